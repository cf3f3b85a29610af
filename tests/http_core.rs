//! HTTP/1.x behaviour of the real binary: keep-alive, pipelining, HEAD, chunked bodies both
//! ways, 100-continue, absolute URIs, Host rules, IPv6, headers the core adds.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::{read_to_close, Response, Server};

const CONFIG: &str = r#"{
  "load": [{"so": "testkit"}, {"so": "hello"}, {"so": "benchmark"}],
  "routing": [
    {"prefix": "/echo", "handler": "echo"},
    {"prefix": "/stream", "handler": "stream", "chunks": 3},
    {"prefix": "/sized/right", "handler": "stream", "chunks": 3, "size": 24},
    {"prefix": "/sized/short", "handler": "stream", "chunks": 3, "size": 30},
    {"prefix": "/sized/long", "handler": "stream", "chunks": 3, "size": 10},
    {"prefix": "/async", "handler": "async"},
    {"prefix": "/worker", "handler": "sleep-worker"},
    {"prefix": "/bad-header", "handler": "bad-header"},
    {"prefix": "/benchmark-inprocess", "handler": "benchmark-inprocess"},
    {"prefix": "/benchmark-inworker", "handler": "benchmark-inworker"},
    {"prefix": "/hello", "handler": "hello"},
  ]
}"#;

fn server() -> Server {
    Server::start(CONFIG)
}

/// Read exactly `n` responses from a keep-alive connection.
fn read_responses(s: &mut std::net::TcpStream, n: usize, head_requests: bool) -> Vec<Response> {
    read_mixed(s, &vec![head_requests; n])
}

/// Read one response per entry of `heads` (true: the answer to a HEAD request).
fn read_mixed(s: &mut std::net::TcpStream, heads: &[bool]) -> Vec<Response> {
    let n = heads.len();
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let mut pos = 0;
        let mut out = Vec::new();
        while out.len() < n {
            if common::find(&raw[pos..], b"\r\n\r\n").is_none() {
                break;
            }
            let head_request = heads[out.len()];
            let complete =
                std::panic::catch_unwind(|| Response::parse_one(&raw[pos..], head_request));
            match complete {
                Ok((r, used)) => {
                    out.push(r);
                    pos += used;
                }
                Err(_) => break,
            }
        }
        if out.len() == n {
            return out;
        }
        let got = s.read(&mut buf).expect("response bytes");
        assert!(got > 0, "connection closed after {} responses", out.len());
        raw.extend_from_slice(&buf[..got]);
    }
}

#[test]
fn hello_answers_with_core_headers() {
    let srv = server();
    let r = srv.get("/hello?name=x");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("server"), Some("osprey"));
    let date = r.header("date").expect("Date header");
    assert!(httpdate_like(date), "{date}");
    assert!(r.text().contains("Hello, world!"));
    assert!(
        r.text().contains("<th>?name</th><td>x</td>"),
        "{}",
        r.text()
    );
    assert_eq!(
        r.header("content-length").unwrap(),
        r.body.len().to_string()
    );
}

fn httpdate_like(d: &str) -> bool {
    d.ends_with(" GMT") && d.len() == 29
}

#[test]
fn benchmark_routes_inline_and_in_worker() {
    let srv = server();
    for path in ["/benchmark-inprocess", "/benchmark-inworker"] {
        let r = srv.get(path);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.text(), "<p>Hello, world!</p>");
        assert_eq!(r.header("content-type"), Some("text/html"));
    }
}

#[test]
fn keep_alive_is_default_on_11_and_close_is_honoured() {
    let srv = server();
    let mut s = srv.connect();
    for _ in 0..3 {
        s.write_all(b"GET /benchmark-inprocess HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let r = read_responses(&mut s, 1, false).remove(0);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("connection"), None);
    }
    s.write_all(b"GET /benchmark-inprocess HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let rest = read_to_close(&mut s);
    let r = Response::parse(rest.as_bytes());
    assert_eq!(r.header("connection"), Some("close"));
}

#[test]
fn http10_closes_unless_keep_alive_asked() {
    let srv = server();
    let text = srv.raw(b"GET /benchmark-inprocess HTTP/1.0\r\n\r\n");
    assert!(text.starts_with("HTTP/1.0 200 OK\r\n"), "{text}");
    assert!(text.contains("Connection: close"));

    let mut s = srv.connect();
    s.write_all(b"GET /benchmark-inprocess HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    let r = read_responses(&mut s, 1, false).remove(0);
    assert_eq!(r.header("connection"), Some("keep-alive"));
    s.write_all(b"GET /benchmark-inprocess HTTP/1.0\r\n\r\n")
        .unwrap();
    assert!(read_to_close(&mut s).contains("200 OK"));
}

#[test]
fn pipelined_requests_answer_in_order() {
    let srv = server();
    let mut s = srv.connect();
    let mut batch = Vec::new();
    for i in 0..20 {
        batch.extend_from_slice(format!("GET /echo/{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
    }
    batch
        .extend_from_slice(b"POST /echo/last HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nbody");
    s.write_all(&batch).unwrap();
    let responses = read_responses(&mut s, 21, false);
    for (i, r) in responses.iter().take(20).enumerate() {
        assert!(
            r.text().contains(&format!("path=/echo/{i}\n")),
            "{i}: {}",
            r.text()
        );
    }
    assert!(responses[20].text().contains("body=body"));
}

/// Each answer carries its own headers, whatever answered before it on the connection: an
/// answered request's header vector goes back to a per-thread pool and serves the next
/// response, emptied; answers made inline, on the worker pool, later, and streamed each
/// leave through their own path.
#[test]
fn pipelined_answers_of_different_handlers_keep_their_own_headers() {
    let srv = server();
    let paths = [
        "/benchmark-inprocess",
        "/echo/a",
        "/stream",
        "/hello",
        "/async",
        "/benchmark-inworker",
        "/echo/b",
    ];
    // The headers of each answer alone, but the date.
    let own = |r: &Response| {
        let mut h: Vec<_> = r
            .headers
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case("date"))
            .cloned()
            .collect();
        h.sort();
        h
    };
    let request = |p: &str| format!("GET {p} HTTP/1.1\r\nHost: a\r\n\r\n").into_bytes();
    let alone: Vec<_> = paths
        .iter()
        .map(|p| {
            let mut s = srv.connect();
            s.write_all(&request(p)).unwrap();
            own(&read_responses(&mut s, 1, false)[0])
        })
        .collect();
    let mut s = srv.connect();
    let batch: Vec<u8> = (0..3).flat_map(|_| paths.map(request)).flatten().collect();
    s.write_all(&batch).unwrap();
    let answers = read_responses(&mut s, 3 * paths.len(), false);
    for (i, r) in answers.iter().enumerate() {
        let k = i % paths.len();
        assert_eq!(r.status, 200, "{}", paths[k]);
        assert_eq!(own(r), alone[k], "{} (answer {i})", paths[k]);
    }
}

/// Answered pipelined requests stay in the read buffer until the connection waits: what
/// follows them (a chunked body, a head cut between two writes) is read where it is.
#[test]
fn requests_after_answered_pipelined_ones_are_read_in_place() {
    let srv = server();
    let mut s = srv.connect();
    let mut batch = Vec::new();
    for i in 0..3 {
        batch.extend_from_slice(format!("GET /echo/{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
    }
    batch.extend_from_slice(
        b"POST /echo/chunked HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
          3\r\nabc\r\n0\r\n\r\n",
    );
    batch.extend_from_slice(b"GET /echo/4 HTTP/1.1\r\nHost: a\r\n\r\nGET /echo/cut HTT");
    s.write_all(&batch).unwrap();
    let first = read_responses(&mut s, 5, false);
    s.write_all(b"P/1.1\r\nHost: a\r\n\r\n").unwrap();
    let last = read_responses(&mut s, 1, false);
    for (i, r) in first.iter().enumerate().filter(|&(i, _)| i != 3) {
        let n = if i == 4 { 4 } else { i };
        assert!(
            r.text().contains(&format!("path=/echo/{n}\n")),
            "{i}: {}",
            r.text()
        );
    }
    assert!(first[3].text().contains("body=abc"), "{}", first[3].text());
    assert!(
        last[0].text().contains("path=/echo/cut\n"),
        "{}",
        last[0].text()
    );
}

/// More answers than the socket buffers hold: the connection stops to write (its pending
/// pipelined output past 64 KiB, then a socket that takes no more) and goes on where it was.
#[test]
fn a_pipelined_burst_larger_than_the_socket_buffers_is_answered_whole_and_in_order() {
    let srv = server();
    let mut s = srv.connect();
    let n = 3000;
    let mut writer = s.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        let mut batch = Vec::new();
        for i in 0..n {
            batch
                .extend_from_slice(format!("GET /echo/{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        }
        writer.write_all(&batch).unwrap();
    });
    let responses = read_responses(&mut s, n, false);
    sending.join().unwrap();
    for (i, r) in responses.iter().enumerate() {
        assert!(
            r.text().contains(&format!("path=/echo/{i}\n")),
            "{i}: {}",
            r.text()
        );
    }
}

#[test]
fn head_has_headers_and_no_body() {
    let srv = server();
    let mut s = srv.connect();
    s.write_all(b"HEAD /hello HTTP/1.1\r\nHost: a\r\n\r\nGET /benchmark-inprocess HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let mut both = read_mixed(&mut s, &[true, false]);
    let head = both.remove(0);
    assert_eq!(head.status, 200);
    let len: usize = head.header("content-length").unwrap().parse().unwrap();
    assert!(len > 100);
    // The next bytes are the next response, not a body.
    let next = both.remove(0);
    assert_eq!(next.text(), "<p>Hello, world!</p>");
}

#[test]
fn chunked_request_bodies_are_decoded() {
    let srv = server();
    let text = srv.raw(b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n7;x=y\r\n, world\r\n0\r\nTrailer: t\r\n\r\n");
    let r = Response::parse(text.as_bytes());
    assert_eq!(r.status, 200, "{text}");
    assert!(r.text().contains("body=hello, world\n"), "{}", r.text());
}

#[test]
fn form_query_and_cookies_reach_the_handler() {
    let srv = server();
    let body = "a=1&b=two+words&c=%C3%A9";
    let req = format!(
        "POST /echo?q=%2Fx HTTP/1.1\r\nHost: a\r\nCookie: s=1; t=\"2\"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let r = Response::parse(srv.raw(req.as_bytes()).as_bytes());
    let t = r.text();
    for want in [
        "query.q=/x",
        "form.a=1",
        "form.b=two words",
        "form.c=é",
        "cookie.s=1",
        "cookie.t=2",
    ] {
        assert!(t.contains(want), "missing {want} in {t}");
    }
}

#[test]
fn unknown_length_bodies_are_chunked_for_11_and_closed_for_10() {
    let srv = server();
    let text = srv.raw(b"GET /stream HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    let r = Response::parse(text.as_bytes());
    assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{text}");
    assert_eq!(r.text(), "chunk 1\nchunk 2\nchunk 3\n");

    let text = srv.raw(b"GET /stream HTTP/1.0\r\n\r\n");
    assert!(!text.contains("chunked"), "{text}");
    assert!(text.contains("Connection: close"));
    assert!(text.ends_with("chunk 1\nchunk 2\nchunk 3\n"), "{text}");
}

#[test]
fn expect_100_continue_gets_an_interim_response() {
    let srv = server();
    let mut s = srv.connect();
    s.write_all(
        b"POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    )
    .unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"hello").unwrap();
    let r = read_responses(&mut s, 1, false).remove(0);
    assert!(r.text().contains("body=hello"));
}

#[test]
fn expect_with_too_large_body_gets_413_without_continue() {
    let srv = server();
    let text = srv.raw(b"POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 99999999\r\n\r\n");
    assert!(text.starts_with("HTTP/1.1 413 "), "{text}");
    assert!(!text.contains("100 Continue"));
}

#[test]
fn absolute_form_uri_uses_its_host() {
    let srv = server();
    let text = srv.raw(b"GET http://Example.ORG:8080/echo/x?y=1 HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n");
    let r = Response::parse(text.as_bytes());
    assert!(r.text().contains("host=example.org\n"), "{}", r.text());
    assert!(r.text().contains("path=/echo/x\n"));
    assert!(r.text().contains("query.y=1"));
}

#[test]
fn host_is_required_on_11() {
    let srv = server();
    let text = srv.raw(b"GET /hello HTTP/1.1\r\n\r\n");
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    assert!(text.contains("missing Host header"));
    assert!(text.contains("Connection: close"));
}

#[test]
fn async_handlers_answer_through_futures() {
    let srv = server();
    let r = srv.get("/async/x");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "async answer for /async/x");
}

#[test]
fn worker_handlers_do_not_block_network_threads() {
    let srv = server();
    // A slow worker request is in flight; inline requests keep flowing meanwhile.
    let addr = srv.addr();
    let slow = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /worker HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        read_to_close(&mut s)
    });
    std::thread::sleep(Duration::from_millis(30));
    let started = std::time::Instant::now();
    for _ in 0..20 {
        assert_eq!(srv.get("/benchmark-inprocess").status, 200);
    }
    let inline_time = started.elapsed();
    let slow = slow.join().unwrap();
    assert!(slow.contains("slept on"), "{slow}");
    assert!(
        !slow.contains("osprey-net"),
        "worker ran on a network thread: {slow}"
    );
    assert!(inline_time < Duration::from_millis(2000), "{inline_time:?}");
}

#[test]
fn handler_header_injection_becomes_500() {
    let srv = server();
    let r = srv.get("/bad-header");
    assert_eq!(r.status, 500);
    assert!(r.header("injected").is_none());
}

#[test]
fn ipv6_listener_serves() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; skipping");
        return;
    }
    let port = common::free_port();
    let srv = Server::start_with(CONFIG, &["-H", &format!("[::1]:{port}")]);
    // The harness's own -H comes first; both listeners serve.
    let mut s = std::net::TcpStream::connect(("::1", port)).unwrap();
    s.write_all(b"GET /echo HTTP/1.1\r\nHost: [::1]\r\nConnection: close\r\n\r\n")
        .unwrap();
    let text = read_to_close(&mut s);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("host=[::1]"), "{text}");
    assert_eq!(srv.get("/echo").status, 200);
}

#[test]
fn curl_talks_to_it() {
    let srv = server();
    let (ok, out) = common::curl(&["-i", &srv.url("/benchmark-inprocess")]);
    assert!(ok);
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    let (ok, out) = common::curl(&["--data-binary", "xyz", &srv.url("/echo")]);
    assert!(ok);
    assert!(
        out.contains("method=POST") && out.contains("body=xyz"),
        "{out}"
    );
}

/// A stream that declares its length is sent with `Content-Length`, and must give exactly that
/// many bytes: one rule (`body::Pieces`) for HTTP/1.1 and HTTP/2 alike. A stream that gives
/// fewer or more has its response cut (HTTP/1.1: the connection closes; HTTP/2: the stream is
/// reset), never padded or run past its length.
#[test]
fn a_stream_gives_exactly_the_length_it_declares_on_every_protocol() {
    let srv = server();
    let raw = srv.raw(b"GET /sized/right HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    let r = Response::parse(raw.as_bytes());
    assert_eq!(r.header("content-length"), Some("24"), "{raw}");
    assert_eq!(r.text(), "chunk 1\nchunk 2\nchunk 3\n");
    let (ok, body) = common::curl(&["--http2-prior-knowledge", &srv.url("/sized/right")]);
    assert!(ok);
    assert_eq!(body, "chunk 1\nchunk 2\nchunk 3\n");
    for (path, got) in [("/sized/short", 24), ("/sized/long", 8)] {
        // Keep-alive asked for: the cut is a close, with fewer bytes than declared.
        let mut s = srv.connect();
        write!(s, "GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        let raw = read_to_close(&mut s);
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("Content-Length: "), "{raw}");
        assert_eq!(body.len(), got, "{path}: {raw}");
        let (ok, _) = common::curl(&["--http2-prior-knowledge", &srv.url(path)]);
        assert!(!ok, "{path}: HTTP/2 must not complete the response");
    }
    assert!(srv
        .log_text()
        .contains("response stream ended after 24 of its declared 30 bytes"));
    assert!(srv
        .log_text()
        .contains("response stream is longer than its declared 10 bytes"));
}
