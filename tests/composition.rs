//! Composition against the real binary: the `ssi` filter's includes as subrequests (static,
//! module, cached and proxied fragments), nesting and its limits, failing fragments before and
//! after their output started, variables, HTTP/2 and TLS, gzip of the assembled page, the
//! access log and counters, and a slow fragment that does not hold up its thread.

mod common;
mod tlskit;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{curl, Response, Server, TempDir};

/// A backend on 127.0.0.1 answering by path: `/x` a fragment, `/ssi` a page with an include
/// and `X-Osprey-SSI: on`, `/nxweb` the same with `X-NXWEB-SSI`, `/slow` after a second,
/// `/partial` 10 of its declared 100 bytes then a close, `/close` nothing.
fn backend() -> u16 {
    let listener = common::listener();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || serve(conn));
        }
    });
    port
}

fn serve(mut conn: TcpStream) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("/").to_owned();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
        }
        let answer = |extra: &str, body: &str| {
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{extra}\r\n{body}",
                body.len()
            )
        };
        let out = match path.split('?').next().unwrap_or("") {
            "/x" => answer("", "PROXIED"),
            "/ssi" => answer(
                "X-Osprey-SSI: on\r\n",
                "[<!--#include virtual=\"/frag.html\" -->]",
            ),
            "/nxweb" => answer(
                "X-NXWEB-SSI: on\r\n",
                "{<!--#echo var=\"QUERY_STRING\" -->}",
            ),
            "/slow" => {
                std::thread::sleep(Duration::from_millis(1000));
                answer("", "SLOW")
            }
            "/partial" => {
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
                std::thread::sleep(Duration::from_millis(100));
                return;
            }
            _ => return,
        };
        if conn.write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}

/// The site: `www` with fragments and pages, behind `ssi`; `/mod` from a module; `/curtime`
/// behind `file_cache`; `/b/...` proxied.
fn site(dir: &TempDir, backend: u16, extra_routes: &str) -> String {
    let www = dir.path().join("www");
    std::fs::create_dir_all(www.join("sub")).unwrap();
    let write = |name: &str, text: &str| std::fs::write(www.join(name), text).unwrap();
    write("frag.html", "<i>static</i>");
    write(
        "page.shtml",
        "A<!--#include virtual=\"/frag.html\" -->B<!--#include virtual=\"/mod\" -->\
         C<!--#include virtual=\"/b/x\" -->D<!--#include virtual=\"/nope.html\" -->E",
    );
    write("loop.shtml", "L<!--#include virtual=\"/loop.shtml\" -->L");
    write(
        "vars.shtml",
        "<!--#set var=\"who\" value=\"${name}\\$\" --><!--#echo var=\"who\" -->|\
         <!--#include virtual=\"sub/inner.shtml?x=1\" -->|<!--#bad directive-->|\
         <!--#echo var=\"REQUEST_URI\" encoding=\"none\" -->",
    );
    write(
        "sub/inner.shtml",
        "(<!--#echo var=\"who\" -->,<!--#echo var=\"x\" -->,<!--#echo var=\"DOCUMENT_URI\" -->)",
    );
    let cache = dir.path().join("cache");
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}, {{"so": "curtime"}}],
  "logging": {{"access_log": {alog:?}}},
  "backends": {{"b": {{"connect": "127.0.0.1:{backend}", "read_timeout": 5}}}},
  "routing": [
    {{"prefix": "/mod", "handler": "text", "text": "MODULE"}},
    {{"prefix": "/curtime", "handler": "curtime", "filters": [{{"type": "file_cache", "cache_dir": {cache:?}}}]}},
    {{"prefix": "/b", "handler": "http_proxy", "backend": "b", "uri": "/", "filters": [{{"type": "ssi"}}]}},
    {{"prefix": "/status", "handler": "status"}},
    {extra_routes}
    {{"handler": "sendfile", "dir": {www:?}, "filters": [{{"type": "gzip", "min_length": 10}}, {{"type": "ssi"}}]}}
  ]
}}"#,
        alog = dir.path().join("access.log").display().to_string(),
        cache = cache.display().to_string(),
        www = www.display().to_string(),
    )
}

const PAGE: &str = "A<i>static</i>BMODULECPROXIEDD<!--[ssi error]-->E";

fn start(extra_routes: &str) -> (Server, TempDir) {
    let dir = TempDir::new("compose");
    let srv = Server::start(&site(&dir, backend(), extra_routes));
    (srv, dir)
}

#[test]
fn includes_static_module_and_proxied_fragments_over_http1_and_h2() {
    let (srv, dir) = start("");
    let r = srv.get("/page.shtml");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), PAGE);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{r:?}");
    assert_eq!(r.header("last-modified"), None, "{r:?}");
    // The missing fragment is logged with its URI.
    let log = srv.log_text();
    assert!(log.contains("/nope.html answered 404"), "{log}");

    let (ok, out) = curl(&["--http2-prior-knowledge", &srv.url("/page.shtml")]);
    assert!(ok, "{out}");
    assert_eq!(out, PAGE);

    // A conditional request still gets the assembled page, not the file's 304.
    let raw = srv.raw(
        b"GET /page.shtml HTTP/1.1\r\nHost: a\r\nIf-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\nConnection: close\r\n\r\n",
    );
    let r = Response::parse(raw.as_bytes());
    assert_eq!((r.status, r.text()), (200, PAGE.to_owned()), "{raw}");

    // Each include is counted and logged as a subrequest.
    let status = srv.get("/status?format=json").text();
    assert!(status.contains("subrequests"), "{status}");
    std::thread::sleep(Duration::from_millis(1500));
    let alog = std::fs::read_to_string(dir.path().join("access.log")).unwrap();
    assert!(alog.contains("\"GET /frag.html SUBREQUEST\" 200"), "{alog}");
    assert!(alog.contains("\"GET /nope.html SUBREQUEST\" 404"), "{alog}");
    assert!(alog.contains("\"GET /page.shtml HTTP/1.1\" 200"), "{alog}");
}

#[test]
fn cached_fragments_keep_their_own_ttls() {
    let (srv, _dir) = start("");
    // The page is written into the site by the test: two clocks, one cached, one not.
    let page =
        "<!--#include virtual=\"/curtime?max_age=60\" -->|<!--#include virtual=\"/curtime\" -->";
    let site_dir = find_www(&srv);
    std::fs::write(site_dir.join("clock.shtml"), page).unwrap();
    let first = srv.get("/clock.shtml").text();
    std::thread::sleep(Duration::from_millis(1100));
    let second = srv.get("/clock.shtml").text();
    let (cached1, live1) = first.split_once('|').unwrap();
    let (cached2, live2) = second.split_once('|').unwrap();
    assert!(cached1.contains("data-max-age=\"60\""), "{first}");
    assert_eq!(cached1, cached2, "the cached clock stays");
    assert_ne!(live1, live2, "the uncached clock moves");
}

/// An include reads only its fragment's body, so the static handler leaves the validators
/// out; not where a filter of the fragment's route keys a cache: the answer it stores for the
/// include is served to clients, validators and all.
#[test]
fn a_fragment_cached_for_an_include_keeps_its_validators_for_clients() {
    let kept = TempDir::new("kept");
    std::fs::write(kept.path().join("f.html"), "<b>kept</b>").unwrap();
    let route = format!(
        r#"{{"prefix": "/kept", "handler": "sendfile", "dir": {:?}, "memcache": true,
            "filters": [{{"type": "file_cache", "cache_dir": {:?}, "ttl": 60}}]}},"#,
        kept.path().display().to_string(),
        kept.path().join("cache").display().to_string(),
    );
    let (srv, _dir) = start(&route);
    let page = "<!--#include virtual=\"/kept/f.html\" -->!";
    std::fs::write(find_www(&srv).join("kept.shtml"), page).unwrap();
    assert_eq!(srv.get("/kept.shtml").text(), "<b>kept</b>!");
    let r = srv.get("/kept/f.html");
    assert_eq!(
        (r.status, r.text()),
        (200, "<b>kept</b>".to_owned()),
        "{r:?}"
    );
    assert!(r.header("age").is_some(), "stored by the include: {r:?}");
    assert!(r.header("last-modified").is_some(), "{r:?}");
    assert!(r.header("etag").is_some(), "{r:?}");
}

/// The `www` directory of a server started by [`start`] (named in its configuration).
fn find_www(srv: &Server) -> std::path::PathBuf {
    let conf = std::fs::read_to_string(srv.dir.path().join("osprey.json")).unwrap();
    let at = conf.rfind("\"dir\": \"").unwrap() + 8;
    let end = conf[at..].find('"').unwrap();
    Path::new(&conf[at..at + end]).to_owned()
}

/// A page whose fragments all answer at once (files from the memory cache, a module) goes
/// out whole, with Content-Length; its layout's parse is kept, and a changed layout is read
/// again.
#[test]
fn a_page_of_ready_fragments_goes_whole_and_a_changed_layout_is_read_again() {
    // The layout from a memory cache (shared bytes) and from an open file.
    for memcache in [true, false] {
        let dir = TempDir::new("ready");
        let www = dir.path().join("www");
        std::fs::create_dir_all(&www).unwrap();
        std::fs::write(www.join("f.html"), "<i>F</i>").unwrap();
        let page = "A<!--#include virtual=\"/f.html\" -->B<!--#include virtual=\"/mod\" -->C";
        std::fs::write(www.join("p.shtml"), page).unwrap();
        let srv = Server::start(&format!(
            r#"{{"load": [{{"so": "testkit"}}], "routing": [
  {{"prefix": "/mod", "handler": "text", "text": "M"}},
  {{"handler": "sendfile", "dir": {www:?}, "memcache": {memcache}, "cache_ttl": 0.1,
    "filters": [{{"type": "ssi"}}]}}]}}"#,
            www = www.display().to_string()
        ));
        for _ in 0..2 {
            let r = srv.get("/p.shtml");
            assert_eq!(
                (r.status, r.text()),
                (200, "A<i>F</i>BMC".to_owned()),
                "{r:?}"
            );
            assert_eq!(r.header("content-length"), Some("12"), "{r:?}");
            assert_eq!(r.header("transfer-encoding"), None, "{r:?}");
        }
        // Rewritten in place (same inode), then the same length again.
        for (text, page) in [
            ("<!--#include virtual=\"/mod\" -->|changed", "M|changed"),
            ("<!--#include virtual=\"/mod\" -->|again!!", "M|again!!"),
        ] {
            std::fs::write(www.join("p.shtml"), text).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(srv.get("/p.shtml").text(), page, "memcache {memcache}");
        }
    }
}

#[test]
fn variables_nest_and_escape_and_syntax_errors_become_markers() {
    let (srv, _dir) = start("");
    let r = srv.get("/vars.shtml?name=%3Cb%3E");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        "&lt;b&gt;$|(&lt;b&gt;$,1,/sub/inner.shtml)|<!--[ssi error]-->|/vars.shtml?name=%3Cb%3E"
    );
    let log = srv.log_text();
    assert!(log.contains("ssi: /vars.shtml at byte"), "{log}");
}

#[test]
fn loops_depth_and_fan_out_are_limited_with_markers() {
    let (srv, _dir) = start("");
    let www = find_www(&srv);
    let r = srv.get("/loop.shtml");
    assert_eq!(r.text(), "L<!--[ssi error]-->L");
    assert!(srv.log_text().contains("includes itself"));
    // A loop through a fragment that includes its including page (whose own lineage is made
    // only when it starts an include).
    std::fs::write(
        www.join("ping.shtml"),
        "P<!--#include virtual=\"/pong.shtml\" -->P",
    )
    .unwrap();
    std::fs::write(
        www.join("pong.shtml"),
        "Q<!--#include virtual=\"/ping.shtml\" -->Q",
    )
    .unwrap();
    assert_eq!(srv.get("/ping.shtml").text(), "PQ<!--[ssi error]-->QP");

    // d0 includes d1 ... includes d10: the ninth level is refused.
    for i in 0..=10 {
        let next = format!("<!--#include virtual=\"/d{}.shtml\" -->", i + 1);
        std::fs::write(www.join(format!("d{i}.shtml")), format!("{i}{next}")).unwrap();
    }
    let r = srv.get("/d0.shtml");
    assert_eq!(r.text(), "012345678<!--[ssi error]-->");
    assert!(srv.log_text().contains("nest deeper than 8"));

    let many: String = (0..65)
        .map(|i| format!("<!--#include virtual=\"/frag.html?{i}\" -->"))
        .collect();
    std::fs::write(www.join("many.shtml"), many).unwrap();
    let r = srv.get("/many.shtml");
    let text = r.text();
    assert_eq!(text.matches("<i>static</i>").count(), 64, "{text}");
    assert!(text.ends_with("<!--[ssi error]-->"), "{text}");
    assert!(srv.log_text().contains("more than 64 subrequests"));
}

#[test]
fn failing_fragments_mark_before_output_and_cut_after() {
    let (srv, _dir) = start("");
    let www = find_www(&srv);
    std::fs::write(
        www.join("before.shtml"),
        "a<!--#include virtual=\"/b/close\" -->b",
    )
    .unwrap();
    let r = srv.get("/before.shtml");
    assert_eq!(
        (r.status, r.text()),
        (200, "a<!--[ssi error]-->b".to_owned())
    );

    std::fs::write(
        www.join("after.shtml"),
        "a<!--#include virtual=\"/b/partial\" -->b",
    )
    .unwrap();
    let raw = srv.raw(b"GET /after.shtml HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(raw.contains("0123456789"), "{raw}");
    // Cut: no last chunk, so the client knows the page is incomplete.
    assert!(!raw.ends_with("0\r\n\r\n"), "{raw:?}");
    assert!(!raw.contains("b\r\n0\r\n"), "{raw:?}");
    // HTTP/2: the stream is reset, so curl reports a failure.
    let (ok, out) = curl(&["--http2-prior-knowledge", &srv.url("/after.shtml")]);
    assert!(!ok, "{out}");
    assert!(out.starts_with("a0123456789"), "{out}");
}

#[test]
fn backend_answers_switch_ssi_on_by_header() {
    let (srv, _dir) = start("");
    let r = srv.get("/b/ssi");
    assert_eq!(r.text(), "[<i>static</i>]");
    assert_eq!(r.header("x-osprey-ssi"), None);
    let r = srv.get("/b/nxweb?q=1");
    assert_eq!(r.text(), "{q=1}");
    // Without the header, a proxied answer is left alone.
    assert_eq!(srv.get("/b/x").text(), "PROXIED");
}

#[test]
fn gzip_applies_to_the_assembled_page() {
    let (srv, _dir) = start("");
    let raw = {
        let mut s = srv.connect();
        s.write_all(
            b"GET /page.shtml HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        out
    };
    let r = Response::parse(&raw);
    assert_eq!(r.header("content-encoding"), Some("gzip"), "{r:?}");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, PAGE);
}

#[test]
fn a_slow_fragment_does_not_hold_up_its_thread() {
    let dir = TempDir::new("compose-slow");
    let srv = Server::start_custom(&site(&dir, backend(), ""), &[], 1, &[]);
    let www = find_www(&srv);
    std::fs::write(
        www.join("slow.shtml"),
        "<!--#include virtual=\"/b/slow\" -->!",
    )
    .unwrap();
    let url = srv.url("/slow.shtml");
    let slow = std::thread::spawn(move || curl(&[&url]));
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    assert_eq!(srv.get("/page.shtml").text(), PAGE);
    assert!(
        t.elapsed() < Duration::from_millis(700),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(slow.join().unwrap().1, "SLOW!");
}

#[test]
fn subrequests_inherit_tls() {
    use tlskit::{start_tls, Cert};
    let dir = TempDir::new("compose-tls");
    let cert = Cert::new(&dir, "localhost", &["localhost"]);
    let routes = r#"{"prefix": "/sec", "handler": "text", "text": "SECURE", "secure_only": true},"#;
    let (srv, port) = start_tls(&site(&dir, backend(), routes), &cert);
    let www = find_www(&srv);
    std::fs::write(www.join("tls.shtml"), "<!--#include virtual=\"/sec\" -->").unwrap();
    let resolve = format!("localhost:{port}:127.0.0.1");
    for http in ["--http1.1", "--http2"] {
        let (ok, out) = curl(&[
            "--resolve",
            &resolve,
            "--cacert",
            cert.cert_str(),
            http,
            &format!("https://localhost:{port}/tls.shtml"),
        ]);
        assert!(ok, "{out}");
        assert_eq!(out, "SECURE", "{http}");
    }
    // Over plain HTTP the secure-only route is not there for the subrequest either.
    assert_eq!(srv.get("/tls.shtml").text(), "<!--[ssi error]-->");
}

#[test]
fn subrequest_limits_are_configurable() {
    let dir = TempDir::new("compose-limits");
    let config = site(&dir, backend(), "").replacen(
        "\"routing\"",
        "\"limits\": {\"max_subrequest_depth\": 2, \"max_subrequests\": 3}, \"routing\"",
        1,
    );
    let srv = Server::start(&config);
    let www = find_www(&srv);
    for i in 0..=3 {
        let next = format!("<!--#include virtual=\"/d{}.shtml\" -->", i + 1);
        std::fs::write(www.join(format!("d{i}.shtml")), format!("{i}{next}")).unwrap();
    }
    assert_eq!(srv.get("/d0.shtml").text(), "012<!--[ssi error]-->");
    let many: String = (0..4)
        .map(|i| format!("<!--#include virtual=\"/frag.html?{i}\" -->"))
        .collect();
    std::fs::write(www.join("many.shtml"), many).unwrap();
    let text = srv.get("/many.shtml").text();
    assert_eq!(text.matches("<i>static</i>").count(), 3, "{text}");
    assert!(srv.log_text().contains("more than 3 subrequests"));
}

#[test]
fn the_sample_composition_config_serves_its_page() {
    // Relative paths in it are from the repository root, as `osprey -c` runs there.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let text = std::fs::read_to_string(format!("{root}/conf/composition.json")).unwrap();
    let text = text.replace("\"conf/compose\"", &format!("\"{root}/conf/compose\""));
    let (ok, out) = common::check_config(&text, &[]);
    assert!(ok, "{out}");
    let srv = Server::start(&text);
    let page = srv.get("/index.shtml?name=you").text();
    assert!(
        page.contains("<h1>Osprey composition sample</h1>"),
        "{page}"
    );
    assert!(page.contains("<p>Hello, you</p>"), "{page}");
    assert!(page.contains("data-max-age=\"5\""), "{page}");
    assert!(page.contains("data-max-age=\"20\""), "{page}");
    assert!(page.contains("Served for /index.shtml?name=you"), "{page}");
    assert!(!page.contains("ssi error"), "{page}");
}

/// The `ssi` filter tells the handler before it runs that the page is read for its body only
/// (`osprey_sdk::BODY_ONLY`), so the static handler makes no validators of the file for it:
/// seen on a page sent unprocessed (over `max_size`). Not on a route whose filter keys a cache
/// (that stored answer is served to clients): there the file's validators stay, seen on a
/// page `ssi` leaves alone as it comes gzipped.
/// `max_size` holds for a document that comes from memory (a cache hit) as for a file: the
/// page over it is sent unprocessed both times.
#[test]
fn max_size_holds_for_a_document_served_from_a_cache() {
    let dir = TempDir::new("max-size-cached");
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    let page = "over max_size <!--#echo var=\"x\" -->";
    std::fs::write(www.join("big.shtml"), page).unwrap();
    let srv = Server::start(&format!(
        r#"{{"routing": [
  {{"handler": "sendfile", "dir": {www:?},
    "filters": [{{"type": "ssi", "max_size": 4}},
                {{"type": "file_cache", "cache_dir": {cache:?}, "ttl": 60}}]}}]}}"#,
        www = www.display().to_string(),
        cache = dir.path().join("cache").display().to_string(),
    ));
    for round in ["from the file", "from the cache"] {
        let r = srv.get("/big.shtml");
        assert_eq!((r.status, r.text().as_str()), (200, page), "{round}: {r:?}");
    }
    assert!(
        srv.log_text().contains("over max_size (4)"),
        "{}",
        srv.log_text()
    );
}

#[test]
fn an_ssi_page_has_no_validators_of_its_file_unless_its_route_keys_a_cache() {
    let dir = TempDir::new("validators");
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(
        www.join("big.shtml"),
        "over max_size <!--#echo var=\"x\" -->",
    )
    .unwrap();
    let srv = Server::start(&format!(
        r#"{{"routing": [
  {{"prefix": "/cached", "handler": "sendfile", "dir": {www:?},
    "filters": [{{"type": "ssi"}},
                {{"type": "file_cache", "cache_dir": {cache:?}, "ttl": 60}},
                {{"type": "gzip", "min_length": 1}}]}},
  {{"handler": "sendfile", "dir": {www:?}, "filters": [{{"type": "ssi", "max_size": 4}}]}}]}}"#,
        www = www.display().to_string(),
        cache = dir.path().join("cache").display().to_string(),
    ));
    let r = srv.get("/big.shtml");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.text().starts_with("over max_size"), "{r:?}");
    for name in ["last-modified", "etag", "accept-ranges"] {
        assert_eq!(r.header(name), None, "{name}: {r:?}");
    }
    let raw = srv.raw(
        b"GET /cached/big.shtml HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    );
    let r = Response::parse(raw.as_bytes());
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-encoding"), Some("gzip"), "{r:?}");
    assert!(r.header("last-modified").is_some(), "{r:?}");
    assert!(r.header("etag").is_some(), "{r:?}");
}
