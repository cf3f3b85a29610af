//! HTTP/2 conformance of the real binary, case by case (RFC 9113 and RFC 7541): the cases of
//! h2spec 2.6.0's generic, http2 and hpack sections (their numbers are kept in the case names),
//! written here with a raw frame client, over h2c (prior knowledge) and over TLS (ALPN `h2`).
//! A connection error passes as a GOAWAY with the code the RFC names or the connection closed;
//! a stream error as an RST_STREAM or GOAWAY with that code, or the connection closed. That is
//! stricter than h2spec, whose checks also pass a GOAWAY with another code when the connection
//! then closes (so h2spec passes every case of `KNOWN_FAILURES`). This is the oracle for any
//! change of the HTTP/2 codec.

mod common;
mod http2_cases;
mod http2_frames;
mod tlskit;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Server, TempDir};
use http2_cases::{
    allowed_field_cases, field_cases, generic_cases, hpack_cases, http1_status_cases, http2_cases,
};
use http2_frames::*;
use tlskit::{start_tls, Cert};

const CONFIG: &str = r#"{
  "http2": {"max_concurrent_streams": 8},
  "load": [{"so": "testkit"}],
  "routing": [{"prefix": "/", "handler": "text", "text": "hello conformance\n"}]
}"#;

/// Cases that fail. A case listed here that passes fails the run too, so the list cannot go
/// stale. (Empty since the server has its own HTTP/2 connection instead of the `h2` crate.)
const KNOWN_FAILURES: &[&str] = &[];

/// A case: its h2spec number and title, and the exchange on a fresh connection.
type Case = (&'static str, fn(&mut Conn) -> Check);

fn run_all(name: &str, connect: &dyn Fn() -> Conn) {
    let mut failed = Vec::new();
    let mut passed_known = Vec::new();
    for (title, case) in cases() {
        let mut conn = connect();
        let result = conn.handshake().and_then(|()| case(&mut conn));
        let known = KNOWN_FAILURES.contains(&title);
        match (result, known) {
            (Ok(()), false) | (Err(_), true) => {}
            (Ok(()), true) => passed_known.push(title),
            (Err(e), false) => failed.push(format!("{title}: {e}")),
        }
    }
    assert!(
        failed.is_empty() && passed_known.is_empty(),
        "{name}: {} case(s) failed:\n{}\nlisted as known failures but passed: {passed_known:?}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn h2c_conforms_to_rfc_9113_and_7541() {
    let srv = Server::start(CONFIG);
    let authority = format!("127.0.0.1:{}", srv.port);
    run_all("h2c", &|| {
        let tcp = TcpStream::connect(srv.addr()).unwrap();
        tcp.set_read_timeout(Some(WAIT)).unwrap();
        tcp.set_nodelay(true).unwrap();
        Conn::new(Box::new(tcp), "http", &authority)
    });
}

#[test]
fn h2_over_tls_conforms_to_rfc_9113_and_7541() {
    let dir = TempDir::new("h2conf");
    let cert = Cert::new(&dir, "h2conf", &["localhost"]);
    let (_srv, port) = start_tls(CONFIG, &cert);
    let authority = format!("localhost:{port}");
    run_all("h2 over TLS", &|| {
        let mut tls = tlskit::client(port, "localhost", &cert.der, &[b"h2"]);
        tls.sock.set_read_timeout(Some(WAIT)).unwrap();
        tls.sock.set_nodelay(true).unwrap();
        // Finish the handshake first: ALPN must have chosen h2.
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock).unwrap();
        }
        assert_eq!(tls.conn.alpn_protocol(), Some(&b"h2"[..]));
        Conn::new(Box::new(tls), "https", &authority)
    });
}

/// RFC 9113 §3.4: a connection that does not open with the preface is a connection error —
/// over TLS (ALPN `h2`) the server closes it. A plain port also serves HTTP/1.1, so there the
/// same bytes are an HTTP/1.1 request line with an unknown version: a 400 and a close
/// (RFC 9112), as a server without prior-knowledge h2c would answer. h2spec's case http2/3.5/2
/// over h2c expects only a GOAWAY or a close, and reports this as a failure.
#[test]
fn an_invalid_preface_closes_the_connection() {
    const INVALID: &[u8] = b"INVALID CONNECTION PREFACE\r\n\r\n";
    let dir = TempDir::new("h2conf-preface");
    let cert = Cert::new(&dir, "h2conf", &["localhost"]);
    let (srv, port) = start_tls(CONFIG, &cert);

    let mut tls = tlskit::client(port, "localhost", &cert.der, &[b"h2"]);
    tls.sock
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    tls.write_all(INVALID).unwrap();
    let (mut got, mut buf) = (Vec::new(), [0u8; 4096]);
    let closed = loop {
        match tls.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => break !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    };
    let frames = parse_frames(&got);
    assert!(closed, "still open after {frames:?}");
    assert!(
        frames
            .iter()
            .all(|f| f.kind != GOAWAY || f.error_code() == PROTOCOL_ERROR),
        "{frames:?}"
    );

    let mut tcp = TcpStream::connect(srv.addr()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    tcp.write_all(INVALID).unwrap();
    let mut got = Vec::new();
    tcp.read_to_end(&mut got).unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    assert!(text.contains("Connection: close"), "{text}");
}

/// Every case: h2spec's, in its order, then the field rules it does not try.
fn cases() -> Vec<Case> {
    let mut all = Vec::new();
    all.extend(generic_cases());
    all.extend(http2_cases());
    all.extend(hpack_cases());
    all.extend(field_cases());
    all.extend(allowed_field_cases());
    all.extend(http1_status_cases());
    all
}
