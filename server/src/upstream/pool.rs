//! Idle keep-alive connections to upstream servers, per network thread (a socket is
//! registered with its thread's reactor, so it never leaves the thread).

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::conn::Conn;
use super::state::{servers_gone, ServerState};
use crate::int_hash::IntMap;

struct Idle {
    stream: Conn,
    /// When it was put back, in the thread's coarse clock (`conn::wait::clock`, milliseconds
    /// at the last sweep): no clock read per request.
    since: u64,
}

struct ServerPool {
    server: Weak<ServerState>,
    /// Oldest first: taken from and put back at the end.
    idle: Vec<Idle>,
    /// The backend's `keepalive`: how many stay once no burst needs more (`trim`).
    limit: usize,
}

/// A thread's idle connections by server (`ServerState::key`).
#[derive(Default)]
struct Pools {
    /// A server's key is a counter: unique, so one multiplication spreads it (`IntMap`).
    by_server: IntMap<u64, ServerPool>,
    /// `servers_gone()` when the pools were last purged of servers that are gone.
    gone_seen: u64,
}

impl Pools {
    /// The list for one server, after closing the connections of servers that are gone (their
    /// address no longer resolves, or a reload removed their backend).
    fn pool(&mut self, server: &Arc<ServerState>) -> &mut ServerPool {
        let gone = servers_gone();
        if gone != self.gone_seen {
            self.gone_seen = gone;
            self.by_server.retain(|_, p| p.server.strong_count() > 0);
        }
        self.by_server
            .entry(server.key)
            .or_insert_with(|| ServerPool {
                server: Arc::downgrade(server),
                idle: Vec::new(),
                limit: 0,
            })
    }
}

thread_local! {
    static IDLE: RefCell<Pools> = RefCell::new(Pools::default());
}

/// The most recently used live connection to `server`. `replayable`: the request can go again
/// on a fresh connection if this one turns out closed, so the reactor's word that nothing
/// arrived on it is enough (no system call); otherwise the socket itself is asked.
pub fn take(server: &Arc<ServerState>, max_idle: Duration, replayable: bool) -> Option<Conn> {
    IDLE.with(|idle| {
        let mut pools = idle.borrow_mut();
        let list = &mut pools.pool(server).idle;
        // The coarse clock may lag a tick behind either end: counting one tick more never
        // keeps a connection past `max_idle`.
        let limit = max_idle.saturating_sub(crate::conn::wait::TICK).as_millis() as u64;
        let now = crate::conn::wait::clock();
        while let Some(c) = list.pop() {
            if now.saturating_sub(c.since) < limit
                && ((replayable && c.stream.quiet()) || still_open(&c.stream))
            {
                return Some(c.stream);
            }
        }
        None
    })
}

/// Keep a connection whose response was read completely. More than `limit` may be kept
/// until `trim` finds them idle for a whole tick: when more requests are in flight than
/// `limit` (wrk -c200 against `keepalive` 64), closing the surplus as each response ends made
/// the next burst connect again — 0.45 new upstream connections per request, every one
/// taking a port still in TIME_WAIT, and half of the proxy's CPU.
pub fn put(server: &Arc<ServerState>, stream: Conn, limit: usize) {
    if limit == 0 {
        return;
    }
    IDLE.with(|idle| {
        let mut pools = idle.borrow_mut();
        let pool = pools.pool(server);
        pool.limit = limit;
        pool.idle.push(Idle {
            stream,
            since: crate::conn::wait::clock(),
        });
    })
}

/// Close, oldest first, the connections beyond a server's `keepalive` that no request took
/// since before the last sweep (idle one to two ticks); run by the network thread's sweep.
pub fn trim() {
    let now = crate::conn::wait::clock();
    let tick = crate::conn::wait::TICK.as_millis() as u64;
    IDLE.with(|idle| {
        let Ok(mut pools) = idle.try_borrow_mut() else {
            return;
        };
        for pool in pools.by_server.values_mut() {
            let surplus = pool.idle.len().saturating_sub(pool.limit);
            let unused = pool.idle[..surplus]
                .iter()
                .take_while(|c| now.saturating_sub(c.since) >= 2 * tick)
                .count();
            pool.idle.drain(..unused);
        }
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
