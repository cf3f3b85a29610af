//! The `status` handler: connection states, request and module counts, module counters, in
//! plain text, JSON and the Prometheus format.

mod common;
mod ops_util;

use std::io::Write;
use std::time::Duration;

use common::Server;
use ops_util::{get_on, wait_for};

const CONFIG: &str = r#"{
  "load": [{"so": "status"}, {"so": "hello"}, {"so": "testkit"}],
  "routing": [
    {"prefix": "/status", "handler": "status"},
    {"prefix": "/metrics", "handler": "status", "format": "prometheus"},
    {"prefix": "/hello", "handler": "hello"},
    {"prefix": "/text", "handler": "text", "text": "t"},
    {"prefix": "/posted", "handler": "text", "text": "p", "methods": ["POST"],
     "filters": [{"type": "before-worker"}]},
  ]
}"#;

fn json_status(srv: &Server) -> serde_json::Value {
    let r = srv.get("/status?format=json");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    serde_json::from_slice(&r.body).unwrap()
}

/// The JSON status through an open keep-alive connection.
fn json_on(s: &mut std::net::TcpStream) -> serde_json::Value {
    let r = get_on(s, "/status?format=json").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_slice(&r.body).unwrap()
}

fn diff(a: &serde_json::Value, b: &serde_json::Value, key: &[&str]) -> i64 {
    let at = |v: &serde_json::Value| {
        key.iter()
            .fold(v.clone(), |v, k| v[*k].clone())
            .as_i64()
            .unwrap_or(0)
    };
    at(b) - at(a)
}

#[test]
fn counts_requests_modules_and_module_counters() {
    let srv = Server::start(CONFIG);
    let mut s = srv.connect();
    // The harness's readiness probe is accepted (maybe by another network thread, after
    // this connection) and closed: wait for both to be counted and the probe gone.
    wait_for(
        "the probe connection to be accepted and go",
        Duration::from_secs(10),
        || {
            let c = &json_on(&mut s)["connections"];
            c["accepted"] == 2 && c["active"] == 1
        },
    );
    let before = json_on(&mut s);
    for _ in 0..3 {
        assert_eq!(get_on(&mut s, "/hello").unwrap().status, 200);
    }
    for _ in 0..2 {
        assert_eq!(get_on(&mut s, "/text").unwrap().text(), "t");
    }
    assert_eq!(get_on(&mut s, "/nothing-here").unwrap().status, 404);
    // The core's 405, wrapped by the route's filter (which waits for the worker pool): not
    // the module's answer.
    assert_eq!(get_on(&mut s, "/posted").unwrap().status, 405);
    let after = json_on(&mut s);
    // The first status request and the seven after it (a request is counted when answered).
    assert_eq!(diff(&before, &after, &["requests"]), 8, "{before}\n{after}");
    assert_eq!(diff(&before, &after, &["modules", "hello"]), 3, "{after}");
    assert_eq!(diff(&before, &after, &["modules", "testkit"]), 2, "{after}");
    assert_eq!(diff(&before, &after, &["modules", "status"]), 1, "{after}");
    assert_eq!(
        diff(&before, &after, &["counters", "testkit_text_served"]),
        2,
        "{after}"
    );
    assert_eq!(
        diff(&before, &after, &["connections", "accepted"]),
        0,
        "one connection: {after}"
    );
    // Two more connections.
    assert_eq!(srv.get("/hello").status, 200);
    assert_eq!(srv.get("/hello").status, 200);
    let last = json_on(&mut s);
    assert_eq!(
        diff(&after, &last, &["connections", "accepted"]),
        2,
        "{last}"
    );
    assert_eq!(diff(&after, &last, &["requests"]), 3, "{last}");
    assert!(
        last["uptime_secs"].is_u64() && last["reloads"] == 0,
        "{last}"
    );
}

#[test]
fn connection_states_are_tracked() {
    let srv = Server::start(CONFIG);
    // Three idle keep-alive connections, one that sent half a request head.
    let mut idle: Vec<_> = (0..3).map(|_| srv.connect()).collect();
    for s in &mut idle {
        assert_eq!(get_on(s, "/hello").unwrap().status, 200);
    }
    let mut reading = srv.connect();
    reading
        .write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut v = serde_json::Value::Null;
    wait_for(
        "the half-sent head to be read",
        Duration::from_secs(10),
        || {
            v = json_status(&srv);
            v["connections"]["reading"] == 1
        },
    );
    let c = &v["connections"];
    assert_eq!(c["idle"], 3, "{v}");
    assert_eq!(c["writing"], 1, "{v}");
    assert_eq!(c["active"], 5, "{v}");
    drop(idle);
    drop(reading);
    wait_for(
        "closed connections to leave the gauges",
        Duration::from_secs(10),
        || json_status(&srv)["connections"]["active"] == 1,
    );
}

#[test]
fn plain_text_is_stub_status_shaped() {
    let srv = Server::start(CONFIG);
    let mut s = srv.connect();
    assert_eq!(get_on(&mut s, "/hello").unwrap().status, 200);
    wait_for(
        "only this connection to be open",
        Duration::from_secs(10),
        || {
            get_on(&mut s, "/status")
                .unwrap()
                .text()
                .starts_with("Active connections: 1\n")
        },
    );
    let r = get_on(&mut s, "/status").unwrap();
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let text = r.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "Active connections: 1", "{text}");
    assert_eq!(lines[1], "server accepts handled requests", "{text}");
    let numbers: Vec<u64> = lines[2]
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(numbers.len(), 3, "{text}");
    assert_eq!(numbers[0], numbers[1], "{text}");
    assert!(numbers[2] >= 2, "{text}");
    assert_eq!(lines[3], "Reading: 0 Writing: 1 Waiting: 0", "{text}");
    assert!(text.contains("\nModule hello: 1\n"), "{text}");
    assert!(
        text.contains("\nCounter testkit_text_served: 0\n"),
        "{text}"
    );
}

#[test]
fn prometheus_exposition() {
    let srv = Server::start(CONFIG);
    assert_eq!(srv.get("/hello").status, 200);
    for path in ["/metrics", "/status?format=prometheus"] {
        let r = srv.get(path);
        assert_eq!(r.status, 200);
        assert!(r
            .header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4"));
        let text = r.text();
        for line in text.lines() {
            if line.starts_with("# ") {
                assert!(
                    line.starts_with("# HELP osprey_") || line.starts_with("# TYPE osprey_"),
                    "{line}"
                );
                continue;
            }
            let (name, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<u64>().is_ok(), "{line}");
            let bare = name.split('{').next().unwrap();
            assert!(
                bare.starts_with("osprey_")
                    && bare.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{line}"
            );
            if let Some(labels) = name.strip_prefix(bare) {
                assert!(
                    labels.is_empty() || (labels.starts_with('{') && labels.ends_with("\"}")),
                    "{line}"
                );
            }
        }
        assert!(
            text.contains("\nosprey_module_requests_total{module=\"hello\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("\nosprey_connections{state=\"writing\"} 1\n"),
            "{text}"
        );
    }
    let mut s = srv.connect();
    let first = get_on(&mut s, "/metrics").unwrap().text();
    let total = |t: &str| -> u64 {
        t.lines()
            .find_map(|l| l.strip_prefix("osprey_requests_total "))
            .unwrap()
            .parse()
            .unwrap()
    };
    let second = get_on(&mut s, "/metrics").unwrap().text();
    assert_eq!(total(&second), total(&first) + 1, "{second}");
}

#[test]
fn bad_formats_are_refused() {
    let srv = Server::start(CONFIG);
    let r = srv.get("/status?format=xml");
    assert_eq!(r.status, 400);
    assert!(r.text().contains("unknown format `xml`"), "{}", r.text());
    let r = srv
        .raw(b"POST /status HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 405"), "{r}");
    // A bad route format is a configuration error naming the line.
    let dir = common::TempDir::new("status-conf");
    let conf = dir.write(
        "bad.json",
        "{\"load\": [{\"so\": \"status\"}],\n \"routing\": [\n  {\"prefix\": \"/s\", \"handler\": \"status\",\n   \"format\": \"xml\"}]}",
    );
    let out = std::process::Command::new(common::osprey_bin())
        .arg("-t")
        .arg("-c")
        .arg(&conf)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.json:4") && err.contains("unknown format `xml`"),
        "{err}"
    );
}
