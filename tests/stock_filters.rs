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
    // The header's name in any case (HTTP/1.1 clients write it as they like).
    for name in ["Origin", "origin", "ORIGIN", "oRiGiN"] {
        let r = get(&srv, "/api", &format!("{name}: http://partner.test\r\n"));
        assert_eq!(
            r.header("access-control-allow-origin"),
            Some("http://partner.test"),
            "{name}"
        );
    }
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

fn headers_config() -> String {
    let headers = r#"{"type": "headers",
        "add": {"X-Frame-Options": "DENY"}, "set": {"X-Served-By": "osprey-test"},
        "remove": ["X-Hits"],
        "expires": [{"types": ["image/"], "max_age": 86400},
                    {"status": [404], "max_age": 5},
                    {"types": ["text/"], "max_age": -1}]}"#;
    let always = r#"{"type": "headers", "always": true, "add": {"X-Always": "yes"}}"#;
    let text = "All work and no play makes Jack a dull boy. ".repeat(20);
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}, {{"so": "filters"}}, {{"so": "gzip"}}, {{"so": "file_cache"}}],
  "routing": [
    {{"prefix": "/text", "handler": "counter", "counter": "t", "text": "hello", "filters": [{headers}]}},
    {{"prefix": "/png", "handler": "counter", "counter": "p",
      "headers": {{"Content-Type": "image/png", "x-served-by": "the handler"}},
      "filters": [{headers}]}},
    {{"prefix": "/missing", "handler": "fail", "status": 404, "filters": [{headers}]}},
    {{"prefix": "/broken", "handler": "fail", "status": 500, "filters": [{headers}, {always}]}},
    {{"prefix": "/outer", "handler": "counter", "counter": "o", "text": "{text}",
      "headers": {{"Cache-Control": "max-age=60", "Content-Type": "application/json"}},
      "filters": [{always}, {{"type": "gzip"}}, {{"type": "file_cache"}}]}},
    {{"prefix": "/inner", "handler": "counter", "counter": "i", "text": "{text}",
      "headers": {{"Cache-Control": "max-age=60", "Content-Type": "application/json"}},
      "filters": [{{"type": "file_cache"}}, {{"type": "gzip"}}, {always}]}},
  ]
}}"#
    )
}

/// Seconds from now to the response's `Expires`.
fn expires_in(r: &Response) -> i64 {
    let at = httpdate::parse_http_date(r.header("expires").expect("Expires")).unwrap();
    match at.duration_since(std::time::SystemTime::now()) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

#[test]
fn headers_add_set_remove_on_successful_answers() {
    let srv = Server::start(&headers_config());
    let r = get(&srv, "/text", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("x-served-by"), Some("osprey-test"));
    assert_eq!(r.header("x-hits"), None, "removed");
    // Errors are left alone unless `always`.
    let r = get(&srv, "/broken", "");
    assert_eq!(r.status, 500);
    assert_eq!(r.header("x-frame-options"), None);
    assert_eq!(r.header("x-always"), Some("yes"));
    let out = h2c(&srv, "/text", &[]);
    assert_eq!(h2_header(&out, "x-frame-options"), Some("DENY"), "{out}");
    assert_eq!(h2_header(&out, "x-hits"), None, "{out}");
}

#[test]
fn headers_expires_by_type_and_status() {
    let srv = Server::start(&headers_config());
    let r = get(&srv, "/png", "");
    assert_eq!(r.header("cache-control"), Some("max-age=86400"));
    assert!(
        (86390..=86400).contains(&expires_in(&r)),
        "{}",
        expires_in(&r)
    );
    let r = get(&srv, "/text", "");
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert!(expires_in(&r) < 0);
    // A rule naming a status applies to that status even without `always`.
    let r = get(&srv, "/missing", "");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("cache-control"), Some("max-age=5"));
    assert_eq!(r.header("x-frame-options"), None);
    let out = h2c(&srv, "/png", &[]);
    assert_eq!(
        h2_header(&out, "cache-control"),
        Some("max-age=86400"),
        "{out}"
    );
}

/// Headers fixed by the configuration (written from their encoded line, not checked per
/// answer) and `Expires` (a fixed name, a value per second) on both protocols, on error
/// answers too; `set` replaces the handler's header of the name in any case.
#[test]
fn fixed_headers_reach_http2_and_error_answers() {
    let srv = Server::start(&headers_config());
    let r = get(&srv, "/png", "");
    let served: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-served-by"))
        .collect();
    assert_eq!(served.len(), 1, "{:?}", r.headers);
    assert_eq!(served[0].1, "osprey-test");
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    let r = get(&srv, "/missing", "");
    assert_eq!(
        (r.status, r.header("cache-control")),
        (404, Some("max-age=5"))
    );
    assert!((0..=5).contains(&expires_in(&r)), "{}", expires_in(&r));
    let out = h2c(&srv, "/missing", &[]);
    assert!(out.starts_with("HTTP/2 404"), "{out}");
    assert_eq!(h2_header(&out, "cache-control"), Some("max-age=5"), "{out}");
    let expires = h2_header(&out, "expires").expect("expires");
    assert!(httpdate::parse_http_date(expires).is_ok(), "{out}");
    let out = h2c(&srv, "/broken", &[]);
    assert!(out.starts_with("HTTP/2 500"), "{out}");
    assert_eq!(h2_header(&out, "x-always"), Some("yes"), "{out}");
    assert_eq!(h2_header(&out, "x-frame-options"), None, "{out}");
    let out = h2c(&srv, "/png", &[]);
    assert_eq!(h2_header(&out, "x-served-by"), Some("osprey-test"), "{out}");
    assert_eq!(out.matches("x-served-by").count(), 1, "{out}");
}

#[test]
fn headers_with_gzip_and_file_cache_in_either_order() {
    let srv = Server::start(&headers_config());
    for path in ["/outer", "/inner"] {
        let mut hits = Vec::new();
        for _ in 0..3 {
            let r = get(&srv, path, "Accept-Encoding: gzip\r\n");
            assert_eq!(r.status, 200, "{path}");
            assert_eq!(r.header("content-encoding"), Some("gzip"), "{path}");
            assert_eq!(r.header("x-always"), Some("yes"), "{path}");
            hits.push(r.header("x-hits").unwrap().to_owned());
        }
        // Served from the cache after the first answer, in both orders.
        assert!(hits.iter().all(|h| *h == hits[0]), "{path}: {hits:?}");
        let out = h2c(&srv, path, &["Accept-Encoding: gzip"]);
        assert_eq!(h2_header(&out, "x-always"), Some("yes"), "{out}");
    }
}

#[test]
fn headers_configuration_errors_name_line_and_key() {
    let config = |filter: &str| {
        format!(
            "{{\"load\": [{{\"so\": \"testkit\"}}, {{\"so\": \"filters\"}}],\n\"routing\": [\n{{\"prefix\": \"/a\", \"handler\": \"text\", \"text\": \"x\",\n\"filters\": [{{\"type\": \"headers\",\n{filter}}}]}}]}}"
        )
    };
    let cases = [
        (r#""add": {"X-A": "a\r\nSet-Cookie: x=1"}"#, "X-A"),
        (r#""set": {"X A": "b"}"#, "X A"),
        (r#""set": {"Content-Length": "5"}"#, "Content-Length"),
        (r#""remove": ["Date"]"#, "Date"),
        (r#""expires": [{"max_age": "soon"}]"#, "invalid type"),
        (r#""add_header": {}"#, "add_header"),
    ];
    for (filter, named) in cases {
        let (ok, out) = check_config(&config(filter), &[]);
        assert!(
            !ok && out.contains("c.json:5") && out.contains(named),
            "{filter}: {out}"
        );
    }
    let (ok, out) = check_config(&config(r#""add": {"X-A": "b"}"#), &[]);
    assert!(ok, "{out}");
}

fn redirect_config() -> &'static str {
    r#"{
  "load": [{"so": "testkit"}, {"so": "filters"}],
  "routing": [
    {"handler": "host_redirect", "host": "www.example.com:8080", "pass": ["localhost", ".internal.test"]},
    {"handler": "text", "text": "canonical"},
  ]
}"#
}

#[test]
fn host_redirect_sends_other_hosts_to_the_canonical_one() {
    let srv = Server::start(redirect_config());
    let r = send(&srv, "GET", "/a/b?x=1&y=2", "example.com", "");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("http://www.example.com:8080/a/b?x=1&y=2")
    );
    // The method and body of a POST are kept with 308.
    let r = send(&srv, "POST", "/form", "old.example.com:81", "");
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some("http://www.example.com:8080/form")
    );
    // The canonical host (any port) and the pass list are served: the route declines.
    for host in [
        "www.example.com:8080",
        "WWW.Example.com",
        "localhost",
        "a.internal.test",
        "internal.test",
    ] {
        let r = send(&srv, "GET", "/p", host, "");
        assert_eq!((r.status, r.text()), (200, "canonical".into()), "{host}");
    }
    let url = srv.url("/h2?q=1");
    let (ok, out) = curl(&[
        "--http2-prior-knowledge",
        "-i",
        "-H",
        "Host: other.test",
        &url,
    ]);
    assert!(ok && out.starts_with("HTTP/2 301"), "{out}");
    assert_eq!(
        h2_header(&out, "location"),
        Some("http://www.example.com:8080/h2?q=1")
    );
}

#[test]
fn host_redirect_never_redirects_an_include() {
    // The page's route comes first and serves any host; its include goes through routing
    // again and meets host_redirect, which declines it (as the canonical route would).
    let config = r#"{
  "load": [{"so": "testkit"}, {"so": "filters"}, {"so": "ssi"}],
  "routing": [
    {"prefix": "/page", "handler": "echo", "filters": [{"type": "ssi"}]},
    {"handler": "host_redirect", "host": "www.example.com"},
    {"handler": "echo"}
  ]
}"#;
    let srv = Server::start(config);
    let page = format!("/page/p.shtml?x={}", query_value(&ssi_include("/frag")));
    let r = send(&srv, "GET", &page, "other.test", "");
    let body = r.text();
    assert_eq!(r.status, 200, "{body}");
    assert_eq!(body.matches("path=/frag\n").count(), 1, "{body}");
    // The same path asked for by a client on that host is redirected.
    let r = send(&srv, "GET", "/frag", "other.test", "");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("http://www.example.com/frag"));
}

#[test]
fn host_redirect_refuses_a_host_that_is_not_an_authority() {
    for (host, extra) in [
        ("http://www.example.com", ""),
        ("www.example.com:99999", ""),
        ("bad host", ""),
        ("ok.test", r#", "pass": ["a/b"]"#),
        ("ok.test", r#", "hots": "x""#),
    ] {
        let config = format!(
            "{{\"load\": [{{\"so\": \"filters\"}}],\n\"routing\": [\n{{\"handler\": \"host_redirect\",\n\"host\": \"{host}\"{extra}}}]}}"
        );
        let (ok, out) = check_config(&config, &[]);
        assert!(!ok && out.contains("c.json:4"), "{host}{extra}: {out}");
    }
}

fn userid_config(dir: &std::path::Path) -> String {
    let userid = r#"{"type": "userid", "name": "vid", "domain": "example.com", "path": "/",
        "expires": 86400, "samesite": "lax", "secure": true}"#;
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}, {{"so": "filters"}}, {{"so": "gzip"}}, {{"so": "file_cache"}}],
  "logging": {{"access_log": {log:?}, "access_log_fields": ["request_id", "cookie:vid"]}},
  "routing": [
    {{"prefix": "/echo", "handler": "echo", "filters": [{userid}]}},
    {{"prefix": "/fail", "handler": "fail", "status": 503, "filters": [{userid}]}},
    {{"prefix": "/outer", "handler": "counter", "counter": "uo", "text": "{text}",
      "headers": {{"Cache-Control": "max-age=60"}},
      "filters": [{userid}, {{"type": "gzip"}}, {{"type": "file_cache"}}]}},
    {{"prefix": "/inner", "handler": "counter", "counter": "ui", "text": "{text}",
      "headers": {{"Cache-Control": "max-age=60"}},
      "filters": [{{"type": "file_cache"}}, {{"type": "gzip"}}, {userid}]}},
  ]
}}"#,
        log = dir.join("access.log").display().to_string(),
        text = "All work and no play makes Jack a dull boy. ".repeat(20),
    )
}

/// The id a `Set-Cookie: vid=...` sets.
fn set_vid(r: &Response) -> Option<String> {
    let v = r.header("set-cookie")?;
    let (pair, _) = v.split_once(';')?;
    pair.strip_prefix("vid=").map(str::to_owned)
}

fn is_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

#[test]
fn userid_sets_a_visitor_cookie_that_handlers_and_the_log_see() {
    let dir = common::TempDir::new("userid");
    let srv = Server::start(&userid_config(dir.path()));
    let r = get(&srv, "/echo", "Cookie: a=1\r\n");
    let id = set_vid(&r).expect("a new visitor gets the cookie");
    assert!(is_id(&id), "{id}");
    assert_eq!(
        r.header("set-cookie").unwrap(),
        format!(
            "vid={id}; Max-Age=86400; Domain=example.com; Path=/; Secure; HttpOnly; SameSite=Lax"
        )
    );
    // The handler saw the new id as the cookie, beside the client's other cookies.
    let body = r.text();
    assert!(body.contains(&format!("cookie.vid={id}")), "{body}");
    assert!(body.contains("cookie.a=1"), "{body}");
    // A returning visitor keeps the id: no new cookie.
    let r = get(&srv, "/echo", &format!("Cookie: vid={id}\r\n"));
    assert_eq!(r.header("set-cookie"), None);
    assert!(r.text().contains(&format!("cookie.vid={id}")));
    // A malformed id is replaced; every new visitor gets a different id.
    let r = get(&srv, "/echo", "Cookie: vid=forged; b=2\r\n");
    let other = set_vid(&r).unwrap();
    assert!(is_id(&other) && other != id);
    assert!(!r.text().contains("cookie.vid=forged"), "{}", r.text());
    assert!(r.text().contains("cookie.b=2"), "{}", r.text());
    // Error answers set it too.
    let r = get(&srv, "/fail", "");
    assert_eq!(r.status, 503);
    assert!(set_vid(&r).is_some_and(|v| is_id(&v) && v != id && v != other));
    // HTTP/2.
    let out = h2c(&srv, "/echo", &[]);
    let h2_id = h2_header(&out, "set-cookie")
        .and_then(|v| v.strip_prefix("vid="))
        .unwrap();
    assert!(
        out.contains(&format!("cookie.vid={}", &h2_id[..32])),
        "{out}"
    );
    // The access log: request id, then the visitor id (set or received).
    let log = ops_util::wait_file(&dir.path().join("access.log"), "\n", 5);
    assert!(
        log.lines()
            .any(|l| l.contains("/echo HTTP/1.1\" 200") && l.ends_with(&format!("\"{id}\""))),
        "{log}"
    );
    let line = log
        .lines()
        .find(|l| l.ends_with(&format!("\"{other}\"")))
        .unwrap();
    let fields: Vec<&str> = line.rsplitn(3, ' ').collect();
    assert!(is_id(fields[1].trim_matches('"')), "{line}");
}

#[test]
fn userid_finds_the_visitor_cookie_anywhere_in_the_cookie_headers() {
    let config = r#"{
  "load": [{"so": "testkit"}, {"so": "filters"}],
  "routing": [{"prefix": "/echo", "handler": "echo", "filters": [{"type": "userid", "name": "vid"}]}]
}"#;
    let srv = Server::start(config);
    let id = set_vid(&get(&srv, "/echo", "")).expect("a new visitor gets the cookie");
    // A returning visitor's id after other cookies (past the first eight-byte words), with
    // spaces around it, quoted, or in a second `Cookie` line: found, so no new cookie.
    let long = "session=0123456789abcdef0123456789abcdef; theme=dark";
    for cookies in [
        format!("Cookie: {long}; vid={id}\r\n"),
        format!("Cookie: {long};vid = {id} ;x=1\r\n"),
        format!("Cookie: {long}; vid=\"{id}\"\r\n"),
        format!("Cookie: {long}\r\nCookie: a=1; vid={id}\r\n"),
        format!("Cookie: vidx=1; xvid=2; vid={id}\r\n"),
    ] {
        let r = get(&srv, "/echo", &cookies);
        assert_eq!(r.header("set-cookie"), None, "{cookies}");
        assert!(r.text().contains(&format!("cookie.vid={id}")), "{cookies}");
    }
    // The first `vid` wins: a malformed one first is replaced, though a good one follows, and
    // the client's other cookies stay.
    for cookies in [
        format!("Cookie: {long}; vid=forged; vid={id}\r\n"),
        format!("Cookie: vid={id}0\r\nCookie: vid={id}\r\n"),
    ] {
        let r = get(&srv, "/echo", &cookies);
        let new = set_vid(&r).expect("a malformed id is replaced");
        assert!(is_id(&new) && new != id, "{cookies}");
        assert!(r.text().contains(&format!("cookie.vid={new}")), "{cookies}");
        assert!(!r.text().contains("cookie.vid=forged"), "{}", r.text());
    }
    let r = get(&srv, "/echo", &format!("Cookie: {long}; vid=forged\r\n"));
    assert!(r.text().contains("cookie.theme=dark"), "{}", r.text());
}

#[test]
fn userid_ids_differ_when_a_proxy_repeats_a_request_id() {
    let config = r#"{
  "load": [{"so": "testkit"}, {"so": "filters"}],
  "request_id": {"response": true, "trusted": ["127.0.0.1"]},
  "routing": [{"prefix": "/echo", "handler": "echo", "filters": [{"type": "userid", "name": "vid"}]}]
}"#;
    let srv = Server::start(config);
    let repeated = "X-Request-Id: proxy-id-1\r\n";
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = get(&srv, "/echo", repeated);
        // The proxy's id is the request's id...
        assert_eq!(r.header("x-request-id"), Some("proxy-id-1"));
        // ...yet each new visitor gets an id of its own, the one its handler saw.
        let id = set_vid(&r).expect("a new visitor gets the cookie");
        assert!(is_id(&id), "{id}");
        assert!(
            r.text().contains(&format!("cookie.vid={id}")),
            "{}",
            r.text()
        );
        ids.push(id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "{ids:?}");
    // Pipelined on one connection too.
    let req = "GET /echo HTTP/1.1\r\nHost: localhost\r\nX-Request-Id: proxy-id-1\r\n";
    let raw = srv.raw(format!("{req}\r\n{req}Connection: close\r\n\r\n").as_bytes());
    let answers = Response::parse_all(raw.as_bytes());
    assert_eq!(answers.len(), 2, "{raw}");
    assert_ne!(set_vid(&answers[0]), set_vid(&answers[1]));
}

#[test]
fn userid_with_gzip_and_file_cache_in_either_order() {
    let dir = common::TempDir::new("userid-cache");
    let srv = Server::start(&userid_config(dir.path()));
    // userid outside the cache: every new visitor gets a cookie, hits included.
    for path in ["/outer", "/inner"] {
        let mut ids = std::collections::HashSet::new();
        for _ in 0..3 {
            let r = get(&srv, path, "Accept-Encoding: gzip\r\n");
            assert_eq!(r.header("content-encoding"), Some("gzip"), "{path}");
            if path == "/outer" {
                ids.insert(
                    set_vid(&r)
                        .unwrap_or_else(|| panic!("cookie on a cache hit too: {:?}", r.headers)),
                );
            }
            let known = get(
                &srv,
                path,
                "Accept-Encoding: gzip\r\nCookie: vid=0123456789abcdef0123456789abcdef\r\n",
            );
            assert_eq!(known.header("set-cookie"), None, "{path}");
            assert_eq!(known.header("content-encoding"), Some("gzip"), "{path}");
        }
        if path == "/outer" {
            assert_eq!(ids.len(), 3);
        }
    }
}

#[test]
fn userid_configuration_errors_name_line_and_key() {
    let config = |filter: &str| {
        format!(
            "{{\"load\": [{{\"so\": \"testkit\"}}, {{\"so\": \"filters\"}}],\n\"routing\": [\n{{\"prefix\": \"/a\", \"handler\": \"text\", \"text\": \"x\",\n\"filters\": [{{\"type\": \"userid\",\n{filter}}}]}}]}}"
        )
    };
    for (filter, named) in [
        (r#""samesite": "none""#, "Secure"),
        (r#""name": "bad name""#, "name"),
        (r#""path": "/a;b""#, "path"),
        (r#""expire": 5"#, "expire"),
    ] {
        let (ok, out) = check_config(&config(filter), &[]);
        assert!(
            !ok && out.contains("c.json:5") && out.contains(named),
            "{filter}: {out}"
        );
    }
}

#[test]
fn userid_gives_a_new_visitor_the_id_its_handler_saw_when_an_include_runs_through_it_too() {
    let dir = common::TempDir::new("userid-ssi");
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("frag.html"), "<i>frag</i>").unwrap();
    std::fs::write(
        www.join("page.shtml"),
        "[<!--#include virtual=\"/frag.html\" -->]",
    )
    .unwrap();
    // The include is a subrequest with the page's request id, no cookie, and the same filter.
    let config = format!(
        r#"{{
  "load": [{{"so": "filters"}}],
  "logging": {{"access_log": {log:?}, "access_log_fields": ["cookie:vid"]}},
  "routing": [{{"handler": "sendfile", "dir": {www:?},
    "filters": [{{"type": "userid", "name": "vid"}}, {{"type": "ssi"}}]}}]
}}"#,
        log = dir.path().join("access.log").display().to_string(),
        www = www.display().to_string(),
    );
    let srv = Server::start(&config);
    let r = get(&srv, "/page.shtml", "");
    assert_eq!(r.text(), "[<i>frag</i>]", "{r:?}");
    let id = set_vid(&r).expect("a new visitor gets the cookie");
    // The page's log line shows the id its handler saw: the one the client is given.
    let log = ops_util::wait_file(&dir.path().join("access.log"), "\n", 2);
    let page = log
        .lines()
        .find(|l| l.contains("/page.shtml HTTP/1.1\""))
        .unwrap();
    assert!(page.ends_with(&format!("\"{id}\"")), "{id}\n{log}");
    // The include carried the page's cookie: its log line shows the same id.
    let frag = log
        .lines()
        .find(|l| l.contains("/frag.html SUBREQUEST"))
        .unwrap();
    assert!(frag.ends_with(&format!("\"{id}\"")), "{id}\n{log}");
}

/// One route, `echo` behind `userid` and `filter` (`ssi` or `templates`): a page is an echo
/// whose query holds the directives, so the page and its includes run through the same
/// `userid` filter, and each prints the `vid` cookie it saw (`cookie.vid=`).
fn echo_page_config(filter: &str) -> String {
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}, {{"so": "filters"}}, {{"so": "ssi"}}, {{"so": "templates"}}],
  "routing": [{{"handler": "echo", "filters": [{{"type": "userid", "name": "vid"}}, {filter}]}}]
}}"#
    )
}

/// `text` as a query value (every byte but letters and digits percent-encoded).
fn query_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b.is_ascii_alphanumeric() {
            true => (b as char).to_string(),
            false => format!("%{b:02X}"),
        })
        .collect()
}

/// An SSI include of `uri`.
fn ssi_include(uri: &str) -> String {
    format!("<!--#include virtual=\"{uri}\" -->")
}

/// The `vid` ids an echo page printed, its includes' and its own, in the order they appear.
fn seen_ids(body: &str) -> Vec<&str> {
    body.lines()
        .filter_map(|l| l.split("cookie.vid=").nth(1))
        .collect()
}

/// `r` gives a new visitor one id, the one the page and each of its `includes` includes saw.
fn one_id_for_page_and_includes(r: &Response, includes: usize) -> String {
    let body = r.text();
    let set: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
        .collect();
    assert_eq!(set.len(), 1, "exactly one Set-Cookie: {set:?}\n{body}");
    let id = set_vid(r).expect("a new visitor gets the cookie");
    assert!(is_id(&id), "{id}");
    assert_eq!(seen_ids(&body), vec![&id[..]; includes + 1], "{id}\n{body}");
    id
}

#[test]
fn userid_an_ssi_include_sees_the_id_a_new_visitors_page_sets() {
    let srv = Server::start(&echo_page_config(r#"{"type": "ssi"}"#));
    let page = format!("/page.shtml?x={}", query_value(&ssi_include("/frag")));
    let r = get(&srv, &page, "Cookie: a=1\r\n");
    assert_eq!(r.status, 200);
    let body = r.text();
    assert_eq!(body.matches("path=/frag\n").count(), 1, "{body}");
    one_id_for_page_and_includes(&r, 1);
    // The include carries the client's other cookies too.
    assert_eq!(body.matches("cookie.a=1").count(), 2, "{body}");
    // HTTP/2: the same.
    let out = h2c(&srv, &page, &[]);
    let id = h2_header(&out, "set-cookie")
        .and_then(|v| v.strip_prefix("vid="))
        .map(|v| &v[..32])
        .unwrap();
    assert_eq!(seen_ids(&out), [id, id], "{out}");
}

#[test]
fn userid_an_ssi_include_sees_a_returning_visitors_id_and_sets_none() {
    let srv = Server::start(&echo_page_config(r#"{"type": "ssi"}"#));
    let page = format!("/page.shtml?x={}", query_value(&ssi_include("/frag")));
    let known = "0123456789abcdef0123456789abcdef";
    let r = get(&srv, &page, &format!("Cookie: vid={known}; a=1\r\n"));
    let body = r.text();
    assert_eq!(r.header("set-cookie"), None, "{body}");
    assert_eq!(body.matches("path=/frag\n").count(), 1, "{body}");
    assert_eq!(seen_ids(&body), [known, known], "{body}");
}

#[test]
fn userid_a_nested_ssi_include_keeps_the_pages_id() {
    let srv = Server::start(&echo_page_config(r#"{"type": "ssi"}"#));
    // The page includes /mid.shtml, itself an echo page that includes /leaf.
    let mid = format!("/mid.shtml?y={}", query_value(&ssi_include("/leaf")));
    let page = format!("/page.shtml?x={}", query_value(&ssi_include(&mid)));
    let r = get(&srv, &page, "");
    let body = r.text();
    assert_eq!(body.matches("path=/leaf\n").count(), 1, "{body}");
    assert_eq!(body.matches("path=/mid.shtml\n").count(), 1, "{body}");
    one_id_for_page_and_includes(&r, 2);
}

#[test]
fn userid_makes_no_id_for_an_include_of_a_page_without_it() {
    // The include's route has `userid`, the page's has not: as nginx's, a subrequest never
    // makes an id (its Set-Cookie would reach no one, and its handler would see an id no
    // visitor has).
    let config = r#"{
  "load": [{"so": "testkit"}, {"so": "filters"}, {"so": "ssi"}],
  "routing": [
    {"prefix": "/frag", "handler": "echo", "filters": [{"type": "userid", "name": "vid"}]},
    {"handler": "echo", "filters": [{"type": "ssi"}]}
  ]
}"#;
    let srv = Server::start(config);
    let page = format!("/page.shtml?x={}", query_value(&ssi_include("/frag")));
    let r = get(&srv, &page, "Cookie: a=1\r\n");
    let body = r.text();
    assert_eq!(body.matches("path=/frag\n").count(), 1, "{body}");
    assert_eq!(seen_ids(&body), Vec::<&str>::new(), "{body}");
    assert_eq!(r.header("set-cookie"), None, "{body}");
    // A returning visitor's id reaches the include all the same.
    let known = "0123456789abcdef0123456789abcdef";
    let r = get(&srv, &page, &format!("Cookie: vid={known}\r\n"));
    assert_eq!(seen_ids(&r.text()), [known, known], "{}", r.text());
}

#[test]
fn userid_a_templates_include_sees_the_pages_visitor_id() {
    let templates = r#"{"type": "templates", "types": ["text/plain"]}"#;
    let srv = Server::start(&echo_page_config(templates));
    // An include, and an include within it.
    let page = format!("/page?x={}", query_value(r#"{% include "/frag" %}"#));
    let nested = format!("/frag?y={}", query_value(r#"{% include "/leaf" %}"#));
    let nested = format!(
        "/page?x={}",
        query_value(&format!("{{% include \"{nested}\" %}}"))
    );
    for (page, includes) in [(page, 1), (nested, 2)] {
        let r = get(&srv, &page, "");
        let body = r.text();
        assert_eq!(body.matches("path=/frag\n").count(), 1, "{body}");
        one_id_for_page_and_includes(&r, includes);
        let known = "0123456789abcdef0123456789abcdef";
        let r = get(&srv, &page, &format!("Cookie: vid={known}\r\n"));
        assert_eq!(r.header("set-cookie"), None, "{}", r.text());
        assert_eq!(seen_ids(&r.text()), vec![known; includes + 1]);
    }
}
