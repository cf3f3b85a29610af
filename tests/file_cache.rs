//! The `file_cache` filter against the real binary: what is stored and for how long,
//! revalidation with 304s, serving stale entries when the origin fails, request coalescing,
//! the disk cache across restarts, corrupt files, and the chain with `gzip`.

mod common;

use std::io::Read;
use std::time::{Duration, SystemTime};

use common::{Response, Server, TempDir};

/// One route per case. `{flag}` is the fail-flag file, `{dir}` the disk cache directory.
fn config(flag: &std::path::Path, dir: &std::path::Path) -> String {
    let in_a_minute = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(60));
    let r = |prefix: &str, handler_keys: &str, filter_keys: &str| {
        common::cached_route::counter_route(flag, prefix, handler_keys, filter_keys)
    };
    let routes = [
        r(
            "/max-age",
            r#""headers": {"Cache-Control": "max-age=60"},"#,
            "",
        ),
        r(
            "/s-maxage",
            r#""headers": {"Cache-Control": "max-age=0, s-maxage=60"},"#,
            "",
        ),
        r(
            "/expires",
            &format!(r#""headers": {{"Expires": "{in_a_minute}"}},"#),
            "",
        ),
        r(
            "/expired",
            r#""headers": {"Expires": "Thu, 01 Jan 1970 00:00:00 GMT"},"#,
            "",
        ),
        r("/ttl", "", r#", "ttl": 60"#),
        r("/no-info", "", ""),
        r(
            "/private",
            r#""headers": {"Cache-Control": "private, max-age=60"},"#,
            "",
        ),
        r(
            "/no-store",
            r#""headers": {"Cache-Control": "no-store"},"#,
            r#", "ttl": 60"#,
        ),
        r(
            "/cookie",
            r#""headers": {"Cache-Control": "max-age=60", "Set-Cookie": "a=1"},"#,
            "",
        ),
        r(
            "/vary-star",
            r#""headers": {"Cache-Control": "max-age=60", "Vary": "X-Lang, *"},"#,
            "",
        ),
        r(
            "/not-found",
            r#""fail_status": 404, "headers": {"Cache-Control": "max-age=60"},"#,
            "",
        ),
        r(
            "/queries",
            r#""headers": {"Cache-Control": "max-age=60"},"#,
            r#", "dont_cache_queries": true"#,
        ),
        r(
            "/etag",
            r#""headers": {"Cache-Control": "max-age=1", "ETag": "\"v1\""},"#,
            "",
        ),
        r(
            "/last-modified",
            r#""headers": {"Cache-Control": "max-age=1", "Last-Modified": "Mon, 02 Jan 2023 03:04:05 GMT"},"#,
            "",
        ),
        r(
            "/both",
            r#""headers": {"Cache-Control": "max-age=60", "ETag": "\"v2\"", "Last-Modified": "Mon, 02 Jan 2023 03:04:05 GMT"},"#,
            "",
        ),
        r(
            "/flaky",
            r#""headers": {"Cache-Control": "max-age=1"},"#,
            "",
        ),
        r(
            "/flaky-limited",
            r#""headers": {"Cache-Control": "max-age=1"},"#,
            r#", "max_stale": 0"#,
        ),
        r(
            "/slow",
            r#""sleep_ms": 700, "headers": {"Cache-Control": "max-age=60"},"#,
            "",
        ),
        r(
            "/slow-uncacheable",
            r#""sleep_ms": 300, "headers": {"Cache-Control": "no-store"},"#,
            "",
        ),
        r(
            "/disk",
            r#""headers": {"Cache-Control": "max-age=60"},"#,
            &format!(r#", "cache_dir": {:?}"#, dir.display().to_string()),
        ),
    ];
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}, {{"so": "file_cache"}}, {{"so": "gzip"}}, {{"so": "status"}}],
  "routing": [
    {{"prefix": "/count", "handler": "count"}},
    {{"prefix": "/status", "handler": "status"}},
    {{"prefix": "/declines", "handler": "decline", "filters": [{{"type": "file_cache", "lock_timeout": 600}}]}},
    {{"prefix": "/declines", "handler": "counter", "counter": "/declines", "headers": {{"Cache-Control": "max-age=60"}}}},
    {{"prefix": "/gzip", "handler": "counter", "counter": "/gzip", "text": {text:?},
      "headers": {{"Cache-Control": "max-age=60"}}, "filters": [{{"type": "gzip"}}, {{"type": "file_cache"}}]}},
    {{"prefix": "/cached-gzip", "handler": "counter", "counter": "/cached-gzip", "text": {text:?},
      "headers": {{"Cache-Control": "max-age=60"}}, "filters": [{{"type": "file_cache"}}, {{"type": "gzip"}}]}},
    {routes}
  ]
}}"#,
        routes = routes.join("\n    "),
        text = "cache me if you can ".repeat(30),
    )
}

struct Site {
    flag: std::path::PathBuf,
    files: TempDir,
    cache: TempDir,
    srv: Server,
}

fn site() -> Site {
    let files = TempDir::new("fc-files");
    let cache = TempDir::new("fc-cache");
    let flag = files.path().join("fail");
    let srv = Server::start(&config(&flag, cache.path()));
    Site {
        flag,
        files,
        cache,
        srv,
    }
}

impl Site {
    fn restart(&mut self) {
        self.srv.stop();
        self.srv = Server::start(&config(&self.flag, self.cache.path()));
    }

    fn fail(&self, on: bool) {
        if on {
            self.files.write("fail", "1");
        } else {
            let _ = std::fs::remove_file(&self.flag);
        }
    }

    /// (origin hits, conditional hits answered 304) of a route's counter.
    fn count(&self, route: &str) -> (u64, u64) {
        let t = self.srv.get(&format!("/count?{route}")).text();
        let (a, b) = t.split_once(' ').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    }
}

fn get_with(srv: &Server, path: &str, headers: &str) -> Response {
    let req =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n");
    let mut s = srv.connect();
    std::io::Write::write_all(&mut s, req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    Response::parse(&raw)
}

/// The `hit N` line of a counter's body.
fn hit(r: &Response) -> String {
    r.text().lines().next().unwrap_or("").to_owned()
}

#[test]
fn stores_fresh_responses() {
    let s = site();
    for route in ["/max-age", "/s-maxage", "/expires", "/ttl"] {
        let first = s.srv.get(route);
        assert_eq!(
            (first.status, hit(&first)),
            (200, "hit 1".to_owned()),
            "{route}"
        );
        let second = s.srv.get(route);
        assert_eq!(
            hit(&second),
            "hit 1",
            "{route} was not served from the cache"
        );
        assert!(
            second.header("age").is_some(),
            "{route}: {:?}",
            second.headers
        );
        assert_eq!(
            second.header("cache-control"),
            first.header("cache-control")
        );
        assert_eq!(s.count(route), (1, 0), "{route}");
    }
    // HEAD is answered from the entry too.
    let raw = s
        .srv
        .raw(b"HEAD /max-age HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert_eq!(s.count("/max-age"), (1, 0));
}

#[test]
fn never_stores_what_it_must_not() {
    let s = site();
    for route in [
        "/no-info",
        "/expired",
        "/private",
        "/no-store",
        "/cookie",
        "/vary-star",
    ] {
        assert_eq!(hit(&s.srv.get(route)), "hit 1", "{route}");
        assert_eq!(
            hit(&s.srv.get(route)),
            "hit 2",
            "{route} must not be cached"
        );
    }
    // Non-200 answers pass through and are not stored.
    s.fail(true);
    assert_eq!(s.srv.get("/not-found").status, 404);
    assert_eq!(s.srv.get("/not-found").status, 404);
    assert_eq!(s.count("/not-found"), (2, 0));
    s.fail(false);
    // Query strings: separate entries by default, not cached with dont_cache_queries.
    assert_eq!(hit(&s.srv.get("/max-age?a=1")), "hit 1");
    assert_eq!(hit(&s.srv.get("/max-age?a=2")), "hit 2");
    assert_eq!(hit(&s.srv.get("/max-age?a=1")), "hit 1");
    assert_eq!(hit(&s.srv.get("/queries?a=1")), "hit 1");
    assert_eq!(hit(&s.srv.get("/queries?a=1")), "hit 2");
    assert_eq!(hit(&s.srv.get("/queries")), "hit 3");
    assert_eq!(hit(&s.srv.get("/queries")), "hit 3");
    // Other methods are not cached.
    let post = s.srv.raw(
        b"POST /max-age HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert!(post.contains("hit 3"), "{post}");
}

#[test]
fn expired_entries_are_revalidated() {
    let s = site();
    for (route, validator) in [
        ("/etag", "\"v1\""),
        ("/last-modified", "Mon, 02 Jan 2023 03:04:05 GMT"),
    ] {
        assert_eq!(hit(&s.srv.get(route)), "hit 1");
        std::thread::sleep(Duration::from_millis(1100));
        // Expired: the origin is asked conditionally, answers 304, and the entry is served.
        let r = s.srv.get(route);
        assert_eq!((r.status, hit(&r)), (200, "hit 1".to_owned()), "{route}");
        assert_eq!(s.count(route), (2, 1), "{route}");
        // The 304 made it fresh again.
        assert_eq!(hit(&s.srv.get(route)), "hit 1");
        assert_eq!(s.count(route), (2, 1), "{route}");
        // A client's own conditional request is answered by the cache.
        let header = if route == "/etag" {
            "If-None-Match"
        } else {
            "If-Modified-Since"
        };
        let r = get_with(&s.srv, route, &format!("{header}: {validator}\r\n"));
        assert_eq!(r.status, 304, "{route}");
        assert_eq!(s.count(route), (2, 1), "{route}");
    }
}

#[test]
fn client_preconditions_are_answered_from_the_entry_in_rfc_order() {
    let s = site();
    let lm = "Mon, 02 Jan 2023 03:04:05 GMT";
    let first = s.srv.get("/both");
    assert_eq!((first.status, hit(&first)), (200, "hit 1".to_owned()));
    // Both validators on the 304, whichever one matched.
    for headers in [
        "If-None-Match: \"v2\"\r\n".to_owned(),
        "If-None-Match: W/\"v2\"\r\n".to_owned(),
        "If-None-Match: \"x\"\r\nIf-None-Match: \"v2\"\r\n".to_owned(),
        format!("If-Modified-Since: {lm}\r\n"),
    ] {
        let r = get_with(&s.srv, "/both", &headers);
        assert_eq!(r.status, 304, "{headers}");
        assert_eq!(r.header("etag"), Some("\"v2\""), "{headers}");
        assert_eq!(r.header("last-modified"), Some(lm), "{headers}");
        assert!(r.body.is_empty());
    }
    // If-None-Match decides alone: a stale tag gets the body despite a matching date.
    let r = get_with(
        &s.srv,
        "/both",
        &format!("If-None-Match: \"old\"\r\nIf-Modified-Since: {lm}\r\n"),
    );
    assert_eq!((r.status, hit(&r)), (200, "hit 1".to_owned()));
    // Failed preconditions: 412, without the entry's caching headers.
    for headers in [
        "If-Match: \"old\"\r\n",
        "If-Match: W/\"v2\"\r\n",
        "If-Unmodified-Since: Sun, 01 Jan 2023 00:00:00 GMT\r\n",
        "If-Match: \"old\"\r\nIf-None-Match: \"v2\"\r\n",
    ] {
        let r = get_with(&s.srv, "/both", headers);
        assert_eq!(r.status, 412, "{headers}");
        assert_eq!(r.header("cache-control"), None, "{headers}");
    }
    let r = get_with(&s.srv, "/both", "If-Match: \"v2\"\r\n");
    assert_eq!((r.status, hit(&r)), (200, "hit 1".to_owned()));
    // All of it from the one stored response.
    assert_eq!(s.count("/both"), (1, 0));
}

#[test]
fn stale_entries_are_served_when_the_origin_fails() {
    let s = site();
    assert_eq!(hit(&s.srv.get("/flaky")), "hit 1");
    assert_eq!(hit(&s.srv.get("/flaky-limited")), "hit 1");
    std::thread::sleep(Duration::from_millis(2100));
    // A HEAD that reaches the origin leaves the (stale) entry alone.
    let head = s
        .srv
        .raw(b"HEAD /flaky HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert!(
        head.starts_with("HTTP/1.1 200") && head.contains("X-Hits: 2"),
        "{head}"
    );
    s.fail(true);
    let r = s.srv.get("/flaky");
    assert_eq!((r.status, hit(&r)), (200, "hit 1".to_owned()));
    assert_eq!(r.header("warning"), Some("110 - \"Response is Stale\""));
    let age: u64 = r.header("age").unwrap().parse().unwrap();
    assert!(age >= 2, "age {age}");
    assert_eq!(s.count("/flaky"), (3, 0), "the origin was asked first");
    // max_stale 0: too stale to serve; the error goes through.
    assert_eq!(s.srv.get("/flaky-limited").status, 503);
    // Without any entry the error goes through.
    assert_eq!(s.srv.get("/flaky?other").status, 503);
    assert_eq!(s.count("/flaky"), (4, 0));
    // The origin is back: a new answer replaces the entry.
    s.fail(false);
    let r = s.srv.get("/flaky");
    assert_eq!((hit(&r), r.header("warning")), ("hit 5".to_owned(), None));
}

/// `n` clients fetching `url` at the same time (curl's success and body, each).
fn fetch_at_once(url: &str, n: usize) -> Vec<(bool, String)> {
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let url = url.to_owned();
            std::thread::spawn(move || common::curl(&[&url]))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn concurrent_misses_make_one_origin_request() {
    let s = site();
    for (ok, body) in fetch_at_once(&s.srv.url("/slow"), 8) {
        assert!(ok);
        assert_eq!(body.lines().next(), Some("hit 1"));
    }
    assert_eq!(s.count("/slow"), (1, 0));

    // An uncacheable answer releases the waiters to the origin (they do not hang).
    for (ok, body) in fetch_at_once(&s.srv.url("/slow-uncacheable"), 4) {
        assert!(ok && body.starts_with("hit "), "{body}");
    }
    assert_eq!(s.count("/slow-uncacheable"), (4, 0));
}

#[test]
fn a_declining_handler_does_not_leave_others_waiting() {
    // The cached route declines; the next route (uncached) answers. The cache's claim on the
    // key is released (`Filter::cancel`), so the next request does not wait for a fill that
    // will never come (curl gives up after 20 s; the lock timeout is 600 s).
    let s = site();
    for n in 1..=3 {
        let (ok, body) = common::curl(&[&s.srv.url("/declines")]);
        assert!(ok, "request {n} hung");
        assert_eq!(body.lines().next(), Some(format!("hit {n}").as_str()));
    }
}

fn cache_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

#[test]
fn disk_cache_survives_a_restart() {
    let mut s = site();
    assert_eq!(hit(&s.srv.get("/disk")), "hit 1");
    let files = cache_files(s.cache.path());
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].extension().is_some_and(|e| e == "cache"),
        "{files:?}"
    );
    s.restart();
    let r = s.srv.get("/disk");
    assert_eq!(hit(&r), "hit 1");
    assert_eq!(r.header("cache-control"), Some("max-age=60"));
    assert_eq!(s.count("/disk"), (0, 0), "served from disk, not the origin");
}

#[test]
fn corrupt_cache_files_are_discarded() {
    let mut s = site();
    assert_eq!(hit(&s.srv.get("/disk")), "hit 1");
    s.srv.stop();
    let file = cache_files(s.cache.path()).pop().unwrap();
    // A flipped byte in the body.
    let mut data = std::fs::read(&file).unwrap();
    let last = data.len() - 2;
    data[last] ^= 0x20;
    std::fs::write(&file, &data).unwrap();
    s.restart();
    let r = s.srv.get("/disk");
    assert_eq!(r.text(), "hit 1\n", "origin answer, not the corrupt body");
    assert_eq!(s.count("/disk"), (1, 0));
    assert!(s.srv.log_text().contains("corrupt"), "{}", s.srv.log_text());
    let status = s.srv.get("/status").text();
    assert!(
        status.contains("\nCounter file_cache_store_errors: 1\n"),
        "{status}"
    );
    // Replaced by a good entry; now a truncated file.
    s.srv.stop();
    let data = std::fs::read(&file).unwrap();
    std::fs::write(&file, &data[..data.len() / 2]).unwrap();
    s.restart();
    assert_eq!(hit(&s.srv.get("/disk")), "hit 1");
    assert_eq!(s.count("/disk"), (1, 0));
    assert!(s.srv.log_text().contains("discarded corrupt cache file"));
    // And garbage.
    s.srv.stop();
    std::fs::write(&file, "not a cache file at all").unwrap();
    s.restart();
    assert_eq!(hit(&s.srv.get("/disk")), "hit 1");
    assert_eq!(s.count("/disk"), (1, 0));
}

#[test]
fn works_behind_gzip_with_separate_variants() {
    let s = site();
    let text = "cache me if you can ".repeat(30);
    // Either order: the cache keeps the gzip and identity variants apart (the key carries
    // gzip's `|gzip`), and each is fetched from the origin once.
    for route in ["/gzip", "/cached-gzip"] {
        for _ in 0..2 {
            let gz = get_with(&s.srv, route, "Accept-Encoding: gzip\r\n");
            assert_eq!(gz.header("content-encoding"), Some("gzip"), "{route}");
            let mut plain = String::new();
            flate2::read::GzDecoder::new(&gz.body[..])
                .read_to_string(&mut plain)
                .unwrap();
            assert_eq!(plain, format!("hit 1\n{text}"), "{route}");
            let id = get_with(&s.srv, route, "");
            assert_eq!(id.header("content-encoding"), None, "{route}");
            assert_eq!(id.text(), format!("hit 2\n{text}"), "{route}");
            assert_eq!(id.header("vary"), Some("Accept-Encoding"), "{route}");
        }
        assert_eq!(s.count(route), (2, 0), "{route}");
    }
}

#[test]
fn configuration_errors_name_the_key_and_line() {
    let dir = TempDir::new("fc-conf");
    for (key, text, want) in [
        ("lock_timeout", "\"lock_timeout\": -1", "0 to 3600"),
        ("ttl_seconds", "\"ttl_seconds\": 5", "unknown key"),
        // serde's type errors do not name the field; the line and the filter's key do.
        ("filters[0]", "\"ttl\": \"long\"", "invalid type"),
    ] {
        let conf = dir.write(
            "bad.json",
            format!(
                "{{\"load\": [{{\"so\": \"testkit\"}}, {{\"so\": \"file_cache\"}}],\n\"routing\": [{{\"prefix\": \"/\", \"handler\": \"echo\",\n \"filters\": [{{\"type\": \"file_cache\",\n {text}}}]}}]}}"
            ),
        );
        let (ok, err) = common::check_file(&conf, &[]);
        assert!(!ok, "{key}");
        assert!(
            err.contains(key) && err.contains(want) && err.contains(":4"),
            "{key}: {err}"
        );
    }
}

#[test]
fn disk_cache_is_bounded_least_recently_used_first_across_restarts() {
    let dir = TempDir::new("fc-bounded");
    // Files are about 1.2 kB: four fit in 5000 bytes; a fifth evicts down to 90% (two go).
    let conf = format!(
        r#"{{"load": [{{"so": "testkit"}}, {{"so": "file_cache"}}],
  "routing": [
    {{"prefix": "/count", "handler": "count"}},
    {{"prefix": "/b/", "handler": "counter", "counter": "b", "text": {text:?},
      "headers": {{"Cache-Control": "max-age=600"}},
      "filters": [{{"type": "file_cache", "cache_dir": {dir:?}, "max_disk_size": 5000}}]}}
  ]}}"#,
        text = "x".repeat(1000),
        dir = dir.path().display().to_string()
    );
    let origin = |srv: &Server| -> u64 {
        let t = srv.get("/count?b").text();
        t.split(' ').next().unwrap().parse().unwrap()
    };
    let disk_bytes = || -> u64 {
        cache_files(dir.path())
            .iter()
            .map(|f| f.metadata().unwrap().len())
            .sum()
    };
    let mut srv = Server::start(&conf);
    for p in ["/b/1", "/b/2", "/b/3", "/b/4"] {
        assert_eq!(srv.get(p).status, 200);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(cache_files(dir.path()).len(), 4);
    // After a restart (memory empty) reading /b/1 from disk makes it the most recent.
    srv.stop();
    srv = Server::start(&conf);
    assert_eq!(hit(&srv.get("/b/1")), "hit 1");
    assert_eq!(origin(&srv), 0, "from disk");
    // The order survives another restart: a fifth entry evicts /b/2 and /b/3.
    srv.stop();
    srv = Server::start(&conf);
    srv.get("/b/5");
    assert!(disk_bytes() <= 4500, "{}", disk_bytes());
    assert_eq!(cache_files(dir.path()).len(), 3);
    for (p, from_origin) in [
        ("/b/1", 1),
        ("/b/4", 1),
        ("/b/5", 1),
        ("/b/2", 2),
        ("/b/3", 3),
    ] {
        srv.get(p);
        assert_eq!(origin(&srv), from_origin, "{p}");
    }
}
