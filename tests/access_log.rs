//! The access log: combined format plus request time, buffered per thread, flushed within a
//! second and at exit, reopened on SIGUSR1 (with the error log).

mod common;
mod ops_util;

use std::io::Write;

use common::{signal, Server};
use ops_util::{get_on, wait_file};

const CONFIG: &str = r#"{
  "load": [{"so": "testkit"}],
  "logging": {"access_log": "access.log"},
  "routing": [
    {"prefix": "/v", "handler": "text", "text": "abc"},
  ]
}"#;

/// A server working in its own directory (dropped after the server, as tuples drop in order).
fn start(config: &str, args: &[&str]) -> (Server, common::TempDir) {
    let dir = common::TempDir::new("alog-cwd");
    let dir_arg = dir.path().to_str().unwrap().to_owned();
    let mut all = vec!["-w", &dir_arg];
    all.extend_from_slice(args);
    (Server::start_with(config, &all), dir)
}

#[test]
fn lines_are_in_combined_format_with_request_time() {
    let (srv, cwd) = start(CONFIG, &[]);
    let log = cwd.path().join("access.log");
    let mut s = srv.connect();
    s.write_all(
        b"GET /v?x=1 HTTP/1.1\r\nHost: a\r\nReferer: http://ref.example/p\r\nUser-Agent: test \"agent\"/1.0\r\n\r\n",
    )
    .unwrap();
    assert_eq!(ops_util::read_one(&mut s).unwrap().text(), "abc");
    assert_eq!(get_on(&mut s, "/missing").unwrap().status, 404);
    s.write_all(b"HEAD /v HTTP/1.0\r\n\r\n").unwrap();
    let _ = common::read_to_close(&mut s);
    assert!(srv.raw(b"BROKEN\r\n\r\n").starts_with("HTTP/1.1 400"));
    let text = wait_file(&log, "\n", 4);
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    // Each network thread writes its own buffer: order lines by what they record.
    let rank = |l: &&str| {
        ["\"GET /v?x=1", "\"GET /missing", "\"HEAD /v", "\"-\" 400"]
            .iter()
            .position(|k| l.contains(k))
    };
    lines.sort_by_key(rank);
    assert!(lines.iter().all(|l| rank(l).is_some()), "{text}");
    let check = |line: &str, request: &str, rest: &str| {
        let (ip, tail) = line
            .split_once(" - - [")
            .unwrap_or_else(|| panic!("{line}"));
        assert_eq!(ip, "127.0.0.1", "{line}");
        let (time, tail) = tail.split_once("] ").unwrap();
        // 02/Dec/2026:15:49:15 +0000
        assert_eq!(time.len(), 26, "{line}");
        assert_eq!(&time[2..3], "/", "{line}");
        assert!(time.ends_with(" +0000"), "{line}");
        let expected = format!("\"{request}\" {rest} ");
        assert!(tail.starts_with(&expected), "{line}\nexpected {expected}");
        let secs = &tail[expected.len()..];
        let (whole, millis) = secs.split_once('.').unwrap_or_else(|| panic!("{line}"));
        assert!(
            whole.parse::<u64>().is_ok() && millis.len() == 3 && millis.parse::<u64>().is_ok(),
            "{line}"
        );
    };
    check(
        lines[0],
        "GET /v?x=1 HTTP/1.1",
        r#"200 3 "http://ref.example/p" "test \x22agent\x22/1.0""#,
    );
    let not_found = lines[1];
    assert!(
        not_found.contains("\"GET /missing HTTP/1.1\" 404 "),
        "{not_found}"
    );
    check(lines[2], "HEAD /v HTTP/1.0", r#"200 0 "-" "-""#);
    assert!(lines[3].contains("] \"-\" 400 "), "{}", lines[3]);
}

#[test]
fn every_line_is_written_at_exit() {
    let (mut srv, cwd) = start(
        &CONFIG.replace("\"logging\": {\"access_log\": \"access.log\"},", ""),
        &["-a", "requests.log"],
    );
    let log = cwd.path().join("requests.log");
    let mut s = srv.connect();
    for _ in 0..500 {
        assert_eq!(get_on(&mut s, "/v").unwrap().status, 200);
    }
    drop(s);
    assert!(srv.stop().success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 500);
    assert!(
        text.lines()
            .all(|l| l.contains("\"GET /v HTTP/1.1\" 200 3 \"-\" \"-\" ")),
        "{text}"
    );
}

#[test]
fn off_unless_configured() {
    let (mut srv, cwd) = start(
        &CONFIG.replace("\"logging\": {\"access_log\": \"access.log\"},", ""),
        &[],
    );
    assert_eq!(srv.get("/v").status, 200);
    assert!(srv.stop().success());
    let files: Vec<_> = std::fs::read_dir(cwd.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(files.is_empty(), "no file was written: {files:?}");
}

#[test]
fn sigusr1_reopens_both_logs() {
    let (srv, cwd) = start(CONFIG, &["-l", "error.log"]);
    let (access, error) = (cwd.path().join("access.log"), cwd.path().join("error.log"));
    assert_eq!(srv.get("/v?before").status, 200);
    wait_file(&access, "/v?before", 1);
    wait_file(&error, "started with", 1);
    // What logrotate does: move the files, then signal.
    std::fs::rename(&access, cwd.path().join("access.log.1")).unwrap();
    std::fs::rename(&error, cwd.path().join("error.log.1")).unwrap();
    signal(&srv.child, "USR1");
    wait_file(&cwd.path().join("error.log.1"), "reopening log files", 1);
    // Logging after the reopen lands in the new files.
    signal(&srv.child, "HUP");
    wait_file(&error, "configuration reloaded", 1);
    assert_eq!(srv.get("/v?after").status, 200);
    let new = wait_file(&access, "/v?after", 1);
    assert!(!new.contains("/v?before"), "{new}");
    let old = std::fs::read_to_string(cwd.path().join("access.log.1")).unwrap();
    assert!(
        old.contains("/v?before") && !old.contains("/v?after"),
        "{old}"
    );
}

/// HTTP/2 requests go through the same finished step as HTTP/1.1: they are logged (with their
/// protocol) and counted in the status handler's request counter.
#[test]
fn http2_requests_are_logged_and_counted_like_http1() {
    let config = CONFIG.replace(
        r#"{"so": "testkit"}"#,
        r#"{"so": "testkit"}, {"so": "status"}"#,
    );
    let config = config.replace(
        r#"{"prefix": "/v","#,
        r#"{"prefix": "/status", "handler": "status"},
    {"prefix": "/v","#,
    );
    let (srv, cwd) = start(&config, &[]);
    let log = cwd.path().join("access.log");
    let requests = || {
        let r = srv.get("/status?format=json");
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        v["requests"].as_i64().unwrap()
    };
    let before = requests();
    for path in ["/v?h2", "/missing-h2"] {
        let (ok, _) = common::curl(&[
            "--http2-prior-knowledge",
            "-e",
            "http://ref.example/",
            "-A",
            "h2-agent",
            &srv.url(path),
        ]);
        assert!(ok);
    }
    // The status request itself is counted once it is answered, so before's is in after.
    let after = requests();
    assert_eq!(
        after - before,
        3,
        "two HTTP/2 requests and the first status request"
    );
    let text = wait_file(&log, "HTTP/2.0", 2);
    assert!(
        text.contains(r#""GET /v?h2 HTTP/2.0" 200 3 "http://ref.example/" "h2-agent" "#),
        "{text}"
    );
    assert!(
        text.contains(r#""GET /missing-h2 HTTP/2.0" 404 "#),
        "{text}"
    );
}
