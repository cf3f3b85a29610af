//! Module faults against the real binary: panicking handlers answer 500 and the connection and
//! server go on; a full worker pool answers 503 while network threads keep answering inline
//! routes.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Response, Server};

const CONFIG: &str = r#"{
  "load": [{"so": "testkit"}],
  "worker_pool": {"threads": 1, "queue": 1},
  "routing": [
    {"prefix": "/panic-worker", "handler": "panic", "worker": true},
    {"prefix": "/panic", "handler": "panic"},
    {"prefix": "/slow", "handler": "sleep-worker", "sleep_ms": 3000},
    {"prefix": "/echo", "handler": "echo"},
  ]
}"#;

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n")
}

/// Read `n` responses (with Content-Length bodies) from a keep-alive connection.
fn read_n(s: &mut TcpStream, n: usize) -> Vec<Response> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    loop {
        let mut out = Vec::new();
        let mut pos = 0;
        while let Some(end) = common::find(&raw[pos..], b"\r\n\r\n") {
            let (r, used) = Response::parse_one(&raw[pos..], false);
            let len: usize = r.header("content-length").map_or(0, |l| l.parse().unwrap());
            if raw.len() < pos + end + 4 + len {
                break;
            }
            out.push(r);
            pos += used;
        }
        if out.len() >= n {
            return out;
        }
        let got = s.read(&mut buf).expect("response bytes");
        assert!(got > 0, "connection closed after {} responses", out.len());
        raw.extend_from_slice(&buf[..got]);
    }
}

fn ask(srv: &Server, path: &str) -> Response {
    let mut s = srv.connect();
    s.write_all(get(path).as_bytes()).unwrap();
    read_n(&mut s, 1).remove(0)
}

#[test]
fn a_panicking_handler_gets_500_and_the_connection_goes_on() {
    let srv = Server::start(CONFIG);
    let mut s = srv.connect();
    for path in [
        "/panic",
        "/echo/after",
        "/panic-worker",
        "/echo/after-worker",
    ] {
        s.write_all(get(path).as_bytes()).unwrap();
        let r = read_n(&mut s, 1).remove(0);
        if path.starts_with("/panic") {
            assert_eq!(r.status, 500, "{path}");
        } else {
            assert_eq!(r.status, 200, "{path}");
            assert!(r.text().contains(&format!("path={path}")));
        }
    }
    assert!(
        srv.log_text().contains("testkit panics on purpose") || srv.log_text().contains("panic")
    );
}

#[test]
fn many_panics_leave_the_server_serving() {
    let mut srv = Server::start(CONFIG);
    let mut s = srv.connect();
    let batch: String = (0..200)
        .map(|i| get(if i % 2 == 0 { "/panic" } else { "/echo" }))
        .collect();
    s.write_all(batch.as_bytes()).unwrap();
    let all = read_n(&mut s, 200);
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r.status, if i % 2 == 0 { 500 } else { 200 }, "response {i}");
    }
    for _ in 0..20 {
        assert_eq!(ask(&srv, "/panic-worker").status, 500);
    }
    assert_eq!(srv.get("/echo").status, 200);
    assert!(srv.child.try_wait().unwrap().is_none(), "the server died");
    assert!(srv.stop().success());
}

#[test]
fn a_full_worker_pool_gets_503_and_inline_routes_keep_answering() {
    let srv = Server::start(CONFIG);
    // Occupy the pool's only place.
    let mut busy = srv.connect();
    busy.write_all(get("/slow").as_bytes()).unwrap();
    // Time for it to reach the pool even on a machine busy with the rest of the suite (with
    // 300 ms, the second request below once took the place first, under .ci/run).
    std::thread::sleep(Duration::from_millis(1000));
    // Another worker request is refused at once, on a network thread that is not blocked,
    // and a request pipelined behind it is still answered ...
    let mut s = srv.connect();
    s.write_all(format!("{}{}", get("/slow"), get("/echo/after")).as_bytes())
        .unwrap();
    let answers = read_n(&mut s, 2);
    assert_eq!(answers[0].status, 503);
    assert_eq!(answers[1].status, 200);
    assert!(
        answers[1].text().contains("/echo/after"),
        "{}",
        answers[1].text()
    );
    // ... and inline routes answer, on every network thread, while the worker sleeps.
    for i in 0..10 {
        assert_eq!(ask(&srv, &format!("/echo/{i}")).status, 200);
    }
    busy.set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    let mut probe = [0u8; 1];
    match busy.read(&mut probe) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("the slow request finished before the inline ones: {other:?}"),
    }
    // The worker request itself completes.
    let done = read_n(&mut busy, 1).remove(0);
    assert_eq!(done.status, 200);
    assert!(done.text().starts_with("slept on"), "{}", done.text());
    // And the pool has room again.
    assert_eq!(ask(&srv, "/echo/end").status, 200);
}

#[test]
fn queued_worker_jobs_do_not_starve_network_threads() {
    let config = CONFIG
        .replace(r#""queue": 1"#, r#""queue": 16"#)
        .replace(r#""sleep_ms": 3000"#, r#""sleep_ms": 1000"#);
    let srv = Server::start(&config);
    let mut slow: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = srv.connect();
            s.write_all(get("/slow").as_bytes()).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..10 {
        assert_eq!(ask(&srv, &format!("/echo/{i}")).status, 200);
    }
    for s in slow.iter_mut() {
        assert_eq!(read_n(s, 1)[0].status, 200);
    }
}
