//! Request bodies that stream (`Handler::streams_request_body`): the testkit `upload` handler
//! reads the body as it arrives and answers with its length and FNV-1a hash.

mod common;
mod ops_util;

use std::io::{Read, Write};
use std::time::Duration;

use common::{read_to_close, Response, Server};
use ops_util::{proc_status, read_one};

const CONFIG: &str = r#"{
  "load": [{"so": "testkit"}],
  "routing": [
    {"prefix": "/up", "handler": "upload", "max_body_size": 2147483648},
    {"prefix": "/small", "handler": "upload", "max_body_size": 1000},
    {"prefix": "/echo", "handler": "echo"},
  ]
}"#;

fn fnv(bytes: &[u8], mut hash: u64) -> u64 {
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    hash
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Deterministic, not repetitive within a block.
fn block(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn kib(status_value: &str) -> u64 {
    status_value.trim_end_matches(" kB").parse().unwrap()
}

#[test]
fn a_1_gib_chunked_upload_streams_with_bounded_memory() {
    let srv = Server::start(CONFIG);
    let pid = srv.child.id();
    // Warm up (buffers, the module), then take the baseline.
    assert_eq!(srv.get("/echo").status, 200);
    let before = kib(&proc_status(pid, "VmRSS"));
    let mut s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.write_all(b"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    let piece = block(256 * 1024, 7);
    let rounds = 4096; // 1 GiB
    let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
    framed.extend_from_slice(&piece);
    framed.extend_from_slice(b"\r\n");
    let mut hash = FNV_START;
    for _ in 0..rounds {
        s.write_all(&framed).unwrap();
        hash = fnv(&piece, hash);
    }
    s.write_all(b"0\r\n\r\n").unwrap();
    let r = read_one(&mut s).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.text(),
        format!(
            "bytes={} fnv={hash:016x} declared=-\n",
            rounds * piece.len()
        )
    );
    let peak = kib(&proc_status(pid, "VmHWM"));
    assert!(
        peak < before + 32 * 1024,
        "peak RSS {peak} kB, {before} kB before the upload: grew by {} kB",
        peak - before
    );
    // The connection goes on.
    s.write_all(b"GET /echo HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_one(&mut s).unwrap().status, 200);
}

#[test]
fn a_length_body_streams_and_the_pipelined_request_after_it_is_answered() {
    let srv = Server::start(CONFIG);
    let body = block(300_000, 3);
    let mut s = srv.connect();
    let mut wire = format!(
        "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    wire.extend_from_slice(&body);
    wire.extend_from_slice(b"GET /up?after HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    s.write_all(&wire).unwrap();
    let all = read_to_close(&mut s);
    let answers = Response::parse_all(all.as_bytes());
    assert_eq!(answers.len(), 2, "{all}");
    assert_eq!(
        answers[0].text(),
        format!(
            "bytes=300000 fnv={:016x} declared=300000\n",
            fnv(&body, FNV_START)
        )
    );
    assert_eq!(answers[1].text(), "no stream; buffered 0 bytes\n");
}

#[test]
fn continue_is_sent_only_when_the_handler_reads_the_body() {
    let srv = Server::start(CONFIG);
    // A handler that answers without reading: no 100, the answer, and a close.
    let mut s = srv.connect();
    s.write_all(
        b"POST /up?reject HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    )
    .unwrap();
    let r = read_one(&mut s).unwrap();
    assert_eq!(r.status, 403, "the final answer, not 100 Continue");
    assert_eq!(r.header("connection"), Some("close"));
    // A handler that reads: 100 Continue first, then the body is sent and answered.
    let mut s = srv.connect();
    s.write_all(
        b"POST /up HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    )
    .unwrap();
    let mut interim = [0u8; 25];
    s.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"hello").unwrap();
    let r = read_one(&mut s).unwrap();
    assert_eq!(
        r.text(),
        format!("bytes=5 fnv={:016x} declared=5\n", fnv(b"hello", FNV_START))
    );
}

#[test]
fn a_handler_that_stops_reading_answers_and_the_connection_closes() {
    let srv = Server::start(CONFIG);
    let mut s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let total = 8 << 20;
    s.write_all(
        format!("POST /up?read=65536 HTTP/1.1\r\nHost: a\r\nContent-Length: {total}\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let mut writer = s.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        let piece = block(64 * 1024, 1);
        for _ in 0..(total / piece.len()) {
            if writer.write_all(&piece).is_err() {
                return;
            }
        }
    });
    let answer = read_to_close(&mut s);
    let r = Response::parse(answer.as_bytes());
    assert_eq!(r.status, 200, "{answer}");
    let bytes: u64 = r.text()["bytes=".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((65536..total as u64).contains(&bytes), "{}", r.text());
    assert_eq!(r.header("connection"), Some("close"));
    sending.join().unwrap();
}

#[test]
fn a_streamed_body_over_the_route_limit_fails_the_stream() {
    let srv = Server::start(CONFIG);
    // Declared too large: refused before the handler runs.
    let r = Response::parse(
        srv.raw(b"POST /small HTTP/1.1\r\nHost: a\r\nContent-Length: 1001\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(r.status, 413);
    // Chunked: the handler's stream fails once the limit is passed.
    let wire = common::chunked_post("/small", 3);
    let r = Response::parse(srv.raw(&wire).as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("too large"), "{}", r.text());
}

#[test]
fn http2_bodies_stream_too() {
    let srv = Server::start(CONFIG);
    let dir = common::TempDir::new("h2-upload");
    let body = block(3 << 20, 9);
    let file = dir.write("body.bin", &body);
    let (ok, out) = common::curl(&[
        "--http2-prior-knowledge",
        "--data-binary",
        &format!("@{}", file.display()),
        &srv.url("/up"),
    ]);
    assert!(ok, "{out}");
    assert_eq!(
        out,
        format!(
            "bytes={} fnv={:016x} declared={}\n",
            body.len(),
            fnv(&body, FNV_START),
            body.len()
        )
    );
}
