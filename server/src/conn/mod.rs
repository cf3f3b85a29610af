//! A connection's life: read a head, read its body, dispatch, respond; keep-alive and
//! pipelining; timeouts; protocol errors answered with a status and a close.
//!
//! The connection is a state machine (`state`): [`Conn::advance`] does all it can without
//! waiting and says what it waits for — the socket to be readable, room to write, or the
//! current state's own step (a future: a body, a filter, the worker pool, a large body) — and
//! one driver, [`Conn::drive`], waits for that. The common request (no body, an inline
//! handler, a response in memory) is served inside `advance`, between two waits for the
//! socket; an idle connection's task is this struct and a small driver.

mod body;
pub mod io;
pub mod pool;
mod request;
mod respond;
mod state;
mod streamed;
mod tunnel;
pub mod wait;

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::dispatch::Peer;
use crate::server::Shared;
use crate::stats::ConnStats;
use io::Io;
use pool::Buffer;
use state::State;
pub use state::Wait;
use wait::{Deadline, Ended};

/// The HTTP/2 client preface: a cleartext connection that opens with it speaks h2c.
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How a connection's HTTP/1 service ended.
pub enum Served {
    Closed,
    /// It opened with the HTTP/2 preface (h2c by prior knowledge): see [`Conn::into_parts`].
    Http2,
    /// Quiet between requests, it parks: see [`Conn::into_parked`].
    Parked,
}

/// What a parked connection keeps (beside its socket) to serve its next request.
pub struct Resting {
    pub peer: Arc<Peer>,
    pub shared: Arc<Shared>,
    pub stats: ConnStats,
    /// When its keep-alive (or header) timeout ends, in `wait::clock` milliseconds.
    pub due: u64,
}

/// An HTTP/1 connection: its transport, where it stands, and everything it keeps between
/// requests. Its task owns one and drives it with [`Conn::drive`].
pub struct Conn<I> {
    io: I,
    peer: Arc<Peer>,
    /// The configuration of the current request (moves to a reloaded one between requests).
    shared: Arc<Shared>,
    state: State,
    /// Bytes read and not yet consumed (released while idle: the buffer is back in the pool).
    buf: Buffer,
    /// Bytes at the start of `buf` that answered pipelined requests used: dropped together
    /// when the connection next waits, rather than moving the rest after each request.
    spent: u32,
    /// Response bytes not yet written.
    out: Buffer,
    stats: ConnStats,
    /// Header and keep-alive timeouts, and the stop signal, while waiting for the client.
    deadline: Deadline,
    /// An answer had to wait for its client to take it (a large one): that client is still
    /// reading when the answer has left, so it is not taken for quiet after its first answer
    /// (`Waiting::IdleFirst`).
    waited_to_write: bool,
}

impl<I: Io> Conn<I> {
    /// A connection on `io`. A plain one whose first bytes are the HTTP/2 preface is h2c
    /// (prior knowledge), when the configuration enables HTTP/2.
    pub fn new(io: I, peer: Arc<Peer>, shared: Arc<Shared>) -> Self {
        Self::resume(io, peer, shared, ConnStats::accepted())
    }

    /// A connection back from parking (between requests, as it was).
    pub fn resume(io: I, peer: Arc<Peer>, shared: Arc<Shared>, stats: ConnStats) -> Self {
        Conn {
            io,
            peer,
            shared,
            state: State::Idle,
            buf: Buffer::default(),
            spent: 0,
            out: Buffer::default(),
            stats,
            deadline: Deadline::new(),
            waited_to_write: false,
        }
    }

    /// Serve requests until the connection closes or turns out to be HTTP/2.
    pub fn serve(&mut self) -> impl Future<Output = Served> + '_ {
        let wait = self.advance();
        self.drive(wait)
    }

    /// Answer, without waiting, what arrived with a new connection (usually all there is: one
    /// request, and a close): read what the socket has, and advance. Unless that was all
    /// ([`Wait::Done`] with [`Conn::served`] closed), go on with [`Conn::drive`] on a
    /// transport that can wait ([`Conn::with_io`]).
    pub fn arrived(&mut self) -> Wait {
        self.read();
        self.advance()
    }

    /// Its transport.
    pub fn io(&self) -> &I {
        &self.io
    }

    /// How the connection's service ended, once [`Wait::Done`].
    pub fn served(&self) -> Served {
        match self.state {
            State::Http2 => Served::Http2,
            State::Parked => Served::Parked,
            _ => Served::Closed,
        }
    }

    /// Whether it has answered a request and waits for the next with nothing buffered or
    /// owed (it can park at once: `net::accept::serve_fresh`).
    pub fn rests(&self) -> bool {
        matches!(self.state, State::Idle) && self.stats.served() > 0
    }

    /// The one driver: wait for what [`Conn::advance`] asks, and advance again, until done.
    // (`fn -> impl Future` rather than `async fn`: an `async fn` keeps its `&mut self` twice,
    // and every byte counts in an idle connection's task.)
    #[allow(clippy::manual_async_fn)]
    pub fn drive(&mut self, first: Wait) -> impl Future<Output = Served> + '_ {
        async move {
            let mut wait = first;
            loop {
                // A thread kept busy by its connections does not sleep, where it would look.
                crate::worker::look_at_inbox();
                match wait {
                    Wait::Read => match std::future::poll_fn(|cx| self.poll_wait(cx)).await {
                        Ok(()) => self.read(),
                        Err(Some(Ended::TimedOut)) if matches!(self.state, State::Head) => {
                            let e = crate::http::HttpError::new(
                                408,
                                "timed out reading the request headers",
                            );
                            self.state = State::failing(1, e);
                        }
                        Err(Some(Ended::Park)) => self.state = State::Parked,
                        Err(_) => self.state = State::Closed,
                    },
                    Wait::Write => {
                        self.waited_to_write = true;
                        let write = self.shared.timeouts.write;
                        if Box::pin(self.flush(write)).await.is_err() {
                            self.state = State::Closed;
                        }
                    }
                    Wait::Step => {
                        self.waited_to_write |= matches!(self.state, State::Writing(_));
                        self.state = self.step().await
                    }
                    Wait::Done => return self.served(),
                }
                wait = self.advance();
            }
        }
    }

    /// The transport, the bytes already read from it (after [`Served::Http2`]), the peer and
    /// the configuration.
    pub fn into_parts(mut self) -> (I, Vec<u8>, Arc<Peer>, Arc<Shared>) {
        let read = self.buf.take_vec();
        (self.io, read, self.peer, self.shared)
    }

    /// The transport and what the connection keeps while parked (after [`Served::Parked`]:
    /// it holds no buffer and owes no output).
    pub fn into_parked(self) -> (I, Resting) {
        let due = self.deadline.due();
        let resting = Resting {
            peer: self.peer,
            shared: self.shared,
            stats: self.stats,
            due,
        };
        (self.io, resting)
    }

    /// The same connection on another transport (its state carries over).
    pub fn with_io<J>(self, f: impl FnOnce(I) -> std::io::Result<J>) -> std::io::Result<Conn<J>> {
        Ok(Conn {
            io: f(self.io)?,
            peer: self.peer,
            shared: self.shared,
            state: self.state,
            buf: self.buf,
            spent: self.spent,
            out: self.out,
            stats: self.stats,
            deadline: self.deadline,
            waited_to_write: self.waited_to_write,
        })
    }

    /// Read what the socket has into the buffer; the end of the stream or a failure closes.
    fn read(&mut self) {
        match self.io.try_read(self.buf.ready()) {
            Ok(0) => self.state = State::Closed,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => self.state = State::Closed,
        }
    }

    /// Readable, or the wait ended (`None`: the transport failed).
    fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Option<Ended>>> {
        match self.io.poll_readable(cx) {
            Poll::Ready(ready) => Poll::Ready(ready.map_err(|_| None)),
            Poll::Pending => match self.deadline.check(cx.waker()) {
                Some(ended) => Poll::Ready(Err(Some(ended))),
                None => Poll::Pending,
            },
        }
    }

    /// Write what the transport takes now of `out`: whether all of it went. `last`: the
    /// connection closes next.
    fn flush_now(&mut self, last: bool) -> std::io::Result<bool> {
        let bufs = [&self.out[..]];
        let written = if last {
            self.io.try_write_last(&bufs)
        } else {
            self.io.try_write(&bufs)
        };
        match written {
            Ok(n) => {
                self.out.drain(..n);
                Ok(self.out.is_empty())
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn flush(&mut self, timeout: std::time::Duration) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        self.io.write_all(&[&self.out], timeout).await?;
        self.out.clear();
        Ok(())
    }
}

/// Whether `buf` is (the start of) the HTTP/2 preface, far enough to tell: no HTTP/1 method
/// we serve is `PRI`.
fn is_h2_preface(buf: &[u8]) -> bool {
    let n = buf.len().min(H2_PREFACE.len());
    n >= 4 && buf[..n] == H2_PREFACE[..n]
}
