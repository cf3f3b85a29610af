//! Response heads from the upstream, as the client of the real binary sees them: what RFC 9112
//! allows arrives (bare LF, agreeing duplicate lengths, 1xx before the answer, a head split
//! over many reads), what it forbids is a 502 (obs-fold, control bytes, conflicting lengths),
//! and hop-by-hop headers stay behind.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use common::Server;

/// The raw response the scripted upstream sends for `path`.
fn script(path: &str) -> &'static [u8] {
    match path {
        "/obs-fold" => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1\r\n folded\r\n\r\nok",
        "/control" => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: a\x01b\r\n\r\nok",
        "/space-before-colon" => b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok",
        "/lengths-agree" => {
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 2\r\nX-A: 1\r\n\r\nok"
        }
        "/lengths-differ" => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
        "/interim" => {
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: 1\r\n\r\nok"
        }
        "/bare-lf" => b"HTTP/1.1 200 OK\nContent-Length: 2\nX-A:  spaced \t\n\nok",
        "/hop" => {
            b"HTTP/1.1 200 OK\r\nX-Hop: 1\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nok"
        }
        _ => b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Split: yes, every byte\r\nContent-Length: 2\r\n\r\nok",
    }
}

/// An upstream that answers each request with `script(path)`; `/split` is written a byte a
/// segment, so the proxy reads its head in many pieces.
fn scripted_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            std::thread::spawn(move || serve(conn));
        }
    });
    addr
}

fn serve(conn: TcpStream) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line == "\r\n" {
                break;
            }
        }
        let path = request_line.split(' ').nth(1).unwrap_or("");
        let raw = script(path);
        if path == "/split" {
            for byte in raw {
                out.write_all(&[*byte])?;
                std::thread::sleep(Duration::from_micros(300));
            }
        } else {
            out.write_all(raw)?;
        }
    }
}

fn proxy() -> Server {
    let up = scripted_upstream();
    Server::start(&format!(
        r#"{{
  "load": [{{"so": "proxy"}}],
  "backends": {{"b": {{"connect": "{up}", "max_fails": 1000}}}},
  "routing": [{{"handler": "http_proxy", "backend": "b"}}]
}}"#
    ))
}

#[test]
fn forbidden_response_heads_are_a_502_that_says_why() {
    let srv = proxy();
    for (path, why) in [
        ("/obs-fold", "obs-fold"),
        ("/control", "control character"),
        ("/space-before-colon", "malformed response header"),
        ("/lengths-differ", "conflicting Content-Length"),
    ] {
        let resp = srv.get(path);
        assert_eq!(resp.status, 502, "{path}");
        let log = srv.log_text();
        assert!(log.contains(why), "{path}: no {why:?} in the log:\n{log}");
    }
    // The server is still there for a good answer.
    assert_eq!(srv.get("/lengths-agree").status, 200);
}

#[test]
fn allowed_response_heads_pass_with_their_end_to_end_headers() {
    let srv = proxy();
    let resp = srv.get("/lengths-agree");
    assert_eq!((resp.status, resp.text().as_str()), (200, "ok"));
    assert_eq!(resp.header("x-a"), Some("1"));

    // Interim answers are dropped; the final one arrives whole.
    let resp = srv.get("/interim");
    assert_eq!((resp.status, resp.text().as_str()), (200, "ok"));
    assert_eq!(resp.header("x-final"), Some("1"));
    assert_eq!(resp.header("link"), None);

    // Bare LF line ends (RFC 9112 §2.2); the value without the whitespace around it.
    let resp = srv.get("/bare-lf");
    assert_eq!((resp.status, resp.text().as_str()), (200, "ok"));
    assert_eq!(resp.header("x-a"), Some("spaced"));

    // Hop-by-hop headers, and those named in `Connection`, stay behind.
    let resp = srv.get("/hop");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("x-kept"), Some("1"));
    assert_eq!(resp.header("x-hop"), None);
    assert_eq!(resp.header("keep-alive"), None);
}

#[test]
fn a_head_read_a_byte_at_a_time_arrives_whole() {
    let srv = proxy();
    for _ in 0..3 {
        let resp = srv.get("/split");
        assert_eq!((resp.status, resp.text().as_str()), (200, "ok"));
        assert_eq!(resp.header("content-type"), Some("text/plain"));
        assert_eq!(resp.header("x-split"), Some("yes, every byte"));
    }
}
