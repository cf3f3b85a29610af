//! The upstream keep-alive pool under bursts wider than `keepalive`: the connections a burst
//! opened serve the next burst instead of being closed and opened again, and the surplus is
//! closed once a burst no longer needs it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Server;

#[derive(Default)]
struct Counts {
    accepted: AtomicUsize,
    /// Connections the proxy closed.
    closed: AtomicUsize,
}

/// An upstream that answers each request 40 ms after reading it (so that a burst is in flight
/// at once), keeping the connection alive; it counts connections opened and closed.
fn slow_upstream() -> (String, Arc<Counts>) {
    let listener = common::listener();
    let address = listener.local_addr().unwrap().to_string();
    let counts = Arc::new(Counts::default());
    let c = counts.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(s) = s else { return };
            c.accepted.fetch_add(1, Ordering::SeqCst);
            let c = c.clone();
            std::thread::spawn(move || {
                let mut out = s.try_clone().unwrap();
                let mut reader = BufReader::new(s);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        c.closed.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    if line == "\r\n" {
                        std::thread::sleep(Duration::from_millis(40));
                        let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                    }
                }
            });
        }
    });
    (address, counts)
}

/// `n` GETs at once, each on its own client connection; all answered 200.
fn burst(srv: &Server, n: usize) {
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let addr = srv.addr();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s.write_all(b"GET /p HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut text = String::new();
                std::io::Read::read_to_string(&mut s, &mut text).unwrap();
                assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
}

#[test]
fn a_burst_wider_than_keepalive_reuses_its_connections_then_gives_back_the_surplus() {
    let (address, counts) = slow_upstream();
    let config = format!(
        r#"{{
  "load": [{{"so": "proxy"}}],
  "backends": {{"b": {{"connect": "{address}", "keepalive": 2}}}},
  "routing": [{{"handler": "http_proxy", "backend": "b"}}]
}}"#
    );
    // One network thread: one pool.
    let srv = Server::start_custom(&config, &[], 1, &[]);
    for _ in 0..3 {
        burst(&srv, 8);
    }
    // Closing the 6 beyond `keepalive` after each burst made the next one connect again (20).
    let accepted = counts.accepted.load(Ordering::SeqCst);
    assert!(accepted <= 8, "3 bursts of 8 opened {accepted} connections");
    // Unused for a while, the pool keeps `keepalive` of them.
    let deadline = Instant::now() + Duration::from_secs(5);
    while counts.closed.load(Ordering::SeqCst) < accepted - 2 {
        assert!(Instant::now() < deadline, "the surplus was never closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(counts.closed.load(Ordering::SeqCst), accepted - 2);
    assert_eq!(srv.get("/p").status, 200);
    assert_eq!(counts.accepted.load(Ordering::SeqCst), accepted);
}
