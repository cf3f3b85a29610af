//! What an attacker (or a careless client) can make the server pay: memory for large request
//! bodies, malformed request lines and headers, HTTP/2 control-frame floods. Real binary, raw
//! sockets.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::{Response, Server};

/// A route that takes large bodies and answers a few bytes.
const ROUTES: &str = r#"
  "load": [{"so": "testkit"}],
  "routing": [
    {"prefix": "/upload", "handler": "text", "text": "stored", "max_body_size": 1073741824},
    {"prefix": "/echo", "handler": "echo"},
  ]"#;

fn server() -> Server {
    Server::start(&format!("{{ {ROUTES} }}"))
}

/// `VmHWM` or `VmRSS` of a process, in bytes.
fn memory(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    let kb: u64 = line[key.len() + 1..]
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

/// Reset the process's peak RSS (`VmHWM`) to its current RSS.
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

const MB: u64 = 1024 * 1024;

/// Upload `size` bytes (Content-Length or chunked) and check the answer.
fn upload(srv: &Server, size: usize, chunked: bool) {
    let mut s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {size}")
    };
    let head =
        format!("POST /upload HTTP/1.1\r\nHost: a\r\nConnection: close\r\n{framing}\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let block = vec![b'x'; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(block.len());
        if chunked {
            s.write_all(format!("{n:x}\r\n").as_bytes()).unwrap();
            s.write_all(&block[..n]).unwrap();
            s.write_all(b"\r\n").unwrap();
        } else {
            s.write_all(&block[..n]).unwrap();
        }
        left -= n;
    }
    if chunked {
        s.write_all(b"0\r\n\r\n").unwrap();
    }
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let r = Response::parse(&answer);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&answer));
    assert_eq!(r.text(), "stored");
}

/// A buffered request body costs its size plus a small constant at the peak, whatever its
/// framing, and the memory goes back when the request is done.
#[test]
fn a_large_body_costs_its_size_once_and_is_given_back() {
    let srv = server();
    let pid = srv.child.id();
    // Warm up (thread pools, first allocations) so that the baseline is steady.
    upload(&srv, 1 << 20, false);
    upload(&srv, 1 << 20, true);
    let size = 256 * MB;
    let slack = 40 * MB;
    for chunked in [false, true] {
        std::thread::sleep(Duration::from_millis(100));
        let base = memory(pid, "VmRSS");
        reset_peak(pid);
        upload(&srv, size as usize, chunked);
        let peak = memory(pid, "VmHWM");
        eprintln!(
            "chunked {chunked}: baseline {} MiB, peak {} MiB",
            base / MB,
            peak / MB
        );
        assert!(
            peak < base + size + slack,
            "chunked {chunked}: peak RSS {} MiB for a {} MiB body (baseline {} MiB)",
            peak / MB,
            size / MB,
            base / MB
        );
        // Given back once the request is done.
        std::thread::sleep(Duration::from_millis(300));
        let after = memory(pid, "VmRSS");
        assert!(
            after < base + slack,
            "chunked {chunked}: {} MiB resident after the request (baseline {} MiB)",
            after / MB,
            base / MB
        );
    }
}
