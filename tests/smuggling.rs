//! Request smuggling against the real binary: every ambiguous or malformed framing is answered
//! 400 and the connection closes, and a request hidden in the same bytes is never answered.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use common::{Response, Server};

const CONFIG: &str = r#"{
  "load": [{"so": "testkit"}],
  "routing": [{"handler": "echo"}]
}"#;

/// The request a front end might see as part of a body, and a back end as the next request.
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";

/// Send `raw` on one connection; every response, and whether the server closed the connection.
fn send(srv: &Server, raw: &[u8]) -> (Vec<Response>, bool, String) {
    let mut s = srv.connect();
    s.write_all(raw).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut bytes = Vec::new();
    let mut buf = [0u8; 65536];
    let closed = loop {
        if Instant::now() > deadline {
            break false;
        }
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break true,
        }
    };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (Response::parse_all(&bytes), closed, text)
}

/// Send `raw` followed by the smuggled request: one 400, a close, and nothing more.
fn attack(srv: &Server, name: &str, raw: impl AsRef<[u8]>) {
    refused(srv, name, raw, 400);
}

/// [`attack`], answered with `status`.
fn refused(srv: &Server, name: &str, raw: impl AsRef<[u8]>, status: u16) {
    let mut raw = raw.as_ref().to_vec();
    raw.extend_from_slice(SMUGGLED.as_bytes());
    let (responses, closed, text) = send(srv, &raw);
    assert_eq!(
        responses.len(),
        1,
        "{name}: expected one answer, got:\n{text}"
    );
    assert_eq!(responses[0].status, status, "{name}:\n{text}");
    assert_eq!(responses[0].header("connection"), Some("close"), "{name}");
    assert!(closed, "{name}: connection left open");
    assert!(
        !text.contains("/smuggled"),
        "{name}: the smuggled request was answered:\n{text}"
    );
}

const POST: &str = "POST /first HTTP/1.1\r\nHost: a\r\n";

#[test]
fn a_well_framed_pipelined_request_is_answered() {
    // The control case: the detection in `attack` would see a second answer.
    let srv = Server::start(CONFIG);
    let raw = format!("{POST}Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n{SMUGGLED}");
    let (responses, _, text) = send(&srv, raw.as_bytes());
    assert_eq!(responses.len(), 2, "{text}");
    assert!(responses[0].text().contains("body=abc"));
    assert!(responses[1].text().contains("path=/smuggled"));
}

#[test]
fn content_length_with_transfer_encoding_is_refused() {
    let srv = Server::start(CONFIG);
    attack(
        &srv,
        "CL.TE",
        format!("{POST}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    );
    attack(
        &srv,
        "TE.CL",
        format!("{POST}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n"),
    );
}

#[test]
fn duplicate_or_malformed_content_length_is_refused() {
    let srv = Server::start(CONFIG);
    let cases = [
        (
            "differing duplicates",
            "Content-Length: 0\r\nContent-Length: 5\r\n",
        ),
        ("list", "Content-Length: 5, 5\r\n"),
        ("plus sign", "Content-Length: +5\r\n"),
        ("negative", "Content-Length: -1\r\n"),
        ("hex", "Content-Length: 0x5\r\n"),
        ("inner space", "Content-Length: 1 2\r\n"),
        ("empty", "Content-Length: \r\n"),
        ("overflow", "Content-Length: 99999999999999999999999\r\n"),
    ];
    for (name, header) in cases {
        attack(&srv, name, format!("{POST}{header}\r\nhello"));
    }
}

#[test]
fn obfuscated_transfer_encoding_is_refused() {
    let srv = Server::start(CONFIG);
    let body = "\r\n0\r\n\r\n";
    // Codings other than `chunked` are not understood: 501 (RFC 9112 §6.1).
    let unknown = [
        ("unknown coding", "Transfer-Encoding: xchunked\r\n"),
        ("coding list", "Transfer-Encoding: chunked, identity\r\n"),
        (
            "gzip before chunked",
            "Transfer-Encoding: gzip, chunked\r\n",
        ),
        ("identity", "Transfer-Encoding: identity\r\n"),
    ];
    for (name, header) in unknown {
        refused(&srv, name, format!("{POST}{header}{body}"), 501);
    }
    let cases = [
        (
            "repeated header",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        ),
        ("space before colon", "Transfer-Encoding : chunked\r\n"),
        ("folded value", "Transfer-Encoding:\r\n chunked\r\n"),
        ("vertical tab", "Transfer-Encoding:\x0bchunked\r\n"),
        ("quoted", "Transfer-Encoding: \"chunked\"\r\n"),
    ];
    for (name, header) in cases {
        attack(&srv, name, format!("{POST}{header}{body}"));
    }
    attack(
        &srv,
        "HTTP/1.0",
        format!("POST / HTTP/1.0\r\nTransfer-Encoding: chunked{body}"),
    );
}

#[test]
fn bad_chunk_sizes_are_refused() {
    let srv = Server::start(CONFIG);
    let cases = [
        ("negative", "-1\r\n"),
        ("hex prefix", "0x3\r\nabc\r\n0\r\n\r\n"),
        ("overflow", "fffffffffffffffff\r\n"),
        ("empty size", "\r\nabc\r\n0\r\n\r\n"),
        ("bare LF", "3\nabc\r\n0\r\n\r\n"),
        ("data past its size", "3\r\nabcdef\r\n0\r\n\r\n"),
        ("no CRLF after data", "3\r\nabc0\r\n\r\n"),
        ("bare CR in extension", "3;a\rb\r\nabc\r\n0\r\n\r\n"),
        ("NUL in extension", "3;a\0\r\nabc\r\n0\r\n\r\n"),
        ("bad last-chunk end", "0\r\n\n"),
    ];
    for (name, chunks) in cases {
        attack(
            &srv,
            name,
            format!("{POST}Transfer-Encoding: chunked\r\n\r\n{chunks}"),
        );
    }
}

#[test]
fn bad_bytes_in_names_and_values_are_refused() {
    let srv = Server::start(CONFIG);
    let cases: [(&str, &[u8]); 9] = [
        ("bare CR in value", b"X: a\rb\r\n"),
        ("NUL in value", b"X: a\0b\r\n"),
        ("NUL in name", b"X\0Y: 1\r\n"),
        ("DEL in name", b"X\x7f: 1\r\n"),
        ("high byte in name", b"X\xff: 1\r\n"),
        ("separator in name", b"X(Y): 1\r\n"),
        ("space in name", b"Bad Name: 1\r\n"),
        ("empty name", b": 1\r\n"),
        ("CR line end alone", b"X: 1\rY: 2\r\n"),
    ];
    for (name, header) in cases {
        let mut raw = b"GET /first HTTP/1.1\r\nHost: a\r\n".to_vec();
        raw.extend_from_slice(header);
        raw.extend_from_slice(b"\r\n");
        attack(&srv, name, raw);
    }
    attack(
        &srv,
        "bare CR in request line",
        "GET /first\r HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    attack(
        &srv,
        "NUL in target",
        "GET /fi\0rst HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    attack(
        &srv,
        "two Hosts",
        "GET /first HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    );
}
