//! `file_cache` revalidation against the real binary: the client's `no-cache` / `max-age=0`
//! (and a route that ignores them), `stale-while-revalidate`, `stale-if-error`,
//! `must-revalidate`, `Age`, and `Vary`.

mod common;

use std::time::{Duration, Instant};

use common::{Response, Server, TempDir};

fn config(flag: &std::path::Path) -> String {
    let r = |prefix: &str, handler_keys: &str, filter_keys: &str| {
        common::cached_route::counter_route(flag, prefix, handler_keys, filter_keys)
    };
    let routes = [
        r(
            "/etag",
            r#""headers": {"Cache-Control": "max-age=60", "ETag": "\"v1\""},"#,
            "",
        ),
        r(
            "/ignoring",
            r#""headers": {"Cache-Control": "max-age=60", "ETag": "\"v1\""},"#,
            r#", "ignore_client_no_cache": true"#,
        ),
        r(
            "/swr",
            r#""sleep_ms": 800, "headers": {"Cache-Control": "max-age=1, stale-while-revalidate=30"},"#,
            "",
        ),
        r(
            "/no-swr",
            r#""sleep_ms": 800, "headers": {"Cache-Control": "max-age=1"},"#,
            "",
        ),
        r(
            "/sie",
            r#""headers": {"Cache-Control": "max-age=1, stale-if-error=1"},"#,
            "",
        ),
        r(
            "/must-revalidate",
            r#""headers": {"Cache-Control": "max-age=1, must-revalidate"},"#,
            "",
        ),
        r(
            "/vary",
            r#""headers": {"Cache-Control": "max-age=60", "Vary": "X-Lang, accept-encoding", "ETag": "\"v\""},"#,
            "",
        ),
        r(
            "/aged",
            r#""headers": {"Cache-Control": "max-age=60", "Age": "20"},"#,
            "",
        ),
    ];
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}, {{"so": "file_cache"}}],
  "routing": [
    {{"prefix": "/count", "handler": "count"}},
    {routes}
  ]
}}"#,
        routes = routes.join("\n    "),
    )
}

struct Site {
    files: TempDir,
    srv: Server,
}

fn site() -> Site {
    let files = TempDir::new("fcr-files");
    let srv = Server::start(&config(&files.path().join("fail")));
    Site { files, srv }
}

impl Site {
    fn fail(&self, on: bool) {
        if on {
            self.files.write("fail", "1");
        } else {
            let _ = std::fs::remove_file(self.files.path().join("fail"));
        }
    }

    /// (origin requests, conditional ones answered 304) of a route.
    fn count(&self, route: &str) -> (u64, u64) {
        let t = self.srv.get(&format!("/count?{route}")).text();
        let (a, b) = t.split_once(' ').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    }

    fn get(&self, path: &str, headers: &str) -> Response {
        let req =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n");
        Response::parse(self.srv.raw(req.as_bytes()).as_bytes())
    }
}

fn hit(r: &Response) -> String {
    r.text().lines().next().unwrap_or("").to_owned()
}

#[test]
fn a_client_no_cache_revalidates_a_fresh_entry() {
    let s = site();
    assert_eq!(hit(&s.get("/etag", "")), "hit 1");
    assert_eq!(hit(&s.get("/etag", "")), "hit 1");
    assert_eq!(s.count("/etag"), (1, 0));
    for (n, headers) in [
        (2, "Cache-Control: no-cache\r\n"),
        (3, "Cache-Control: max-age=0\r\n"),
        (4, "Pragma: no-cache\r\n"),
    ] {
        let r = s.get("/etag", headers);
        // The origin said 304: the client gets the entry, refreshed.
        assert_eq!((r.status, hit(&r)), (200, "hit 1".into()), "{headers}");
        assert_eq!(r.header("age"), Some("0"), "{headers}");
        assert_eq!(s.count("/etag"), (n, n - 1), "{headers}");
    }
    // A max-age the entry is younger than, or Pragma beside Cache-Control, is a hit.
    s.get("/etag", "Cache-Control: max-age=60\r\n");
    s.get("/etag", "Cache-Control: max-stale\r\nPragma: no-cache\r\n");
    s.get("/etag", "");
    assert_eq!(s.count("/etag"), (4, 3));

    // A route configured to ignore them.
    s.get("/ignoring", "");
    s.get("/ignoring", "Cache-Control: no-cache\r\n");
    s.get("/ignoring", "Cache-Control: max-age=0\r\n");
    assert_eq!(s.count("/ignoring"), (1, 0));
}

#[test]
fn stale_while_revalidate_serves_stale_during_one_refresh() {
    let s = site();
    for route in ["/swr", "/no-swr"] {
        assert_eq!(hit(&s.get(route, "")), "hit 1", "{route}");
        std::thread::sleep(Duration::from_millis(1100));
        // The first request after expiry refreshes (the origin takes 0.8 s) ...
        let lead_sent = Instant::now();
        let lead = std::thread::spawn({
            let req =
                format!("GET {route} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            let addr = s.srv.addr();
            move || {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                std::io::Write::write_all(&mut c, req.as_bytes()).unwrap();
                Response::parse(common::read_to_close(&mut c).as_bytes())
            }
        });
        std::thread::sleep(Duration::from_millis(200));
        // ... while the others get the stale entry at once (or, without the directive, wait).
        let started = Instant::now();
        let other = s.get(route, "");
        let waited = started.elapsed();
        let since_lead = lead_sent.elapsed();
        let lead = lead.join().unwrap();
        assert_eq!(hit(&lead), "hit 2", "{route}");
        if route == "/swr" {
            assert_eq!(hit(&other), "hit 1", "{route}");
            assert!(other
                .header("warning")
                .is_some_and(|w| w.starts_with("110")));
            assert!(waited < Duration::from_millis(400), "{waited:?}");
        } else {
            assert_eq!(hit(&other), "hit 2", "{route}");
            // It waited for the refresh, which ends 0.8 s or more after the lead was sent
            // (timed from there: on a loaded machine the 200 ms sleep above can last longer).
            assert!(since_lead >= Duration::from_millis(750), "{since_lead:?}");
        }
        assert_eq!(s.count(route), (2, 0), "one refresh: {route}");
        assert_eq!(hit(&s.get(route, "")), "hit 2", "{route}");
    }
}

#[test]
fn stale_if_error_bounds_serving_stale_and_must_revalidate_forbids_it() {
    let s = site();
    assert_eq!(hit(&s.get("/sie", "")), "hit 1");
    assert_eq!(hit(&s.get("/must-revalidate", "")), "hit 1");
    std::thread::sleep(Duration::from_millis(1200));
    s.fail(true);
    let r = s.get("/sie", "");
    assert_eq!(
        (r.status, hit(&r)),
        (200, "hit 1".into()),
        "within stale-if-error"
    );
    assert_eq!(s.get("/must-revalidate", "").status, 503);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(s.get("/sie", "").status, 503, "past stale-if-error");
    s.fail(false);
    assert_eq!(hit(&s.get("/sie", "")), "hit 4");
}

#[test]
fn age_counts_from_the_origins_age() {
    let s = site();
    let r = s.get("/aged", "");
    assert_eq!(r.header("age"), Some("20"));
    std::thread::sleep(Duration::from_millis(1100));
    let r = s.get("/aged", "");
    assert_eq!((hit(&r), r.header("age")), ("hit 1".into(), Some("21")));
}

#[test]
fn vary_keeps_one_entry_per_listed_request_header() {
    let s = site();
    let lang = |l: &str| format!("X-Lang: {l}\r\n");
    assert_eq!(hit(&s.get("/vary", &lang("en"))), "hit 1");
    assert_eq!(hit(&s.get("/vary", &lang("fr"))), "hit 2");
    assert_eq!(hit(&s.get("/vary", "")), "hit 3");
    for _ in 0..2 {
        assert_eq!(hit(&s.get("/vary", &lang("en"))), "hit 1");
        assert_eq!(hit(&s.get("/vary", &lang("fr"))), "hit 2");
        assert_eq!(hit(&s.get("/vary", "")), "hit 3");
        // Accept-Encoding is not part of the variant (the gzip filter keys it).
        assert_eq!(
            hit(&s.get("/vary", &format!("{}Accept-Encoding: br\r\n", lang("en")))),
            "hit 1"
        );
    }
    assert_eq!(s.count("/vary"), (3, 0));
    // A variant is revalidated on its own: a 304 refreshes the `fr` entry only.
    let r = s.get(
        "/vary",
        &format!("{}Cache-Control: no-cache\r\n", lang("fr")),
    );
    assert_eq!((hit(&r), s.count("/vary")), ("hit 2".into(), (4, 1)));
}
