//! The `cache_purge` handler against the real binary: PURGE of a URI with its variants, by
//! host, prefix and pattern; the memory and disk stores; zones; who may purge; and the
//! cache's counters in the `status` output.

mod common;

use common::{Response, Server, TempDir};

fn config(disk: &std::path::Path) -> String {
    let cached = |prefix: &str, filters: &str| {
        format!(
            r#"{{"prefix": "{prefix}", "handler": "counter", "counter": "{prefix}", "text": {text:?},
      "headers": {{"Cache-Control": "max-age=60"}}, "filters": [{filters}]}},"#,
            text = "a fragment worth compressing ".repeat(20)
        )
    };
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}, {{"so": "file_cache"}}, {{"so": "gzip"}}, {{"so": "status"}}],
  "routing": [
    {{"vhost": "secret.test", "methods": ["PURGE"], "handler": "cache_purge", "zone": "frags",
      "allow": ["10.0.0.0/8"], "secret": "s3cret"}},
    {{"methods": ["PURGE"], "handler": "cache_purge", "zone": "frags",
      "allow": ["192.168.0.0/16", "127.0.0.1/32"]}},
    {{"prefix": "/count", "handler": "count"}},
    {{"prefix": "/status", "handler": "status"}},
    {frag}
    {disk}
    {other}
    {{"prefix": "/purge-any", "handler": "cache_purge", "allow": ["127.0.0.1"]}}
  ]
}}"#,
        frag = cached(
            "/frag/",
            r#"{"type": "file_cache", "zone": "frags"}, {"type": "gzip"}"#
        ),
        disk = cached(
            "/disk/",
            &format!(
                r#"{{"type": "file_cache", "zone": "frags", "cache_dir": {:?}}}"#,
                disk.display().to_string()
            )
        ),
        other = cached("/other/", r#"{"type": "file_cache", "zone": "other"}"#),
    )
}

fn send(srv: &Server, method: &str, path: &str, headers: &str) -> Response {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n"
    );
    Response::parse(srv.raw(req.as_bytes()).as_bytes())
}

fn purge(srv: &Server, path: &str, headers: &str) -> (u16, String) {
    let r = send(srv, "PURGE", path, headers);
    (r.status, r.text())
}

/// Origin requests so far for a route's counter.
fn origin_hits(srv: &Server, route: &str) -> u64 {
    let t = srv.get(&format!("/count?{route}")).text();
    t.split(' ').next().unwrap().parse().unwrap()
}

/// GET, plain and with gzip: two entries (`...|/frag/a` and `...|/frag/a|gzip`).
fn fill(srv: &Server, path: &str) {
    assert_eq!(send(srv, "GET", path, "").status, 200);
    let gz = send(srv, "GET", path, "Accept-Encoding: gzip\r\n");
    assert_eq!(gz.header("content-encoding"), Some("gzip"), "{path}");
}

#[test]
fn purges_a_uri_with_its_variants_and_says_how_many() {
    let disk = TempDir::new("purge-disk");
    let srv = Server::start(&config(disk.path()));
    fill(&srv, "/frag/a");
    fill(&srv, "/frag/a");
    fill(&srv, "/frag/a?x=1");
    assert_eq!(origin_hits(&srv, "/frag/"), 4, "two variants of two URIs");

    assert_eq!(purge(&srv, "/frag/a", ""), (200, "purged 2\n".into()));
    assert_eq!(
        purge(&srv, "/frag/a", ""),
        (404, "purged 0\n".into()),
        "a missing key"
    );
    // The other URI stays cached; the purged one comes from the origin again.
    fill(&srv, "/frag/a?x=1");
    assert_eq!(origin_hits(&srv, "/frag/"), 4);
    fill(&srv, "/frag/a");
    assert_eq!(origin_hits(&srv, "/frag/"), 6);

    let r = send(&srv, "PURGE", "/frag/a?x=1", "Accept: application/json\r\n");
    assert_eq!((r.status, r.text()), (200, "{\"purged\": 2}\n".into()));
    assert_eq!(r.header("content-type"), Some("application/json"));
}

#[test]
fn purges_by_prefix_pattern_and_host() {
    let disk = TempDir::new("purge-disk");
    let srv = Server::start(&config(disk.path()));
    for p in ["/frag/ads/1.js", "/frag/ads/2.html", "/frag/news/3.js"] {
        assert_eq!(srv.get(p).status, 200);
    }
    let (status, text) = purge(&srv, "/", "X-Purge-Pattern: /frag/*/*.js\r\n");
    assert_eq!((status, text.as_str()), (200, "purged 2\n"));
    let (status, text) = purge(&srv, "/", "X-Purge-Prefix: /frag/ads/\r\n");
    assert_eq!((status, text.as_str()), (200, "purged 1\n"));
    let (status, _) = purge(&srv, "/", "X-Purge-Prefix: /frag/\r\n");
    assert_eq!(status, 404, "nothing left");

    // By host: every entry of that host in the purge route's zone (`frags`), not others.
    srv.get("/frag/x");
    srv.get("/disk/y");
    srv.get("/other/z");
    let (status, text) = purge(&srv, "/", "X-Purge-Host: elsewhere.test\r\n");
    assert_eq!((status, text.as_str()), (404, "purged 0\n"));
    let (status, text) = purge(&srv, "/", "X-Purge-Host: localhost\r\n");
    assert_eq!(
        (status, text.as_str()),
        (200, "purged 2\n"),
        "not zone `other`"
    );
    let before = origin_hits(&srv, "/other/");
    srv.get("/other/z");
    assert_eq!(
        origin_hits(&srv, "/other/"),
        before,
        "zone `other` kept its entry"
    );

    let (status, text) = purge(&srv, "/", "X-Purge-Pattern: /[\r\n");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("X-Purge-Pattern"), "{text}");
}

#[test]
fn purges_disk_entries_for_good() {
    let disk = TempDir::new("purge-disk");
    let mut srv = Server::start(&config(disk.path()));
    srv.get("/disk/a");
    srv.get("/disk/b");
    assert_eq!(std::fs::read_dir(disk.path()).unwrap().count(), 2);
    assert_eq!(purge(&srv, "/disk/a", "").0, 200);
    assert_eq!(std::fs::read_dir(disk.path()).unwrap().count(), 1);
    // After a restart the index comes from the files: bulk purges find them.
    srv.stop();
    let srv = Server::start(&config(disk.path()));
    assert_eq!(
        purge(&srv, "/", "X-Purge-Prefix: /disk/\r\n"),
        (200, "purged 1\n".into())
    );
    assert_eq!(std::fs::read_dir(disk.path()).unwrap().count(), 0);
    srv.get("/disk/b");
    assert_eq!(
        origin_hits(&srv, "/disk/"),
        1,
        "not served from a purged file"
    );
}

#[test]
fn only_allowed_addresses_or_the_secret_may_purge() {
    let disk = TempDir::new("purge-disk");
    let srv = Server::start(&config(disk.path()));
    srv.get("/frag/a");
    let as_secret_host = |extra: &str| {
        let req = format!(
            "PURGE /frag/a HTTP/1.1\r\nHost: secret.test\r\nX-Purge-Host: localhost\r\n{extra}Connection: close\r\n\r\n"
        );
        Response::parse(srv.raw(req.as_bytes()).as_bytes()).status
    };
    // 127.0.0.1 is not in that route's `allow`.
    assert_eq!(as_secret_host(""), 403);
    assert_eq!(as_secret_host("X-Purge-Secret: wrong\r\n"), 403);
    assert_eq!(as_secret_host("X-Purge-Secret: s3cret\r\n"), 200);
    assert_eq!(
        send(&srv, "PURGE", "/frag/a", "").status,
        404,
        "already purged"
    );
    // Other methods on a purge route are refused.
    let r = send(&srv, "GET", "/purge-any", "");
    assert_eq!((r.status, r.header("allow")), (405, Some("PURGE")));
}

#[test]
fn status_shows_each_caches_counters() {
    let disk = TempDir::new("purge-disk");
    let srv = Server::start(&config(disk.path()));
    srv.get("/frag/a"); // miss
    srv.get("/frag/a"); // hit
    srv.get("/frag/a"); // hit
    srv.get("/other/a"); // miss in zone `other`
    purge(&srv, "/frag/a", "");
    let text = srv.get("/status").text();
    for line in [
        "Counter file_cache_frags_hits: 2",
        "Counter file_cache_frags_misses: 1",
        "Counter file_cache_frags_purges: 1",
        "Counter file_cache_frags_stale: 0",
        "Counter file_cache_frags_revalidations: 0",
        "Counter file_cache_frags_store_errors: 0",
        "Counter file_cache_other_misses: 1",
        "Counter file_cache_other_hits: 0",
    ] {
        assert!(text.contains(&format!("\n{line}\n")), "{line}:\n{text}");
    }
}

#[test]
fn configuration_errors_name_the_key_and_line() {
    let dir = TempDir::new("purge-conf");
    for (route, key, want) in [
        (
            r#""handler": "cache_purge""#,
            "cache_purge",
            "needs `allow`",
        ),
        (
            r#""handler": "cache_purge", "allow": ["10.0.0.0/33"]"#,
            "allow",
            "CIDR",
        ),
        (
            r#""handler": "counter", "filters": [{"type": "file_cache", "zone": "Bad-Name"}]"#,
            "zone",
            "lower-case",
        ),
        (
            r#""handler": "counter", "filters": [{"type": "file_cache", "max_disk_size": 1000}]"#,
            "max_disk_size",
            "needs `cache_dir`",
        ),
    ] {
        let conf = dir.write(
            "bad.json",
            format!(
                "{{\"load\": [{{\"so\": \"testkit\"}}, {{\"so\": \"file_cache\"}}],\n\"routing\": [\n{{\"prefix\": \"/\",\n {route}}}]}}"
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
