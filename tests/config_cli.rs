//! Configuration files and the command line.

mod common;

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
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
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
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (ok, body) = common::curl(&[&format!("http://127.0.0.1:{port}/benchmark-inprocess")]);
    let (ok2, hello) = common::curl(&[&format!("http://127.0.0.1:{port}/hello")]);
    common::signal(&child, "TERM");
    let _ = child.wait();
    assert!(ok && ok2);
    assert_eq!(body, "<p>Hello, world!</p>");
    assert!(hello.contains("Hello, world!"));
}
