//! Configuration files and the command line.

mod common;
mod upstream;

use std::process::Command;

use common::{osprey_bin, Server, TempDir};

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(osprey_bin()).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn version_and_help() {
    let (ok, text) = run(&["-v"]);
    assert!(ok && text.starts_with("osprey 0."), "{text}");
    let (ok, text) = run(&["-h"]);
    assert!(ok, "{text}");
    for flag in ["-c", "-H", "-w", "-l", "-L", "-M", "-t", "--workers"] {
        assert!(text.contains(flag), "help lacks {flag}: {text}");
    }
}

#[test]
fn embedded_default_config_is_valid() {
    let (ok, text) = run(&["-t"]);
    assert!(ok, "{text}");
    assert!(text.contains("<default>"), "{text}");
}

#[test]
fn comments_and_trailing_commas_are_accepted() {
    let srv = Server::start(
        "// a comment\n{\n  /* block\n comment */\n  \"load\": [{\"so\": \"testkit\"},],\n  \"routing\": [{\"prefix\": \"/t\", \"handler\": \"text\", \"text\": \"ok // not a comment\",},],\n}\n",
    );
    assert_eq!(srv.get("/t").text(), "ok // not a comment");
}

#[test]
fn errors_name_file_line_and_key() {
    let dir = TempDir::new("cfg");
    let conf = dir.write("bad.json", "{\n  \"listen\": [{\"interface\": \":1\"}],\n  \"limits\": {\n    \"max_body_bytez\": 5\n  }\n}\n");
    let (ok, text) = run(&["-t", "-c", conf.to_str().unwrap()]);
    assert!(!ok);
    assert!(text.contains("bad.json:4"), "{text}");
    assert!(text.contains("max_body_bytez"), "{text}");
    let syntax = dir.write("syntax.json", "{\n \"load\": [\n  {\"so\" \"x\"}\n]}");
    let (ok, text) = run(&["-t", "-c", syntax.to_str().unwrap()]);
    assert!(!ok);
    assert!(text.contains("syntax.json:3"), "{text}");
    let (ok, text) = run(&["-t", "-c", "/no/such/file.json"]);
    assert!(
        !ok && text.contains("/no/such/file.json") && text.contains("cannot read"),
        "{text}"
    );
}

#[test]
fn bad_flags_are_refused() {
    let (ok, _) = run(&["--workers", "0", "-t"]);
    assert!(!ok);
    let (ok, text) = run(&["-H", "not-an-address", "-t"]);
    assert!(!ok && text.contains("not-an-address"), "{text}");
    let (ok, _) = run(&["--no-such-flag"]);
    assert!(!ok);
}

#[test]
fn work_dir_flag_changes_directory_first() {
    let dir = TempDir::new("wd");
    dir.write("rel.json", r#"{"load": [{"so": "testkit"}], "routing": [{"prefix": "/t", "handler": "text", "text": "from wd"}]}"#);
    let (ok, text) = run(&["-w", dir.path().to_str().unwrap(), "-c", "rel.json", "-t"]);
    assert!(ok, "{text}");
}

#[test]
fn error_log_file_and_level() {
    let dir = TempDir::new("log");
    let log = dir.path().join("err.log");
    let port = common::free_port();
    let mut child = Command::new(osprey_bin())
        .args([
            "-H",
            &format!("127.0.0.1:{port}"),
            "-l",
            log.to_str().unwrap(),
            "-L",
            "info",
        ])
        .spawn()
        .unwrap();
    common::wait_for_port(port, std::time::Duration::from_secs(10));
    common::signal(&child, "TERM");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("listening on 127.0.0.1"), "{text}");
    assert!(text.contains("stopped"), "{text}");
}

#[test]
fn default_config_serves_hello_and_benchmark() {
    let port = common::free_port();
    let mut child = Command::new(osprey_bin())
        .args(["-H", &format!("127.0.0.1:{port}")])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for_port(port, std::time::Duration::from_secs(10));
    let (ok, body) = common::curl(&[&format!("http://127.0.0.1:{port}/benchmark-inprocess")]);
    let (ok2, hello) = common::curl(&[&format!("http://127.0.0.1:{port}/hello")]);
    common::signal(&child, "TERM");
    let _ = child.wait();
    assert!(ok && ok2);
    assert_eq!(body, "<p>Hello, world!</p>");
    assert!(hello.contains("Hello, world!"));
}

/// NXWEB 3.x's own sample configuration (adapted only where Osprey lacks a module) is read
/// as it is, and a server started on it answers its routes.
#[test]
fn nxweb_sample_configuration_loads_and_serves() {
    use image::{ImageFormat, RgbImage};
    let sample_path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/nxweb/nxweb_config.json");
    let sample = std::fs::read_to_string(&sample_path).unwrap();
    let work = TempDir::new("nxweb");
    work.write("www/index.htm", "<p>nxweb index</p>");
    let mut png = std::io::Cursor::new(Vec::new());
    RgbImage::from_pixel(64, 48, image::Rgb([10, 200, 30]))
        .write_to(&mut png, ImageFormat::Png)
        .unwrap();
    work.write("www/pic.png", png.into_inner());
    let wd = work.path().to_str().unwrap();
    let (ok, text) = run(&["-t", "-w", wd, "-c", sample_path.to_str().unwrap()]);
    assert!(ok, "{text}");

    // The file's backends (localhost:8000 and :8080) become this test's upstream.
    let up = upstream::Upstream::start("up");
    let config = sample
        .replace("localhost:8000", &up.address())
        .replace("localhost:8080", &up.address());
    let srv = Server::start_with(&config, &["-w", wd]);
    for path in ["/benchmark-inprocess", "/benchmark-inworker"] {
        let r = srv.get(path);
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, "<p>Hello, world!</p>"),
            "{path}"
        );
    }
    assert_eq!(srv.get("/hello").status, 200);
    // sendfile with NXWEB's index_file.
    assert_eq!(srv.get("/").text(), "<p>nxweb index</p>");
    // `"uri": ""`: the path below the prefix as it is; proxy_copy_host.
    let r = srv.get("/backend1/a/b?q=1");
    assert_eq!((r.status, r.text().as_str()), (200, "up GET /a/b?q=1"));
    assert!(up
        .state
        .last_head
        .lock()
        .unwrap()
        .contains("Host: localhost"));
    assert_eq!(srv.get("/backend2").text(), "up GET /");
    // The image filter on the sendfile route, with the route's `dir` and NXWEB's
    // `modules.image_filter` (object commands, a free-form sign_key).
    for path in [
        "/pic.50x50.png",
        "/pic.c200x100.png",
        "/pic.f100x100xFF8800.png",
    ] {
        let r = srv.get(path);
        assert_eq!(
            (r.status, r.header("content-type")),
            (200, Some("image/png")),
            "{path}"
        );
    }
    assert_eq!(srv.get("/pic.77x77.png").status, 403);
    let key = "xbLBZeqSsUgfKWooMKoh0r1gjzqG856yVCMLf1pz";
    let sig = osprey_image::sign::sign(key.as_bytes(), "/pic.77x77.png");
    assert_eq!(srv.get(&format!("/pic.77x77.png?sig={sig}")).status, 200);
}

/// Logs an operator can live with: no colour codes in a redirected log, identical warnings
/// rate-limited, and a start-up error printed once.
#[test]
fn error_log_is_plain_rate_limited_and_says_an_error_once() {
    // A backend nobody listens on: every request logs the same warning.
    let dead = common::listener();
    let address = dead.local_addr().unwrap();
    drop(dead);
    let mut srv = Server::start(&format!(
        r#"{{"backends": {{"b": {{"connect": "{address}"}}}},
            "routing": [{{"handler": "http_proxy", "backend": "b"}}]}}"#
    ));
    for _ in 0..40 {
        assert_eq!(srv.get("/x").status, 502);
    }
    // At exit the count of what was held back is written.
    assert!(srv.stop().success());
    let log = srv.log_text();
    assert!(
        log.contains("similar messages suppressed: upstream attempt failed: connect failed"),
        "{log}"
    );
    assert!(
        !log.contains('\x1b'),
        "colour codes in a redirected log:\n{log}"
    );
    let repeated = log
        .lines()
        .filter(|l| l.contains("upstream attempt failed: connect failed"))
        .filter(|l| !l.contains("suppressed"))
        .count();
    assert!(
        (1..=5).contains(&repeated),
        "{repeated} identical warnings written:\n{log}"
    );
    assert!(log.contains("listening on"), "{log}");

    // The port is taken: said once (not by the logger and again on standard error).
    let taken = common::listener();
    let port = taken.local_addr().unwrap().port();
    let out = Command::new(osprey_bin())
        .args(["-H", &format!("127.0.0.1:{port}"), "--workers", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");
    assert!(!err.contains('\x1b'), "{err}");
}

/// Network threads are `network_threads` / `--network-threads` ("worker" names only the blocking
/// pool); the first names, `workers` / `--workers`, are accepted aliases, and an error names the
/// key as written.
#[test]
fn network_threads_and_their_old_name() {
    for key in ["network_threads", "workers"] {
        let (ok, _) = common::check_config(&format!("{{\"{key}\": 2}}"), &[]);
        assert!(ok, "{key}");
        let (ok, text) = common::check_config(&format!("{{\n\"{key}\": 0}}"), &[]);
        assert!(!ok);
        assert!(
            text.contains(&format!(":2: key `{key}`: must be at least 1")),
            "{text}"
        );
    }
    for flag in ["--network-threads", "--workers"] {
        let (ok, text) = common::check_config("{}", &[flag, "0"]);
        assert!(
            !ok && text.contains("--network-threads must be at least 1"),
            "{flag}: {text}"
        );
        let (ok, text) = common::check_config("{}", &[flag, "3"]);
        assert!(ok, "{flag}: {text}");
    }
}
