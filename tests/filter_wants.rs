//! `Filter::wants` against the real binary: the core calls only the steps a filter declares,
//! a filter that declares nothing (as one built before `wants` existed) gets every step, the
//! answers are the same either way, and the cache key is built whenever a filter reads it.

mod common;

use common::{Response, Server};

const CONFIG: &str = r#"{
  "load": [{"so": "testkit"}, {"so": "file_cache"}],
  "routing": [
    {"prefix": "/after-only", "handler": "text", "text": "hi",
     "filters": [{"type": "steps", "name": "after-only", "wants": ["after"]}]},
    {"prefix": "/undeclared", "handler": "text", "text": "hi",
     "filters": [{"type": "steps", "name": "undeclared"}]},
    {"prefix": "/declared", "handler": "text", "text": "hi",
     "filters": [{"type": "steps", "name": "declared", "wants": ["after"]}]},
    {"prefix": "/preflight-only", "handler": "text", "text": "hi",
     "filters": [{"type": "steps", "name": "preflight-only", "wants": ["before_options", "after"]}]},
    {"prefix": "/plain-async", "handler": "async",
     "filters": [{"type": "steps", "name": "plain-async", "wants": ["before", "request_headers", "after"]}]},
    {"prefix": "/idle", "handler": "text", "text": "hi",
     "filters": [{"type": "steps", "name": "idle", "wants": []}]},
    {"prefix": "/keyed", "handler": "text", "text": "hi",
     "filters": [{"type": "tag", "text": "old"},
                 {"type": "steps", "name": "keyed", "wants": ["after", "cache_key"]}]},
    {"prefix": "/cached", "handler": "counter", "counter": "cached",
     "headers": {"Cache-Control": "max-age=60"},
     "filters": [{"type": "steps", "name": "cached", "wants": ["after", "key"]},
                 {"type": "file_cache"}]},
    {"prefix": "/report", "handler": "steps-report"}
  ]
}"#;

/// The counts `steps-report` gives for filter `name`.
fn report(srv: &Server, name: &str) -> String {
    let text = srv.get("/report").text();
    let line = text.lines().find(|l| l.split(' ').next() == Some(name));
    line.unwrap_or_default().to_owned()
}

/// The head without `Date` and the filter's own headers, and the body.
fn comparable(r: &Response, name: &str) -> String {
    let mut lines: Vec<String> = r
        .headers
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case("date") && !n.to_ascii_lowercase().contains(name))
        .map(|(n, v)| format!("{n}: {v}"))
        .collect();
    lines.sort();
    format!("{} {}\n{}", r.status, lines.join("\n"), r.text())
}

#[test]
fn an_after_only_filter_runs_after_and_no_other_step() {
    let srv = Server::start(CONFIG);
    for _ in 0..3 {
        let r = srv.get("/after-only");
        assert_eq!(r.header("x-steps-after-only"), Some("done"));
        // No filter of the route reads the key: none is built.
        assert_eq!(r.header("x-key-after-only"), Some(""));
        assert_eq!(r.text(), "hi");
    }
    assert_eq!(
        report(&srv, "after-only"),
        "after-only cache_key=0 before_mode=0 before=0 request_headers=0 cancel=0 after_mode=0 after=3"
    );
}

#[test]
fn a_before_for_options_only_is_called_for_options_only() {
    let srv = Server::start(CONFIG);
    for method in ["GET", "POST", "OPTIONS", "GET"] {
        let raw = format!("{method} /preflight-only HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        let r = Response::parse(srv.raw(raw.as_bytes()).as_bytes());
        assert_eq!(r.header("x-steps-preflight-only"), Some("done"), "{method}");
    }
    assert_eq!(
        report(&srv, "preflight-only"),
        "preflight-only cache_key=0 before_mode=0 before=1 request_headers=0 cancel=0 after_mode=0 after=4"
    );
}

#[test]
fn inline_filters_around_an_asynchronous_answer_take_each_step_once() {
    let srv = Server::start(CONFIG);
    let r = srv.get("/plain-async");
    assert_eq!(r.text(), "async answer for /plain-async");
    assert_eq!(r.header("x-steps-plain-async"), Some("done"));
    assert_eq!(
        report(&srv, "plain-async"),
        "plain-async cache_key=0 before_mode=0 before=1 request_headers=1 cancel=0 after_mode=0 after=1"
    );
}

#[test]
fn a_filter_that_declares_nothing_gets_every_step() {
    let srv = Server::start(CONFIG);
    for _ in 0..2 {
        srv.get("/undeclared");
    }
    // As before `wants` existed: every step (`cancel` only when `after` does not run).
    assert_eq!(
        report(&srv, "undeclared"),
        "undeclared cache_key=2 before_mode=2 before=2 request_headers=2 cancel=0 after_mode=2 after=2"
    );
    // And the key is built with its variant.
    let r = srv.get("/undeclared/x");
    assert_eq!(
        r.header("x-key-undeclared"),
        Some("localhost|http|/undeclared/x|steps")
    );
}

#[test]
fn answers_are_the_same_with_and_without_declarations() {
    let srv = Server::start(CONFIG);
    let declared = srv.get("/declared");
    let undeclared = srv.get("/undeclared");
    assert_eq!(declared.header("x-steps-declared"), Some("done"));
    assert_eq!(
        comparable(&declared, "declared"),
        comparable(&undeclared, "undeclared")
    );
}

#[test]
fn a_filter_that_wants_nothing_is_never_called() {
    let srv = Server::start(CONFIG);
    let r = srv.get("/idle");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hi");
    assert!(r.header("x-steps-idle").is_none());
    assert_eq!(report(&srv, "idle"), "");
}

#[test]
fn the_key_is_built_when_a_filter_reads_it() {
    let srv = Server::start(CONFIG);
    // `tag` declares nothing (so reads the key): the key carries both filters' variants.
    let r = srv.get("/keyed/a?q");
    assert_eq!(
        r.header("x-key-keyed"),
        Some("localhost|http|/keyed/a?q|tag|steps")
    );
    let r = srv.get("/keyed?short-circuit");
    assert_eq!(
        r.text(),
        "from filter, key localhost|http|/keyed?short-circuit|tag|steps"
    );
    // `file_cache` reads it: entries stay apart by URI.
    let a = srv.get("/cached/a");
    let b = srv.get("/cached/b");
    assert_eq!(a.header("x-key-cached"), Some("localhost|http|/cached/a"));
    assert_ne!(a.text(), b.text(), "one cache entry for two URIs");
    assert_eq!(srv.get("/cached/a").text(), a.text(), "a cache hit");
}
