//! SIGHUP reloads the configuration without losing a connection or a request; a bad
//! configuration is refused and the old one keeps serving.

mod common;
mod ops_util;
mod upstream;

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
                // A connection's last request (`max_requests_per_connection`, 10,000: a fast
                // run reaches it) is answered `Connection: close`: the next goes on a new one.
                if r.header("connection") == Some("close") {
                    conn = None;
                }
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

/// Sets the flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A configuration proxying `/app` to backend `app`, plus the `extra` JSON (backends and routes).
fn proxy_config(app: &str, extra_backends: &str, extra_routes: &str) -> String {
    format!(
        r#"{{
  "load": [{{"so": "proxy"}}],
  "backends": {{"app": {{"connect": "{app}"}}{extra_backends}}},
  "routing": [
    {{"prefix": "/app", "handler": "http_proxy", "backend": "app", "uri": "/"}},{extra_routes}
  ]
}}"#
    )
}

/// Backends are part of the reloadable configuration: a reload points a backend at another
/// server, adds one (with its health checks) and removes one, while keep-alive clients keep
/// sending requests, and none of them fails.
#[test]
fn reload_applies_added_removed_and_changed_backends_under_load() {
    use upstream::Upstream;
    let (a, b, c) = (
        Upstream::start("A"),
        Upstream::start("B"),
        Upstream::start("C"),
    );
    let srv = Arc::new(Server::start(&proxy_config(&a.address(), "", "")));
    let done = Arc::new(AtomicBool::new(false));
    // Clients stop even if an assertion below fails, so that the server (which they share)
    // is dropped and stopped.
    let _stop_clients = StopOnDrop(done.clone());
    let mut clients = Vec::new();
    for _ in 0..3 {
        let (srv, done) = (srv.clone(), done.clone());
        clients.push(std::thread::spawn(move || {
            let mut s = srv.connect();
            let mut seen = Vec::new();
            let mut n = 0;
            while !done.load(Ordering::Relaxed) {
                n += 1;
                let r =
                    get_on(&mut s, "/app/x").unwrap_or_else(|e| panic!("request {n} failed: {e}"));
                assert_eq!(r.status, 200, "{}", r.text());
                // A connection's last answer (`max_requests_per_connection`, 10,000: a fast
                // build gets there) says so, and the client goes on with a new one.
                if r.header("connection") == Some("close") {
                    s = srv.connect();
                }
                let from = r.header("x-upstream").unwrap_or("?").to_owned();
                if seen.last() != Some(&from) {
                    seen.push(from);
                }
            }
            seen
        }));
    }
    std::thread::sleep(Duration::from_millis(300));
    // `app` moves to B; `extra` (health-checked) is added.
    let extra_backend = format!(
        r#", "extra": {{"connect": "{}", "health_check": {{"path": "/health", "interval": 0.1}}}}"#,
        c.address()
    );
    let extra_route = r#"
    {"prefix": "/extra", "handler": "http_proxy", "backend": "extra", "uri": "/"},"#;
    rewrite(
        &srv,
        &proxy_config(&b.address(), &extra_backend, extra_route),
    );
    signal(&srv.child, "HUP");
    wait_log(&srv, "configuration reloaded", 1);
    let hits_before = b.hits();
    std::thread::sleep(Duration::from_millis(300));
    assert!(b.hits() > hits_before, "requests now go to B");
    let r = srv.get("/extra/y");
    assert_eq!((r.status, r.header("x-upstream")), (200, Some("C")));
    ops_util::wait_for(
        "health checks of the added backend",
        Duration::from_secs(5),
        || c.state.health_hits.load(Ordering::SeqCst) >= 2,
    );
    // `extra` is removed: its route 404s and its health checks stop.
    rewrite(&srv, &proxy_config(&b.address(), "", ""));
    signal(&srv.child, "HUP");
    wait_log(&srv, "configuration reloaded", 2);
    assert_eq!(srv.get("/extra/y").status, 404);
    std::thread::sleep(Duration::from_millis(300));
    let checks = c.state.health_hits.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        c.state.health_hits.load(Ordering::SeqCst),
        checks,
        "the removed backend is no longer checked"
    );
    done.store(true, Ordering::Relaxed);
    for client in clients {
        let seen = client.join().expect("a client failed");
        assert_eq!(seen, ["A", "B"], "each client moved from A to B once");
    }
    let log = srv.log_text();
    assert!(!log.contains("upstream attempt failed"), "{log}");
}

/// A reload applies what it can and names every key that needs a restart.
#[test]
fn keys_a_reload_cannot_apply_are_named() {
    let srv = Server::start(&config("one", ""));
    let two = config("two", "").replacen(
        '{',
        r#"{"cpu_affinity": true, "worker_pool": {"threads": 3},"#,
        1,
    );
    rewrite(&srv, &two);
    signal(&srv.child, "HUP");
    let log = wait_log(&srv, "configuration reloaded", 1);
    assert!(
        log.contains(
            "`network_threads`, `cpu_affinity` and `worker_pool.threads` take effect at the next restart"
        ),
        "{log}"
    );
    assert_eq!(srv.get("/v").text(), "two", "the rest is applied");
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
