//! The life of an HTTP/2 connection as real clients meet it: graceful close with GOAWAY while
//! streams are in flight (SIGTERM, the per-connection request limit), with a raw frame client
//! that sees every frame.

mod common;
mod http2_frames;

use std::net::TcpStream;
use std::time::Duration;

use common::{signal, Server};
use http2_frames::*;

const CONFIG: &str = r#"{
  "limits": {"max_requests_per_connection": 2},
  "load": [{"so": "testkit"}],
  "routing": [
    {"prefix": "/slow", "handler": "sleep-worker", "sleep_ms": 1500},
    {"prefix": "/", "handler": "text", "text": "fast\n"}
  ]
}"#;

fn connect(srv: &Server) -> Conn {
    let tcp = TcpStream::connect(srv.addr()).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let mut conn = Conn::new(Box::new(tcp), "http", &format!("127.0.0.1:{}", srv.port));
    conn.handshake().unwrap();
    conn
}

/// The last-stream-id and code of each GOAWAY.
fn goaways(frames: &[Frame]) -> Vec<(u32, u32)> {
    frames
        .iter()
        .filter(|f| f.kind == GOAWAY)
        .map(|f| {
            let last = u32::from_be_bytes(f.payload[..4].try_into().unwrap()) & 0x7fff_ffff;
            (last, f.error_code())
        })
        .collect()
}

/// The DATA of `stream`, and whether it ended.
fn body(frames: &[Frame], stream: u32) -> (String, bool) {
    let mut text = String::new();
    let mut ended = false;
    for f in frames.iter().filter(|f| f.stream == stream) {
        if f.kind == DATA {
            text.push_str(&String::from_utf8_lossy(&f.payload));
        }
        ended |= matches!(f.kind, DATA | HEADERS) && f.flags & END_STREAM != 0;
    }
    (text, ended)
}

/// SIGTERM: a GOAWAY NO_ERROR that covers the stream in flight, whose answer then arrives
/// whole, then the connection closes and the server exits.
#[test]
fn sigterm_sends_goaway_and_the_stream_in_flight_finishes() {
    let mut srv = Server::start(CONFIG);
    let mut conn = connect(&srv);
    conn.get_path(1, "/slow");
    std::thread::sleep(Duration::from_millis(300));
    signal(&srv.child, "TERM");
    let (frames, closed) = conn.frames_until_closed();
    let goaways = goaways(&frames);
    assert!(!goaways.is_empty(), "no GOAWAY: {frames:?}");
    assert!(
        goaways
            .iter()
            .all(|&(last, code)| code == NO_ERROR && last >= 1),
        "{goaways:?}"
    );
    let (text, ended) = body(&frames, 1);
    assert!(ended && text.starts_with("slept on"), "{frames:?}");
    assert!(closed, "the connection stayed open: {frames:?}");
    assert!(srv.stop().success());
}

/// `limits.max_requests_per_connection`: after the last stream allowed, a GOAWAY NO_ERROR
/// whose last-stream-id is that stream; the streams before it are answered.
#[test]
fn the_request_limit_ends_the_connection_after_its_streams_are_answered() {
    let srv = Server::start(CONFIG);
    let mut conn = connect(&srv);
    conn.get_path(1, "/slow");
    conn.get(3);
    let (frames, closed) = conn.frames_until_closed();
    let goaways = goaways(&frames);
    assert_eq!(goaways.last(), Some(&(3, NO_ERROR)), "{frames:?}");
    assert!(body(&frames, 1).0.starts_with("slept on"), "{frames:?}");
    assert_eq!(body(&frames, 3), ("fast\n".to_string(), true), "{frames:?}");
    assert!(closed, "{frames:?}");
}

/// `timeouts.keepalive`: an idle connection (its stream answered) gets a GOAWAY NO_ERROR that
/// names the last stream, then closes.
#[test]
fn an_idle_connection_ends_with_goaway() {
    let srv = Server::start(
        r#"{
      "timeouts": {"keepalive": 1},
      "load": [{"so": "testkit"}],
      "routing": [{"prefix": "/", "handler": "text", "text": "fast\n"}]
    }"#,
    );
    let mut conn = connect(&srv);
    conn.get(1);
    let started = std::time::Instant::now();
    let (frames, closed) = conn.frames_until_closed();
    assert_eq!(body(&frames, 1), ("fast\n".to_string(), true), "{frames:?}");
    assert_eq!(goaways(&frames).last(), Some(&(1, NO_ERROR)), "{frames:?}");
    assert!(closed, "{frames:?}");
    assert!(started.elapsed() >= Duration::from_millis(900));
}

/// SIGHUP (reload): a connection open across it keeps serving — the stream in flight finishes
/// and a new stream on the same connection is answered.
#[test]
fn a_reload_keeps_open_connections_serving() {
    let srv = Server::start(&CONFIG.replace(
        r#""max_requests_per_connection": 2"#,
        r#""max_requests_per_connection": 100"#,
    ));
    let mut conn = connect(&srv);
    conn.get_path(1, "/slow");
    std::thread::sleep(Duration::from_millis(300));
    signal(&srv.child, "HUP");
    conn.stream_end(1).unwrap();
    conn.get(3);
    conn.response(3).unwrap();
    conn.stream_end(3).unwrap();
    assert!(
        srv.log_text().contains("reload"),
        "no reload logged:\n{}",
        srv.log_text()
    );
}
