//! What an attacker (or a careless client) can make the server pay: memory for large request
//! bodies, malformed request lines and headers, HTTP/2 control-frame floods. Real binary, raw
//! sockets.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::{memory, reset_peak, Response, Server};

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
        assert_cost_once_and_given_back(pid, base, size, slack, &format!("chunked {chunked}"));
    }
}

/// After a `size` upload: the peak RSS stayed under `base + size + slack`, and once the request
/// is done the resident memory is back under `base + slack`.
fn assert_cost_once_and_given_back(pid: u32, base: u64, size: u64, slack: u64, what: &str) {
    let peak = memory(pid, "VmHWM");
    eprintln!("{what}: baseline {} MiB, peak {} MiB", base / MB, peak / MB);
    assert!(
        peak < base + size + slack,
        "{what}: peak RSS {} MiB for a {} MiB body (baseline {} MiB)",
        peak / MB,
        size / MB,
        base / MB
    );
    // Given back once the request is done.
    std::thread::sleep(Duration::from_millis(300));
    let after = memory(pid, "VmRSS");
    assert!(
        after < base + slack,
        "{what}: {} MiB resident after the request (baseline {} MiB)",
        after / MB,
        base / MB
    );
}

/// One HTTP/2 frame.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Read frames until a GOAWAY: its error code, and whether the server then closed.
fn read_goaway(s: &mut std::net::TcpStream) -> Option<(u32, bool)> {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = [0u8; 9];
    loop {
        s.read_exact(&mut head).ok()?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0; len];
        s.read_exact(&mut payload).ok()?;
        if head[3] == 0x7 {
            let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
            // Whatever follows (PING answers already queued), the connection ends.
            let mut rest = Vec::new();
            let closed = s.read_to_end(&mut rest).is_ok();
            return Some((code, closed));
        }
    }
}

fn flood(srv: &Server, frame: Vec<u8>, count: usize) -> Option<(u32, bool)> {
    let mut s = srv.connect();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        out.extend(h2_frame(0x4, 0, 0, &[]));
        for _ in 0..count {
            out.extend_from_slice(&frame);
        }
        // The server may close mid-flood.
        let _ = w.write_all(&out);
    });
    let got = read_goaway(&mut s);
    let _ = writer.join();
    got
}

fn h2_server(budget: &str) -> Server {
    Server::start(&format!(r#"{{ "http2": {{ {budget} }}, {ROUTES} }}"#))
}

/// PING, SETTINGS, WINDOW_UPDATE and PRIORITY floods without a request end with GOAWAY
/// ENHANCE_YOUR_CALM (0xb) and a close once `http2.max_control_frames` is spent.
#[test]
fn http2_control_frame_floods_are_cut_off() {
    let srv = h2_server(r#""max_control_frames": 1000"#);
    let floods = [
        ("PING", h2_frame(0x6, 0, 0, &[0; 8])),
        ("SETTINGS", h2_frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100])),
        ("WINDOW_UPDATE", h2_frame(0x8, 0, 0, &[0, 0, 0, 1])),
        ("PRIORITY", h2_frame(0x2, 0, 1, &[0, 0, 0, 0, 16])),
    ];
    for (name, frame) in floods {
        let got = flood(&srv, frame, 5000);
        assert_eq!(got, Some((0xb, true)), "{name} flood");
    }
    assert!(srv.log_text().contains("control-frame flood"));
}

/// Under the default budget a few hundred control frames are answered as usual, and a client
/// reading a large response (answering with WINDOW_UPDATEs) is not cut off by a small budget.
#[test]
fn http2_control_frames_of_normal_clients_pass() {
    let srv = h2_server(r#""max_control_frames": 20"#);
    let big = Server::start(
        r#"{ "http2": { "max_control_frames": 20 }, "load": [{"so": "testkit"}],
             "routing": [{"prefix": "/big", "handler": "big", "size": 33554432}] }"#,
    );
    let (ok, out) = common::curl(&[
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{size_download}",
        "--http2-prior-knowledge",
        &big.url("/big"),
    ]);
    assert!(ok && out.trim() == "200 33554432", "{out}");
    // Pings below the budget are answered and the connection stays.
    let mut s = srv.connect();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    for _ in 0..10 {
        out.extend(h2_frame(0x6, 0, 0, &[1; 8]));
    }
    s.write_all(&out).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut acks = 0;
    let mut head = [0u8; 9];
    while s.read_exact(&mut head).is_ok() {
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0; len];
        s.read_exact(&mut payload).unwrap();
        assert_ne!(head[3], 0x7, "GOAWAY under the budget");
        if head[3] == 0x6 && head[4] == 1 {
            acks += 1;
        }
    }
    assert_eq!(acks, 10);
}

/// Each malformed request line or header gets the status RFC 9112 gives it and a reason that
/// names what is wrong, then the connection closes.
#[test]
fn malformed_requests_are_answered_with_what_is_wrong() {
    let srv = server();
    let long_target = format!("GET /{} HTTP/1.1", "a".repeat(9000));
    let cases: &[(&str, &str, u16, &str)] = &[
        // Request lines.
        (
            "GET /echo?a=\x01 HTTP/1.1",
            "",
            400,
            "control character in the request target",
        ),
        (
            "GET /echo?a b HTTP/1.1",
            "",
            400,
            "space in the request target",
        ),
        (
            "GE(T /echo HTTP/1.1",
            "",
            400,
            "invalid character in the method",
        ),
        (
            "GET  /echo HTTP/1.1",
            "",
            400,
            "more than one space after the method",
        ),
        ("GET /echo", "", 400, "no HTTP version"),
        ("GET /echo HTTP/1.1.1", "", 400, "malformed HTTP version"),
        ("GET /echo HTTP/2.0", "", 505, "HTTP version not supported"),
        ("GET /echo HTTP/9.9", "", 505, "HTTP version not supported"),
        ("GET\t/echo HTTP/1.1", "", 400, "tab in the request line"),
        (&long_target, "", 414, "request line too long"),
        // Headers.
        (
            "GET /echo HTTP/1.1",
            "Host : a\r\n",
            400,
            "whitespace between a header name",
        ),
        (
            "GET /echo HTTP/1.1",
            "X: 1\r\n folded\r\n",
            400,
            "folded header line",
        ),
        (
            "GET /echo HTTP/1.1",
            "X-\x01: 1\r\n",
            400,
            "invalid character in a header name",
        ),
        (
            "GET /echo HTTP/1.1",
            "NoColon\r\n",
            400,
            "header line without a colon",
        ),
        (
            "GET /echo HTTP/1.1",
            "X: a\x01b\r\n",
            400,
            "control character in a header value",
        ),
        (
            "GET /echo HTTP/1.1",
            "X: a\0b\r\n",
            400,
            "NUL byte in a header value",
        ),
        // Transfer codings (RFC 9112 §6.1: 501 for one not understood).
        (
            "POST /echo HTTP/1.1",
            "Transfer-Encoding: gzip, chunked\r\n",
            501,
            "unsupported transfer coding",
        ),
        (
            "POST /echo HTTP/1.1",
            "Transfer-Encoding: identity\r\n",
            501,
            "unsupported transfer coding",
        ),
        (
            "POST /echo HTTP/1.1",
            "Transfer-Encoding: chunked, chunked\r\n",
            400,
            "`chunked` applied more than once",
        ),
        (
            "POST /echo HTTP/1.1",
            "Transfer-Encoding: \"chunked\"\r\n",
            400,
            "malformed Transfer-Encoding",
        ),
    ];
    for (line, headers, status, reason) in cases {
        let raw = format!("{line}\r\nHost: a\r\n{headers}\r\n");
        let answer = srv.raw(raw.as_bytes());
        let r = Response::parse(answer.as_bytes());
        assert_eq!(r.status, *status, "{line:?} {headers:?}:\n{answer}");
        assert!(
            r.text().contains(reason),
            "{line:?} {headers:?}: expected `{reason}` in:\n{answer}"
        );
        assert_eq!(
            r.header("connection"),
            Some("close"),
            "{line:?} {headers:?}"
        );
    }
}

/// The same over HTTP/2 (h2c, curl streaming the body from a pipe: DATA frames of unknown
/// total length).
#[test]
fn a_large_http2_body_costs_its_size_once() {
    use std::process::{Command, Stdio};
    let srv = server();
    let pid = srv.child.id();
    let size = 128 * MB;
    let slack = 40 * MB;
    let base = memory(pid, "VmRSS");
    reset_peak(pid);
    let mut curl = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "60",
            "--http2-prior-knowledge",
            "-X",
            "POST",
        ])
        .args(["-T", "-", &srv.url("/upload")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl is installed");
    let mut stdin = curl.stdin.take().unwrap();
    let block = vec![b'x'; 1 << 20];
    for _ in 0..size / MB {
        stdin.write_all(&block).unwrap();
    }
    drop(stdin);
    let out = curl.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "stored");
    assert_cost_once_and_given_back(pid, base, size, slack, "HTTP/2");
}
