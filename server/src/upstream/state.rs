//! What every network thread and the health checker share about an upstream server: requests
//! in flight (for least_conn), the active checks' verdict, and passive ejection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use osprey_sdk::UpstreamState;

/// Milliseconds since the first call (a monotonic clock that fits an atomic).
pub fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// One address of a configured server entry: a name that resolves to several addresses gives
/// one of these per address (see `resolve`), each with its own state.
pub struct ServerState {
    pub addr: SocketAddr,
    /// The address as configured (also the default `Host` header).
    pub name: String,
    /// `name`'s host is a name, not an IP address: it is re-resolved.
    pub named: bool,
    /// Unique for the process's life: the key of its idle connections in the pools.
    pub key: u64,
    pub weight: u32,
    /// Requests in flight, on every thread.
    pub active: AtomicUsize,
    /// The active health checks' verdict (true until a check says otherwise).
    healthy: AtomicBool,
    /// Consecutive passive failures.
    fails: AtomicU32,
    /// Ejected until this `now_ms()`.
    down_until: AtomicU64,
    /// For the status page: responses, failed attempts, and the moving average of the time to
    /// a response head.
    responses: AtomicU64,
    fails_total: AtomicU64,
    response_us: AtomicU64,
}

impl ServerState {
    pub fn new(addr: SocketAddr, name: String, weight: u32) -> ServerState {
        let named = is_named(&name);
        static KEYS: AtomicU64 = AtomicU64::new(0);
        ServerState {
            addr,
            name,
            named,
            key: KEYS.fetch_add(1, Ordering::Relaxed),
            weight,
            active: AtomicUsize::new(0),
            healthy: AtomicBool::new(true),
            fails: AtomicU32::new(0),
            down_until: AtomicU64::new(0),
            responses: AtomicU64::new(0),
            fails_total: AtomicU64::new(0),
            response_us: AtomicU64::new(0),
        }
    }

    /// A response head came `took` after the attempt began: counted, and averaged (weight 1/8,
    /// as TCP's smoothed RTT; concurrent updates may lose one sample, which is harmless).
    pub fn record_response(&self, took: Duration) {
        let sample = took.as_micros().min(u64::MAX as u128) as u64;
        let n = self.responses.fetch_add(1, Ordering::Relaxed);
        let old = self.response_us.load(Ordering::Relaxed);
        let new = if n == 0 {
            sample
        } else {
            (old * 7 + sample) / 8
        };
        self.response_us.store(new, Ordering::Relaxed);
    }

    /// What the status page shows.
    pub fn health(&self, backend: &str, now: u64) -> osprey_sdk::ServerHealth {
        let until = self.down_until.load(Ordering::Relaxed);
        let state = if !self.is_healthy() {
            UpstreamState::Down
        } else if until == 0 {
            UpstreamState::Up
        } else if now < until {
            UpstreamState::Ejected
        } else {
            UpstreamState::Checking
        };
        osprey_sdk::ServerHealth {
            backend: backend.into(),
            server: self.name.as_str().into(),
            address: self.addr.to_string().into(),
            state,
            in_flight: self.active.load(Ordering::Relaxed) as u64,
            responses: self.responses.load(Ordering::Relaxed),
            fails: self.fails_total.load(Ordering::Relaxed),
            response_us: self.response_us.load(Ordering::Relaxed),
        }
    }

    /// Not ejected, or ejected and waiting for its probe. A server whose ejection is over still
    /// has to win `claim` before it gets a request.
    pub fn available(&self, now: u64) -> bool {
        self.healthy.load(Ordering::Relaxed) && now >= self.down_until.load(Ordering::Relaxed)
    }

    /// Healthy and never ejected (or back from it): any request may take it.
    pub fn in_service(&self) -> bool {
        self.is_healthy() && self.down_until.load(Ordering::Relaxed) == 0
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Set the active checks' verdict; returns whether it changed.
    pub fn set_healthy(&self, healthy: bool) -> bool {
        self.healthy.swap(healthy, Ordering::Relaxed) != healthy
    }

    /// Take this server for a request chosen by the balancer. A server in service is always
    /// taken. One whose ejection is over is taken by one request only, the passive probe: the
    /// others see it ejected for another `fail_timeout` until the probe's outcome is recorded.
    pub fn claim(&self, now: u64, fail_timeout: Duration) -> bool {
        let until = self.down_until.load(Ordering::Relaxed);
        if until == 0 {
            return true;
        }
        now >= until
            && self
                .down_until
                .compare_exchange(
                    until,
                    now + millis(fail_timeout),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// A request failed on this server. Returns true when this failure takes it out of service
    /// (a failed probe or a failure while every server is ejected keeps it out, silently).
    pub fn record_failure(&self, max_fails: u32, fail_timeout: Duration) -> bool {
        self.fails_total.fetch_add(1, Ordering::Relaxed);
        let fails = self.fails.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if fails < max_fails {
            return false;
        }
        // `fails` stays counted (as nginx's): once back, a single failure ejects it again,
        // until a success resets the count.
        let until = now_ms() + millis(fail_timeout);
        self.down_until.swap(until, Ordering::Relaxed) == 0
    }

    /// A request got an answer: the server is in service again at once. Returns true when it
    /// was ejected.
    pub fn record_success(&self) -> bool {
        if self.fails.load(Ordering::Relaxed) != 0 {
            self.fails.store(0, Ordering::Relaxed);
        }
        self.down_until.load(Ordering::Relaxed) != 0
            && self.down_until.swap(0, Ordering::Relaxed) != 0
    }
}

/// Whether the host of `address` (`host:port`) is a name to look up, not an IP address.
pub fn is_named(address: &str) -> bool {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_err()
}

/// Bumped each time a server's state goes away (re-resolution dropped its address, or a reload
/// its backend): the pools then close their connections to it.
static GONE: AtomicU64 = AtomicU64::new(0);

pub fn servers_gone() -> u64 {
    GONE.load(Ordering::Relaxed)
}

impl Drop for ServerState {
    fn drop(&mut self) {
        GONE.fetch_add(1, Ordering::Relaxed);
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().max(1) as u64
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
    fn ejects_after_max_fails_and_recovers_on_an_answer() {
        let t = Duration::from_secs(60);
        let s = ServerState::new("127.0.0.1:1".parse().unwrap(), "x".into(), 1);
        let now = now_ms();
        assert!(s.available(now) && s.claim(now, t));
        assert!(!s.record_failure(2, t));
        assert!(!s.record_success(), "was not ejected");
        assert!(!s.record_failure(2, t));
        assert!(s.record_failure(2, t));
        assert!(!s.available(now_ms()));
        assert!(!s.claim(now_ms(), t));
        assert!(!s.record_failure(2, t), "already out");
        // Any answer brings it back at once.
        assert!(s.record_success());
        assert!(s.available(now_ms()) && s.claim(now_ms(), t));
        s.set_healthy(false);
        assert!(!s.available(now_ms()));
    }

    #[test]
    fn one_probe_after_fail_timeout_and_a_failed_probe_ejects_again() {
        let t = Duration::from_secs(60);
        let s = ServerState::new("127.0.0.1:1".parse().unwrap(), "x".into(), 1);
        assert!(!s.record_failure(3, t) && !s.record_failure(3, t));
        assert!(s.record_failure(3, t));
        let later = now_ms() + 61_000;
        assert!(s.available(later));
        assert!(s.claim(later, t), "the probe");
        assert!(!s.claim(later, t), "only one probe");
        assert!(!s.available(later + 1));
        // The probe fails: out again at once, without three new failures.
        s.record_failure(3, t);
        assert!(!s.available(now_ms() + 1000));
    }

    #[test]
    fn health_names_the_state_and_averages_response_times() {
        let t = Duration::from_secs(60);
        let s = ServerState::new("127.0.0.1:1".parse().unwrap(), "x".into(), 1);
        let now = now_ms();
        assert_eq!(s.health("b", now).state, UpstreamState::Up);
        s.record_response(Duration::from_micros(800));
        s.record_response(Duration::from_micros(1600));
        let h = s.health("b", now);
        assert_eq!((h.responses, h.response_us), (2, 900));
        s.record_failure(1, t);
        let h = s.health("b", now_ms());
        assert_eq!((h.state, h.fails), (UpstreamState::Ejected, 1));
        assert_eq!(
            s.health("b", now_ms() + 61_000).state,
            UpstreamState::Checking
        );
        s.set_healthy(false);
        assert_eq!(s.health("b", now_ms()).state, UpstreamState::Down);
    }
}
