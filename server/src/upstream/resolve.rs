//! Server names re-resolved while the server runs, so that a backend behind DNS that changes
//! address is followed without a reload: every `resolve_interval` seconds, and at once
//! (at most once a second) when connecting to a server fails. A name gives one server per
//! address, as nginx's does; an address that stays keeps its server's state (health,
//! ejection, counters, pooled connections). Lookups run on the upkeep thread, never on a
//! network thread.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::config::distinct;
use super::state::{is_named, now_ms, ServerState};
use super::Backend;

/// Start re-resolving the named servers of backends not watched yet. A loop ends when its
/// backend is gone.
pub fn start(backends: &[Arc<Backend>]) {
    for b in backends {
        if !has_names(b) || b.resolving.swap(true, Ordering::Relaxed) {
            continue;
        }
        super::upkeep::spawn(resolve_loop(Arc::downgrade(b), b.resolve_interval));
    }
}

fn has_names(b: &Backend) -> bool {
    b.servers().servers.iter().any(|s| s.named)
}

/// Connecting to a named server of `backend` failed: look its names up again now, unless that
/// was done less than a second ago.
pub fn after_connect_failure(backend: &Arc<Backend>) {
    let now = now_ms();
    let last = backend.resolved_ms.load(Ordering::Relaxed);
    if (last != 0 && now < last + 1000)
        || backend
            .resolved_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let backend = backend.clone();
    super::upkeep::spawn(async move { refresh(&backend).await });
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
        refresh(&b).await;
    }
}

/// Look every configured name up, then replace the backend's server list in one step: the
/// servers of addresses that stay are kept (in their order), new addresses are added after
/// them, and those no longer found leave. A failed or empty lookup keeps the name's servers.
async fn refresh(b: &Arc<Backend>) {
    let mut answers: Vec<Option<Vec<SocketAddr>>> = Vec::new();
    for (_, name, _) in &b.spec.servers {
        answers.push(if is_named(name) {
            lookup(&b.name, name).await
        } else {
            None
        });
    }
    let current = b.servers();
    let mut next: Vec<Arc<ServerState>> = Vec::new();
    let mut added: Vec<Arc<ServerState>> = Vec::new();
    for (k, ((_, name, weight), found)) in b.spec.servers.iter().zip(answers).enumerate() {
        // A name listed twice: its servers were all taken with its first entry.
        if b.spec.servers[..k].iter().any(|(_, n, _)| n == name) {
            continue;
        }
        let mine = current.servers.iter().filter(|s| &s.name == name);
        let Some(found) = found else {
            next.extend(mine.cloned());
            continue;
        };
        for s in mine {
            if found.contains(&s.addr) {
                next.push(s.clone());
            } else {
                tracing::info!(backend = %b.name, server = %name, "address {} no longer resolves: server removed", s.addr);
            }
        }
        for addr in found {
            if !next.iter().any(|s| &s.name == name && s.addr == addr) {
                tracing::info!(backend = %b.name, server = %name, "address {addr} added");
                let s = Arc::new(ServerState::new(addr, name.clone(), *weight));
                added.push(s.clone());
                next.push(s);
            }
        }
    }
    let same = next.len() == current.servers.len()
        && next
            .iter()
            .zip(&current.servers)
            .all(|(a, b)| Arc::ptr_eq(a, b));
    if same {
        return;
    }
    b.set_servers(next);
    for s in &added {
        super::health::watch(b, s);
    }
}

/// The name's addresses, or `None` (logged) when the lookup fails or finds none.
async fn lookup(backend: &str, name: &str) -> Option<Vec<SocketAddr>> {
    match tokio::net::lookup_host(name).await {
        Ok(found) => {
            let found = distinct(found);
            if found.is_empty() {
                tracing::warn!(backend, server = %name, "name resolves to no address; keeping its servers");
                return None;
            }
            Some(found)
        }
        Err(e) => {
            tracing::warn!(backend, server = %name, "cannot resolve the name ({e}); keeping its servers");
            None
        }
    }
}
