//! The `templates` filter against the real binary: inheritance (several parents, nested and
//! parent blocks, raw, relative URIs), parents fetched raw, includes through their own
//! handlers and filters, Last-Modified of the newest part and 304, the parsed-template cache
//! following changed files, error markers, HTTP/1.1 and HTTP/2.

mod common;
mod tlskit;

use std::path::Path;
use std::time::{Duration, SystemTime};

use common::{Response, Server, TempDir};

const LAYOUT: &str = "<html><title>{% block title %}Site{% endblock %}</title>\
<body>{% include 'nav.html' %}{% block body %}<p>empty</p>{% endblock %}</body></html>";

/// Set a file's mtime to `secs` after 2023-11-14 (whole seconds, as HTTP dates are).
fn touch(path: &Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs))
        .unwrap();
}

fn http_date(secs: u64) -> String {
    httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs))
}

struct Site {
    www: TempDir,
    srv: Server,
}

fn site() -> Site {
    let (www, config) = files_and_config();
    let srv = Server::start(&config);
    Site { www, srv }
}

/// The sample site's files and a configuration serving them.
fn files_and_config() -> (TempDir, String) {
    let www = TempDir::new("templates");
    let files: &[(&str, &str)] = &[
        ("t/layout.html", LAYOUT),
        ("t/nav.html", "<nav>N</nav>"),
        ("t/theme.html", "{% block title %}Theme: {% parent %}{% endblock %}"),
        (
            "t/pages/page.html",
            "{% extends '../layout.html' %}\n\
             {% block title %}Page{% endblock %}\n\
             {% block body %}<main>{% block main %}M{% endblock %}</main>{% raw %}{% block x %}{% endraw %}{% endblock %}\n",
        ),
        (
            "t/pages/multi.html",
            "{% use '/t/layout.html' '../theme.html' %}{% block body %}{% parent %}+{% endblock %}",
        ),
        (
            "t/pages/inc.html",
            "{% extends '../layout.html' %}{% block body %}[{% include '/dyn' %}|{% include '/t/pages/page.html' %}|{% include '/missing.html' %}]{% endblock %}",
        ),
        ("t/pages/nolm.html", "<b>{% include '/dyn' %}</b>"),
        ("t/pages/plain.html", "<p>no tags here</p>"),
        ("t/pages/style.css", "body {}"),
        ("t/pages/broken.html", "<p>{% block a %}never closed"),
        ("t/pages/orphan.html", "{% extends 'gone.html' %}{% block a %}kept{% endblock %}"),
        ("t/pages/badparent.html", "{% extends 'broken.html' %}"),
        ("t/pages/loop.html", "{% extends 'loop2.html' %}"),
        ("t/pages/loop2.html", "{% extends 'loop.html' %}"),
        ("t/pages/cached.html", "{% extends '/origin/layout' %}{% block a %}page{% endblock %}"),
        ("t/pages/late.html", "{% extends '/slowlayout' %}{% block a %}late {% include '/t/nav.html' %}{% endblock %}"),
        ("t/pages/slow.html", "<p>{% include '/slow' %}</p>{% include 'plain.html' %}"),
    ];
    for (name, text) in files {
        if let Some(dir) = Path::new(name).parent() {
            std::fs::create_dir_all(www.path().join(dir)).unwrap();
        }
        let path = www.write(name, text);
        touch(&path, 10);
    }
    touch(&www.path().join("t/nav.html"), 20);
    let config = format!(
        r#"{{
  "load": [{{"so": "testkit"}}],
  "routing": [
    {{"prefix": "/dyn", "handler": "counter", "text": "dynamic", "filters": [{{"type": "tag", "text": "dyn"}}]}},
    {{"prefix": "/origin/layout", "handler": "counter", "counter": "layout", "text": "<{{% block a %}}A{{% endblock %}}>",
      "headers": {{"ETag": "\"v1\"", "Content-Type": "text/html"}}, "filters": [{{"type": "templates"}}]}},
    {{"prefix": "/slow", "handler": "counter", "sleep_ms": 600, "text": "slow"}},
    {{"prefix": "/slowlayout", "handler": "counter", "sleep_ms": 300, "text": "<{{% block a %}}A{{% endblock %}}|{{% include '/t/nav.html' %}}>",
      "headers": {{"Content-Type": "text/html"}}}},
    {{"prefix": "/count", "handler": "count"}},
    {{"prefix": "/small/", "handler": "sendfile", "dir": {dir:?}, "filters": [{{"type": "templates", "max_size": 50}}]}},
    {{"prefix": "/z/", "handler": "sendfile", "cache_ttl": 0, "dir": {dir:?},
      "filters": [{{"type": "gzip", "min_length": 10}}, {{"type": "templates"}}]}},
    {{"handler": "sendfile", "cache_ttl": 0, "dir": {dir:?}, "filters": [{{"type": "templates"}}]}}
  ]
}}"#,
        dir = www.path().display().to_string()
    );
    (www, config)
}

fn get(srv: &Server, path: &str, headers: &str) -> Response {
    let req =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n");
    Response::parse(srv.raw(req.as_bytes()).as_bytes())
}

const PAGE: &str =
    "<html><title>Page</title><body><nav>N</nav><main>M</main>{% block x %}</body></html>";

#[test]
fn a_page_extends_its_layout_with_blocks_raw_and_relative_uris() {
    let s = site();
    let r = get(&s.srv, "/t/pages/page.html", "");
    assert_eq!(r.status, 200);
    // The layout's blocks were overridden, so the layout came raw (its own filter did not
    // assemble it); its relative include resolved against the layout's directory.
    assert_eq!(r.text(), PAGE);
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(r.header("etag"), None);
    // Every part answered at once: one buffer, with its length.
    assert_eq!(
        r.header("content-length"),
        Some(PAGE.len().to_string().as_str())
    );
}

#[test]
fn several_parents_the_later_overrides_and_parent_shows_the_earlier() {
    let s = site();
    let r = get(&s.srv, "/t/pages/multi.html", "");
    assert_eq!(
        r.text(),
        "<html><title>Theme: Site</title><body><nav>N</nav><p>empty</p>+</body></html>"
    );
}

#[test]
fn includes_run_through_their_own_handlers_and_filters() {
    let s = site();
    let r = get(&s.srv, "/t/pages/inc.html", "");
    assert_eq!(r.status, 200);
    let body = r.text();
    // /dyn answered by its handler (hit count), the included page assembled by its own
    // templates filter, and a 404 include became the marker.
    assert!(
        body.starts_with("<html><title>Site</title><body><nav>N</nav>[hit "),
        "{body}"
    );
    assert!(
        body.contains(&format!("dynamic|{PAGE}|<!--[subrequest error]-->]</body>")),
        "{body}"
    );
    // A part without Last-Modified (the counter) means none for the page.
    assert_eq!(r.header("last-modified"), None);
    let log = s.srv.log_text();
    assert!(
        log.contains("include /missing.html: it answered 404"),
        "{log}"
    );
}

#[test]
fn last_modified_is_the_newest_part_and_answers_304() {
    let s = site();
    let r = get(&s.srv, "/t/pages/page.html", "");
    // page and layout at +10, nav.html at +20.
    assert_eq!(r.header("last-modified"), Some(http_date(20).as_str()));

    let ims = format!("If-Modified-Since: {}\r\n", http_date(20));
    let r = get(&s.srv, "/t/pages/page.html", &ims);
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    let r = get(
        &s.srv,
        "/t/pages/page.html",
        &format!("If-Modified-Since: {}\r\n", http_date(15)),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), PAGE);

    // The included fragment changes: the page is newer, and shows it.
    let nav = s.www.path().join("t/nav.html");
    std::fs::write(&nav, "<nav>N2</nav>").unwrap();
    touch(&nav, 30);
    let r = get(&s.srv, "/t/pages/page.html", &ims);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("last-modified"), Some(http_date(30).as_str()));
    assert!(r.text().contains("<nav>N2</nav>"));
}

#[test]
fn a_changed_parent_is_parsed_again() {
    let s = site();
    assert_eq!(get(&s.srv, "/t/pages/page.html", "").text(), PAGE);
    let layout = s.www.path().join("t/layout.html");
    std::fs::write(&layout, LAYOUT.replace("<html>", "<html lang=en>")).unwrap();
    touch(&layout, 40);
    let r = get(&s.srv, "/t/pages/page.html", "");
    assert_eq!(r.text(), PAGE.replace("<html>", "<html lang=en>"));
    assert_eq!(r.header("last-modified"), Some(http_date(40).as_str()));
    // And once more from the cached parse (the layout answers 304 to its subrequest).
    assert_eq!(
        get(&s.srv, "/t/pages/page.html", "").text(),
        PAGE.replace("<html>", "<html lang=en>")
    );
}

#[test]
fn a_page_without_last_modified_parts_has_none_and_no_304() {
    let s = site();
    let r = get(&s.srv, "/t/pages/nolm.html", "");
    assert!(r.text().starts_with("<b>hit "), "{}", r.text());
    assert_eq!(r.header("last-modified"), None);
    let r = get(
        &s.srv,
        "/t/pages/nolm.html",
        &format!("If-Modified-Since: {}\r\n", http_date(1000)),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn other_answers_on_the_route_keep_their_own_304() {
    let s = site();
    let r = get(&s.srv, "/t/pages/style.css", "");
    assert_eq!(r.status, 200);
    let etag = r.header("etag").unwrap().to_string();
    let r = get(
        &s.srv,
        "/t/pages/style.css",
        &format!("If-None-Match: {etag}\r\n"),
    );
    assert_eq!(r.status, 304);
    let r = get(&s.srv, "/t/pages/plain.html", "");
    assert_eq!(r.text(), "<p>no tags here</p>");
    let lm = r.header("last-modified").unwrap().to_string();
    let r = get(
        &s.srv,
        "/t/pages/plain.html",
        &format!("If-Modified-Since: {lm}\r\n"),
    );
    assert_eq!(r.status, 304);
}

#[test]
fn a_client_cannot_ask_for_the_raw_template() {
    let s = site();
    let r = get(&s.srv, "/t/pages/page.html", "X-Osprey-Template-Raw: 1\r\n");
    assert_eq!(r.text(), PAGE);
}

#[test]
fn template_errors_give_a_marker_and_a_log_line() {
    let s = site();
    let r = get(&s.srv, "/t/pages/broken.html", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "<!--[template error; check error log]-->");
    let r = get(&s.srv, "/t/pages/loop.html", "");
    assert_eq!(r.text(), "<!--[template error; check error log]-->");
    let r = get(&s.srv, "/t/pages/badparent.html", "");
    assert_eq!(r.text(), "<!--[template error; check error log]-->");
    // A parent that is not there leaves the child's own blocks.
    let r = get(&s.srv, "/t/pages/orphan.html", "");
    assert_eq!(r.text(), "kept");
    let log = s.srv.log_text();
    assert!(
        log.contains(
            "template error in /t/pages/broken.html: at byte 3: block `a` has no endblock"
        ),
        "{log}"
    );
    assert!(log.contains("/t/pages/loop.html extends itself"), "{log}");
    assert!(
        log.contains("template error in /t/pages/badparent.html: in parent /t/pages/broken.html at byte 3: block `a` has no endblock"),
        "{log}"
    );
    assert!(
        log.contains("parent /t/pages/gone.html left out: it answered 404"),
        "{log}"
    );
}

#[test]
fn http2_gets_the_same_page() {
    let s = site();
    let (ok, out) = common::curl(&[
        "--http2-prior-knowledge",
        "-sS",
        &s.srv.url("/t/pages/page.html"),
    ]);
    assert!(ok, "{out}");
    assert_eq!(out, PAGE);
    let (ok, out) = common::curl(&[
        "--http2-prior-knowledge",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        &format!("If-Modified-Since: {}", http_date(20)),
        &s.srv.url("/t/pages/page.html"),
    ]);
    assert!(ok, "{out}");
    assert_eq!(out, "304");
}

#[test]
fn a_cached_parent_is_asked_conditionally_and_its_parse_reused() {
    let s = site();
    let first = get(&s.srv, "/t/pages/cached.html", "");
    assert_eq!(first.text(), "hit 1\n<page>");
    // The layout's subrequest now carries its ETag; the origin answers 304 and the cached
    // parse (of "hit 1") is used again.
    let again = get(&s.srv, "/t/pages/cached.html", "");
    assert_eq!(again.text(), "hit 1\n<page>");
    assert_eq!(get(&s.srv, "/count?layout", "").text(), "2 1");
}

#[test]
fn a_slow_include_streams_and_does_not_hold_up_other_connections() {
    let s = site();
    let started = std::time::Instant::now();
    let slow = std::thread::scope(|scope| {
        let slow = scope.spawn(|| get(&s.srv, "/t/pages/slow.html", ""));
        std::thread::sleep(Duration::from_millis(100));
        let quick = get(&s.srv, "/t/pages/page.html", "");
        assert_eq!(quick.text(), PAGE);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        slow.join().unwrap()
    });
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert_eq!(slow.status, 200);
    // Not known when the head went out: no Last-Modified, and the body is chunked.
    assert_eq!(slow.header("last-modified"), None);
    assert_eq!(slow.header("transfer-encoding"), Some("chunked"));
    assert!(
        slow.text()
            .starts_with("<p>hit 1\nslow</p><p>no tags here</p>"),
        "{}",
        slow.text()
    );
}

#[test]
fn configuration_errors_name_the_line_and_key() {
    let (ok, out) = common::check_config(
        "{\"routing\": [{\"handler\": \"hello\",\n \"filters\": [{\"type\": \"templates\", \"max_sise\": 1}]}]}",
        &[],
    );
    assert!(!ok);
    assert!(
        out.contains("c.json:2: key `routing[0].filters[0]`: unknown key `max_sise`"),
        "{out}"
    );
}

#[test]
fn a_parent_that_answers_late_is_awaited_in_the_body() {
    let s = site();
    let r = get(&s.srv, "/t/pages/late.html", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hit 1\n<late <nav>N</nav>|<nav>N</nav>>");
    // The head went before the parent answered: no Last-Modified, so no 304 either.
    assert_eq!(r.header("last-modified"), None);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
}

#[test]
fn tls_over_http11_and_h2() {
    let (www, config) = files_and_config();
    let cert = tlskit::Cert::new(&www, "localhost", &["localhost"]);
    let (_srv, port) = tlskit::start_tls(&config, &cert);
    let url = format!("https://localhost:{port}/t/pages/page.html");
    let resolve = format!("localhost:{port}:127.0.0.1");
    for version in ["--http1.1", "--http2"] {
        let args = [
            "--resolve",
            &resolve,
            "--cacert",
            cert.cert_str(),
            version,
            "-sS",
            &url,
        ];
        let (ok, out) = common::curl(&args);
        assert!(ok, "{out}");
        assert_eq!(out, PAGE, "{version}");
    }
}

#[test]
fn gzip_before_templates_compresses_the_assembled_page() {
    use std::io::Read;
    let s = site();
    let req = "GET /z/t/pages/page.html HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n";
    let mut conn = s.srv.connect();
    std::io::Write::write_all(&mut conn, req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).unwrap();
    let r = Response::parse(&raw);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let mut page = String::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_string(&mut page)
        .unwrap();
    assert_eq!(page, PAGE);
}

#[test]
fn head_and_failed_preconditions() {
    let s = site();
    let raw = s
        .srv
        .raw(b"HEAD /t/pages/page.html HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let (r, _) = Response::parse_one(raw.as_bytes(), true);
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    assert_eq!(r.header("last-modified"), Some(http_date(20).as_str()));
    // The template file's own ETag is not the page's: If-Match cannot hold.
    let r = get(&s.srv, "/t/pages/page.html", "If-Match: \"x\"\r\n");
    assert_eq!(r.status, 412);
    let r = get(
        &s.srv,
        "/t/pages/page.html",
        &format!("If-Unmodified-Since: {}\r\n", http_date(15)),
    );
    assert_eq!(r.status, 412);
}

#[test]
fn a_template_over_max_size_is_sent_as_it_is() {
    let s = site();
    let r = get(&s.srv, "/small/t/pages/page.html", "");
    assert_eq!(r.status, 200);
    assert!(
        r.text().starts_with("{% extends '../layout.html' %}"),
        "{}",
        r.text()
    );
    assert!(s
        .srv
        .log_text()
        .contains("template /small/t/pages/page.html is over 50 bytes (max_size): sent as it is"));
}
