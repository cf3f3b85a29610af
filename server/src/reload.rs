//! Configuration reload (SIGHUP, `-s reload`) and the signal loop of the main thread.
//!
//! The configuration a request needs lives in an immutable `Shared`. The current one is
//! published in an `ArcSwap`; every connection checks it before each request and moves to the
//! newest, while requests already running keep the `Shared` they started with (it is freed when
//! the last of them ends). Nothing is closed or restarted, so a reload loses no connection and
//! no request. Backends are part of the configuration: a reload adds, removes and changes them
//! (an unchanged backend keeps its pools, ejections and health; a removed one serves the
//! requests that still use it, then its pooled connections close and its checks stop).
//! Listeners, `network_threads` and module sections (`modules.<name>`) stay as they were at start:
//! changing them needs a restart, and a reload that changes them says so in the log.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use osprey_sdk::Lifecycle;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::config::Config;
use crate::server::Shared;

static LIVE: OnceLock<ArcSwap<Shared>> = OnceLock::new();
/// The address of the `Shared` in `LIVE`: comparing it with a connection's own is the whole
/// per-request check. (No ABA: the connection's `Arc` keeps its address from being reused.)
static LIVE_ADDRESS: AtomicPtr<Shared> = AtomicPtr::new(std::ptr::null_mut());

/// Make `shared` the configuration new requests use.
pub fn publish(shared: Arc<Shared>) {
    let address = Arc::as_ptr(&shared).cast_mut();
    match LIVE.get() {
        Some(live) => live.store(shared),
        None => {
            let _ = LIVE.set(ArcSwap::new(shared));
        }
    }
    LIVE_ADDRESS.store(address, Ordering::Release);
}

/// The configuration new requests use.
pub fn current() -> Option<Arc<Shared>> {
    LIVE.get().map(|live| live.load_full())
}

/// Move `shared` to the current configuration if a reload replaced it (one atomic load when
/// nothing changed).
#[inline]
pub fn refresh(shared: &mut Arc<Shared>) {
    let live_address = LIVE_ADDRESS.load(Ordering::Acquire);
    if live_address.is_null() || std::ptr::eq(live_address, Arc::as_ptr(shared)) {
        return;
    }
    if let Some(live) = LIVE.get() {
        let guard = live.load();
        if !Arc::ptr_eq(&guard, shared) {
            *shared = Arc::clone(&guard);
        }
    }
}

/// Reads the configuration again the way it was read at start (file, then command line).
pub struct Reloader {
    pub load: Box<dyn Fn() -> Result<Config, String>>,
    /// `-M` libraries.
    pub extra_modules: Vec<String>,
}

impl Reloader {
    /// Build and publish a new configuration; on error the old one stays.
    pub fn reload(&self) -> Result<(), String> {
        let old = current().ok_or("the server has not started")?;
        let config = (self.load)()?;
        warn_about_restart_only_changes(&old.config, &config);
        let shared = crate::check::build(config, &self.extra_modules)?;
        let registry = shared.registry;
        crate::access_log::configure(&shared.config.logging)?;
        registry.lifecycle_new(old.registry, Lifecycle::ServerStart);
        for (name, path) in registry.modules() {
            if !old.registry.modules().any(|(_, p)| p == path) {
                tracing::info!("module {name} loaded from {path}");
            }
        }
        let file = shared.config.file.clone();
        shared.backends.start_health_checks();
        publish(Arc::new(shared));
        crate::stats::count_reload();
        tracing::info!("configuration reloaded from {file}");
        Ok(())
    }
}

fn warn_about_restart_only_changes(old: &Config, new: &Config) {
    let listeners = |c: &Config| {
        c.listen
            .iter()
            .map(|l| (l.interface.clone(), l.secure, l.backlog, l.deferred))
            .collect::<Vec<_>>()
    };
    if listeners(old) != listeners(new) {
        tracing::warn!(
            "reload: `listen` changes (interface, backlog, deferred) take effect at the next restart"
        );
    }
    if old.network_threads != new.network_threads
        || old.cpu_affinity != new.cpu_affinity
        || old.worker_pool.threads != new.worker_pool.threads
    {
        tracing::warn!(
            "reload: `network_threads`, `cpu_affinity` and `worker_pool.threads` take effect at the \
             next restart"
        );
    }
    for (name, section) in &new.modules {
        if old.modules.get(name).is_none_or(|s| s.json != section.json) {
            tracing::warn!("reload: modules.{name} takes effect at the next restart (a module is initialised once)");
        }
    }
    if old.logging.log_level != new.logging.log_level
        || old.logging.error_log != new.logging.error_log
    {
        tracing::warn!("reload: log_level and error_log take effect at the next restart");
    }
}

/// The signals the main thread serves, installed before the listeners are bound so that an
/// early SIGHUP cannot kill the process by its default action.
pub struct Signals {
    runtime: tokio::runtime::Runtime,
    term: Signal,
    int: Signal,
    hup: Signal,
    usr1: Signal,
}

impl Signals {
    pub fn install() -> Result<Signals, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime: {e}"))?;
        let _entered = runtime.enter();
        let on =
            |kind: SignalKind| signal(kind).map_err(|e| format!("cannot handle a signal: {e}"));
        Ok(Signals {
            term: on(SignalKind::terminate())?,
            int: on(SignalKind::interrupt())?,
            hup: on(SignalKind::hangup())?,
            usr1: on(SignalKind::user_defined1())?,
            runtime,
        })
    }

    /// Serve signals until SIGTERM or SIGINT: SIGHUP reloads, SIGUSR1 reopens the log files.
    pub fn serve(mut self, reloader: &Reloader) {
        self.runtime.block_on(async {
            loop {
                tokio::select! {
                    _ = self.term.recv() => return,
                    _ = self.int.recv() => return,
                    _ = self.hup.recv() => {
                        tracing::info!("SIGHUP: reloading the configuration");
                        if let Err(e) = reloader.reload() {
                            tracing::error!("reload refused, the old configuration keeps serving: {e}");
                        }
                    }
                    _ = self.usr1.recv() => {
                        tracing::info!("SIGUSR1: reopening log files");
                        if let Err(e) = crate::access_log::reopen() {
                            tracing::error!("{e}");
                        }
                        if let Err(e) = crate::log::reopen() {
                            tracing::error!("{e}");
                        }
                    }
                }
            }
        });
    }
}
