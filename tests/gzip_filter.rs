//! The `gzip` filter against the real binary: negotiation (q-values, `*`), which responses
//! are compressed, Vary and ETag, the compression level, the variant cache in memory and on
//! disk (restart, corrupt files, changed sources), and streamed bodies.

mod common;

use std::io::Read;
use std::time::{Duration, SystemTime};

use common::{Response, Server, TempDir};

/// A body long and repetitive enough that compression is obvious.
fn long_text() -> String {
    "All work and no play makes Jack a dull boy. ".repeat(40)
}

fn config(cache_dir: Option<&std::path::Path>, file: &std::path::Path) -> String {
    let dir = cache_dir.map_or(String::new(), |d| {
        format!(r#", "cache_dir": {:?}"#, d.display().to_string())
    });
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}, {{"so": "gzip"}}],
  "routing": [
    {{"prefix": "/text", "handler": "counter", "text": {text:?}, "filters": [{{"type": "gzip"}}]}},
    {{"prefix": "/small", "handler": "counter", "text": "short", "filters": [{{"type": "gzip"}}]}},
    {{"prefix": "/min", "handler": "counter", "text": {text:?}, "filters": [{{"type": "gzip", "min_length": 100000}}]}},
    {{"prefix": "/png", "handler": "counter", "text": {text:?}, "headers": {{"Content-Type": "image/png"}},
      "filters": [{{"type": "gzip"}}]}},
    {{"prefix": "/encoded", "handler": "counter", "text": {text:?}, "headers": {{"Content-Encoding": "br"}},
      "filters": [{{"type": "gzip"}}]}},
    {{"prefix": "/vary", "handler": "counter", "text": {text:?}, "headers": {{"Vary": "Cookie"}},
      "filters": [{{"type": "gzip"}}]}},
    {{"prefix": "/level1", "handler": "counter", "text": {text:?}, "filters": [{{"type": "gzip", "compression": 1}}]}},
    {{"prefix": "/level9", "handler": "counter", "text": {text:?}, "filters": [{{"type": "gzip", "compression": 9}}]}},
    {{"prefix": "/file", "handler": "file", "path": {file:?}, "filters": [{{"type": "gzip"{dir}}}]}},
    {{"prefix": "/broken", "handler": "fail", "status": 502, "filters": [{{"type": "gzip"}}]}},
    {{"prefix": "/stream", "handler": "stream", "chunks": 200, "filters": [{{"type": "gzip"}}]}},
  ]
}}"#,
        text = long_text(),
        file = file.display().to_string(),
    )
}

fn get(srv: &Server, path: &str, accept: Option<&str>) -> Response {
    let ae = accept.map_or(String::new(), |a| format!("Accept-Encoding: {a}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{ae}Connection: close\r\n\r\n");
    Response::parse(&raw_bytes(srv, req.as_bytes()))
}

/// Like `Server::raw`, keeping binary bodies intact.
fn raw_bytes(srv: &Server, req: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut s = srv.connect();
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    srv.explain_if_empty(&out);
    out
}

fn gunzip(data: &[u8]) -> String {
    let mut out = String::new();
    flate2::read::GzDecoder::new(data)
        .read_to_string(&mut out)
        .expect("a valid gzip body");
    out
}

fn is_gzip(r: &Response) -> bool {
    r.header("content-encoding") == Some("gzip")
}

/// Rewrite a file and pin its mtime, so its `ETag` (length + mtime) is the same as before.
fn write_pinned(path: &std::path::Path, contents: &str) {
    std::fs::write(path, contents).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .unwrap();
}

struct Site {
    _files: TempDir,
    file: std::path::PathBuf,
    srv: Server,
}

fn site() -> Site {
    let files = TempDir::new("gzip-files");
    let file = files.write("page.txt", long_text());
    let srv = Server::start(&config(None, &file));
    Site {
        _files: files,
        file,
        srv,
    }
}

#[test]
fn compresses_for_clients_that_accept_gzip() {
    let s = site();
    let r = get(&s.srv, "/text", Some("gzip"));
    assert_eq!(r.status, 200);
    assert!(is_gzip(&r), "{:?}", r.headers);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let plain = gunzip(&r.body);
    assert!(plain.ends_with(&long_text()), "{plain}");
    assert!(
        r.body.len() < plain.len() / 4,
        "{} vs {}",
        r.body.len(),
        plain.len()
    );
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );

    // A client that does not ask gets the identity body, still with Vary.
    let r = get(&s.srv, "/text", None);
    assert!(!is_gzip(&r));
    assert!(r.text().ends_with(&long_text()));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));

    // curl decodes it like a browser would.
    let (ok, out) = common::curl(&["--compressed", &s.srv.url("/text")]);
    assert!(ok && out.ends_with(&long_text()));
}

#[test]
fn accept_encoding_q_values() {
    let s = site();
    for (accept, want) in [
        ("gzip", true),
        ("GZIP", true),
        ("x-gzip", true),
        ("deflate, gzip;q=0.5", true),
        ("gzip;q=1.0, br", true),
        ("gzip;q=0", false),
        ("gzip; q=0.000", false),
        ("*", true),
        ("*;q=0", false),
        ("gzip;q=0, *", false),
        ("br, *;q=0.1", true),
        // A weight that is no qvalue counts as 0 (as in static and nginx).
        ("gzip;q=abc", false),
        ("gzip;q=2", false),
        ("gzip;q=0.5.1", false),
        ("identity", false),
        ("deflate, br", false),
        ("", false),
    ] {
        let r = get(&s.srv, "/text", Some(accept));
        assert_eq!(is_gzip(&r), want, "Accept-Encoding: {accept}");
        if want {
            assert!(gunzip(&r.body).ends_with(&long_text()));
        } else {
            assert!(r.text().ends_with(&long_text()));
        }
    }
}

#[test]
fn only_compressible_long_unencoded_bodies() {
    let s = site();
    // Below min_length (default 100, and a configured one).
    let r = get(&s.srv, "/small", Some("gzip"));
    assert!(!is_gzip(&r) && r.text().ends_with("short"));
    assert_eq!(r.header("vary"), None);
    let r = get(&s.srv, "/min", Some("gzip"));
    assert!(!is_gzip(&r) && r.text().ends_with(&long_text()));
    // Not a compressible type.
    let r = get(&s.srv, "/png", Some("gzip"));
    assert!(!is_gzip(&r) && r.text().ends_with(&long_text()));
    // Already encoded: left alone.
    let r = get(&s.srv, "/encoded", Some("gzip"));
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert!(r.text().ends_with(&long_text()));
    // An existing Vary is extended.
    let r = get(&s.srv, "/vary", Some("gzip"));
    assert!(is_gzip(&r));
    assert_eq!(r.header("vary"), Some("Cookie, Accept-Encoding"));
    // Error pages are not compressed.
    let r = get(&s.srv, "/broken", Some("gzip"));
    assert_eq!(r.status, 502);
    assert!(!is_gzip(&r));
}

#[test]
fn strong_etag_becomes_weak() {
    let s = site();
    let plain = get(&s.srv, "/file", None);
    let etag = plain.header("etag").unwrap().to_owned();
    assert!(etag.starts_with('"'), "{etag}");
    let gz = get(&s.srv, "/file", Some("gzip"));
    assert!(is_gzip(&gz));
    assert_eq!(gz.header("etag"), Some(format!("W/{etag}").as_str()));
    assert_eq!(gunzip(&gz.body), long_text());
}

#[test]
fn the_compressed_variant_answers_304_to_its_own_validators() {
    let s = site();
    let gz = get(&s.srv, "/file", Some("gzip"));
    let weak = gz.header("etag").unwrap().to_owned();
    assert!(weak.starts_with("W/"), "{weak}");
    let ask = |accept: &str, cond: &str| {
        let req = format!(
            "GET /file HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: {accept}\r\n{cond}Connection: close\r\n\r\n"
        );
        Response::parse(&raw_bytes(&s.srv, req.as_bytes()))
    };
    // The testkit handler never answers 304 itself: the filter does, for its variant.
    let r = ask("gzip", &format!("If-None-Match: {weak}\r\n"));
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(weak.as_str()));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert!(r.body.is_empty());
    // Another tag, or a client that takes no gzip: the full answer as before.
    let r = ask("gzip", "If-None-Match: \"other\"\r\n");
    assert_eq!((r.status, gunzip(&r.body)), (200, long_text()));
    let r = ask("identity", &format!("If-None-Match: {weak}\r\n"));
    assert_eq!((r.status, r.text()), (200, long_text()));
}

#[test]
fn compression_level_defaults_to_6_and_is_configurable() {
    let s = site();
    let size = |path: &str| get(&s.srv, path, Some("gzip")).body.len();
    let (default, fast, best) = (size("/text"), size("/level1"), size("/level9"));
    let plain = long_text().len();
    // Level 0 would store the text uncompressed (larger than the input).
    assert!(
        default * 4 < plain,
        "default level gave {default} bytes for {plain}"
    );
    assert!(
        best <= default && default <= fast,
        "9: {best}, 6: {default}, 1: {fast}"
    );

    // An invalid level is a configuration error naming the key and line.
    let dir = TempDir::new("gzip-conf");
    let conf = dir.write(
        "bad.json",
        "{\"load\": [{\"so\": \"testkit\"}, {\"so\": \"gzip\"}],\n\"routing\": [{\"prefix\": \"/\", \"handler\": \"echo\",\n \"filters\": [{\"type\": \"gzip\",\n \"compression\": 0}]}]}",
    );
    let (ok, err) = common::check_file(&conf, &[]);
    assert!(!ok);
    assert!(
        err.contains("compression") && err.contains("1 to 9") && err.contains(":4"),
        "{err}"
    );
}

#[test]
fn variants_are_cached_until_the_source_changes() {
    let s = site();
    write_pinned(&s.file, &"a".repeat(500));
    let first = get(&s.srv, "/file", Some("gzip"));
    assert_eq!(gunzip(&first.body), "a".repeat(500));
    // Same length and mtime: the source's ETag is unchanged, so the cached variant is used
    // (this is how we see that it was cached: the file now says "b").
    write_pinned(&s.file, &"b".repeat(500));
    let second = get(&s.srv, "/file", Some("gzip"));
    assert_eq!(gunzip(&second.body), "a".repeat(500));
    assert_eq!(second.header("etag"), first.header("etag"));
    // The identity response reads the file itself.
    assert_eq!(get(&s.srv, "/file", None).text(), "b".repeat(500));
    // A changed length changes the validator: compressed again.
    write_pinned(&s.file, &"c".repeat(600));
    let third = get(&s.srv, "/file", Some("gzip"));
    assert_eq!(gunzip(&third.body), "c".repeat(600));
    assert_ne!(third.header("etag"), first.header("etag"));
}

#[test]
fn dynamic_responses_without_validators_are_compressed_each_time() {
    let s = site();
    // The counter's body changes on every request and has no ETag: never served from cache.
    let a = gunzip(&get(&s.srv, "/text", Some("gzip")).body);
    let b = gunzip(&get(&s.srv, "/text", Some("gzip")).body);
    assert_ne!(a.lines().next(), b.lines().next(), "{a:.20} / {b:.20}");
}

fn cache_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gz"))
        .collect()
}

/// A server whose gzip filter caches on disk, after it served a page of 700 `x` compressed
/// (so stored it): the page's and cache's directories, the page, the configuration, the server.
fn disk_cached_page() -> (TempDir, TempDir, std::path::PathBuf, String, Server) {
    let files = TempDir::new("gzip-files");
    let cache = TempDir::new("gzip-cache");
    let file = files.write("page.txt", "");
    write_pinned(&file, &"x".repeat(700));
    let conf = config(Some(cache.path()), &file);
    let srv = Server::start(&conf);
    assert_eq!(
        gunzip(&get(&srv, "/file", Some("gzip")).body),
        "x".repeat(700)
    );
    (files, cache, file, conf, srv)
}

#[test]
fn disk_cache_survives_a_restart() {
    let (_files, cache, file, conf, mut srv) = disk_cached_page();
    let stored = cache_files(cache.path());
    assert_eq!(stored.len(), 1, "{stored:?}");
    srv.stop();

    // Same validators, different bytes: a restarted server answers from the disk cache.
    write_pinned(&file, &"y".repeat(700));
    let srv = Server::start(&conf);
    assert_eq!(
        gunzip(&get(&srv, "/file", Some("gzip")).body),
        "x".repeat(700)
    );
    // No temporary files are left behind.
    let names: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn corrupt_cache_file_is_discarded() {
    let (_files, cache, file, conf, mut srv) = disk_cached_page();
    srv.stop();

    // Flip bytes inside the stored compressed data.
    let stored = cache_files(cache.path()).pop().unwrap();
    let mut data = std::fs::read(&stored).unwrap();
    let n = data.len();
    for b in &mut data[n - 12..n - 4] {
        *b ^= 0x5a;
    }
    std::fs::write(&stored, &data).unwrap();
    write_pinned(&file, &"y".repeat(700));

    let srv = Server::start(&conf);
    let r = get(&srv, "/file", Some("gzip"));
    assert_eq!(
        gunzip(&r.body),
        "y".repeat(700),
        "the corrupt entry must not be served"
    );
    assert!(srv.log_text().contains("corrupt"), "{}", srv.log_text());
    // It was replaced by a good one.
    let again = get(&srv, "/file", Some("gzip"));
    assert_eq!(gunzip(&again.body), "y".repeat(700));
    assert_ne!(std::fs::read(&stored).unwrap(), data);
}

#[test]
fn streamed_bodies_are_compressed_as_a_stream() {
    let s = site();
    let r = get(&s.srv, "/stream", Some("gzip"));
    assert!(is_gzip(&r), "{:?}", r.headers);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.header("content-length"), None);
    let want: String = (1..=200).map(|n| format!("chunk {n}\n")).collect();
    assert_eq!(gunzip(&r.body), want);
    let plain = get(&s.srv, "/stream", None);
    assert_eq!(plain.text(), want);
    // HTTP/1.0: the compressed stream ends with the connection.
    let raw = raw_bytes(
        &s.srv,
        b"GET /stream HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n",
    );
    let r = Response::parse(&raw);
    assert!(is_gzip(&r));
    assert_eq!(gunzip(&r.body), want);
}
