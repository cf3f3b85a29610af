//! Parked connections: a plain HTTP/1 connection quiet between requests (see `conn::wait`)
//! waits here without a task or an event-loop registration of its own. The thread's lot keeps
//! its socket, peer, configuration and counters (a few words, as nginx keeps an idle
//! connection) and watches the sockets with an epoll set of its own. When the client sends (or
//! closes), the connection is answered as a new one is (`accept::serve_fresh`: without waiting,
//! and with a task again only if it then has to wait); one that rests again stays in its spot
//! and in the set, as nginx keeps a connection in its one epoll set.
//!
//! What an idle connection costs otherwise: a tokio task cell (256 bytes) and tokio's
//! registration of the socket (256 bytes: cache-line aligned, in an `Arc`).

use std::cell::RefCell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;

use nix::libc;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::accept::serve_fresh;
use super::tcp::FreshTcp;
use crate::conn::{wait, Conn, Resting};
use crate::dispatch::Peer;
use crate::server::{Counted, Shared};
use crate::stats::ConnStats;

/// A parked connection (`Resting` spread out: its padding and the socket's share 8 bytes).
struct Parked {
    tcp: std::net::TcpStream,
    stats: ConnStats,
    peer: Arc<Peer>,
    shared: Arc<Shared>,
    due: u64,
    counted: Counted,
}

/// The thread's parked connections; a connection's index is its epoll event's data.
#[derive(Default)]
struct Lot {
    /// The epoll set of parked sockets (see [`start`]).
    epoll: Option<RawFd>,
    spots: Vec<Option<Parked>>,
    free: Vec<u32>,
}

impl Lot {
    fn insert(&mut self, parked: Parked) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.spots[i as usize] = Some(parked);
                i
            }
            None => {
                self.spots.push(Some(parked));
                (self.spots.len() - 1) as u32
            }
        }
    }

    fn remove(&mut self, index: u32) -> Option<Parked> {
        let parked = self.spots.get_mut(index as usize)?.take()?;
        self.free.push(index);
        Some(parked)
    }

    /// The connection of spot `index`, which stays reserved (its socket is still in the set)
    /// until it is given back ([`Lot::put`]) or let go ([`leave`]).
    fn take(&mut self, index: u32) -> Option<Parked> {
        self.spots.get_mut(index as usize)?.take()
    }

    fn put(&mut self, index: u32, parked: Parked) {
        self.spots[index as usize] = Some(parked);
    }
}

thread_local! {
    static LOT: RefCell<Lot> = RefCell::new(Lot::default());
}

/// Park a connection that [`Conn::drive`] ended with `Served::Parked`: its task ends, and the
/// lot serves it again when its client sends. (A failure closes it.)
pub fn park(conn: Conn<tokio::net::TcpStream>, counted: Counted) {
    if wait::stopping() {
        return;
    }
    let (tcp, resting) = conn.into_parked();
    // Leaves tokio's event loop (and frees its registration).
    let Ok(tcp) = tcp.into_std() else { return };
    lay(tcp, resting, counted);
}

/// Whether this thread parks connections now (its lot is ready and the server not stopping).
pub fn open() -> bool {
    !wait::stopping() && LOT.with(|l| l.borrow().epoll.is_some())
}

/// Park a connection never registered with tokio (just accepted, or served from its spot in
/// the lot) that answered on arrival and rests ([`Conn::rests`]): it costs the lot's spot and
/// nothing more while it stays quiet. One back from spot `spot` takes it again, its socket
/// still in the set. (A failure closes it.)
pub fn park_fresh(conn: Conn<FreshTcp>, counted: Counted, spot: Option<u32>) {
    let (tcp, resting) = conn.into_parked();
    match spot {
        Some(index) => {
            let parked = Parked::new(tcp.0, resting, counted);
            LOT.with(|l| l.borrow_mut().put(index, parked));
        }
        None => lay(tcp.0, resting, counted),
    }
}

/// The connection served from spot `index` leaves the lot (for a task, or closed): its socket
/// out of the set before the spot is reused.
pub fn leave(index: u32, tcp: &std::net::TcpStream) {
    if let Some(epoll) = LOT.with(|l| l.borrow().epoll) {
        // SAFETY: a plain system call on open descriptors.
        unsafe {
            libc::epoll_ctl(
                epoll,
                libc::EPOLL_CTL_DEL,
                tcp.as_raw_fd(),
                std::ptr::null_mut(),
            )
        };
    }
    vacate(index);
}

/// The connection served from spot `index` is closed: the spot is free again.
pub fn vacate(index: u32) {
    LOT.with(|l| l.borrow_mut().free.push(index));
}

impl Parked {
    fn new(tcp: std::net::TcpStream, resting: Resting, counted: Counted) -> Parked {
        let Resting {
            peer,
            shared,
            stats,
            due,
        } = resting;
        Parked {
            tcp,
            stats,
            peer,
            shared,
            due,
            counted,
        }
    }
}

/// Put a socket in the lot's set, with what its connection keeps.
fn lay(tcp: std::net::TcpStream, resting: Resting, counted: Counted) {
    let Some(epoll) = LOT.with(|l| l.borrow().epoll) else {
        return;
    };
    let fd = tcp.as_raw_fd();
    let parked = Parked::new(tcp, resting, counted);
    let index = LOT.with(|l| l.borrow_mut().insert(parked));
    let mut event = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
        u64: index.into(),
    };
    // SAFETY: `fd` is the open socket just parked; `event` is valid for the call.
    if unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event) } < 0 {
        drop(LOT.with(|l| l.borrow_mut().remove(index)));
    }
}

/// How many connections are parked on this thread.
#[cfg(test)]
pub fn parked() -> usize {
    LOT.with(|l| {
        let l = l.borrow();
        l.spots.len() - l.free.len()
    })
}

/// Close every parked connection (the server stops: they are between requests).
pub fn stop() {
    let all: Vec<Parked> = LOT.with(|l| {
        let mut l = l.borrow_mut();
        l.free.clear();
        l.spots.drain(..).flatten().collect()
    });
    drop(all);
}

/// Give this network thread its lot: the epoll set of parked sockets, and the task that
/// watches it. (Made up front: a connection parks when descriptors may have run out.) Until
/// then, or if it cannot be made, the thread's connections do not park.
pub fn start() {
    // SAFETY: a plain system call; the descriptor it returns is owned below.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        tracing::error!(
            "idle connections will not park: epoll_create1: {}",
            std::io::Error::last_os_error()
        );
        return;
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: the lot owns the descriptor, which stays open and the same for the life of
    // the AsyncFd (the thread's).
    match unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) } {
        Ok(watched) => {
            tokio::task::spawn_local(watch(Rc::new(watched)));
            LOT.with(|l| l.borrow_mut().epoll = Some(fd));
            wait::allow_parking();
        }
        Err(e) => tracing::error!("idle connections will not park: {e}"),
    }
}

/// Serve parked connections as their clients send. (Those whose timeout passed are closed by
/// the thread's sweep, `conn::wait::sweep`, with [`expire`].)
async fn watch(epoll: Rc<AsyncFd<OwnedFd>>) {
    const BATCH: usize = 64;
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; BATCH];
    let fd = epoll.as_raw_fd();
    loop {
        let Ok(mut ready) = epoll.readable().await else {
            return;
        };
        // SAFETY: `events` has room for BATCH events; a zero timeout never blocks.
        let n = unsafe { libc::epoll_wait(fd, events.as_mut_ptr(), BATCH as i32, 0) };
        let n = usize::try_from(n).unwrap_or(0);
        if n < BATCH {
            ready.clear_ready();
        }
        for e in &events[..n] {
            unpark(e.u64 as u32);
        }
    }
}

/// The client of parked connection `index` sent (or closed): serve it, from its spot (it
/// stays in the lot if it rests again, see `accept::serve_fresh`).
fn unpark(index: u32) {
    let Some(p) = LOT.with(|l| l.borrow_mut().take(index)) else {
        return;
    };
    let conn = Conn::resume(FreshTcp(p.tcp), p.peer, p.shared, p.stats);
    if let Some(serving) = serve_fresh(conn, p.counted, Some(index)) {
        tokio::task::spawn_local(serving);
    }
}

/// Close the parked connections whose keep-alive (or header) timeout has passed (at each
/// sweep of the thread's deadlines).
pub fn expire() {
    let now = wait::clock();
    let expired: Vec<Parked> = LOT.with(|l| {
        let mut l = l.borrow_mut();
        let due: Vec<u32> = (0..l.spots.len() as u32)
            .filter(|&i| matches!(&l.spots[i as usize], Some(p) if p.due <= now))
            .collect();
        due.into_iter().filter_map(|i| l.remove(i)).collect()
    });
    // Closing a socket takes it out of the epoll set.
    drop(expired);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::Duration;

    /// What the lot keeps for a parked connection (beside its spot's free-list entry), in
    /// place of a 256-byte task cell and a 256-byte event-loop registration.
    #[test]
    fn a_parked_connection_is_a_few_words() {
        let size = std::mem::size_of::<Option<Parked>>();
        assert!(size <= 32, "a parked connection grew to {size} bytes");
    }

    #[test]
    fn a_parked_connection_is_served_when_its_client_sends_and_closed_when_it_leaves() {
        let shared = Shared::for_tests(r#"{"workers": 1}"#);
        let runtime = crate::server::plain_runtime();
        runtime.block_on(async {
            start();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let peer = Arc::new(Peer {
                remote: "127.0.0.1:1".into(),
                secure: false,
                http2: false,
            });
            let mut client = std::net::TcpStream::connect(addr).unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            park(
                Conn::new(tcp, peer.clone(), shared.clone()),
                Counted::for_test(),
            );
            assert_eq!(parked(), 1);
            let answer = tokio::task::spawn_blocking(move || {
                client
                    .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                    .unwrap();
                let mut buf = [0u8; 1024];
                let n = client.read(&mut buf).unwrap();
                (String::from_utf8_lossy(&buf[..n]).into_owned(), client)
            });
            let (answer, _first) = answer.await.unwrap();
            assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
            assert_eq!(parked(), 1, "served, and resting in its spot again");

            let client = std::net::TcpStream::connect(addr).unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            park(Conn::new(tcp, peer, shared), Counted::for_test());
            assert_eq!(parked(), 2);
            drop(client);
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(parked(), 1, "closed by its client: out of the lot");
            // Before the thread's locals go (as a network thread does when it stops).
            stop();
        });
    }
}
