//! Active health checks: one thread with its own runtime runs a task per checked server,
//! and publishes each verdict in the server's shared state, read by every network thread.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use super::config::HealthCheckConfig;
use super::Backend;

/// A backend's servers to check, sent to the checker thread.
type Checked = (Weak<Backend>, HealthCheckConfig);

/// Start checking the backends that have `health_check` and are not checked yet (the
/// checker thread starts with the first). A check loop ends when its backend is gone.
pub fn start(backends: &[Arc<Backend>]) {
    static CHECKER: Mutex<Option<mpsc::UnboundedSender<Checked>>> = Mutex::new(None);
    let mut checker = CHECKER.lock().unwrap();
    for b in backends {
        let Some(hc) = b.health_check.clone() else {
            continue;
        };
        if b.checked.swap(true, Ordering::Relaxed) {
            continue;
        }
        if checker.is_none() {
            *checker = spawn_checker();
        }
        if let Some(tx) = checker.as_ref() {
            let _ = tx.send((Arc::downgrade(b), hc));
        }
    }
}

/// The checker thread: its own runtime, a task per checked server.
fn spawn_checker() -> Option<mpsc::UnboundedSender<Checked>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Checked>();
    let spawned = std::thread::Builder::new()
        .name("osprey-health".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!("health checks disabled: cannot start their runtime: {e}");
                    return;
                }
            };
            runtime.block_on(async move {
                while let Some((backend, hc)) = rx.recv().await {
                    let servers = backend.upgrade().map_or(0, |b| b.servers.len());
                    for server in 0..servers {
                        tokio::spawn(check_loop(backend.clone(), server, hc.clone()));
                    }
                }
            });
        });
    match spawned {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::error!("health checks disabled: cannot start their thread: {e}");
            None
        }
    }
}

async fn check_loop(backend: Weak<Backend>, index: usize, hc: HealthCheckConfig) {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(hc.interval));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let timeout = Duration::from_secs_f64(hc.timeout);
    let (mut fails, mut passes) = (0u32, 0u32);
    loop {
        tick.tick().await;
        // A reload removed or changed the backend, and no request uses it any more.
        let Some(backend) = backend.upgrade() else {
            return;
        };
        let server = backend.servers[index].clone();
        let result = match tokio::time::timeout(
            timeout,
            super::service::check(server.addr, &server.name, &hc.path),
        )
        .await
        {
            Ok(Ok(status)) if (200..400).contains(&status) => Ok(()),
            Ok(Ok(status)) => Err(format!("status {status}")),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("timed out".into()),
        };
        match result {
            Ok(()) => {
                fails = 0;
                passes = passes.saturating_add(1);
                if !server.is_healthy() && passes >= hc.passes && server.set_healthy(true) {
                    tracing::info!(backend = %backend.name, server = %server.name, "health check passed: server is up");
                }
            }
            Err(why) => {
                passes = 0;
                fails = fails.saturating_add(1);
                if server.is_healthy() && fails >= hc.fails && server.set_healthy(false) {
                    tracing::warn!(backend = %backend.name, server = %server.name, "health check failed ({why}): server is down");
                }
            }
        }
    }
}
