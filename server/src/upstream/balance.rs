//! Choosing a server of a backend: smooth weighted round robin, least connections, or
//! weighted rendezvous hashing of the client address. Servers that are down or already tried
//! for this request are skipped;
//! passively ejected servers are tried when nothing else is left.

use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;

use super::config::Balance;
use super::state::{now_ms, ServerState};
use super::{Backend, ServerList};

impl Backend {
    /// The server for the next attempt, or `None` when every server is tried or marked down by
    /// its health checks. A server whose passive ejection is over gets one request (the
    /// probe). When every server left is passively ejected they are tried anyway, as nginx
    /// does with a single server: ejection steers traffic to the others, it never leaves a
    /// backend with none.
    pub fn pick(&self, list: &ServerList, client_ip: &str, tried: &[usize]) -> Option<usize> {
        let servers = &list.servers;
        // A sole server in service is the answer whatever the method: no clock, no lock.
        if let [only] = &servers[..] {
            if tried.is_empty() && only.in_service() {
                return Some(0);
            }
        }
        let now = now_ms();
        let mut lost_probe: Vec<usize> = Vec::new();
        loop {
            let skip = |i: usize| tried.contains(&i) || lost_probe.contains(&i);
            let Some(i) = self.choose(list, client_ip, |i| !skip(i) && servers[i].available(now))
            else {
                break;
            };
            if servers[i].claim(now, self.fail_timeout) {
                return Some(i);
            }
            // Another request is probing it.
            lost_probe.push(i);
        }
        self.choose(list, client_ip, |i| {
            !tried.contains(&i) && servers[i].is_healthy()
        })
    }

    fn choose(
        &self,
        list: &ServerList,
        client_ip: &str,
        usable: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        match self.balance {
            Balance::RoundRobin => {
                let mut current = list.rr.lock().unwrap_or_else(|e| e.into_inner());
                smooth_wrr(&mut current, &list.servers, usable)
            }
            Balance::LeastConn => {
                let start = self.ties.fetch_add(1, Ordering::Relaxed);
                least_conn(&list.servers, start, usable)
            }
            Balance::IpHash => rendezvous(client_ip, &list.servers, usable),
        }
    }
}

/// nginx's smooth weighted round robin over the usable servers.
fn smooth_wrr(
    current: &mut [i64],
    servers: &[std::sync::Arc<ServerState>],
    usable: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut total = 0i64;
    let mut best: Option<usize> = None;
    for (i, s) in servers.iter().enumerate() {
        if !usable(i) {
            continue;
        }
        let w = s.weight as i64;
        current[i] += w;
        total += w;
        if best.is_none_or(|b| current[i] > current[b]) {
            best = Some(i);
        }
    }
    let b = best?;
    current[b] -= total;
    Some(b)
}

/// Fewest requests in flight per unit of weight; ties go round from `start`.
fn least_conn(
    servers: &[std::sync::Arc<ServerState>],
    start: usize,
    usable: impl Fn(usize) -> bool,
) -> Option<usize> {
    let n = servers.len();
    let mut best: Option<(usize, u64)> = None;
    for k in 0..n {
        let i = (start + k) % n;
        if !usable(i) {
            continue;
        }
        let s = &servers[i];
        // active / weight, compared without division.
        let load = s.active.load(Ordering::Relaxed) as u64;
        let better = match best {
            None => true,
            Some((b, bload)) => load * (servers[b].weight as u64) < bload * (s.weight as u64),
        };
        if better {
            best = Some((i, load));
        }
    }
    best.map(|(i, _)| i)
}

/// Weighted rendezvous (highest random weight) hashing: each server scores the client, the
/// highest score wins. A server leaving moves only its own clients.
fn rendezvous(
    client_ip: &str,
    servers: &[std::sync::Arc<ServerState>],
    usable: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, s) in servers.iter().enumerate() {
        if !usable(i) {
            continue;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        client_ip.hash(&mut h);
        s.name.hash(&mut h);
        // The addresses of one name are distinct servers.
        s.addr.hash(&mut h);
        // A uniform number in (0, 1), then the weighted score -w / ln(u).
        let u = ((h.finish() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let score = -(s.weight as f64) / u.ln();
        if best.is_none_or(|(_, b)| score > b) {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn servers(weights: &[u32]) -> Vec<Arc<ServerState>> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                Arc::new(ServerState::new(
                    format!("127.0.0.1:{}", 9000 + i).parse().unwrap(),
                    format!("s{i}:1"),
                    w,
                ))
            })
            .collect()
    }

    #[test]
    fn smooth_wrr_follows_weights_and_interleaves() {
        let s = servers(&[5, 1, 1]);
        let mut cur = vec![0; 3];
        let seq: Vec<usize> = (0..7)
            .map(|_| smooth_wrr(&mut cur, &s, |_| true).unwrap())
            .collect();
        assert_eq!(seq.iter().filter(|&&i| i == 0).count(), 5);
        assert_eq!(seq, [0, 0, 1, 0, 2, 0, 0]);
        assert_eq!(smooth_wrr(&mut cur, &s, |i| i == 2), Some(2));
        assert_eq!(smooth_wrr(&mut cur, &s, |_| false), None);
    }

    #[test]
    fn least_conn_prefers_idle_servers() {
        let s = servers(&[1, 1, 2]);
        s[0].active.store(3, Ordering::Relaxed);
        s[1].active.store(1, Ordering::Relaxed);
        s[2].active.store(3, Ordering::Relaxed);
        assert_eq!(least_conn(&s, 0, |_| true), Some(1));
        s[1].active.store(2, Ordering::Relaxed);
        // 3/2 < 2/1
        assert_eq!(least_conn(&s, 0, |_| true), Some(2));
        assert_eq!(least_conn(&s, 0, |i| i == 0), Some(0));
    }

    #[test]
    fn rendezvous_is_stable_and_consistent() {
        let s = servers(&[1, 1, 1, 1]);
        let ips: Vec<String> = (0..400)
            .map(|i| format!("10.0.{}.{}", i / 256, i % 256))
            .collect();
        let before: Vec<usize> = ips
            .iter()
            .map(|ip| rendezvous(ip, &s, |_| true).unwrap())
            .collect();
        for (ip, &b) in ips.iter().zip(&before) {
            assert_eq!(rendezvous(ip, &s, |_| true), Some(b), "stable");
        }
        // Every server gets a fair share.
        for i in 0..4 {
            let n = before.iter().filter(|&&b| b == i).count();
            assert!((50..150).contains(&n), "server {i} got {n} of 400");
        }
        // Server 2 leaves: only its clients move.
        for (ip, &b) in ips.iter().zip(&before) {
            let after = rendezvous(ip, &s, |i| i != 2).unwrap();
            if b != 2 {
                assert_eq!(after, b);
            } else {
                assert_ne!(after, 2);
            }
        }
    }
}
