//! A connection's life: read a head, read its body, dispatch, respond; keep-alive and
//! pipelining; timeouts; protocol errors answered with a status and a close.
//!
//! The common request (no body, an inline handler, a response in memory) is served by plain
//! function calls between two waits for the socket; anything that has to wait (a body, a
//! filter, the worker pool, a file, a slow reader) continues in a boxed future, so an idle
//! connection's task stays small.

mod body;
pub mod io;
mod pool;
mod respond;
mod tunnel;
pub mod wait;

use std::sync::Arc;
use std::task::Poll;

use tokio::time::Instant;

use crate::dispatch::Unfinished;
use crate::dispatch::{dispatch_now, error_response, finish, BodyLoc, Exchange, Peer, Routed};
use crate::http::parse::{parse_into, BodyFraming, Head, Span};
use crate::http::HttpError;
use crate::server::Shared;
use crate::stats::{ConnStats, State};
use io::Io;
use respond::{Sent, Started};
use wait::{Deadline, Ended};

/// Pending pipelined output is written once it reaches this size.
const FLUSH_AT: usize = 64 * 1024;

/// The HTTP/2 client preface: a cleartext connection that opens with it speaks h2c.
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How a connection's HTTP/1 service ended.
pub enum Served<I> {
    Closed,
    /// It opened with the HTTP/2 preface (h2c by prior knowledge): the transport, and the
    /// bytes already read from it.
    Http2(I, Vec<u8>),
}

/// Serve one connection until it closes. `h2c`: look for the HTTP/2 preface first.
pub async fn serve<I: Io>(mut io: I, peer: Arc<Peer>, shared: Arc<Shared>, h2c: bool) -> Served<I> {
    let mut conn = Conn {
        buf: Vec::new(),
        out: Vec::new(),
        served: 0,
        stats: ConnStats::accepted(),
        deadline: Deadline::new(),
    };
    let result = conn.run(&mut io, &peer, &shared, h2c).await;
    pool::give_buffer(std::mem::take(&mut conn.out));
    match result {
        Ok(true) => return Served::Http2(io, std::mem::take(&mut conn.buf)),
        Ok(false) => {}
        Err(e) => tracing::debug!(peer = %peer.remote, "connection ended: {e}"),
    }
    pool::give_buffer(std::mem::take(&mut conn.buf));
    Served::Closed
}

struct Conn {
    /// Bytes read and not yet consumed (capacity 0 while idle: the buffer is back in the pool).
    buf: Vec<u8>,
    /// Response bytes not yet written.
    out: Vec<u8>,
    served: u64,
    stats: ConnStats,
    /// Header and keep-alive timeouts, and the stop signal, while waiting for the client.
    deadline: Deadline,
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

/// What a request needs to remember on its way through.
struct Flight {
    minor: u8,
    is_head: bool,
    /// Keep the connection open after this response (the client may, and the server will).
    keep_alive: bool,
    /// The client asked to close: with nothing unread, no lingering is needed.
    client_close: bool,
    /// Bytes of the buffer this request used (head and body).
    used: usize,
    /// When the request started, for the access log.
    started: Option<Instant>,
}

/// Where a request stands; each step but the last two may have to wait.
enum Step {
    Dispatching(Box<Unfinished>, Flight),
    Sending(Exchange, Started, Flight),
    /// A worker job failed and took the request with it: 500, close.
    Lost(Flight),
    /// Answered; flush if asked (nothing else is buffered), then read the next request.
    KeepAlive {
        flush: bool,
    },
    /// Answered; flush and close (lingering unless the client asked for the close).
    Close {
        linger: bool,
    },
    /// After a 101: the connection belongs to this tunnel.
    Upgrade(osprey_sdk::TunnelBox),
}

impl Conn {
    /// Returns whether the connection turned out to be HTTP/2.
    async fn run<I: Io>(
        &mut self,
        io: &mut I,
        peer: &Arc<Peer>,
        shared: &Arc<Shared>,
        h2c: bool,
    ) -> std::io::Result<bool> {
        let mut shared = shared.clone();
        loop {
            let mut head = pool::take_head();
            let detect = h2c && self.served == 0;
            match self.read_head(io, &shared, &mut head, detect).await {
                Ok(()) => {}
                Err(e) => {
                    pool::give_head(head);
                    return match e {
                        // read_head flushed pending output before it waited.
                        HeadError::Closed => Ok(false),
                        HeadError::Http2 => Ok(true),
                        HeadError::Http(e) => {
                            let failing = Box::pin(self.fail(io, peer, &shared, 1, e));
                            failing.await.map(|()| false)
                        }
                    };
                }
            }
            // A request is served by the configuration current when its head arrived.
            crate::reload::refresh(&mut shared);
            let step = if head.body == BodyFraming::None {
                let used = head.len;
                self.serve_now(peer, &shared, head, BodyLoc::InBuf(Span::default()), used)
            } else {
                // Boxed, as everything that waits mid-request: an idle task must stay small.
                let reading = Box::pin(self.read_request_body(io, peer, &shared, head));
                match reading.await? {
                    Some(step) => step,
                    None => return Ok(false),
                }
            };
            let more = match step {
                Step::KeepAlive { flush: false } => true,
                Step::KeepAlive { flush: true } if self.flush_now(io)? => true,
                step => {
                    let finishing = Box::pin(self.continue_request(io, peer, &shared, step));
                    finishing.await?
                }
            };
            if !more {
                return Ok(false);
            }
        }
    }

    /// Read the body of a request that has one, then serve it. `None`: the body was refused
    /// (answered, connection closed).
    async fn read_request_body<I: Io>(
        &mut self,
        io: &mut I,
        peer: &Arc<Peer>,
        shared: &Arc<Shared>,
        head: Box<Head>,
    ) -> std::io::Result<Option<Step>> {
        self.stats.set(State::Writing);
        let limit = body_limit(shared, &self.buf, &head, peer.secure);
        let read = body::read_body(io, &mut self.buf, &head, limit, shared.timeouts.body).await;
        match read {
            Ok((body, used)) => Ok(Some(self.serve_now(peer, shared, head, body, used))),
            Err(e) => {
                let minor = head.minor;
                pool::give_head(head);
                self.fail(io, peer, shared, minor, e).await?;
                Ok(None)
            }
        }
    }

    /// Dispatch and answer a request whose body is read, as far as that goes without waiting.
    fn serve_now(
        &mut self,
        peer: &Arc<Peer>,
        shared: &Arc<Shared>,
        head: Box<Head>,
        body: BodyLoc,
        used: usize,
    ) -> Step {
        self.stats.set(State::Writing);
        self.served += 1;
        let flight = Flight {
            minor: head.minor,
            is_head: head.method(&self.buf) == "HEAD",
            keep_alive: head.keep_alive
                && self.served < shared.config.limits.max_requests_per_connection
                && !wait::stopping(),
            client_close: !head.keep_alive,
            used,
            started: crate::access_log::enabled().then(Instant::now),
        };
        let ex = Exchange {
            buf: std::mem::take(&mut self.buf),
            head,
            body,
            resp: pool::take_response(),
            extra: Vec::new(),
        };
        match dispatch_now(shared, peer, ex) {
            Routed::Done(ex) => self.respond(peer, ex, flight),
            Routed::Unfinished(rest) => Step::Dispatching(rest, flight),
        }
    }

    /// Put the response in `out`; done unless its body has to be sent on its own.
    fn respond(&mut self, peer: &Peer, mut ex: Exchange, flight: Flight) -> Step {
        self.buf = std::mem::take(&mut ex.buf);
        // A stop that came while the handler ran ends keep-alive too.
        let keep_alive = flight.keep_alive && !wait::stopping();
        // Counted when answered, before its bytes leave.
        self.stats.request();
        if self.out.capacity() == 0 {
            self.out = pool::take_buffer();
        }
        let started = respond::start_response(
            &mut self.out,
            flight.minor,
            flight.is_head,
            &mut ex.resp,
            keep_alive,
        );
        match started.into_sent() {
            Ok(sent) => self.answered(peer, ex, flight, sent),
            Err(started) => Step::Sending(ex, started, flight),
        }
    }

    /// The response is in `out` (or sent): log it, drop the request's bytes, and say what
    /// the connection does next.
    fn answered(&mut self, peer: &Peer, ex: Exchange, flight: Flight, sent: Sent) -> Step {
        if let Some(started) = flight.started {
            log_access(
                peer,
                &self.buf,
                Some(&ex.head),
                ex.resp.status,
                sent.body_bytes,
                started,
            );
        }
        pool::give_response(ex.resp);
        pool::give_head(ex.head);
        // Keep pipelined bytes that follow this request.
        self.buf.drain(..flight.used.min(self.buf.len()));
        if let Some(tunnel) = sent.upgrade {
            return Step::Upgrade(tunnel);
        }
        if !sent.keep_alive {
            return Step::Close {
                linger: !(flight.client_close && self.buf.is_empty()),
            };
        }
        // The answer is complete once flushed: the connection waits from here on.
        self.stats.set(if self.buf.is_empty() {
            State::Idle
        } else {
            State::Reading
        });
        // Pipelined requests' answers are gathered into one write.
        let next_head_buffered = memchr::memmem::find(&self.buf, b"\r\n\r\n").is_some();
        Step::KeepAlive {
            flush: !next_head_buffered || self.out.len() >= FLUSH_AT,
        }
    }

    /// Take a request through the steps that wait. Returns whether the connection stays open.
    async fn continue_request<I: Io>(
        &mut self,
        io: &mut I,
        peer: &Arc<Peer>,
        shared: &Arc<Shared>,
        mut step: Step,
    ) -> std::io::Result<bool> {
        let timeout = shared.timeouts.write;
        loop {
            step = match step {
                Step::Dispatching(rest, flight) => match finish(shared, peer, *rest).await {
                    Some(ex) => self.respond(peer, ex, flight),
                    None => Step::Lost(flight),
                },
                Step::Sending(ex, started, flight) => {
                    let sent = respond::send_rest(io, &mut self.out, started, timeout).await?;
                    self.answered(peer, ex, flight, sent)
                }
                Step::Lost(flight) => {
                    self.stats.request();
                    let mut resp = pool::take_response();
                    error_response(&mut resp, 500, "");
                    respond::write_response(
                        io,
                        &mut self.out,
                        flight.minor,
                        flight.is_head,
                        &mut resp,
                        false,
                        timeout,
                    )
                    .await?;
                    pool::give_response(resp);
                    self.flush(io, timeout).await?;
                    return Ok(false);
                }
                Step::KeepAlive { flush } => {
                    if flush {
                        self.flush(io, timeout).await?;
                    }
                    return Ok(true);
                }
                Step::Close { linger } => {
                    self.flush(io, timeout).await?;
                    // Lingering until the peer closes counts as waiting.
                    self.stats.set(State::Idle);
                    if linger {
                        io.close().await;
                    } else {
                        io.close_now().await;
                    }
                    return Ok(false);
                }
                Step::Upgrade(tunnel) => {
                    // 101: the connection is no longer HTTP; bytes already read belong to the
                    // tunnel.
                    self.flush(io, timeout).await?;
                    let pending = std::mem::take(&mut self.buf);
                    let result =
                        tunnel::splice(io, &pending, tunnel, shared.timeouts.keepalive).await;
                    pool::give_buffer(pending);
                    io.close().await;
                    result?;
                    return Ok(false);
                }
            };
        }
    }

    /// Wait for a complete head and parse it into `head`. While idle the connection holds
    /// no buffer. `detect`: a first request that opens with the HTTP/2 preface is h2c.
    async fn read_head<I: Io>(
        &mut self,
        io: &mut I,
        shared: &Shared,
        head: &mut Head,
        detect: bool,
    ) -> Result<(), HeadError> {
        let limits = &shared.config.limits;
        let timeouts = &shared.timeouts;
        // The header timeout runs from a request's first byte.
        let mut partial = false;
        loop {
            if !self.buf.is_empty() {
                if detect && is_h2_preface(&self.buf) {
                    self.deadline.disarm();
                    return Err(HeadError::Http2);
                }
                match parse_into(&self.buf, limits, head) {
                    Ok(true) => {
                        self.deadline.disarm();
                        return Ok(());
                    }
                    Ok(false) => {}
                    Err(e) => {
                        self.deadline.disarm();
                        return Err(HeadError::Http(e));
                    }
                }
                if !partial {
                    partial = true;
                    self.stats.set(State::Reading);
                    self.deadline.arm(timeouts.header, false);
                }
            } else {
                self.stats.set(State::Idle);
                let idle_for = if self.served == 0 {
                    timeouts.header
                } else {
                    timeouts.keepalive
                };
                self.deadline.arm(idle_for, true);
            }
            // Before waiting, send what pipelined requests produced (rare here: requests
            // flush unless another head is already buffered; boxed to keep idle tasks small).
            if !self.out.is_empty() && !self.flush_now(io).map_err(|_| HeadError::Closed)? {
                let flushing = Box::pin(self.flush(io, timeouts.write));
                flushing.await.map_err(|_| HeadError::Closed)?;
            }
            if self.buf.is_empty() {
                pool::give_buffer(std::mem::take(&mut self.buf));
                pool::give_buffer(std::mem::take(&mut self.out));
            }
            let woke = std::future::poll_fn(|cx| match io.poll_readable(cx) {
                Poll::Ready(ready) => Poll::Ready(ready.map_err(|_| None)),
                Poll::Pending => match self.deadline.check(cx.waker()) {
                    Some(ended) => Poll::Ready(Err(Some(ended))),
                    None => Poll::Pending,
                },
            })
            .await;
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
            match io.try_read(&mut self.buf) {
                Ok(0) => return Err(HeadError::Closed),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return Err(HeadError::Closed),
            }
        }
    }

    /// Write `out` if the socket takes all of it now. `Ok(false)`: some is left.
    fn flush_now<I: Io>(&mut self, io: &mut I) -> std::io::Result<bool> {
        match io.try_write(&[&self.out]) {
            Ok(n) => {
                self.out.drain(..n);
                Ok(self.out.is_empty())
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn flush<I: Io>(
        &mut self,
        io: &mut I,
        timeout: std::time::Duration,
    ) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let result = tokio::time::timeout(timeout, io.write_all(&[&self.out]))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "write timed out"))?;
        self.out.clear();
        result
    }

    /// Answer a protocol error and close.
    async fn fail<I: Io>(
        &mut self,
        io: &mut I,
        peer: &Peer,
        shared: &Shared,
        minor: u8,
        e: HttpError,
    ) -> std::io::Result<()> {
        tracing::debug!("protocol error {}: {}", e.status, e.reason);
        self.stats.set(State::Writing);
        let started = Instant::now();
        let mut resp = pool::take_response();
        error_response(&mut resp, e.status, e.reason);
        let timeout = shared.timeouts.write;
        self.stats.request();
        let sent =
            respond::write_response(io, &mut self.out, minor, false, &mut resp, false, timeout)
                .await?;
        pool::give_response(resp);
        if crate::access_log::enabled() {
            log_access(peer, &[], None, e.status, sent.body_bytes, started);
        }
        self.flush(io, timeout).await?;
        self.stats.set(State::Idle);
        io.close().await;
        Ok(())
    }
}

/// Whether `buf` is (the start of) the HTTP/2 preface, far enough to tell: no HTTP/1 method
/// we serve is `PRI`.
fn is_h2_preface(buf: &[u8]) -> bool {
    let n = buf.len().min(H2_PREFACE.len());
    n >= 4 && buf[..n] == H2_PREFACE[..n]
}

/// One access log line (`head` is `None` when the request could not be parsed).
fn log_access(
    peer: &Peer,
    buf: &[u8],
    head: Option<&Head>,
    status: u16,
    body_bytes: u64,
    started: Instant,
) {
    // A request lost to a busy worker pool comes back without its bytes.
    let head = head.filter(|h| buf.len() >= h.len);
    let header = |name: &str| {
        head.and_then(|h| {
            h.headers
                .iter()
                .find(|(n, _)| n.str(buf).eq_ignore_ascii_case(name))
                .map(|(_, v)| v.get(buf))
        })
    };
    crate::access_log::record(&crate::access_log::Entry {
        remote: &peer.remote,
        method: head.map(|h| h.method(buf)),
        uri: head.map_or(&[][..], |h| h.uri.str(buf).as_bytes()),
        minor: head.map_or(1, |h| h.minor),
        status,
        body_bytes,
        referer: header("referer"),
        user_agent: header("user-agent"),
        duration: started.elapsed(),
    });
}

/// The body limit of the first route that would take this request, else the global one.
pub(crate) fn body_limit(shared: &Shared, buf: &[u8], head: &Head, secure: bool) -> u64 {
    shared
        .router
        .candidates(head.path(buf), head.host(buf), secure)
        .next()
        .and_then(|(i, _, _)| shared.router.route(i).max_body)
        .unwrap_or(shared.config.limits.max_body_bytes)
}
