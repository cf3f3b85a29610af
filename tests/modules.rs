//! The module loader and the ABI boundary: checked loading, clear refusals, panics contained.

mod common;

use common::{check_config, module_lib, Server};

#[test]
fn loads_by_path_and_by_flag() {
    let hello = module_lib("hello");
    let config = format!(
        r#"{{"load": [{{"so": "{}"}}], "routing": [{{"prefix": "/h", "handler": "hello"}}]}}"#,
        hello.display()
    );
    let (ok, text) = check_config(&config, &[]);
    assert!(ok, "{text}");
    let (ok, text) = check_config(
        r#"{"routing": [{"prefix": "/h", "handler": "hello"}]}"#,
        &["-M", hello.to_str().unwrap()],
    );
    assert!(ok, "{text}");
}

/// Check a configuration that loads the library at `path`: it must be refused in one line,
/// which is returned.
fn refused_load(path: &std::path::Path) -> String {
    let (ok, text) = check_config(
        &format!(r#"{{"load": [{{"so": "{}"}}]}}"#, path.display()),
        &[],
    );
    assert!(!ok, "{text}");
    assert_eq!(text.trim().lines().count(), 1, "{text}");
    text
}

#[test]
fn missing_library_is_one_clear_line() {
    let text = refused_load("/nonexistent/libx.so".as_ref());
    assert!(
        text.contains("/nonexistent/libx.so") && text.contains("no such file"),
        "{text}"
    );
}

#[test]
fn library_without_export_is_refused() {
    let text = refused_load(&module_lib("not_a_module"));
    assert!(
        text.contains("not_a_module") && text.contains("is not an Osprey module"),
        "{text}"
    );
}

#[test]
fn abi_mismatch_is_refused_before_any_module_code_runs() {
    let text = refused_load(&module_lib("abi_mismatch"));
    assert!(
        text.contains("abi_mismatch")
            && text.contains("incompatible osprey-sdk")
            && text.contains(
                "ModuleRoot: mismatched package (expected osprey-sdk, found osprey-abi-mismatch)"
            ),
        "{text}"
    );
}

#[test]
fn unknown_handler_names_the_route_and_known_types() {
    let (ok, text) = check_config("{\"load\": [{\"so\": \"hello\"}],\n \"routing\": [\n  {\"prefix\": \"/x\", \"handler\": \"helo\"}]}", &[]);
    assert!(!ok);
    assert!(text.contains(":3: key `routing[0]`"), "{text}");
    assert!(
        text.contains("`helo`") && text.contains("known: hello"),
        "{text}"
    );
}

#[test]
fn module_rejects_unknown_route_keys_with_file_line() {
    let (ok, text) = check_config("{\"load\": [{\"so\": \"testkit\"}],\n\"routing\": [{\"prefix\": \"/x\",\n \"handler\": \"text\",\n \"txet\": \"typo\"}]}", &[]);
    assert!(!ok);
    assert!(text.contains("c.json:4"), "{text}");
    assert!(text.contains("unknown key `txet`"), "{text}");
}

#[test]
fn same_library_twice_is_loaded_once() {
    let hello = module_lib("hello");
    let (ok, text) = check_config(
        r#"{"load": [{"so": "hello"}]}"#,
        &["-M", hello.to_str().unwrap()],
    );
    // The same library twice is fine (loaded once).
    assert!(ok, "{text}");
}

#[test]
fn modules_can_allocate_with_the_servers_allocator() {
    let srv = Server::start(
        r#"{"load": [{"so": "testkit"}], "routing": [
            {"prefix": "/", "handler": "allocator"}]}"#,
    );
    // The module's allocations (this answer's among them) go to the server's mimalloc.
    assert_eq!(srv.get("/").text(), "server");
}

#[test]
fn panicking_handler_is_500_and_the_server_keeps_serving() {
    let srv = Server::start(
        r#"{"load": [{"so": "testkit"}], "routing": [
            {"prefix": "/panic", "handler": "panic"},
            {"prefix": "/ok", "handler": "text", "text": "fine"}]}"#,
    );
    let mut s = srv.connect();
    use std::io::Write;
    s.write_all(b"GET /panic HTTP/1.1\r\nHost: a\r\n\r\nGET /ok HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").unwrap();
    let raw = common::read_to_close(&mut s);
    let all = common::Response::parse_all(raw.as_bytes());
    assert_eq!(all.len(), 2, "{raw}");
    assert_eq!(all[0].status, 500);
    assert_eq!(all[1].text(), "fine");
    for _ in 0..5 {
        assert_eq!(srv.get("/panic").status, 500);
    }
    assert_eq!(srv.get("/ok").text(), "fine");
    assert!(
        srv.log_text().contains("testkit panics on purpose"),
        "{}",
        srv.log_text()
    );
}

#[test]
fn lifecycle_hooks_and_module_config_reach_modules() {
    // modules.<name> for a module that is not loaded is an error naming the key.
    let (ok, text) = check_config(
        "{\"load\": [{\"so\": \"hello\"}],\n\"modules\": {\n \"nosuch\": {}}}",
        &[],
    );
    assert!(!ok);
    assert!(text.contains(":3: key `modules.nosuch`"), "{text}");
}

/// Every handler and filter type of the stock modules, with the route keys it needs.
const STOCK_TYPES: &[(&str, bool, &str)] = &[
    ("sendfile", false, r#", "dir": ".""#),
    ("static", false, r#", "dir": ".""#),
    ("http_proxy", false, r#", "backend": "b""#),
    ("benchmark-inprocess", false, ""),
    ("benchmark-inworker", false, ""),
    ("benchmark_inprocess", false, ""),
    ("benchmark_inworker", false, ""),
    ("hello", false, ""),
    ("status", false, ""),
    ("gzip", true, ""),
    ("file_cache", true, r#", "cache_dir": "c""#),
    ("image", true, r#", "cache_dir": "c", "dir": ".""#),
    ("templates", true, ""),
    ("host_redirect", false, r#", "host": "www.example.com""#),
    ("cors", true, r#", "allow_hosts": ["example.com"]"#),
    ("headers", true, ""),
    ("userid", true, ""),
];

#[test]
fn stock_modules_load_without_a_load_entry() {
    for (kind, filter, keys) in STOCK_TYPES {
        let route = if *filter {
            format!(r#"{{"handler": "hello", "filters": [{{"type": "{kind}"{keys}}}]}}"#)
        } else {
            format!(r#"{{"handler": "{kind}"{keys}}}"#)
        };
        let config = format!(
            r#"{{"backends": {{"b": {{"connect": "127.0.0.1:1"}}}}, "routing": [{route}]}}"#
        );
        let (ok, text) = check_config(&config, &[]);
        assert!(ok, "{kind}: {text}");
    }
    // A module section loads its stock module too.
    let (ok, text) = check_config(r#"{"modules": {"image": {}}}"#, &[]);
    assert!(ok, "{text}");
    // And the server answers through them.
    let srv = Server::start(
        r#"{"routing": [
          {"prefix": "/b", "handler": "benchmark_inprocess"},
          {"prefix": "/w", "handler": "benchmark_inworker"},
          {"prefix": "/h", "handler": "hello", "filters": [{"type": "gzip"}]}
        ]}"#,
    );
    for path in ["/b", "/w"] {
        let r = srv.get(path);
        assert_eq!((r.status, r.text().as_str()), (200, "<p>Hello, world!</p>"));
    }
    assert_eq!(srv.get("/h").status, 200);
}

#[test]
fn a_missing_stock_library_names_the_load_entry() {
    // The binary alone in a directory: no stock library beside it.
    let dir = common::TempDir::new("lonely-bin");
    let bin = dir.path().join("osprey");
    if std::fs::hard_link(common::osprey_bin(), &bin).is_err() {
        std::fs::copy(common::osprey_bin(), &bin).unwrap();
    }
    let conf = dir.write(
        "c.json",
        "{\"routing\": [\n  {\"handler\": \"sendfile\", \"dir\": \".\"}]}",
    );
    let out = std::process::Command::new(&bin)
        .arg("-t")
        .arg("-c")
        .arg(&conf)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("c.json:2: key `routing[0]`: handler `sendfile` is provided by the stock module `static`")
            && err.contains(r#"add its library to `load`: {"so": "/path/to/libosprey_static.so"}"#),
        "{err}"
    );
}

#[test]
fn error_outcome_keeps_the_headers_the_handler_set() {
    let srv = Server::start(
        r#"{"load": [{"so": "testkit"}], "routing": [
            {"prefix": "/inline", "handler": "fail", "status": 404, "text": "cors"},
            {"prefix": "/filtered", "handler": "fail", "status": 403, "text": "cors",
             "filters": [{"type": "tag", "text": "t"}]},
            {"prefix": "/bare", "handler": "fail", "status": 404}]}"#,
    );
    for (path, status) in [("/inline", 404), ("/filtered", 403)] {
        let r = srv.get(path);
        assert_eq!(r.status, status, "{path}");
        assert_eq!(r.header("x-fail-note"), Some("cors"), "{path}: {r:?}");
        // The error page's own type, not the one set for the body it replaced.
        assert_eq!(
            r.header("content-type"),
            Some("text/html; charset=utf-8"),
            "{path}"
        );
        assert_eq!(
            r.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("content-type"))
                .count(),
            1,
            "{path}: {r:?}"
        );
    }
    let r = srv.get("/bare");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-fail-note"), None);
}
