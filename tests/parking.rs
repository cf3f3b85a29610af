//! When a quiet keep-alive connection parks (`net::park`: its socket leaves tokio's event loop
//! for the thread's lot, an epoll set of its own), seen from outside the real binary: the
//! lot's epoll set is the one of the server's sets that watches no eventfd, and
//! `/proc/PID/fdinfo` lists the sockets in it.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{find, Server, TempDir};

/// Longer than a few sweeps (50 ms each), far shorter than two seconds.
const SHORT: Duration = Duration::from_millis(400);
/// Long enough for a quiet keep-alive connection to park (two seconds of sweeps, and margin).
const PARKS: Duration = Duration::from_millis(2400);
/// More than loopback's socket buffers take: the server waits for the client to read.
const LARGE: usize = 16 << 20;

fn start(site: &TempDir) -> Server {
    let config = format!(
        r#"{{"routing": [{{"handler": "sendfile", "dir": "{}"}}]}}"#,
        site.path().join("www").display()
    );
    Server::start_custom(&config, &[], 1, &[])
}

/// Sockets in the server's parked-connection lot.
fn parked(pid: u32) -> usize {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
    let link = |fd: &str| {
        std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            .map(|l| l.display().to_string())
            .unwrap_or_default()
    };
    let mut in_lot = 0;
    for fd in fds.flatten() {
        let fd = fd.file_name().to_string_lossy().into_owned();
        if link(&fd) != "anon_inode:[eventpoll]" {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap_or_default();
        let targets: Vec<String> = info
            .lines()
            .filter_map(|l| l.strip_prefix("tfd:"))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect();
        // A tokio runtime's set watches its eventfd; the lot's watches sockets only.
        if targets.iter().all(|t| link(t).starts_with("socket:")) {
            in_lot += targets.len();
        }
    }
    in_lot
}

/// [`parked`] once it is `want`, or after a second: the server parks a connection just after
/// its answer has left, so a client may read it first.
fn parked_soon(pid: u32, want: usize) -> usize {
    for _ in 0..100 {
        if parked(pid) == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    parked(pid)
}

/// Ask for `path` and read its whole answer, the client's reading starting after `pause`.
fn fetch(s: &mut TcpStream, path: &str, pause: Duration) -> usize {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
        .unwrap();
    std::thread::sleep(pause);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let end = loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the head");
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = find(&got, b"\r\n\r\n") {
            break end + 4;
        }
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap();
    let mut rest = got.len() - end;
    while rest < length {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed in the body");
        rest += n;
    }
    length
}

/// A client that had to be waited for while it read its first answer (a large file) is not
/// quiet when that answer has left: it parks only once quiet for two seconds, as after any
/// later request, not at the next sweep (each park and return costs four `epoll_ctl` and a
/// task). A client with a small first answer still parks at once.
#[test]
fn a_client_reading_a_large_first_answer_is_not_parked_at_the_next_sweep() {
    let site = TempDir::new("parking");
    site.write("www/large.bin", vec![b'x'; LARGE]);
    site.write("www/small.txt", "small\n");
    let srv = start(&site);
    let pid = srv.child.id();

    let mut small = srv.connect();
    assert_eq!(fetch(&mut small, "/small.txt", Duration::ZERO), 6);
    std::thread::sleep(SHORT);
    assert_eq!(parked(pid), 1, "a small first answer: parked at once");

    let mut large = srv.connect();
    assert_eq!(
        fetch(&mut large, "/large.bin", Duration::from_millis(200)),
        LARGE
    );
    std::thread::sleep(SHORT);
    assert_eq!(
        parked(pid),
        1,
        "the large answer's client is not parked yet"
    );

    std::thread::sleep(PARKS);
    assert_eq!(parked(pid), 2, "quiet for two seconds: parked");
    // And served from the lot when it asks again.
    assert_eq!(fetch(&mut large, "/small.txt", Duration::ZERO), 6);
    assert_eq!(fetch(&mut small, "/small.txt", Duration::ZERO), 6);
}

/// A parked connection whose next answer leaves at once stays in the lot (no `epoll_ctl`, no
/// task: nginx keeps a connection in its one epoll set); one whose answer has to wait leaves
/// it for a task, and comes back once quiet.
#[test]
fn a_parked_connection_answered_at_once_stays_parked() {
    let site = TempDir::new("parking");
    site.write("www/large.bin", vec![b'x'; LARGE]);
    site.write("www/small.txt", "small\n");
    let srv = start(&site);
    let pid = srv.child.id();
    let mut s = srv.connect();
    for round in 0..5 {
        assert_eq!(fetch(&mut s, "/small.txt", Duration::ZERO), 6);
        assert_eq!(parked_soon(pid, 1), 1, "round {round}: in the lot");
    }
    let mut pipelined = Vec::new();
    for _ in 0..3 {
        pipelined.extend_from_slice(b"GET /small.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    }
    s.write_all(&pipelined).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.windows(6).filter(|w| w == b"small\n").count() < 3 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(
        parked(pid),
        1,
        "pipelined requests answered at once: in the lot"
    );

    let pause = Duration::from_millis(200);
    assert_eq!(fetch(&mut s, "/large.bin", pause), LARGE);
    std::thread::sleep(SHORT);
    assert_eq!(
        parked(pid),
        0,
        "waited for its client: out of the lot, with a task"
    );
    std::thread::sleep(PARKS);
    assert_eq!(parked(pid), 1, "quiet for two seconds: parked again");
}
