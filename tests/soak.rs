//! Soak test: a long run of mixed requests with random disconnects against the real binary;
//! at the end the server's open descriptors are back to where they started and its resident
//! memory is flat. Not in the default run:
//!
//!     cargo test -p osprey --test soak -- --ignored --nocapture
//!
//! `SOAK_SECS` (default 120) and `SOAK_CLIENTS` (default 4) size the run.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Server;

const CONFIG: &str = r#"{
  "load": [{"so": "testkit"}],
  "routing": [
    {"prefix": "/panic", "handler": "panic"},
    {"prefix": "/big", "handler": "big", "size": 1048576},
    {"prefix": "/stream", "handler": "stream", "chunks": 20},
    {"prefix": "/worker", "handler": "echo", "worker": true},
    {"handler": "echo"},
  ]
}"#;

/// A small deterministic generator (xorshift64*), seeded per client.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    disconnects: AtomicU64,
    errors: AtomicU64,
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Read `n` responses that carry a Content-Length; returns their statuses.
fn read_responses(s: &mut TcpStream, n: usize, raw: &mut Vec<u8>) -> std::io::Result<Vec<u16>> {
    let mut statuses = Vec::with_capacity(n);
    let mut pos = 0;
    let mut buf = [0u8; 65536];
    raw.clear();
    while statuses.len() < n {
        if let Some(end) = common::find(&raw[pos..], b"\r\n\r\n") {
            let head =
                std::str::from_utf8(&raw[pos..pos + end]).map_err(|_| ErrorKind::InvalidData)?;
            let status: u16 = head
                .get(9..12)
                .and_then(|s| s.parse().ok())
                .ok_or(ErrorKind::InvalidData)?;
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.parse().ok())
                .ok_or(ErrorKind::InvalidData)?;
            if raw.len() >= pos + end + 4 + len {
                statuses.push(status);
                pos += end + 4 + len;
                continue;
            }
        }
        let got = s.read(&mut buf)?;
        if got == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        raw.extend_from_slice(&buf[..got]);
    }
    Ok(statuses)
}

fn read_to_end(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// One round of client behaviour; returns false on an unexpected answer.
fn round(
    addr: SocketAddr,
    rng: &mut Rng,
    counts: &Counts,
    raw: &mut Vec<u8>,
) -> std::io::Result<bool> {
    let pick = rng.below(100);
    let mut s = connect(addr)?;
    match pick {
        // Keep-alive connections with pipelined batches: most of the traffic.
        0..=54 => {
            for _ in 0..1 + rng.below(20) {
                let batch = 1 + rng.below(16) as usize;
                let mut out = String::new();
                for i in 0..batch {
                    let path = if rng.below(50) == 0 {
                        "/worker/w"
                    } else {
                        "/e"
                    };
                    out.push_str(&format!("GET {path}?i={i} HTTP/1.1\r\nHost: soak\r\n\r\n"));
                }
                s.write_all(out.as_bytes())?;
                let statuses = read_responses(&mut s, batch, raw)?;
                counts.requests.fetch_add(batch as u64, Ordering::Relaxed);
                if statuses.iter().any(|&st| st != 200) {
                    return Ok(false);
                }
            }
        }
        // Bodies, by length and chunked.
        55..=64 => {
            let size = rng.below(64 * 1024) as usize;
            let body = vec![b'b'; size];
            let mut req = if pick.is_multiple_of(2) {
                format!("POST /post HTTP/1.1\r\nHost: soak\r\nContent-Length: {size}\r\n\r\n")
                    .into_bytes()
            } else {
                format!("POST /post HTTP/1.1\r\nHost: soak\r\nTransfer-Encoding: chunked\r\n\r\n{size:x}\r\n")
                    .into_bytes()
            };
            req.extend_from_slice(&body);
            if pick % 2 == 1 {
                req.extend_from_slice(if size == 0 { b"\r\n" } else { b"\r\n0\r\n\r\n" });
            }
            s.write_all(&req)?;
            let statuses = read_responses(&mut s, 1, raw)?;
            counts.requests.fetch_add(1, Ordering::Relaxed);
            return Ok(statuses == [200]);
        }
        // Disconnect in the middle of a head or a body.
        65..=69 => {
            let req = b"POST /cut HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000\r\n\r\npartial";
            let cut = 1 + rng.below(req.len() as u64) as usize;
            s.write_all(&req[..cut])?;
            counts.disconnects.fetch_add(1, Ordering::Relaxed);
        }
        // Ask and go away without reading; sometimes for a large body.
        70..=77 => {
            let path = if pick < 74 { "/e" } else { "/big" };
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: soak\r\n\r\n").as_bytes())?;
            if pick.is_multiple_of(2) {
                let mut some = [0u8; 1000];
                let _ = s.read(&mut some)?;
            }
            counts.requests.fetch_add(1, Ordering::Relaxed);
            counts.disconnects.fetch_add(1, Ordering::Relaxed);
        }
        // Protocol errors: answered 400 and closed.
        78..=84 => {
            let bad: &[&[u8]] = &[
                b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                b"GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n",
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n",
            ];
            s.write_all(bad[rng.below(bad.len() as u64) as usize])?;
            let answer = read_to_end(&mut s);
            counts.requests.fetch_add(1, Ordering::Relaxed);
            return Ok(answer.starts_with(b"HTTP/1.1 400 ") || answer.starts_with(b"HTTP/1.1 505 "));
        }
        // Streams and panics.
        85..=92 => {
            s.write_all(b"GET /stream HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n")?;
            let answer = read_to_end(&mut s);
            counts.requests.fetch_add(1, Ordering::Relaxed);
            return Ok(answer.starts_with(b"HTTP/1.1 200 ") && answer.ends_with(b"0\r\n\r\n"));
        }
        _ => {
            s.write_all(
                b"GET /panic HTTP/1.1\r\nHost: soak\r\n\r\nGET /e HTTP/1.1\r\nHost: soak\r\n\r\n",
            )?;
            let statuses = read_responses(&mut s, 2, raw)?;
            counts.requests.fetch_add(2, Ordering::Relaxed);
            return Ok(statuses == [500, 200]);
        }
    }
    Ok(true)
}

/// VmRSS in KiB and the number of open descriptors of `pid`.
fn usage(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (rss, fds)
}

#[test]
#[ignore = "long: run with --ignored"]
fn soak_mixed_traffic_leaks_nothing() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let clients: u64 = std::env::var("SOAK_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    // Log at info: a debug line per connection would make the log the thing that grows.
    let srv = Server::start_custom(CONFIG, &[], 2, &["-L", "info"]);
    let pid = srv.child.id();
    let addr = srv.addr();
    std::thread::sleep(Duration::from_millis(500));
    let (rss_start, fds_start) = usage(pid);
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let (counts, stop) = (counts.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (c + 1).wrapping_mul(0x1234_5678_9abc));
                let mut raw = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match round(addr, &mut rng, &counts, &mut raw) {
                        Ok(true) => {}
                        Ok(false) => {
                            counts.errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            eprintln!("client {c}: {e}");
                            counts.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    let mut samples = Vec::new();
    while started.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs((secs / 10).max(1)));
        let (rss, fds) = usage(pid);
        let done = counts.requests.load(Ordering::Relaxed);
        eprintln!(
            "{:>5.0}s requests={done} rss={rss} KiB fds={fds}",
            started.elapsed().as_secs_f64()
        );
        samples.push(rss);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    // Let lingering closes and keep-alive connections end.
    std::thread::sleep(Duration::from_secs(4));
    let (rss_end, fds_end) = usage(pid);
    let requests = counts.requests.load(Ordering::Relaxed);
    let errors = counts.errors.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!(
        "soak: {requests} requests ({:.0}/s), {} disconnects, {errors} errors in {elapsed:.0}s; \
         rss {rss_start} -> {} (after warm-up) -> {rss_end} KiB; fds {fds_start} -> {fds_end}",
        requests as f64 / elapsed,
        counts.disconnects.load(Ordering::Relaxed),
        samples[0],
    );
    assert_eq!(errors, 0, "unexpected answers");
    assert_eq!(fds_end, fds_start, "descriptors leaked");
    // Flat: after warm-up, memory may move with the allocator but must not grow with traffic.
    let warm = samples[0];
    assert!(
        rss_end <= warm + warm / 5 + 8 * 1024,
        "rss grew from {warm} KiB to {rss_end} KiB"
    );
    assert!(
        samples
            .iter()
            .skip(1)
            .all(|&r| r <= warm + warm / 5 + 8 * 1024),
        "rss grew under load: {samples:?}"
    );
    let _ = TcpStream::connect(addr).map(|mut s| {
        let _ = s.write_all(b"GET /e HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n");
        assert!(read_to_end(&mut s).starts_with(b"HTTP/1.1 200 "));
    });
}
