//! Idle keep-alive connections to upstream servers, per network thread (a socket is
//! registered with its thread's reactor, so it never leaves the thread).

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

struct Idle {
    stream: TcpStream,
    since: Instant,
}

thread_local! {
    static IDLE: RefCell<HashMap<(u32, usize), Vec<Idle>>> = RefCell::new(HashMap::new());
}

/// The most recently used live connection to server `server` of backend `backend`.
pub fn take(backend: u32, server: usize, max_idle: Duration) -> Option<TcpStream> {
    IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        let list = idle.get_mut(&(backend, server))?;
        while let Some(c) = list.pop() {
            if c.since.elapsed() < max_idle && still_open(&c.stream) {
                return Some(c.stream);
            }
        }
        None
    })
}

/// Keep a connection whose response was read completely; at most `limit` per server.
pub fn put(backend: u32, server: usize, stream: TcpStream, limit: usize) {
    if limit == 0 {
        return;
    }
    IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        let list = idle.entry((backend, server)).or_default();
        if list.len() >= limit {
            list.remove(0);
        }
        list.push(Idle {
            stream,
            since: Instant::now(),
        });
    })
}

/// An idle connection must have nothing to read: end of stream means the upstream closed it,
/// and stray bytes mean it is out of step.
fn still_open(stream: &TcpStream) -> bool {
    use nix::sys::socket::{recv, MsgFlags};
    let mut byte = [0u8; 1];
    matches!(
        recv(
            stream.as_raw_fd(),
            &mut byte,
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT
        ),
        Err(nix::errno::Errno::EAGAIN)
    )
}
