//! The stock filters of `modules/filters` against the real binary: `cors`, `headers`
//! (with `expires`), `userid` and the `host_redirect` handler, over HTTP/1.1 and HTTP/2
//! (h2c), alone and with `gzip` and `file_cache` in either order.

mod common;
mod ops_util;

use common::{check_config, curl, Response, Server};

/// A request with extra header lines (each ending in `\r\n`), on its own connection.
fn send(srv: &Server, method: &str, path: &str, host: &str, headers: &str) -> Response {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    Response::parse(srv.raw(req.as_bytes()).as_bytes())
}

fn get(srv: &Server, path: &str, headers: &str) -> Response {
    send(srv, "GET", path, "localhost", headers)
}

/// curl over h2c; the response head and body, header names lower-cased by HTTP/2.
fn h2c(srv: &Server, path: &str, headers: &[&str]) -> String {
    let url = srv.url(path);
    let mut args = vec!["--http2-prior-knowledge", "-i"];
    for h in headers {
        args.extend(["-H", h]);
    }
    args.push(&url);
    let (ok, out) = curl(&args);
    assert!(ok && out.starts_with("HTTP/2 "), "{out}");
    out
}

fn h2_header<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .map(str::trim_end)
}

const GOOD: &str = "Origin: https://app.example.com:8443\r\n";
const EVIL: &str = "Origin: https://example.com.evil.test\r\n";

fn cors_config() -> String {
    let cors = r#"{"type": "cors", "allow_hosts": [".example.com", "partner.test"],
        "allow_credentials": true, "max_age": 600, "allow_methods": ["GET", "POST", "PUT"],
        "expose_headers": ["X-Total"]}"#;
    let text = "All work and no play makes Jack a dull boy. ".repeat(20);
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}, {{"so": "filters"}}, {{"so": "gzip"}}, {{"so": "file_cache"}}],
  "routing": [
    {{"prefix": "/api", "handler": "echo", "filters": [{cors}]}},
    {{"prefix": "/get-only", "handler": "text", "text": "x", "methods": ["GET"], "filters": [{cors}]}},
    {{"prefix": "/fail", "handler": "fail", "status": 500, "filters": [{cors}]}},
    {{"prefix": "/none", "handler": "decline", "filters": [{cors}]}},
    {{"prefix": "/outer", "handler": "counter", "counter": "outer", "text": "{text}", "headers": {{"Cache-Control": "max-age=60"}},
      "filters": [{cors}, {{"type": "gzip"}}, {{"type": "file_cache"}}]}},
    {{"prefix": "/inner", "handler": "counter", "counter": "inner", "text": "{text}", "headers": {{"Cache-Control": "max-age=60"}},
      "filters": [{{"type": "file_cache"}}, {{"type": "gzip"}}, {cors}]}},
  ]
}}"#
    )
}

#[test]
fn cors_echoes_allowed_origins_only() {
    let srv = Server::start(&cors_config());
    let r = get(&srv, "/api", GOOD);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example.com:8443")
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(r.header("access-control-expose-headers"), Some("X-Total"));
    assert_eq!(r.header("vary"), Some("Origin"));
    let r = get(&srv, "/api", "Origin: http://partner.test\r\n");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://partner.test")
    );
    // Not allowed, or no origin at all: the answer as it is, no CORS headers, Vary kept.
    for headers in [
        EVIL,
        "Origin: null\r\n",
        "Origin: http://sub.partner.test\r\n",
        "",
    ] {
        let r = get(&srv, "/api", headers);
        assert_eq!(r.status, 200, "{headers}");
        assert_eq!(r.header("access-control-allow-origin"), None, "{headers}");
        assert_eq!(
            r.header("access-control-allow-credentials"),
            None,
            "{headers}"
        );
        assert_eq!(r.header("vary"), Some("Origin"), "{headers}");
    }
}

#[test]
fn cors_answers_preflights_without_the_handler() {
    let srv = Server::start(&cors_config());
    let preflight = "Access-Control-Request-Method: PUT\r\nAccess-Control-Request-Headers: X-Token, Content-Type\r\n";
    // `/fail` would answer 500: a 204 shows the handler did not run.
    for path in ["/fail", "/get-only"] {
        let r = send(
            &srv,
            "OPTIONS",
            path,
            "localhost",
            &format!("{GOOD}{preflight}"),
        );
        assert_eq!(r.status, 204, "{path}");
        assert_eq!(
            r.header("access-control-allow-origin"),
            Some("https://app.example.com:8443")
        );
        assert_eq!(
            r.header("access-control-allow-methods"),
            Some("GET, POST, PUT")
        );
        assert_eq!(
            r.header("access-control-allow-headers"),
            Some("X-Token, Content-Type")
        );
        assert_eq!(r.header("access-control-max-age"), Some("600"));
        assert_eq!(r.header("vary"), Some("Origin"));
        assert!(r.body.is_empty());
    }
    // A disallowed origin's preflight goes on to the handler (here: its 500), no CORS.
    let r = send(
        &srv,
        "OPTIONS",
        "/fail",
        "localhost",
        &format!("{EVIL}{preflight}"),
    );
    assert_eq!(r.status, 500);
    assert_eq!(r.header("access-control-allow-origin"), None);
    // A plain OPTIONS (no Access-Control-Request-Method) is not a preflight.
    let r = send(&srv, "OPTIONS", "/fail", "localhost", GOOD);
    assert_eq!(r.status, 500);
}

#[test]
fn cors_headers_reach_error_answers() {
    let srv = Server::start(&cors_config());
    let origin = Some("https://app.example.com:8443");
    // The handler's 500, the core's 404 (the handler declined), the core's 405.
    let r = get(&srv, "/fail", GOOD);
    assert_eq!(r.status, 500);
    assert_eq!(r.header("access-control-allow-origin"), origin);
    let r = get(&srv, "/none", GOOD);
    assert_eq!(r.status, 404);
    assert_eq!(r.header("access-control-allow-origin"), origin);
    assert_eq!(r.header("vary"), Some("Origin"));
    let r = send(&srv, "POST", "/get-only", "localhost", GOOD);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET"));
    assert_eq!(r.header("access-control-allow-origin"), origin);
    // No route matched the path at all: no route's filters apply.
    let r = get(&srv, "/elsewhere", GOOD);
    assert_eq!(r.status, 404);
    assert_eq!(r.header("access-control-allow-origin"), None);
}

#[test]
fn cors_over_http2() {
    let srv = Server::start(&cors_config());
    let out = h2c(&srv, "/none", &["Origin: https://app.example.com"]);
    assert!(out.starts_with("HTTP/2 404"), "{out}");
    assert_eq!(
        h2_header(&out, "access-control-allow-origin"),
        Some("https://app.example.com")
    );
    let url = srv.url("/get-only");
    let (ok, out) = curl(&[
        "--http2-prior-knowledge",
        "-i",
        "-X",
        "OPTIONS",
        "-H",
        "Origin: https://app.example.com",
        "-H",
        "Access-Control-Request-Method: POST",
        &url,
    ]);
    assert!(ok && out.starts_with("HTTP/2 204"), "{out}");
    assert_eq!(
        h2_header(&out, "access-control-allow-methods"),
        Some("GET, POST, PUT")
    );
}

#[test]
fn cors_with_gzip_and_file_cache_in_either_order() {
    let srv = Server::start(&cors_config());
    for path in ["/outer", "/inner"] {
        let mut first_hits = std::collections::HashMap::new();
        for round in 0..3 {
            for origin in ["https://a.example.com", "https://b.example.com"] {
                let r = get(
                    &srv,
                    path,
                    &format!("Origin: {origin}\r\nAccept-Encoding: gzip\r\n"),
                );
                assert_eq!(r.status, 200, "{path}");
                assert_eq!(r.header("content-encoding"), Some("gzip"), "{path}");
                assert_eq!(
                    r.header("access-control-allow-origin"),
                    Some(origin),
                    "{path} round {round}"
                );
                let vary = r.header("vary").unwrap_or("");
                assert!(
                    vary.contains("Origin") && vary.contains("Accept-Encoding"),
                    "{vary}"
                );
                // cors outside the cache: each origin's variant is cached on its own.
                let hits = r.header("x-hits").unwrap().to_owned();
                let first = first_hits.entry(origin).or_insert(hits.clone());
                if path == "/outer" {
                    assert_eq!(*first, hits, "{path} {origin} round {round}");
                }
            }
            let r = get(&srv, path, EVIL);
            assert_eq!(r.header("access-control-allow-origin"), None, "{path}");
        }
    }
}

#[test]
fn cors_configuration_errors_name_line_and_key() {
    let config = |filter: &str| {
        format!(
            "{{\"load\": [{{\"so\": \"testkit\"}}, {{\"so\": \"filters\"}}],\n\"routing\": [\n{{\"prefix\": \"/a\", \"handler\": \"text\", \"text\": \"x\",\n\"filters\": [{{\"type\": \"cors\",\n{filter}}}]}}]}}"
        )
    };
    let (ok, out) = check_config(
        &config("\"allow_hosts\": [\"a.com\"], \"alow_credentials\": true"),
        &[],
    );
    assert!(
        !ok && out.contains("c.json:5") && out.contains("alow_credentials"),
        "{out}"
    );
    let (ok, out) = check_config(&config("\"allow_hosts\": [\"a b\"]"), &[]);
    assert!(
        !ok && out.contains("c.json:5") && out.contains("a b"),
        "{out}"
    );
    let (ok, out) = check_config(
        &config("\"allow_hosts\": [\"a.com\"], \"allow_headers\": [\"X Y\"]"),
        &[],
    );
    assert!(
        !ok && out.contains("c.json:5") && out.contains("X Y"),
        "{out}"
    );
    let (ok, out) = check_config(&config("\"allow_hosts\": [\"a.com\"]"), &[]);
    assert!(ok, "{out}");
}
