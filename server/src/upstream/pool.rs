//! Idle keep-alive connections to upstream servers, per network thread (a socket is
//! registered with its thread's reactor, so it never leaves the thread).

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::conn::Conn;

struct Idle {
    stream: Conn,
    since: Instant,
    /// The server's address generation when it was put (a moved server's old connections are
    /// not reused).
    generation: u64,
}

/// A thread's idle connections by (backend id, server index).
#[derive(Default)]
struct Pools {
    idle: HashMap<(u32, usize), Vec<Idle>>,
    /// `super::retired()` when the pools were last purged of backends that are gone.
    retired_seen: u64,
}

impl Pools {
    /// The list for one server, after closing the connections of backends a reload removed.
    fn list(&mut self, backend: u32, server: usize) -> &mut Vec<Idle> {
        let retired = super::retired();
        if retired != self.retired_seen {
            self.retired_seen = retired;
            self.idle.retain(|(id, _), _| super::is_live(*id));
        }
        self.idle.entry((backend, server)).or_default()
    }
}

thread_local! {
    static IDLE: RefCell<Pools> = RefCell::new(Pools::default());
}

/// The most recently used live connection to server `server` of backend `backend` at its
/// address of `generation`.
pub fn take(backend: u32, server: usize, max_idle: Duration, generation: u64) -> Option<Conn> {
    IDLE.with(|idle| {
        let mut pools = idle.borrow_mut();
        let list = pools.list(backend, server);
        while let Some(c) = list.pop() {
            if c.generation == generation && c.since.elapsed() < max_idle && still_open(&c.stream) {
                return Some(c.stream);
            }
        }
        None
    })
}

/// Keep a connection whose response was read completely; at most `limit` per server.
pub fn put(backend: u32, server: usize, stream: Conn, limit: usize, generation: u64) {
    if limit == 0 {
        return;
    }
    IDLE.with(|idle| {
        let mut pools = idle.borrow_mut();
        let list = pools.list(backend, server);
        if list.len() >= limit {
            list.remove(0);
        }
        list.push(Idle {
            stream,
            since: Instant::now(),
            generation,
        });
    })
}

/// An idle connection must have nothing to read: end of stream means the upstream closed it,
/// and stray bytes mean it is out of step.
fn still_open(stream: &Conn) -> bool {
    use nix::sys::socket::{recv, MsgFlags};
    let mut byte = [0u8; 1];
    matches!(
        recv(
            stream.raw_fd(),
            &mut byte,
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT
        ),
        Err(nix::errno::Errno::EAGAIN)
    )
}
