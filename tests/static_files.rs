//! The `static` module (`sendfile` handler) against the real binary: bodies by sendfile and
//! from the memory cache, validators and conditional requests, ranges, MIME types, index
//! files, directory redirects, autoindex, per-host roots, gzip siblings, and path security.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Response, Server, TempDir};

/// A document root `www` with a `secret` directory beside it (outside the root).
fn site() -> TempDir {
    let t = TempDir::new("static");
    t.write("www/a.txt", "hello static\n");
    t.write("www/style.css", "body { color: red; }\n");
    t.write("www/pic.png", b"\x89PNG\r\n\x1a\nnot really");
    t.write("www/data.json", "{}");
    t.write("www/blob.unknownext", "???");
    t.write("www/big.bin", pattern(300 * 1024));
    t.write("www/sub/index.html", "<p>sub index</p>");
    t.write("www/empty-dir/.keep", "");
    t.write("www/index.html", "<p>root index</p>");
    t.write("secret/secret.txt", "TOPSECRET");
    t
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

fn start(root: &Path, extra: &str) -> Server {
    Server::start(&format!(
        r#"{{
  "load": [{{"so": "static"}}, {{"so": "hello"}}],
  "routing": [
    {{"handler": "sendfile", "dir": "{}", "charset": "utf-8" {extra}}},
    {{"prefix": "/hello", "handler": "hello"}},
  ]
}}"#,
        root.display()
    ))
}

/// One request (with `Connection: close`); the whole answer as bytes.
fn fetch(srv: &Server, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let raw = raw_bytes(srv, req.as_bytes());
    Response::parse_one(&raw, method == "HEAD").0
}

fn raw_bytes(srv: &Server, req: &[u8]) -> Vec<u8> {
    let mut s = srv.connect();
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

fn get(srv: &Server, path: &str, headers: &[(&str, &str)]) -> Response {
    fetch(srv, "GET", path, headers)
}

#[test]
fn get_and_head_by_sendfile_and_from_memory() {
    let t = site();
    for extra in ["", r#", "memcache": true, "max_cache_file_size": 1000000"#] {
        let srv = start(&t.path().join("www"), extra);
        let r = get(&srv, "/big.bin", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, pattern(300 * 1024), "{extra}");
        assert_eq!(r.header("content-length"), Some("307200"));
        assert_eq!(r.header("content-type"), Some("application/octet-stream"));
        assert_eq!(r.header("accept-ranges"), Some("bytes"));
        let etag = r.header("etag").unwrap();
        assert!(
            etag.starts_with('"') && etag.ends_with('"') && etag.len() > 4,
            "{etag}"
        );
        let lm = r.header("last-modified").unwrap();
        assert!(httpdate_ok(lm), "{lm}");

        let h = fetch(&srv, "HEAD", "/big.bin", &[]);
        assert_eq!(h.status, 200);
        assert_eq!(h.header("content-length"), Some("307200"));
        assert_eq!(h.header("etag"), Some(etag));
        let raw = raw_bytes(
            &srv,
            b"HEAD /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(
            raw.ends_with(b"\r\n\r\n"),
            "HEAD sent a body: {:?}",
            String::from_utf8_lossy(&raw)
        );

        let r = get(&srv, "/a.txt", &[]);
        assert_eq!((r.status, r.text().as_str()), (200, "hello static\n"));
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    }
}

fn httpdate_ok(s: &str) -> bool {
    s.ends_with(" GMT") && s.len() == 29
}

#[test]
fn a_large_file_reaches_a_slow_reader_over_many_sendfile_rounds() {
    // 6 MiB (more than the socket buffers hold) by sendfile to a client with a small receive
    // buffer that reads slowly: the socket fills again and again (short sendfiles), and each
    // time room to write must wake the connection; a missed wake-up ends in the 1 s write
    // timeout, the body cut. The connection stays usable for the next request.
    let t = TempDir::new("static-slow");
    t.write("www/6m.bin", pattern(6 << 20));
    let srv = Server::start(&format!(
        r#"{{"load": [{{"so": "static"}}], "timeouts": {{"write": 1}},
  "routing": [{{"handler": "sendfile", "dir": "{}"}}]}}"#,
        t.path().join("www").display()
    ));
    let mut s = srv.connect();
    socket2::SockRef::from(&s)
        .set_recv_buffer_size(32 * 1024)
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut ask = |req: &[u8], pause: Duration| {
        s.write_all(req).unwrap();
        let (mut got, mut buf) = (Vec::new(), vec![0u8; 64 * 1024]);
        loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                let len: usize = head
                    .split("content-length: ")
                    .nth(1)
                    .unwrap()
                    .split("\r\n")
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                if got.len() >= end + 4 + len {
                    return Response::parse(&got);
                }
            }
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return Response::parse(&got),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            std::thread::sleep(pause);
        }
    };
    let r = ask(
        b"GET /6m.bin HTTP/1.1\r\nHost: localhost\r\n\r\n",
        Duration::from_millis(2),
    );
    assert_eq!(r.status, 200);
    assert!(
        r.body == pattern(6 << 20),
        "{} of {} bytes",
        r.body.len(),
        6 << 20
    );
    let r = ask(
        b"GET /6m.bin HTTP/1.1\r\nHost: localhost\r\nRange: bytes=0-9\r\n\r\n",
        Duration::ZERO,
    );
    assert_eq!((r.status, r.body.as_slice()), (206, &pattern(10)[..]));
}

#[test]
fn pipelined_file_bodies_keep_their_order() {
    let t = site();
    let srv = start(&t.path().join("www"), "");
    let mut s = srv.connect();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\nGET /a.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let all = Response::parse_all(&raw);
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].body, pattern(300 * 1024));
    assert_eq!(all[1].text(), "hello static\n");
    assert_eq!(all[2].body, pattern(300 * 1024));
}

#[test]
fn changed_and_deleted_files_are_not_served_stale_after_cache_ttl() {
    for extra in [
        r#", "cache_ttl": 0.1"#,
        r#", "cache_ttl": 0.1, "memcache": true"#,
    ] {
        let t = site();
        let srv = start(&t.path().join("www"), extra);
        assert_eq!(get(&srv, "/a.txt", &[]).text(), "hello static\n");
        let old_etag = get(&srv, "/a.txt", &[]).header("etag").unwrap().to_owned();
        // Replaced by rename (the cached descriptor keeps the old inode) ...
        t.write("www/a.txt.new", "second version, longer\n");
        std::fs::rename(t.path().join("www/a.txt.new"), t.path().join("www/a.txt")).unwrap();
        std::thread::sleep(Duration::from_millis(400));
        let r = get(&srv, "/a.txt", &[]);
        assert_eq!(r.text(), "second version, longer\n", "{extra}");
        assert_ne!(r.header("etag").unwrap(), old_etag);
        // ... rewritten in place ...
        std::fs::write(t.path().join("www/a.txt"), "third\n").unwrap();
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(get(&srv, "/a.txt", &[]).text(), "third\n", "{extra}");
        // ... and deleted.
        std::fs::remove_file(t.path().join("www/a.txt")).unwrap();
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(get(&srv, "/a.txt", &[]).status, 404, "{extra}");
    }
}

#[test]
fn conditional_requests_answer_304() {
    let t = site();
    let srv = start(&t.path().join("www"), r#", "memcache": true"#);
    let r = get(&srv, "/a.txt", &[]);
    let etag = r.header("etag").unwrap().to_owned();
    let lm = r.header("last-modified").unwrap().to_owned();

    let r = get(&srv, "/a.txt", &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert!(r.body.is_empty());
    let list = format!("\"nope\", W/{etag}");
    assert_eq!(get(&srv, "/a.txt", &[("If-None-Match", &list)]).status, 304);
    assert_eq!(get(&srv, "/a.txt", &[("If-None-Match", "*")]).status, 304);
    assert_eq!(
        get(&srv, "/a.txt", &[("If-None-Match", "\"other\"")]).status,
        200
    );

    assert_eq!(
        get(&srv, "/a.txt", &[("If-Modified-Since", &lm)]).status,
        304
    );
    let old = "Sat, 01 Jan 2000 00:00:00 GMT";
    assert_eq!(
        get(&srv, "/a.txt", &[("If-Modified-Since", old)]).status,
        200
    );
    assert_eq!(
        get(&srv, "/a.txt", &[("If-Modified-Since", "garbage")]).status,
        200
    );
    // If-None-Match wins over If-Modified-Since.
    let r = get(
        &srv,
        "/a.txt",
        &[("If-None-Match", "\"other\""), ("If-Modified-Since", &lm)],
    );
    assert_eq!(r.status, 200);
}

#[test]
fn failed_preconditions_answer_412_before_304() {
    let t = site();
    let srv = start(&t.path().join("www"), "");
    let r = get(&srv, "/a.txt", &[]);
    let etag = r.header("etag").unwrap().to_owned();
    let lm = r.header("last-modified").unwrap().to_owned();
    let old = "Sat, 01 Jan 2000 00:00:00 GMT";

    // If-Match compares strongly: the current tag passes, a weak or other one fails.
    let r = get(&srv, "/a.txt", &[("If-Match", &etag)]);
    assert_eq!((r.status, r.text().as_str()), (200, "hello static\n"));
    assert_eq!(get(&srv, "/a.txt", &[("If-Match", "*")]).status, 200);
    let weak = format!("W/{etag}");
    let r = get(&srv, "/a.txt", &[("If-Match", &weak)]);
    assert_eq!(r.status, 412, "{}", r.text());
    assert!(r.text().contains("Precondition Failed"), "{}", r.text());
    assert_eq!(
        get(&srv, "/a.txt", &[("If-Match", "\"other\"")]).status,
        412
    );
    // If-Unmodified-Since: 412 once the file changed after the date.
    assert_eq!(
        get(&srv, "/a.txt", &[("If-Unmodified-Since", &lm)]).status,
        200
    );
    assert_eq!(
        get(&srv, "/a.txt", &[("If-Unmodified-Since", old)]).status,
        412
    );
    // ...and is ignored when If-Match is present (RFC 9110 §13.2.2 step 2).
    let r = get(
        &srv,
        "/a.txt",
        &[("If-Match", &etag), ("If-Unmodified-Since", old)],
    );
    assert_eq!(r.status, 200);
    // A failed precondition wins over a matching If-None-Match.
    let r = get(
        &srv,
        "/a.txt",
        &[("If-Match", "\"other\""), ("If-None-Match", &etag)],
    );
    assert_eq!(r.status, 412);
    // HEAD is conditional too.
    assert_eq!(
        fetch(&srv, "HEAD", "/a.txt", &[("If-None-Match", &etag)]).status,
        304
    );
    assert_eq!(
        fetch(&srv, "HEAD", "/a.txt", &[("If-Match", "\"x\"")]).status,
        412
    );
}

#[test]
fn preconditions_and_ranges_are_the_same_over_http2() {
    let t = site();
    let srv = start(&t.path().join("www"), "");
    let etag = get(&srv, "/a.txt", &[]).header("etag").unwrap().to_owned();
    let url = srv.url("/a.txt");
    let status = |header: &str| {
        let (ok, out) = common::curl(&[
            "--http2-prior-knowledge",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
            "-H",
            header,
            &url,
        ]);
        assert!(ok, "curl failed for {header}");
        out
    };
    assert_eq!(status(&format!("If-None-Match: {etag}")), "304 2");
    assert_eq!(status("If-Match: \"old\""), "412 2");
    assert_eq!(status("Range: bytes=0-4"), "206 2");
    assert_eq!(status("Range: bytes=99-"), "416 2");
}

#[test]
fn ranges_need_get_and_a_strong_if_range() {
    let t = site();
    let srv = start(&t.path().join("www"), "");
    let etag = get(&srv, "/big.bin", &[])
        .header("etag")
        .unwrap()
        .to_owned();
    // A weak tag never satisfies If-Range (strong comparison): the whole file.
    let weak = format!("W/{etag}");
    let r = get(
        &srv,
        "/big.bin",
        &[("Range", "bytes=0-0"), ("If-Range", &weak)],
    );
    assert_eq!((r.status, r.body.len()), (200, 307200));
    // Range is defined for GET only: HEAD gets the full headers.
    let r = fetch(&srv, "HEAD", "/big.bin", &[("Range", "bytes=0-0")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("307200"));
    assert_eq!(r.header("content-range"), None);
    // 416 names the size and says why.
    let r = get(&srv, "/big.bin", &[("Range", "bytes=999999-")]);
    assert_eq!(
        (r.status, r.header("content-range")),
        (416, Some("bytes */307200"))
    );
    assert!(r.text().contains("Range Not Satisfiable"), "{}", r.text());
}

#[test]
fn ranges_single_suffix_open_unsatisfiable_and_multipart() {
    let t = site();
    let whole = pattern(300 * 1024);
    for extra in ["", r#", "memcache": true, "max_cache_file_size": 1000000"#] {
        let srv = start(&t.path().join("www"), extra);
        let r = get(&srv, "/big.bin", &[("Range", "bytes=10-19")]);
        assert_eq!(r.status, 206, "{extra}");
        assert_eq!(r.header("content-range"), Some("bytes 10-19/307200"));
        assert_eq!(r.body, &whole[10..20]);

        let r = get(&srv, "/big.bin", &[("Range", "bytes=-100")]);
        assert_eq!(
            (r.status, r.header("content-range")),
            (206, Some("bytes 307100-307199/307200"))
        );
        assert_eq!(r.body, &whole[307100..]);

        let r = get(&srv, "/big.bin", &[("Range", "bytes=307000-")]);
        assert_eq!(r.body, &whole[307000..]);
        let r = get(&srv, "/big.bin", &[("Range", "bytes=307190-999999")]);
        assert_eq!(
            r.header("content-range"),
            Some("bytes 307190-307199/307200")
        );

        let r = get(&srv, "/big.bin", &[("Range", "bytes=307200-")]);
        assert_eq!(r.status, 416);
        assert_eq!(r.header("content-range"), Some("bytes */307200"));
        // Bad syntax is ignored: the whole file.
        let r = get(&srv, "/big.bin", &[("Range", "bytes=9-1")]);
        assert_eq!((r.status, r.body.len()), (200, 307200));

        let r = get(&srv, "/big.bin", &[("Range", "bytes=0-1, 100-104")]);
        assert_eq!(r.status, 206);
        let ct = r.header("content-type").unwrap();
        let boundary = ct
            .strip_prefix("multipart/byteranges; boundary=")
            .expect(ct);
        let body = r.body.clone();
        let mut expected = Vec::new();
        for (a, b) in [(0, 1), (100, 104)] {
            expected.extend_from_slice(format!("\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes {a}-{b}/307200\r\n\r\n").as_bytes());
            expected.extend_from_slice(&whole[a..=b]);
        }
        expected.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        assert_eq!(body, expected);

        // Too many ranges: the whole file instead.
        let many: Vec<String> = (0..17)
            .map(|i| format!("{}-{}", i * 10, i * 10 + 1))
            .collect();
        let many = format!("bytes={}", many.join(","));
        let r = get(&srv, "/big.bin", &[("Range", &many)]);
        assert_eq!((r.status, r.body.len()), (200, 307200));

        // If-Range: the range only when the validator still matches.
        let etag = get(&srv, "/big.bin", &[])
            .header("etag")
            .unwrap()
            .to_owned();
        let lm = get(&srv, "/big.bin", &[])
            .header("last-modified")
            .unwrap()
            .to_owned();
        assert_eq!(
            get(
                &srv,
                "/big.bin",
                &[("Range", "bytes=0-0"), ("If-Range", &etag)]
            )
            .status,
            206
        );
        assert_eq!(
            get(
                &srv,
                "/big.bin",
                &[("Range", "bytes=0-0"), ("If-Range", &lm)]
            )
            .status,
            206
        );
        let r = get(
            &srv,
            "/big.bin",
            &[("Range", "bytes=0-0"), ("If-Range", "\"old\"")],
        );
        assert_eq!((r.status, r.body.len()), (200, 307200));
    }
}

#[test]
fn mime_types_and_charset() {
    let t = site();
    let srv = start(&t.path().join("www"), "");
    let ct = |p: &str| get(&srv, p, &[]).header("content-type").map(str::to_owned);
    assert_eq!(ct("/style.css").as_deref(), Some("text/css; charset=utf-8"));
    assert_eq!(ct("/pic.png").as_deref(), Some("image/png"));
    assert_eq!(
        ct("/data.json").as_deref(),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(
        ct("/blob.unknownext").as_deref(),
        Some("application/octet-stream")
    );
    assert_eq!(ct("/").as_deref(), Some("text/html; charset=utf-8"));
}

#[test]
fn index_files_and_directory_redirects() {
    let t = site();
    let srv = start(&t.path().join("www"), "");
    assert_eq!(get(&srv, "/", &[]).text(), "<p>root index</p>");
    assert_eq!(get(&srv, "/sub/", &[]).text(), "<p>sub index</p>");
    let r = get(&srv, "/sub", &[]);
    assert_eq!((r.status, r.header("location")), (301, Some("/sub/")));
    let r = get(&srv, "/sub?a=1&b=2", &[]);
    assert_eq!(r.header("location"), Some("/sub/?a=1&b=2"));
    // Never a protocol-relative Location (an open redirect to another host).
    t.write("www/evil.example/index.html", "x");
    let r = get(&srv, "//evil.example", &[]);
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/evil.example/"))
    );
    // No index and no autoindex: declined, so the 404 page answers.
    assert_eq!(get(&srv, "/empty-dir/", &[]).status, 404);
    // A file named as a directory does not exist.
    assert_eq!(get(&srv, "/a.txt/", &[]).status, 404);
}

#[test]
fn autoindex_lists_with_escaped_names() {
    let t = site();
    t.write("www/list/<b>&x.txt", "x");
    t.write("www/list/inner/f", "f");
    let srv = start(&t.path().join("www"), r#", "autoindex": true"#);
    let r = get(&srv, "/list/", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let html = r.text();
    assert!(html.contains("&lt;b&gt;&amp;x.txt"), "{html}");
    assert!(html.contains("href=\"%3Cb%3E%26x.txt\""), "{html}");
    assert!(!html.contains("<b>"), "{html}");
    assert!(html.contains("href=\"inner/\""), "{html}");
    assert!(html.contains("href=\"../\""));
    // A directory with an index file still serves the index.
    assert_eq!(get(&srv, "/sub/", &[]).text(), "<p>sub index</p>");
}

#[test]
fn per_host_document_roots() {
    let t = TempDir::new("hosts");
    t.write("a.test/index.html", "site A");
    t.write("b.test/index.html", "site B");
    t.write("secret.txt", "TOPSECRET");
    let srv = start(&t.path().join("{host}"), "");
    let on = |host: &str, path: &str| {
        let raw = raw_bytes(
            &srv,
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        Response::parse(&raw)
    };
    assert_eq!(on("a.test", "/").text(), "site A");
    assert_eq!(on("B.TEST:8080", "/").text(), "site B");
    assert_eq!(on("c.test", "/").status, 404);
    for bad in [".", "..", ".a.test"] {
        let r = on(bad, "/secret.txt");
        assert_eq!(r.status, 400, "{bad}");
        assert!(!r.text().contains("TOPSECRET"));
    }
    let raw = raw_bytes(
        &srv,
        b"GET /secret.txt HTTP/1.1\r\nHost: a/..\r\nConnection: close\r\n\r\n",
    );
    assert!(!String::from_utf8_lossy(&raw).contains("TOPSECRET"));
    assert!(
        raw.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

#[test]
fn precompressed_gzip_sibling() {
    let t = site();
    t.write("www/style.css.gz", b"\x1f\x8bfake-gzip-bytes");
    let srv = start(&t.path().join("www"), r#", "memcache": true"#);
    let gz = get(
        &srv,
        "/style.css",
        &[("Accept-Encoding", "deflate, gzip;q=0.8")],
    );
    assert_eq!(gz.body, b"\x1f\x8bfake-gzip-bytes");
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(gz.header("vary"), Some("Accept-Encoding"));
    assert_eq!(gz.header("content-type"), Some("text/css; charset=utf-8"));
    let plain = get(&srv, "/style.css", &[]);
    assert_eq!(plain.text(), "body { color: red; }\n");
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.header("vary"), Some("Accept-Encoding"));
    assert_ne!(plain.header("etag"), gz.header("etag"));
    // q=0, and a weight that is no qvalue (the gzip filter reads it the same way), refuse.
    for refusal in ["gzip;q=0", "gzip;q=abc", "identity, *;q=0"] {
        let refused = get(&srv, "/style.css", &[("Accept-Encoding", refusal)]);
        assert_eq!(refused.text(), "body { color: red; }\n", "{refusal}");
    }
    // Error pages are plain HTML, never labelled as the gzip variant.
    for extra in [("If-Match", "\"old\""), ("Range", "bytes=9999-")] {
        let r = get(&srv, "/style.css", &[("Accept-Encoding", "gzip"), extra]);
        assert!(matches!(r.status, 412 | 416), "{extra:?}: {}", r.status);
        assert_eq!(r.header("content-encoding"), None, "{extra:?}");
        assert!(r.text().contains("<!DOCTYPE html>"), "{extra:?}");
    }
    // Files without a sibling say nothing about encodings.
    assert_eq!(
        get(&srv, "/a.txt", &[("Accept-Encoding", "gzip")]).header("vary"),
        None
    );
}

#[test]
fn nothing_outside_the_root_is_served() {
    let t = site();
    let www = t.path().join("www");
    std::os::unix::fs::symlink("../secret/secret.txt", www.join("link-out")).unwrap();
    std::os::unix::fs::symlink(t.path().join("secret/secret.txt"), www.join("abs-out")).unwrap();
    std::os::unix::fs::symlink("../secret", www.join("dir-out")).unwrap();
    std::os::unix::fs::symlink("a.txt", www.join("link-in")).unwrap();
    let srv = start(&www, "");
    let bad_request = [
        "/../secret/secret.txt",
        "/%2e%2e/secret/secret.txt",
        "/%2E%2E/secret/secret.txt",
        "/..%2fsecret%2fsecret.txt",
        "/%2e%2e%2fsecret%2fsecret.txt",
        "/sub/../../secret/secret.txt",
        "/a.txt%00.html",
        "/..%5csecret%5csecret.txt",
        "/%5c..%5csecret%5csecret.txt",
        "/a%zz",
    ];
    for path in bad_request {
        let r = get(&srv, path, &[]);
        assert_eq!(r.status, 400, "{path}");
        assert!(!r.text().contains("TOPSECRET"), "{path}");
    }
    // A raw backslash (if the core lets it through) and double encoding find nothing.
    for path in [
        "/..\\secret\\secret.txt",
        "/%252e%252e/secret/secret.txt",
        "/%252e%252e%252fsecret%252fsecret.txt",
    ] {
        let raw = raw_bytes(
            &srv,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        let text = String::from_utf8_lossy(&raw);
        assert!(
            text.starts_with("HTTP/1.1 400") || text.starts_with("HTTP/1.1 404"),
            "{path}: {text}"
        );
        assert!(!text.contains("TOPSECRET"), "{path}");
    }
    // Symbolic links out of the root are not followed; inside it they are.
    for path in ["/link-out", "/abs-out", "/dir-out/secret.txt", "/dir-out/"] {
        let r = get(&srv, path, &[]);
        assert_eq!(r.status, 404, "{path}");
        assert!(!r.text().contains("TOPSECRET"), "{path}");
    }
    assert_eq!(get(&srv, "/link-in", &[]).text(), "hello static\n");
    // %2f is a separator once decoded; inside the root that is harmless.
    assert_eq!(
        get(&srv, "/sub%2findex.html", &[]).text(),
        "<p>sub index</p>"
    );

    let srv = start(&www, r#", "follow_symlinks": true"#);
    assert_eq!(get(&srv, "/link-out", &[]).text(), "TOPSECRET");
    assert_eq!(get(&srv, "/dir-out/secret.txt", &[]).text(), "TOPSECRET");
    assert_eq!(get(&srv, "/../secret/secret.txt", &[]).status, 400);
}

#[test]
fn missing_files_fall_through_and_other_methods_are_refused() {
    let t = site();
    let srv = start(&t.path().join("www"), "");
    // The static route is first and catches everything, but /hello is no file.
    let r = get(&srv, "/hello", &[]);
    assert_eq!(r.status, 200);
    assert!(r.text().contains("Hello, world"), "{}", r.text());
    assert_eq!(get(&srv, "/missing.txt", &[]).status, 404);
    let raw = raw_bytes(
        &srv,
        b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    let r = Response::parse(&raw);
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD")));
    let raw = raw_bytes(
        &srv,
        b"DELETE /nothing-here HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(Response::parse(&raw).status, 404);
}

#[test]
fn bad_route_config_is_refused_with_key_and_line() {
    let t = TempDir::new("static-conf");
    let conf = t.write(
        "bad.json",
        "{\n\"load\": [{\"so\": \"static\"}],\n\"routing\": [\n{\"handler\": \"sendfile\", \"dir\": \"www\",\n \"memcahce\": true}\n]\n}\n",
    );
    let (ok, err) = common::check_file(&conf, &[]);
    assert!(!ok);
    assert!(err.contains("memcahce") && err.contains(":5"), "{err}");
    std::fs::write(&conf, "{\"load\": [{\"so\": \"static\"}],\n\"routing\": [{\"handler\": \"static\", \"dir\": \"w\", \"cache_ttl\": -3}]}").unwrap();
    let (ok, err) = common::check_file(&conf, &[]);
    assert!(!ok);
    assert!(err.contains("cache_ttl"), "{err}");
}

#[test]
fn embedded_default_config_serves_the_sample_site() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let port = common::free_port();
    let mut child = Command::new(common::osprey_bin())
        .arg("-H")
        .arg(format!("127.0.0.1:{port}"))
        .current_dir(repo)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut answer = Vec::new();
    for _ in 0..500 {
        if let Ok(mut s) = std::net::TcpStream::connect(addr) {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(b"GET /style.css HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let _ = s.read_to_end(&mut answer);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    let r = Response::parse(&answer);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/css; charset=utf-8"));
    assert_eq!(
        r.body,
        std::fs::read(repo.join("conf/www/style.css")).unwrap()
    );
}
