//! Request ids: one per request (32 hex digits, different every time), `X-Request-Id` on
//! responses and to upstreams through the proxy, a trusted proxy's id kept, the id in the
//! access log, and the section's configuration errors.

mod common;
mod ops_util;
mod upstream;

use common::{check_config, curl, Response, Server};
use upstream::Upstream;

fn config(up: &Upstream, request_id: &str, log: &std::path::Path) -> String {
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}, {{"so": "proxy"}}],
  "backends": {{"b": {{"connect": "{}"}}}},
  "logging": {{"access_log": {:?}, "access_log_fields": ["request_id"]}},
  "request_id": {request_id},
  "routing": [
    {{"prefix": "/up", "handler": "http_proxy", "backend": "b", "uri": "/"}},
    {{"prefix": "/missing", "handler": "fail", "status": 404}},
    {{"prefix": "/page", "handler": "text", "filters": [{{"type": "ssi", "always": true}}],
      "text": "<!--#include virtual=\"/a\" -->|<!--#include virtual=\"/b\" -->"}},
    {{"handler": "text", "text": "hi"}},
  ]
}}"#,
        up.address(),
        log.display().to_string()
    )
}

fn get(srv: &Server, path: &str, headers: &str) -> Response {
    let req =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n");
    Response::parse(srv.raw(req.as_bytes()).as_bytes())
}

fn is_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The `X-Request-Id` line the upstream received.
fn upstream_id(up: &Upstream) -> Option<String> {
    let head = up.state.last_head.lock().unwrap().clone();
    head.lines()
        .find_map(|l| {
            l.strip_prefix("x-request-id: ")
                .or(l.strip_prefix("X-Request-Id: "))
        })
        .map(str::to_owned)
}

#[test]
fn every_response_and_upstream_request_carries_the_id() {
    let up = Upstream::start("u");
    let dir = common::TempDir::new("rid");
    let log = dir.path().join("access.log");
    let srv = Server::start(&config(&up, r#"{"response": true, "forward": true}"#, &log));
    let a = get(&srv, "/", "");
    let b = get(&srv, "/missing", "");
    let (a, b) = (
        a.header("x-request-id").unwrap(),
        b.header("x-request-id").unwrap(),
    );
    assert!(is_id(a) && is_id(b) && a != b, "{a} {b}");
    // A client's id is not trusted: replaced, for the response and the upstream alike.
    let r = get(&srv, "/up/echo", "X-Request-Id: forged-by-client\r\n");
    assert_eq!(r.status, 200);
    let id = r.header("x-request-id").unwrap();
    assert!(is_id(id), "{id}");
    assert_eq!(upstream_id(&up).as_deref(), Some(id));
    // HTTP/2 too.
    let url = srv.url("/");
    let (ok, out) = curl(&["--http2-prior-knowledge", "-i", &url]);
    assert!(ok && out.starts_with("HTTP/2 200"), "{out}");
    let h2 = out
        .lines()
        .find_map(|l| l.strip_prefix("x-request-id: "))
        .unwrap()
        .trim();
    assert!(is_id(h2), "{out}");
    // The access log line ends with the id the response carried (HTTP/2 too).
    let text = ops_util::wait_file(&log, "\n", 4);
    for id in [a, b, id, h2] {
        assert!(
            text.lines().any(|l| l.ends_with(&format!(" \"{id}\""))),
            "{id}\n{text}"
        );
    }
}

/// The ids of the access log's lines for `uri` (the last field).
fn logged_ids(log: &std::path::Path, uri: &str) -> Vec<String> {
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .filter(|l| l.contains(&format!("\"GET {uri} ")))
        .map(|l| l.rsplit('"').nth(1).unwrap().to_owned())
        .collect()
}

#[test]
fn subrequests_share_their_client_requests_id() {
    let up = Upstream::start("u");
    let dir = common::TempDir::new("rid3");
    let log = dir.path().join("access.log");
    let trusting = r#"{"response": true, "trusted": ["127.0.0.1", "::1"]}"#;
    let srv = Server::start(&config(&up, trusting, &log));
    let r = get(&srv, "/page", "");
    assert_eq!(r.text(), "hi|hi");
    let id = r.header("x-request-id").unwrap().to_owned();
    // A trusted proxy's id, which lives in the client request's bytes, is shared too.
    let r = get(&srv, "/page?x", "X-Request-Id: lb-7f3a:1\r\n");
    assert_eq!(r.text(), "hi|hi");
    let ids = logged_ids(&log, "/a");
    assert_eq!(ids, logged_ids(&log, "/b"));
    // The two pages may be served by different network threads, whose log lines reach the
    // file in either order.
    let mut sorted = ids.clone();
    sorted.sort();
    let mut expected = vec![id.clone(), "lb-7f3a:1".to_owned()];
    expected.sort();
    assert_eq!(sorted, expected);
    assert!(is_id(&id), "{id}");
    assert_eq!(logged_ids(&log, "/page"), [id]);
}

#[test]
fn off_by_default_and_a_trusted_proxy_keeps_its_id() {
    let up = Upstream::start("u");
    let dir = common::TempDir::new("rid2");
    let log = dir.path().join("access.log");
    let srv = Server::start(&config(&up, "{}", &log));
    let r = get(&srv, "/up/echo", "");
    assert_eq!(r.header("x-request-id"), None);
    assert_eq!(upstream_id(&up), None);

    let trusting = r#"{"response": true, "forward": true, "trusted": ["10.0.0.0/8", "127.0.0.1"]}"#;
    let srv = Server::start(&config(&up, trusting, &log));
    let r = get(&srv, "/up/echo", "X-Request-Id: lb-7f3a:1\r\n");
    assert_eq!(r.header("x-request-id"), Some("lb-7f3a:1"));
    assert_eq!(upstream_id(&up).as_deref(), Some("lb-7f3a:1"));
    // Even from a trusted proxy, a value unsafe in headers and logs is replaced.
    let r = get(&srv, "/", "X-Request-Id: <script>\r\n");
    assert!(is_id(r.header("x-request-id").unwrap()));
    let long = "a".repeat(65);
    let r = get(&srv, "/", &format!("X-Request-Id: {long}\r\n"));
    assert!(is_id(r.header("x-request-id").unwrap()));
    // Not a trusted address: replaced.
    let untrusting = r#"{"response": true, "trusted": ["10.0.0.0/8"]}"#;
    let srv = Server::start(&config(&up, untrusting, &log));
    let r = get(&srv, "/", "X-Request-Id: lb-7f3a:1\r\n");
    assert!(is_id(r.header("x-request-id").unwrap()));
}

#[test]
fn configuration_errors_name_line_and_key() {
    let cases = [
        (
            "\"request_id\": {\n\"trusted\": [\"10.0.0.0/40\"]}",
            4,
            "trusted",
        ),
        ("\"request_id\": {\n\"respones\": true}", 4, "respones"),
        (
            "\"logging\": {\n\"access_log_fields\": [\"request_idd\"]}",
            4,
            "request_idd",
        ),
    ];
    for (section, line, named) in cases {
        let config = format!("{{\n\"routing\": [],\n{section}}}");
        let (ok, out) = check_config(&config, &[]);
        assert!(
            !ok && out.contains(&format!("c.json:{line}")) && out.contains(named),
            "{section}: {out}"
        );
    }
}
