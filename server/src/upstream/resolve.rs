//! Server names re-resolved while the server runs, so that a backend behind DNS that changes
//! address is followed without a reload: every `resolve_interval` seconds, and at once
//! (at most once a second) when connecting to a server fails. Lookups run on the upkeep
//! thread, never on a network thread.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::state::{now_ms, ServerState};
use super::Backend;

/// Start re-resolving the named servers of backends not watched yet. A loop ends when its
/// backend is gone.
pub fn start(backends: &[Arc<Backend>]) {
    for b in backends {
        if !b.servers.iter().any(|s| s.named) || b.resolving.swap(true, Ordering::Relaxed) {
            continue;
        }
        super::upkeep::spawn(resolve_loop(Arc::downgrade(b), b.resolve_interval));
    }
}

/// Connecting to `server` failed: look its name up again now, unless that was done less than a
/// second ago.
pub fn after_connect_failure(backend: &str, server: &Arc<ServerState>) {
    if !server.named {
        return;
    }
    let now = now_ms();
    let last = server.resolved_ms.load(Ordering::Relaxed);
    if (last != 0 && now < last + 1000)
        || server
            .resolved_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let (backend, server) = (backend.to_owned(), server.clone());
    super::upkeep::spawn(async move { refresh(&backend, &server).await });
}

async fn resolve_loop(backend: Weak<Backend>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is now: the configuration has just resolved the names.
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(b) = backend.upgrade() else {
            return;
        };
        for server in b.servers.iter().filter(|s| s.named) {
            refresh(&b.name, server).await;
        }
    }
}

/// Look the server's name up; move to a new address only when the current one is no longer
/// among the answers (round-robin DNS does not make it hop).
async fn refresh(backend: &str, server: &ServerState) {
    match tokio::net::lookup_host(server.name.as_str()).await {
        Ok(found) => {
            let found: Vec<_> = found.collect();
            let current = server.addr();
            match found.first() {
                Some(_) if found.contains(&current) => {}
                Some(&new) => {
                    server.set_addr(new);
                    tracing::info!(backend, server = %server.name, "address changed from {current} to {new}");
                }
                None => {
                    tracing::warn!(backend, server = %server.name, "name resolves to no address; keeping {current}")
                }
            }
        }
        Err(e) => {
            tracing::warn!(backend, server = %server.name, "cannot resolve the name ({e}); keeping {}", server.addr())
        }
    }
}
