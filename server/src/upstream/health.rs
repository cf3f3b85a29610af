//! Active health checks: one thread with its own runtime runs a task per checked server,
//! and publishes each verdict in the server's shared state, read by every network thread.

use std::sync::Arc;
use std::time::Duration;

use super::config::HealthCheckConfig;
use super::state::ServerState;
use super::Backend;

/// Start the checker thread if any backend has `health_check`.
pub fn start(backends: &'static [Arc<Backend>]) {
    let checked: Vec<(&'static Backend, HealthCheckConfig)> = backends
        .iter()
        .filter_map(|b| b.health_check.clone().map(|h| (&**b, h)))
        .collect();
    if checked.is_empty() {
        return;
    }
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
                for (backend, hc) in checked {
                    for server in &backend.servers {
                        tokio::spawn(check_loop(backend, server.clone(), hc.clone()));
                    }
                }
                std::future::pending::<()>().await
            });
        });
    if let Err(e) = spawned {
        tracing::error!("health checks disabled: cannot start their thread: {e}");
    }
}

async fn check_loop(backend: &'static Backend, server: Arc<ServerState>, hc: HealthCheckConfig) {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(hc.interval));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let timeout = Duration::from_secs_f64(hc.timeout);
    let (mut fails, mut passes) = (0u32, 0u32);
    loop {
        tick.tick().await;
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
