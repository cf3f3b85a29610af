//! Active health checks: a task per checked server on the upkeep thread publishes each
//! verdict in the server's shared state, read by every network thread.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::config::HealthCheckConfig;
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
        for server in 0..b.servers.len() {
            super::upkeep::spawn(check_loop(Arc::downgrade(b), server, hc.clone()));
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
