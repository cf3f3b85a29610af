//! SIGHUP reloads the configuration without losing a connection or a request; a bad
//! configuration is refused and the old one keeps serving.

mod common;
mod ops_util;

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{signal, Server};
use ops_util::{get_on, wait_log};

fn config(text: &str, extra: &str) -> String {
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}{extra}],
  "routing": [
    {{"prefix": "/v", "handler": "text", "text": "{text}"}},
    {{"prefix": "/new", "handler": "text", "text": "new in {text}"}},
  ]
}}"#
    )
}

fn rewrite(srv: &Server, text: &str) {
    let path = srv.dir.path().join("osprey.json");
    let tmp = srv.dir.path().join("osprey.json.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

#[test]
fn reload_swaps_routes_on_open_connections() {
    let srv = Server::start(&config("one", ""));
    let mut keep = srv.connect();
    assert_eq!(get_on(&mut keep, "/v").unwrap().text(), "one");
    assert_eq!(srv.get("/hello").status, 404);
    // A new configuration that also loads a new library.
    let two = config("two", r#", {"so": "hello"}"#).replace(
        "  ]\n}",
        "    {\"prefix\": \"/hello\", \"handler\": \"hello\"},\n  ]\n}",
    );
    rewrite(&srv, &two);
    signal(&srv.child, "HUP");
    wait_log(&srv, "configuration reloaded", 1);
    // The same keep-alive connection now sees the new configuration.
    assert_eq!(get_on(&mut keep, "/v").unwrap().text(), "two");
    assert_eq!(srv.get("/new").text(), "new in two");
    assert_eq!(
        srv.get("/hello").status,
        200,
        "a module loaded by the reload"
    );
    assert!(
        srv.log_text().contains("module hello loaded from"),
        "{}",
        srv.log_text()
    );
}

#[test]
fn bad_configuration_is_refused_and_old_one_serves() {
    let srv = Server::start(&config("old", ""));
    rewrite(
        &srv,
        "{\"routing\": [\n  {\"prefix\": \"/v\", \"handler\": \"text\",, }\n]}",
    );
    signal(&srv.child, "HUP");
    let log = wait_log(&srv, "reload refused", 1);
    assert!(
        log.contains("osprey.json:2"),
        "the error names file and line: {log}"
    );
    assert_eq!(srv.get("/v").text(), "old");
    // A configuration that parses but names an unknown handler is refused too.
    rewrite(&srv, "{\"load\": [{\"so\": \"testkit\"}],\n\"routing\": [\n {\"prefix\": \"/v\", \"handler\": \"nope\"}\n]}");
    signal(&srv.child, "HUP");
    let log = wait_log(&srv, "reload refused", 2);
    assert!(
        log.contains("no loaded module provides handler `nope`"),
        "{log}"
    );
    assert_eq!(srv.get("/v").text(), "old");
    // And a good one after them is taken.
    rewrite(&srv, &config("fixed", ""));
    signal(&srv.child, "HUP");
    wait_log(&srv, "configuration reloaded", 1);
    assert_eq!(srv.get("/v").text(), "fixed");
}

#[test]
fn no_request_is_lost_across_reloads() {
    let srv = Arc::new(Server::start(&config("a", "")));
    let done = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    // Keep-alive clients and clients that open a connection per request.
    for keep_alive in [true, true, true, false, false] {
        let (srv, done, served) = (srv.clone(), done.clone(), served.clone());
        clients.push(std::thread::spawn(move || {
            let mut mine = 0;
            let mut conn: Option<TcpStream> = None;
            while !done.load(Ordering::Relaxed) || mine < 800 {
                let s = match &mut conn {
                    Some(s) if keep_alive => s,
                    _ => conn.insert(srv.connect()),
                };
                let r = get_on(s, "/v").unwrap_or_else(|e| panic!("request {mine} failed: {e}"));
                assert_eq!(r.status, 200);
                let body = r.text();
                assert!(body == "a" || body == "b", "{body}");
                mine += 1;
                served.fetch_add(1, Ordering::Relaxed);
            }
            mine
        }));
    }
    for i in 0..8 {
        std::thread::sleep(Duration::from_millis(60));
        rewrite(&srv, &config(if i % 2 == 0 { "b" } else { "a" }, ""));
        signal(&srv.child, "HUP");
        wait_log(&srv, "configuration reloaded", i + 1);
    }
    done.store(true, Ordering::Relaxed);
    let total: usize = clients
        .into_iter()
        .map(|c| c.join().expect("a client failed"))
        .sum();
    assert!(total >= 4000, "{total}");
    assert_eq!(total, served.load(Ordering::Relaxed));
    let log = srv.log_text();
    assert!(!log.contains("reload refused"), "{log}");
}

#[test]
fn reload_names_a_module_library_rebuilt_since_it_was_loaded() {
    let dir = common::TempDir::new("reload-rebuilt");
    let lib = dir.path().join("libosprey_hello.so");
    std::fs::copy(common::module_lib("hello"), &lib).unwrap();
    let text = format!(
        r#"{{"load": [{{"so": "{}"}}], "routing": [{{"prefix": "/h", "handler": "hello"}}]}}"#,
        lib.display()
    );
    let srv = Server::start(&text);
    // An unchanged library: no warning.
    signal(&srv.child, "HUP");
    wait_log(&srv, "configuration reloaded", 1);
    assert!(
        !srv.log_text().contains("changed on disk"),
        "{}",
        srv.log_text()
    );
    // Replaced as a build does (a new file renamed over the old one, never written in place:
    // the running server maps it).
    let fresh = dir.path().join("fresh.so");
    std::fs::copy(common::module_lib("hello"), &fresh).unwrap();
    std::fs::rename(&fresh, &lib).unwrap();
    signal(&srv.child, "HUP");
    let log = wait_log(&srv, "configuration reloaded", 2);
    assert!(
        log.contains(&format!("module library {} changed on disk", lib.display()))
            && log.contains("restart it to load the new build"),
        "{log}"
    );
    assert_eq!(srv.get("/h").status, 200);
}
