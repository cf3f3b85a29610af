//! Memory held by idle keep-alive connections: open many, make one request on each, then
//! measure how much the server's resident memory grew.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::servers::rss_kib;

/// Bytes of server RSS per idle keep-alive connection.
pub fn bytes_per_connection(pid: u32, port: u16, count: usize) -> Result<f64, String> {
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(pid);
    let mut conns = Vec::with_capacity(count);
    let request = b"GET /benchmark-inprocess HTTP/1.1\r\nHost: bench\r\n\r\n";
    let mut buf = [0u8; 1024];
    for i in 0..count {
        let mut s =
            TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connection {i}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        s.write_all(request).map_err(|e| e.to_string())?;
        let n = s
            .read(&mut buf)
            .map_err(|e| format!("connection {i}: {e}"))?;
        if !buf[..n].starts_with(b"HTTP/1.1 200") {
            return Err(format!("connection {i}: unexpected answer"));
        }
        conns.push(s);
    }
    // Osprey parks a connection quiet for two seconds (conn/wait.rs `QUIET_SWEEPS`).
    std::thread::sleep(Duration::from_millis(3000));
    let after = rss_kib(pid);
    drop(conns);
    Ok((after.saturating_sub(before) * 1024) as f64 / count as f64)
}

/// Raise this process's open-file limit (children inherit it).
pub fn raise_fd_limit(want: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let hard = hard.max(want);
        let _ = setrlimit(Resource::RLIMIT_NOFILE, soft.max(want), hard);
    }
}
