//! Active health checks: a task per checked server on the upkeep thread publishes each
//! verdict in the server's shared state, read by every network thread.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::config::HealthCheckConfig;
use super::state::ServerState;
use super::Backend;

/// Start checking the backends that have `health_check` and are not checked yet. A check loop
/// ends when its backend is gone.
pub fn start(backends: &[Arc<Backend>]) {
    for b in backends {
        let Some(hc) = b.health_check.clone() else {
            continue;
        };
        if b.checked.swap(true, Ordering::Relaxed) {
            continue;
        }
        for server in &b.servers().servers {
            super::upkeep::spawn(check_loop(
                Arc::downgrade(b),
                Arc::downgrade(server),
                hc.clone(),
            ));
        }
    }
}

/// Check a server re-resolution added to a checked backend.
pub fn watch(b: &Arc<Backend>, server: &Arc<ServerState>) {
    if let Some(hc) = b.health_check.clone() {
        if b.checked.load(Ordering::Relaxed) {
            super::upkeep::spawn(check_loop(Arc::downgrade(b), Arc::downgrade(server), hc));
        }
    }
}

async fn check_loop(backend: Weak<Backend>, server: Weak<ServerState>, hc: HealthCheckConfig) {
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
        // Re-resolution dropped its address.
        let Some(server) = server
            .upgrade()
            .filter(|s| backend.servers().servers.iter().any(|t| Arc::ptr_eq(s, t)))
        else {
            return;
        };
        let result =
            match tokio::time::timeout(timeout, super::service::check(&backend, &server, &hc.path))
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
