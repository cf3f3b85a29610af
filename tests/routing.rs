//! NXWEB routing rules against the real binary.

mod common;

use common::Server;

fn text_route(extra: &str, text: &str) -> String {
    format!(r#"{{{extra} "handler": "text", "text": "{text}"}}"#)
}

fn server() -> Server {
    let routes = [
        text_route(r#""prefix": "/", "#, "home"),
        text_route(r#""prefix": "/hello", "#, "hello"),
        text_route(r#""prefix": "/dir/", "#, "dir"),
        text_route(r#""prefix": "/v", "vhost": "exact.test", "#, "v-exact"),
        text_route(r#""prefix": "/v", "vhost": ".domain.test", "#, "v-domain"),
        text_route(r#""prefix": "/s", "secure_only": true, "#, "secure"),
        text_route(r#""prefix": "/s", "insecure_only": true, "#, "insecure"),
        text_route(r#""prefix": "/m", "methods": ["POST", "PUT"], "#, "posted"),
        text_route(r#""prefix": "/prio", "#, "normal"),
        text_route(r#""prefix": "/prio", "priority": -5, "#, "first"),
        r#"{"prefix": "/fall", "handler": "decline"}"#.to_owned(),
        text_route(r#""prefix": "/fall", "#, "fell through"),
        r#"{"prefix": "/wfall", "handler": "decline", "worker": true}"#.to_owned(),
        r#"{"prefix": "/wfall", "handler": "text", "text": "fell through the pool", "filters": [{"type": "count"}]}"#.to_owned(),
        r#"{"prefix": "/wnone", "handler": "decline", "worker": true}"#.to_owned(),
        r#"{"prefix": "/filtered", "handler": "text", "text": "handled", "filters": [{"type": "tag", "text": "t1"}, {"type": "tag", "text": "t2"}]}"#.to_owned(),
        r#"{"prefix": "/counted", "handler": "text", "text": "counted", "filters": [{"type": "count"}, {"type": "before-worker"}]}"#.to_owned(),
        r#"{"prefix": "/declined", "handler": "decline", "filters": [{"type": "count"}]}"#.to_owned(),
        r#"{"prefix": "/declined", "handler": "text", "text": "second", "filters": [{"type": "count"}]}"#.to_owned(),
        text_route(r#""prefix": "/catch", "#, "catch"),
    ];
    let config = format!(
        r#"{{"load": [{{"so": "testkit"}}], "routing": [{}]}}"#,
        routes.join(",\n")
    );
    Server::start(&config)
}

fn get_host(srv: &Server, path: &str, host: &str) -> common::Response {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    common::Response::parse(srv.raw(req.as_bytes()).as_bytes())
}

#[test]
fn prefixes_match_at_segment_boundaries() {
    let srv = server();
    assert_eq!(srv.get("/hello").text(), "hello");
    assert_eq!(srv.get("/hello/x/y").text(), "hello");
    assert_eq!(srv.get("/hello?a=1").text(), "hello");
    assert_eq!(srv.get("/helloworld").status, 404);
    assert_eq!(srv.get("/dir/a").text(), "dir");
    assert_eq!(srv.get("/dir").status, 404);
}

#[test]
fn root_prefix_is_only_the_home_page() {
    let srv = server();
    assert_eq!(srv.get("/").text(), "home");
    assert_eq!(srv.get("/?x").text(), "home");
    assert_eq!(srv.get("/other").status, 404);
}

#[test]
fn not_found_page_names_the_status() {
    let srv = server();
    let r = srv.get("/nothing/here");
    assert_eq!(r.status, 404);
    assert!(r.text().contains("404 Not Found"));
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
}

#[test]
fn vhosts_exact_and_domain_suffix() {
    let srv = server();
    assert_eq!(get_host(&srv, "/v", "exact.test").text(), "v-exact");
    assert_eq!(get_host(&srv, "/v", "EXACT.test:8080").text(), "v-exact");
    assert_eq!(get_host(&srv, "/v", "domain.test").text(), "v-domain");
    assert_eq!(get_host(&srv, "/v", "a.b.domain.test").text(), "v-domain");
    assert_eq!(get_host(&srv, "/v", "baddomain.test").status, 404);
    assert_eq!(get_host(&srv, "/v", "other.test").status, 404);
}

#[test]
fn secure_only_routes_are_skipped_on_plain_listeners() {
    let srv = server();
    assert_eq!(srv.get("/s").text(), "insecure");
}

#[test]
fn method_mismatch_is_405_with_allow() {
    let srv = server();
    let r = srv.get("/m");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST, PUT"));
    let resp =
        srv.raw(b"POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert!(resp.ends_with("posted"), "{resp}");
}

#[test]
fn priority_orders_routes() {
    let srv = server();
    assert_eq!(srv.get("/prio").text(), "first");
}

#[test]
fn declining_handler_falls_through() {
    let srv = server();
    assert_eq!(srv.get("/fall/x").text(), "fell through");
}

/// A filterless worker handler is awaited on its own (not in a route run): when it declines,
/// routing goes on down the routes all the same.
#[test]
fn a_worker_handler_that_declines_falls_through() {
    let srv = server();
    let resp = srv.get("/wfall/x");
    assert_eq!(resp.text(), "fell through the pool");
    assert_eq!(resp.header("x-befores"), Some("1"));
    assert_eq!(srv.get("/wnone").status, 404);
}

#[test]
fn filters_wrap_the_handler_in_order() {
    let srv = server();
    let r = srv.get("/filtered");
    assert_eq!(r.text(), "handled");
    let tags: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n == "X-Tag")
        .map(|(_, v)| v.as_str())
        .collect();
    // After-steps run in reverse order.
    assert_eq!(tags, ["t2", "t1"]);
    // The first filter answers: the handler and the second filter do not run.
    let r = srv.get("/filtered?short-circuit");
    assert_eq!(
        r.text(),
        "from filter, key localhost|http|/filtered?short-circuit|tag|tag"
    );
    assert!(r.header("x-tag").is_none());
}

#[test]
fn each_filter_step_runs_once_when_a_later_filter_waits_for_the_pool() {
    let srv = server();
    // `count` runs inline; `before-worker` then sends the run to the pool: the run goes on
    // from there, not from the first filter.
    for n in 1..=3 {
        let resp = srv.get("/counted");
        assert_eq!(resp.text(), "counted");
        assert_eq!(resp.header("x-befores"), Some(n.to_string().as_str()));
        assert!(resp.header("x-before-thread").is_some());
        assert_eq!(resp.header("x-cancels"), Some("0"));
    }
}

#[test]
fn a_declining_handler_cancels_its_routes_filters() {
    let srv = server();
    let resp = srv.get("/declined");
    assert_eq!(resp.text(), "second");
    // The first route's filter let the request go on and was told it ended there; then the
    // second route's filter ran.
    assert_eq!(resp.header("x-befores"), Some("2"));
    assert_eq!(resp.header("x-cancels"), Some("1"));
}
