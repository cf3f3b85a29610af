//! A connection's life: read a head, read its body, dispatch, respond; keep-alive and
//! pipelining; timeouts; protocol errors answered with a status and a close.
//!
//! The common request (no body, an inline handler, a response in memory) is served by plain
//! function calls between two waits for the socket; anything that has to wait (a body, a
//! filter, the worker pool, a file, a slow reader) continues in a boxed future (see
//! `request`), so an idle connection's task stays small.

mod body;
pub mod io;
mod pool;
mod request;
mod respond;
mod streamed;
mod tunnel;
pub mod wait;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::dispatch::{error_response, finished, BodyLoc, Finished, Peer};
use crate::http::parse::{parse_into, BodyFraming, Head, Span};
use crate::http::HttpError;
use crate::server::Shared;
use crate::stats::{Activity, ConnStats};
use io::Io;
use request::Stage;
use wait::{Deadline, Ended};

/// The HTTP/2 client preface: a cleartext connection that opens with it speaks h2c.
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How a connection's HTTP/1 service ended.
pub enum Served {
    Closed,
    /// It opened with the HTTP/2 preface (h2c by prior knowledge): see [`Conn::into_parts`].
    Http2,
}

/// An HTTP/1 connection: its transport and everything it keeps between requests. Its task
/// owns one and drives it with [`Conn::serve`], so the task's state is this struct and one
/// small future rather than copies of the same values nested in each other.
pub struct Conn<I> {
    io: I,
    peer: Arc<Peer>,
    /// The configuration of the current request (moves to a reloaded one between requests).
    shared: Arc<Shared>,
    /// Bytes read and not yet consumed (capacity 0 while idle: the buffer is back in the pool).
    buf: Vec<u8>,
    /// Response bytes not yet written.
    out: Vec<u8>,
    stats: ConnStats,
    /// Header and keep-alive timeouts, and the stop signal, while waiting for the client.
    deadline: Deadline,
}

/// What a new connection's first answers left to do.
pub enum Arrived {
    /// Answered, and closed.
    Closed,
    /// It has to wait: for more bytes, or to finish this request.
    Waits(Option<Box<Rest>>),
}

/// What is left of a request that has to wait (moved straight into a boxed future).
pub struct Rest(Waiting);

#[allow(clippy::large_enum_variant)]
enum Waiting {
    /// Its body is still to be read.
    Body(Box<Head>),
    Stage(Stage),
}

/// Why reading a head stopped.
enum HeadError {
    /// The peer went away or stayed idle: close quietly.
    Closed,
    /// Protocol error: answer it, then close.
    Http(HttpError),
    /// The HTTP/2 preface.
    Http2,
}

impl<I: Io> Conn<I> {
    /// A connection on `io`. A plain one whose first bytes are the HTTP/2 preface is h2c
    /// (prior knowledge), when the configuration enables HTTP/2.
    pub fn new(io: I, peer: Arc<Peer>, shared: Arc<Shared>) -> Self {
        Conn {
            io,
            peer,
            shared,
            buf: Vec::new(),
            out: Vec::new(),
            stats: ConnStats::accepted(),
            deadline: Deadline::new(),
        }
    }

    /// Serve requests until the connection closes or turns out to be HTTP/2.
    // (`fn -> impl Future` rather than `async fn`, here and in `read_head`: an `async fn` keeps
    // its `&mut self` twice, and every byte counts in an idle connection's task.)
    #[allow(clippy::manual_async_fn)]
    pub fn serve(&mut self) -> impl Future<Output = Served> + '_ {
        async move {
            let ended = loop {
                let head = match self.read_head().await {
                    Ok(head) => head,
                    Err(e) => break e,
                };
                // (Bound first: the `Result` must not live across the await.)
                let rest = match self.request_now(head) {
                    Ok(true) => continue,
                    Ok(false) => break HeadError::Closed,
                    Err(rest) => rest,
                };
                match rest.await {
                    Ok(true) => {}
                    Ok(false) => break HeadError::Closed,
                    Err(e) => {
                        tracing::debug!(peer = %self.peer.remote, "connection ended: {e}");
                        break HeadError::Closed;
                    }
                }
            };
            let served = match ended {
                // read_head flushed pending output before it waited.
                HeadError::Closed => Served::Closed,
                HeadError::Http2 => Served::Http2,
                HeadError::Http(e) => {
                    if let Err(e) = Box::pin(self.fail(1, e)).await {
                        tracing::debug!(peer = %self.peer.remote, "connection ended: {e}");
                    }
                    Served::Closed
                }
            };
            pool::give_buffer(std::mem::take(&mut self.out));
            if let Served::Closed = served {
                pool::give_buffer(std::mem::take(&mut self.buf));
            }
            served
        }
    }

    /// The transport, the bytes already read from it (after [`Served::Http2`]), the peer and
    /// the configuration.
    pub fn into_parts(self) -> (I, Vec<u8>, Arc<Peer>, Arc<Shared>) {
        (self.io, self.buf, self.peer, self.shared)
    }

    /// Serve a request whose head has arrived as far as that goes without waiting: `Ok`
    /// whether the connection stays open, or the rest of the request as a future, boxed as
    /// everything that waits mid-request (an idle connection's task must stay small).
    #[allow(clippy::type_complexity)]
    fn request_now(
        &mut self,
        head: Box<Head>,
    ) -> Result<bool, Pin<Box<impl Future<Output = std::io::Result<bool>> + '_>>> {
        self.answer_now(head)
            .map_err(|rest| Box::pin(self.request_rest(rest)))
    }

    /// [`Conn::request_now`], leaving what waits as a [`Rest`] (which goes straight into a box).
    #[allow(clippy::result_large_err)]
    fn answer_now(&mut self, head: Box<Head>) -> Result<bool, Rest> {
        // A request is served by the configuration current when its head arrived.
        crate::reload::refresh(&mut self.shared);
        if head.body != BodyFraming::None {
            return Err(Rest(Waiting::Body(head)));
        }
        let rest = {
            let used = head.len;
            match self.serve_now(head, BodyLoc::InBuf(Span::default()), used, None) {
                Stage::KeepAlive { flush: false } => return Ok(true),
                Stage::KeepAlive { flush: true } => match self.flush_now(false) {
                    Ok(true) => return Ok(true),
                    Ok(false) => Waiting::Stage(Stage::KeepAlive { flush: true }),
                    Err(_) => return Ok(false),
                },
                // The client asked to close and everything is answered: done.
                Stage::Close { linger: false } => match self.flush_now(true) {
                    Ok(true) if self.io.close_now() => {
                        self.stats.set(Activity::Idle);
                        return Ok(false);
                    }
                    Ok(true) => Waiting::Stage(Stage::Closing),
                    Ok(false) => Waiting::Stage(Stage::Close { linger: false }),
                    Err(_) => return Ok(false),
                },
                step => Waiting::Stage(step),
            }
        };
        Err(Rest(rest))
    }

    /// Answer, without waiting, the requests that arrived with a new connection (usually all
    /// there is: one request, and a close). [`Arrived::Waits`]: the connection has to wait for
    /// something; go on with [`Conn::finish`] (with what is left of a request) and
    /// [`Conn::serve`] on a transport that can wait.
    pub fn answer_arrived(&mut self) -> Arrived {
        let arrived = self.answer_arrived_inner();
        if let Arrived::Closed = arrived {
            // The buffers go back to the pool for the next connection.
            pool::give_buffer(std::mem::take(&mut self.buf));
            pool::give_buffer(std::mem::take(&mut self.out));
        }
        arrived
    }

    fn answer_arrived_inner(&mut self) -> Arrived {
        self.buf = pool::take_buffer();
        match self.io.try_read(&mut self.buf) {
            Ok(0) => return Arrived::Closed,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Arrived::Waits(None),
            Err(_) => return Arrived::Closed,
        }
        loop {
            // The HTTP/2 preface, an incomplete head or a bad one: `serve` deals with those.
            if self.shared.config.http2.enabled && is_h2_preface(&self.buf) {
                return Arrived::Waits(None);
            }
            let mut head = pool::take_head();
            if !matches!(
                parse_into(&self.buf, &self.shared.config.limits, &mut head),
                Ok(true)
            ) {
                pool::give_head(head);
                return Arrived::Waits(None);
            }
            match self.answer_now(head) {
                // Pipelined requests are answered in turn; then the connection waits.
                Ok(true) if !self.buf.is_empty() => {}
                Ok(true) => return Arrived::Waits(None),
                Ok(false) => return Arrived::Closed,
                Err(rest) => return Arrived::Waits(Some(Box::new(rest))),
            }
        }
    }

    /// The same connection on another transport (its state carries over).
    pub fn with_io<J>(self, f: impl FnOnce(I) -> std::io::Result<J>) -> std::io::Result<Conn<J>> {
        Ok(Conn {
            io: f(self.io)?,
            peer: self.peer,
            shared: self.shared,
            buf: self.buf,
            out: self.out,
            stats: self.stats,
            deadline: self.deadline,
        })
    }

    /// Finish the request [`Conn::answer_arrived`] left; then [`Conn::serve`] unless this
    /// gives `false` (the connection is done).
    pub fn finish(&mut self, rest: Box<Rest>) -> Pin<Box<impl Future<Output = bool> + '_>> {
        Box::pin(async move {
            match self.request_rest(*rest).await {
                Ok(more) => more,
                Err(e) => {
                    tracing::debug!(peer = %self.peer.remote, "connection ended: {e}");
                    false
                }
            }
        })
    }

    /// The rest of a request after [`Conn::request_now`].
    async fn request_rest(&mut self, rest: Rest) -> std::io::Result<bool> {
        let step = match rest.0 {
            Waiting::Stage(step) => step,
            Waiting::Body(head) => match self.read_request_body(head).await? {
                Some(step) => step,
                None => return Ok(false),
            },
        };
        self.continue_request(step).await
    }

    /// Wait for a complete head. While idle the connection holds no buffer and no head.
    #[allow(clippy::manual_async_fn)]
    fn read_head(&mut self) -> impl Future<Output = Result<Box<Head>, HeadError>> + '_ {
        async move {
            let detect =
                self.stats.served() == 0 && !self.peer.secure && self.shared.config.http2.enabled;
            // The header timeout runs from a request's first byte.
            let mut partial = false;
            loop {
                let timeouts = &self.shared.timeouts;
                if !self.buf.is_empty() {
                    if detect && is_h2_preface(&self.buf) {
                        self.deadline.disarm();
                        return Err(HeadError::Http2);
                    }
                    let mut head = pool::take_head();
                    match parse_into(&self.buf, &self.shared.config.limits, &mut head) {
                        Ok(true) => {
                            self.deadline.disarm();
                            return Ok(head);
                        }
                        Ok(false) => pool::give_head(head),
                        Err(e) => {
                            pool::give_head(head);
                            self.deadline.disarm();
                            return Err(HeadError::Http(e));
                        }
                    }
                    if !partial {
                        partial = true;
                        self.stats.set(Activity::Reading);
                        self.deadline.arm(timeouts.header, false);
                    }
                } else {
                    self.stats.set(Activity::Idle);
                    let idle_for = if self.stats.served() == 0 {
                        timeouts.header
                    } else {
                        timeouts.keepalive
                    };
                    self.deadline.arm(idle_for, true);
                }
                // Before waiting, send what pipelined requests produced (rare here: requests
                // flush unless another head is already buffered; boxed to keep idle tasks small).
                if !self.out.is_empty() && !self.flush_now(false).map_err(|_| HeadError::Closed)? {
                    let write = self.shared.timeouts.write;
                    let flushing = Box::pin(self.flush(write));
                    flushing.await.map_err(|_| HeadError::Closed)?;
                }
                if self.buf.is_empty() {
                    pool::give_buffer(std::mem::take(&mut self.buf));
                    pool::give_buffer(std::mem::take(&mut self.out));
                }
                let woke = std::future::poll_fn(|cx| self.poll_wait(cx)).await;
                match woke {
                    Ok(()) => {}
                    Err(Some(Ended::TimedOut)) if partial => {
                        return Err(HeadError::Http(HttpError::new(
                            408,
                            "timed out reading the request headers",
                        )))
                    }
                    Err(_) => return Err(HeadError::Closed),
                }
                if self.buf.capacity() == 0 {
                    self.buf = pool::take_buffer();
                }
                match self.io.try_read(&mut self.buf) {
                    Ok(0) => return Err(HeadError::Closed),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return Err(HeadError::Closed),
                }
            }
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

    /// Answer a protocol error and close.
    async fn fail(&mut self, minor: u8, e: HttpError) -> std::io::Result<()> {
        tracing::debug!("protocol error {}: {}", e.status, e.reason);
        self.stats.set(Activity::Writing);
        let started = crate::dispatch::start_clock();
        let mut resp = pool::take_response();
        error_response(&mut resp, e.status, e.reason);
        let timeout = self.shared.timeouts.write;
        let sent = respond::write_response(
            &mut self.io,
            &mut self.out,
            minor,
            false,
            &mut resp,
            false,
            timeout,
        )
        .await?;
        pool::give_response(resp);
        finished(Finished {
            peer: &self.peer,
            request: None,
            status: e.status,
            body_bytes: sent.body_bytes,
            started,
            id: None,
            set_cookies: &[],
        });
        self.flush(timeout).await?;
        self.stats.set(Activity::Idle);
        self.io.close().await;
        Ok(())
    }
}

/// Whether `buf` is (the start of) the HTTP/2 preface, far enough to tell: no HTTP/1 method
/// we serve is `PRI`.
fn is_h2_preface(buf: &[u8]) -> bool {
    let n = buf.len().min(H2_PREFACE.len());
    n >= 4 && buf[..n] == H2_PREFACE[..n]
}
