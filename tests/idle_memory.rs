//! Memory of idle keep-alive connections, measured on the real binary: what 2,000 of them
//! (one request each, then quiet) add to its resident memory. It does not depend on load: a
//! connection answered on arrival parks at once (no task, no event-loop registration), and
//! the heap grows by small pages, not 2 MiB at a time (`allocator::small_pages`).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{memory, Server};

const CONNECTIONS: usize = 2000;
/// Issue 20's target. About 160 bytes are kept today: the lot's spot (32, and its vector's
/// slack), the `Peer` and its address text; a task cell and a registration were 512 more.
const MAX_BYTES_PER_CONNECTION: u64 = 400;

#[test]
fn idle_keep_alive_connections_cost_under_400_bytes_each() {
    // Room for the connections, in this process and in the server it starts.
    use nix::libc;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a local struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    let need = CONNECTIONS as u64 + 256;
    if limit.rlim_max < need {
        eprintln!(
            "skipped: the open-file limit ({}) is below {need}",
            limit.rlim_max
        );
        return;
    }
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);

    let config =
        r#"{"load": [{"so": "testkit"}], "routing": [{"prefix": "/echo", "handler": "echo"}]}"#;
    let srv = Server::start_custom(config, &[], 1, &[]);
    let pid = srv.child.id();
    let request = b"GET /echo HTTP/1.1\r\nHost: a\r\n\r\n";
    let mut buf = [0u8; 1024];
    let mut ask = |s: &mut TcpStream| {
        s.write_all(request).unwrap();
        let n = s.read(&mut buf).unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    };
    // Warm up: the first connections grow the pools and tables that any load grows.
    let warm: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut s = srv.connect();
            ask(&mut s);
            s
        })
        .collect();
    drop(warm);
    std::thread::sleep(Duration::from_millis(300));
    let before = memory(pid, "VmRSS");
    let idle: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| {
            let mut s = srv.connect();
            ask(&mut s);
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let after = memory(pid, "VmRSS");
    let each = after.saturating_sub(before) / CONNECTIONS as u64;
    eprintln!("{each} bytes of RSS per idle connection");
    assert!(
        each <= MAX_BYTES_PER_CONNECTION,
        "{CONNECTIONS} idle connections grew the server by {each} bytes each"
    );
    drop(idle);
}
