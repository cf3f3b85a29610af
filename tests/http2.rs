//! HTTP/2 of the real binary: cleartext prior knowledge (h2c) and over TLS (ALPN), through
//! the same routing, handlers and filters as HTTP/1.1; settings from the `http2` section;
//! h2load.

mod common;
mod http2_frames;
mod tlskit;

use std::process::Command;

use common::{curl, Server, TempDir};
use tlskit::{start_tls, Cert};

const CONFIG: &str = r#"{
  "http2": {"max_concurrent_streams": 7, "initial_window_size": 1048576},
  "limits": {"max_body_bytes": 100000},
  "load": [{"so": "testkit"}, {"so": "benchmark"}],
  "routing": [
    {"prefix": "/echo", "handler": "echo"},
    {"prefix": "/stream", "handler": "stream", "chunks": 3},
    {"prefix": "/async", "handler": "async"},
    {"prefix": "/worker", "handler": "sleep-worker"},
    {"prefix": "/bad-header", "handler": "bad-header"},
    {"prefix": "/tagged", "handler": "echo", "filters": [{"type": "tag", "text": "t1"}]},
    {"prefix": "/declines", "handler": "decline"},
    {"prefix": "/declines", "handler": "text", "text": "second route"},
    {"prefix": "/post-only", "handler": "echo", "methods": ["POST"]},
    {"prefix": "/benchmark-inprocess", "handler": "benchmark-inprocess"},
  ]
}"#;

/// curl with HTTP/2 prior knowledge on the plain port; returns (ok, output with headers).
fn h2c(srv: &Server, path: &str, extra: &[&str]) -> (bool, String) {
    let url = srv.url(path);
    let mut args = vec!["--http2-prior-knowledge", "-i"];
    args.extend_from_slice(extra);
    args.push(&url);
    curl(&args)
}

#[test]
fn h2c_prior_knowledge_reaches_the_handlers() {
    let srv = Server::start(CONFIG);
    let (ok, out) = h2c(
        &srv,
        "/echo/x?q=1",
        &["-H", "Cookie: a=1", "-H", "Cookie: b=2"],
    );
    assert!(ok, "{out}");
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    assert!(
        out.contains("x-http2: 1") && out.contains("x-secure: 0"),
        "{out}"
    );
    assert!(
        out.contains("path=/echo/x") && out.contains("path_info=/x") && out.contains("query.q=1"),
        "{out}"
    );
    assert!(out.contains("host=127.0.0.1\n"), "{out}");
    assert!(
        out.contains("cookie.a=1") && out.contains("cookie.b=2"),
        "{out}"
    );
    // Cookie crumbs reach the handler (and an upstream) as one field (RFC 9113 §8.2.3).
    assert!(out.contains("header.cookie=a=1; b=2\n"), "{out}");
    assert!(
        out.contains("server: osprey") && out.contains("date: "),
        "{out}"
    );
    // HTTP/1.1 on the same port is unaffected.
    let resp = srv.get("/echo");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("x-http2"), Some("0"));
}

#[test]
fn bodies_limits_and_errors_over_h2() {
    let srv = Server::start(CONFIG);
    let body_file = |name: &str, text: &str| format!("@{}", srv.dir.write(name, text).display());
    let (ok, out) = h2c(&srv, "/echo", &["--data-binary", "a=1&b=two"]);
    assert!(
        ok && out.contains("method=POST") && out.contains("form.b=two"),
        "{out}"
    );
    let big = "y".repeat(90_000);
    let (ok, out) = h2c(&srv, "/echo", &["--data-binary", &body_file("big", &big)]);
    assert!(
        ok && out.contains(&format!("body={big}")),
        "body of 90000 bytes not echoed"
    );
    let too_big = "z".repeat(150_000);
    let (_, out) = h2c(
        &srv,
        "/echo",
        &["--data-binary", &body_file("too-big", &too_big)],
    );
    assert!(
        out.starts_with("HTTP/2 413"),
        "{}",
        &out[..out.len().min(300)]
    );
    let (_, out) = h2c(&srv, "/nowhere", &[]);
    assert!(out.starts_with("HTTP/2 404"), "{out}");
    let (_, out) = h2c(&srv, "/post-only", &[]);
    assert!(
        out.starts_with("HTTP/2 405") && out.contains("allow: POST"),
        "{out}"
    );
    let (_, out) = h2c(&srv, "/bad-header", &[]);
    assert!(out.starts_with("HTTP/2 500"), "{out}");
    let huge = format!("X-Big: {}", "h".repeat(20_000));
    let headers = format!("@{}", srv.dir.write("headers", &huge).display());
    let (_, out) = h2c(&srv, "/echo", &["-H", &headers]);
    assert!(out.starts_with("HTTP/2 431"), "{out}");
    // What HTTP/1.1 answers with a status is answered with it over HTTP/2 too.
    let (_, out) = h2c(&srv, "/echo", &["-H", "Expect: magic"]);
    assert!(out.starts_with("HTTP/2 417"), "{out}");
    let (_, out) = h2c(&srv, "/echo", &["-H", "Host: a/b"]);
    assert!(out.starts_with("HTTP/2 400"), "{out}");
    // HEAD: the length of the GET body, no body.
    let (ok, out) = h2c(&srv, "/declines", &["-I"]);
    assert!(
        ok && out.starts_with("HTTP/2 200") && out.contains("content-length: 12"),
        "{out}"
    );
    assert!(!out.contains("second route"), "{out}");
}

#[test]
fn streams_async_workers_filters_and_fallthrough_over_h2() {
    let srv = Server::start(CONFIG);
    let (ok, out) = h2c(&srv, "/stream", &[]);
    assert!(ok && out.ends_with("chunk 1\nchunk 2\nchunk 3\n"), "{out}");
    let (ok, out) = h2c(&srv, "/async/a", &[]);
    assert!(ok && out.contains("async answer for /async/a"), "{out}");
    let (ok, out) = h2c(&srv, "/worker", &[]);
    assert!(ok && out.contains("slept on"), "{out}");
    let (ok, out) = h2c(&srv, "/tagged", &[]);
    assert!(ok && out.contains("x-tag: t1"), "{out}");
    let (ok, out) = h2c(&srv, "/tagged?short-circuit", &[]);
    assert!(ok && out.contains("from filter"), "{out}");
    let (ok, out) = h2c(&srv, "/declines", &[]);
    assert!(ok && out.ends_with("second route"), "{out}");
}

#[test]
fn http2_settings_come_from_the_configuration() {
    let srv = Server::start(CONFIG);
    let out = Command::new("nghttp")
        .args(["-nv", &srv.url("/echo")])
        .output()
        .expect("nghttp is installed");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("SETTINGS_MAX_CONCURRENT_STREAMS(0x03):7"),
        "{text}"
    );
    assert!(
        text.contains("SETTINGS_INITIAL_WINDOW_SIZE(0x04):1048576"),
        "{text}"
    );
}

#[test]
fn h2c_can_be_turned_off() {
    let srv =
        Server::start(&CONFIG.replacen("\"max_concurrent_streams\": 7", "\"enabled\": false", 1));
    let (_, out) = h2c(&srv, "/echo", &[]);
    assert!(!out.starts_with("HTTP/2 200"), "{out}");
    assert_eq!(srv.get("/echo").status, 200);
}

#[test]
fn bad_http2_settings_are_refused() {
    let dir = TempDir::new("h2conf");
    let conf = dir.write("c.json", "{\n\"http2\": {\n\"max_frame_size\": 100}}");
    let (ok, err) = common::check_file(&conf, &[]);
    assert!(
        !ok && err.contains(":3") && err.contains("max_frame_size"),
        "{err}"
    );
}

fn h2load(url: &str) -> String {
    let out = Command::new("h2load")
        .args(["-n", "2000", "-c", "4", "-m", "10", url])
        .output()
        .expect("h2load is installed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn h2load_over_h2c_and_tls() {
    let dir = TempDir::new("h2load");
    let cert = Cert::new(&dir, "localhost", &["localhost"]);
    // The default settings (128 streams): h2load opens its 10 streams before it reads ours.
    let config = CONFIG.replacen(
        r#""http2": {"max_concurrent_streams": 7, "initial_window_size": 1048576},"#,
        "",
        1,
    );
    let (srv, port) = start_tls(&config, &cert);
    for url in [
        srv.url("/benchmark-inprocess"),
        format!("https://127.0.0.1:{port}/benchmark-inprocess"),
    ] {
        let out = h2load(&url);
        assert!(
            out.contains("2000 succeeded, 0 failed, 0 errored"),
            "{url}: {out}"
        );
        assert!(out.contains("status codes: 2000 2xx"), "{url}: {out}");
        assert!(out.contains("Application protocol: h2"), "{url}: {out}");
    }
}

#[test]
fn many_concurrent_streams_on_one_connection() {
    let srv = Server::start(CONFIG);
    // 40 slow requests over one connection, 7 streams at once (the server's limit), each on
    // the worker pool: every one must be answered.
    let out = Command::new("h2load")
        .args(["-n", "40", "-c", "1", "-m", "7", &srv.url("/worker")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("40 succeeded"), "{text}");
}

/// The answers to a batch of streams leave in one write: h2 writes each DATA frame over 256
/// bytes with a write of its own, so without batching 2 KiB answers cost a system call each.
/// The server runs under `strace -c`, counting every system call that writes to a socket.
#[test]
fn answers_of_a_batch_of_streams_leave_together() {
    let dir = TempDir::new("h2-batch");
    let counts = dir.path().join("strace.txt");
    let counts_arg = counts.to_str().unwrap().to_owned();
    let mut srv = Server::start_custom(
        r#"{"load": [{"so": "testkit"}],
            "routing": [{"prefix": "/big", "handler": "big", "size": 2048}]}"#,
        &[
            "strace",
            "-f",
            "-qq",
            "-c",
            "-o",
            &counts_arg,
            "-e",
            "trace=write,writev,sendto,sendmsg",
        ],
        1,
        // No debug lines: log lines are writes too.
        &["-L", "info"],
    );
    let out = Command::new("h2load")
        .args(["-n", "2000", "-c", "1", "-m", "20", &srv.url("/big")])
        .output()
        .expect("h2load is installed");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("2000 succeeded"), "{report}");
    // Stop the server itself (strace's child): strace writes its table when it exits.
    let children = format!("/proc/{0}/task/{0}/children", srv.child.id());
    let server = std::fs::read_to_string(children).unwrap();
    let status = Command::new("kill")
        .args(["-TERM", server.trim()])
        .status()
        .unwrap();
    assert!(status.success());
    srv.stop();
    let table = std::fs::read_to_string(&counts).unwrap();
    let writes: u64 = table
        .lines()
        .filter(|l| {
            ["write", "writev", "sendto", "sendmsg"]
                .iter()
                .any(|s| l.ends_with(&format!(" {s}")))
        })
        .map(|l| l.split_whitespace().nth(3).unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(
        writes < 2000 / 4,
        "{writes} writes for 2000 answers of 2 KiB in batches of 20 streams:\n{table}"
    );
}

/// Connection-specific fields a handler sets are left out of an HTTP/2 response (RFC 9113
/// §8.2.2) instead of failing the stream (h2 refuses to send them); over HTTP/1.1 `TE` goes
/// out as set.
#[test]
fn connection_specific_response_fields_are_dropped() {
    let srv = Server::start(
        r#"{"load": [{"so": "testkit"}],
            "routing": [{"prefix": "/", "handler": "text", "text": "kept\n", "headers": [
              ["TE", "gzip"], ["Connection", "x-extra"], ["Keep-Alive", "timeout=5"],
              ["Upgrade", "websocket"], ["Proxy-Connection", "close"], ["X-Kept", "1"]]}]}"#,
    );
    let (ok, out) = h2c(&srv, "/", &[]);
    assert!(ok && out.starts_with("HTTP/2 200"), "{out}");
    assert!(
        out.contains("x-kept: 1") && out.ends_with("kept\n"),
        "{out}"
    );
    for name in [
        "te:",
        "connection:",
        "keep-alive:",
        "upgrade:",
        "proxy-connection:",
    ] {
        assert!(
            !out.lines().any(|l| l.starts_with(name)),
            "{name} sent: {out}"
        );
    }
    assert_eq!(srv.get("/").header("te"), Some("gzip"));
}

/// A body in memory goes out by reference (not copied into the output buffer), in DATA frames
/// still cut to the client's SETTINGS_MAX_FRAME_SIZE and sent within its stream window: a
/// shared one (the static module's memory cache) and an owned one (a handler's), both larger
/// than a frame and than the window. The rest comes after a WINDOW_UPDATE, and the bytes are
/// the body's, in order.
#[test]
fn bodies_in_memory_keep_to_the_frame_size_and_the_window() {
    use http2_frames::*;
    let dir = TempDir::new("h2-frames");
    let file: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("f40k.bin"), &file).unwrap();
    let srv = Server::start(&format!(
        r#"{{"load": [{{"so": "testkit"}}, {{"so": "static"}}],
            "routing": [{{"prefix": "/big", "handler": "big", "size": 40000}},
              {{"handler": "sendfile", "dir": "{}", "memcache": true}}]}}"#,
        dir.path().display()
    ));
    for (path, body, max_frame) in [
        ("/f40k.bin", file.clone(), 16_384usize),
        ("/big", vec![b'x'; 40_000], 20_000),
    ] {
        let tcp = std::net::TcpStream::connect(srv.addr()).unwrap();
        tcp.set_read_timeout(Some(WAIT)).unwrap();
        let mut conn = Conn::new(Box::new(tcp), "http", &format!("127.0.0.1:{}", srv.port));
        conn.handshake().unwrap();
        conn.settings(&[(0x4, 10_000), (0x5, max_frame as u32)]);
        conn.settings_ack().unwrap();
        conn.window_update(0, 1_000_000);
        // Twice: the memory cache serves the second.
        for stream in [1, 3] {
            conn.get_path(stream, path);
            let data = |frames: &[Frame]| -> Vec<(usize, bool)> {
                frames
                    .iter()
                    .filter(|f| f.kind == DATA && f.stream == stream)
                    .map(|f| (f.payload.len(), f.flags & END_STREAM != 0))
                    .collect()
            };
            let (first, _) = conn.frames_until_closed();
            let sizes = data(&first);
            assert_eq!(
                sizes.iter().map(|s| s.0).sum::<usize>(),
                10_000,
                "{path}: within the window: {sizes:?}"
            );
            conn.window_update(stream, 30_000);
            let (rest, _) = conn.frames_until_closed();
            let more = data(&rest);
            let all: Vec<_> = sizes.iter().chain(&more).collect();
            assert!(all.iter().all(|s| s.0 <= max_frame), "{path}: {all:?}");
            assert_eq!(all.iter().filter(|s| s.1).count(), 1, "{path}: {all:?}");
            assert!(all.last().unwrap().1, "{path}: {all:?}");
            let sent: Vec<u8> = first
                .iter()
                .chain(&rest)
                .filter(|f| f.kind == DATA && f.stream == stream)
                .flat_map(|f| f.payload.clone())
                .collect();
            assert!(sent == body, "{path}: the bytes differ from the body's");
            assert!(more.iter().any(|s| s.0 == max_frame), "{path}: {all:?}");
        }
    }
}

/// Streams answered at once (no body, an inline answer in memory that fits the windows: no
/// future) and streams whose answer waits for the window, in one batch: an answer goes whole
/// or waits for its future, which sends what the window allows, so the connection window is
/// used to the byte and every stream ends with all of its body once it is opened again.
#[test]
fn a_batch_answered_at_once_and_by_window_keeps_to_the_connection_window() {
    use http2_frames::*;
    let srv = Server::start(
        r#"{"load": [{"so": "testkit"}],
            "routing": [{"prefix": "/big", "handler": "big", "size": 2048}]}"#,
    );
    let tcp = std::net::TcpStream::connect(srv.addr()).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let authority = format!("127.0.0.1:{}", srv.port);
    let mut conn = Conn::new(Box::new(tcp), "http", &authority);
    conn.handshake().unwrap();
    // 40 answers of 2 KiB: 31 fit the connection's 65,535 bytes whole, the 32nd in part.
    let fields: Vec<(String, String)> = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/big"),
        (":authority", authority.as_str()),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect();
    let block = conn.block(&fields);
    let streams: Vec<u32> = (0..40).map(|i| 1 + 2 * i).collect();
    let batch: Vec<u8> = streams
        .iter()
        .flat_map(|&s| frame(HEADERS, END_HEADERS | END_STREAM, s, &block))
        .collect();
    conn.send(&batch);
    let (first, _) = conn.frames_until_closed();
    let data = |frames: &[Frame]| -> Vec<(u32, usize, bool)> {
        frames
            .iter()
            .filter(|f| f.kind == DATA)
            .map(|f| (f.stream, f.payload.len(), f.flags & END_STREAM != 0))
            .collect()
    };
    let before = data(&first);
    let sent: usize = before.iter().map(|d| d.1).sum();
    assert_eq!(
        sent, 65_535,
        "the connection window, to the byte: {before:?}"
    );
    assert_eq!(before.iter().filter(|d| d.2).count(), 31, "{before:?}");
    conn.window_update(0, 1_000_000);
    let (rest, _) = conn.frames_until_closed();
    let all: Vec<_> = before.into_iter().chain(data(&rest)).collect();
    for s in &streams {
        let mine: Vec<_> = all.iter().filter(|d| d.0 == *s).collect();
        assert_eq!(
            mine.iter().map(|d| d.1).sum::<usize>(),
            2048,
            "{s}: {mine:?}"
        );
        assert_eq!(mine.iter().filter(|d| d.2).count(), 1, "{s}: {mine:?}");
        assert!(mine.last().unwrap().2, "{s}: {mine:?}");
    }
    let heads = first.iter().chain(&rest).filter(|f| f.kind == HEADERS);
    assert_eq!(heads.count(), 40);
}
