//! Helpers shared by the operations tests (daemon, reload, access log, status).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{find, Response, Server};

/// Poll `check` until it holds (panics with `what` after `limit`).
pub fn wait_for(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until `file` holds `needle` at least `count` times.
pub fn wait_file(file: &Path, needle: &str, count: usize) -> String {
    let mut text = String::new();
    wait_for(
        &format!("{count} × {needle:?} in {}", file.display()),
        Duration::from_secs(15),
        || {
            text = std::fs::read_to_string(file).unwrap_or_default();
            text.matches(needle).count() >= count
        },
    );
    text
}

/// Wait until the server's error log holds `needle` at least `count` times.
pub fn wait_log(srv: &Server, needle: &str, count: usize) -> String {
    wait_file(&srv.log, needle, count)
}

/// One GET on a keep-alive connection; the response must carry a Content-Length.
pub fn get_on(s: &mut TcpStream, path: &str) -> std::io::Result<Response> {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())?;
    read_one(s)
}

/// Read one response with a Content-Length body.
pub fn read_one(s: &mut TcpStream) -> std::io::Result<Response> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        if let Some(end) = find(&raw, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            if raw.len() >= end + 4 + len {
                return Ok(Response::parse(&raw[..end + 4 + len]));
            }
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("closed after {} bytes", raw.len()),
            ));
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

/// Send a signal by name to a pid.
pub fn kill(pid: u32, name: &str) {
    let _ = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status();
}

/// Is a process alive (and not a zombie)?
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Children of `pid`, found through /proc.
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let rest = stat.rsplit(')').next().unwrap_or("");
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(pid) && fields[0] != "Z" {
            out.push(child);
        }
    }
    out
}

/// A line of /proc/<pid>/status, e.g. `Uid`.
pub fn proc_status(pid: u32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}
