//! What every network thread and the health checker share about an upstream server: requests
//! in flight (for least_conn), the active checks' verdict, and passive ejection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Milliseconds since the first call (a monotonic clock that fits an atomic).
pub fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

pub struct ServerState {
    pub addr: SocketAddr,
    /// The address as configured (also the default `Host` header).
    pub name: String,
    pub weight: u32,
    /// Requests in flight, on every thread.
    pub active: AtomicUsize,
    /// The active health checks' verdict (true until a check says otherwise).
    healthy: AtomicBool,
    /// Consecutive passive failures.
    fails: AtomicU32,
    /// Ejected until this `now_ms()`.
    down_until: AtomicU64,
}

impl ServerState {
    pub fn new(addr: SocketAddr, name: String, weight: u32) -> ServerState {
        ServerState {
            addr,
            name,
            weight,
            active: AtomicUsize::new(0),
            healthy: AtomicBool::new(true),
            fails: AtomicU32::new(0),
            down_until: AtomicU64::new(0),
        }
    }

    /// May this server get traffic now?
    pub fn available(&self, now: u64) -> bool {
        self.healthy.load(Ordering::Relaxed) && now >= self.down_until.load(Ordering::Relaxed)
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Set the active checks' verdict; returns whether it changed.
    pub fn set_healthy(&self, healthy: bool) -> bool {
        self.healthy.swap(healthy, Ordering::Relaxed) != healthy
    }

    /// A request failed on this server. Returns true when this failure ejects it.
    pub fn record_failure(&self, max_fails: u32, fail_timeout: Duration) -> bool {
        let fails = self.fails.fetch_add(1, Ordering::Relaxed) + 1;
        if fails >= max_fails {
            // Start counting afresh: after `fail_timeout` the server gets traffic again, and
            // `max_fails` new failures eject it again.
            self.fails.store(0, Ordering::Relaxed);
            let until = now_ms() + fail_timeout.as_millis() as u64;
            self.down_until.store(until, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// A request succeeded: failures are counted consecutively.
    pub fn record_success(&self) {
        if self.fails.load(Ordering::Relaxed) != 0 {
            self.fails.store(0, Ordering::Relaxed);
        }
    }
}

/// Counts a request in flight on a server while it lives.
pub struct ActiveGuard(std::sync::Arc<ServerState>);

impl ActiveGuard {
    pub fn new(server: std::sync::Arc<ServerState>) -> ActiveGuard {
        server.active.fetch_add(1, Ordering::Relaxed);
        ActiveGuard(server)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ejects_after_max_fails_and_recovers() {
        let s = ServerState::new("127.0.0.1:1".parse().unwrap(), "x".into(), 1);
        let now = now_ms();
        assert!(s.available(now));
        assert!(!s.record_failure(2, Duration::from_secs(60)));
        s.record_success();
        assert!(!s.record_failure(2, Duration::from_secs(60)));
        assert!(s.record_failure(2, Duration::from_secs(60)));
        assert!(!s.available(now_ms()));
        assert!(s.available(now_ms() + 61_000));
        s.set_healthy(false);
        assert!(!s.available(now_ms() + 61_000));
    }
}
