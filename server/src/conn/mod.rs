//! A connection's life: read a head, read its body, dispatch, respond; keep-alive and
//! pipelining; timeouts; protocol errors answered with a status and a close.

mod body;
pub mod io;
mod pool;
mod respond;
mod tunnel;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::dispatch::{dispatch, error_response, Exchange, Peer};
use crate::http::parse::{parse, BodyFraming, Head};
use crate::http::HttpError;
use crate::server::Shared;
use crate::stats::{ConnStats, State};
use io::Io;

/// Pending pipelined output is written once it reaches this size.
const FLUSH_AT: usize = 64 * 1024;

/// Serve one connection until it closes.
pub async fn serve<I: Io>(
    mut io: I,
    peer: Arc<Peer>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut conn = Conn {
        buf: Vec::new(),
        out: Vec::new(),
        served: 0,
        stats: ConnStats::accepted(),
    };
    let result = conn.run(&mut io, &peer, &shared, &mut stop).await;
    if let Err(e) = result {
        tracing::debug!(peer = %peer.remote, "connection ended: {e}");
    }
    pool::give_buffer(std::mem::take(&mut conn.buf));
    pool::give_buffer(std::mem::take(&mut conn.out));
}

struct Conn {
    /// Bytes read and not yet consumed (capacity 0 while idle: the buffer is back in the pool).
    buf: Vec<u8>,
    /// Response bytes not yet written.
    out: Vec<u8>,
    served: u64,
    stats: ConnStats,
}

/// Why reading a head stopped.
enum HeadError {
    /// The peer went away or stayed idle: close quietly.
    Closed,
    /// Protocol error: answer it, then close.
    Http(HttpError),
}

impl Conn {
    async fn run<I: Io>(
        &mut self,
        io: &mut I,
        peer: &Arc<Peer>,
        shared: &Arc<Shared>,
        stop: &mut watch::Receiver<bool>,
    ) -> std::io::Result<()> {
        let mut shared = shared.clone();
        loop {
            let head = match self.read_head(io, &shared, stop).await {
                Ok(head) => head,
                // read_head flushed pending output before it waited.
                Err(HeadError::Closed) => return Ok(()),
                Err(HeadError::Http(e)) => {
                    let failing = Box::pin(self.fail(io, peer, &shared, 1, e));
                    return failing.await;
                }
            };
            // Boxed: the request's state (head, exchange, handler futures) is large, and an idle
            // connection's task must stay small, so it is allocated only while a request runs.
            // (Built in its own statement, so the unboxed future takes no room in this one.)
            // A request is served by the configuration current when its head arrived.
            crate::reload::refresh(&mut shared);
            let request = Box::pin(self.serve_request(io, peer, &shared, stop, head));
            let more = request.await?;
            if !more {
                return Ok(());
            }
        }
    }

    /// Read the body, dispatch, respond. Returns whether the connection stays open.
    async fn serve_request<I: Io>(
        &mut self,
        io: &mut I,
        peer: &Arc<Peer>,
        shared: &Arc<Shared>,
        stop: &watch::Receiver<bool>,
        head: Box<Head>,
    ) -> std::io::Result<bool> {
        let limits = &shared.config.limits;
        let timeouts = &shared.timeouts;
        self.stats.set(State::Writing);
        let started = Instant::now();
        // Routing twice is only worth it when there is a body to bound.
        let limit = match head.body {
            BodyFraming::None => 0,
            _ => body_limit(shared, &self.buf, &head, peer.secure),
        };
        let (body, used) =
            match body::read_body(io, &mut self.buf, &head, limit, timeouts.body).await {
                Ok(found) => found,
                Err(e) => {
                    self.fail(io, peer, shared, head.minor, e).await?;
                    return Ok(false);
                }
            };
        self.served += 1;
        let minor = head.minor;
        let is_head = head.method(&self.buf) == "HEAD";
        let keep_alive =
            head.keep_alive && self.served < limits.max_requests_per_connection && !*stop.borrow();
        let ex = Exchange {
            buf: std::mem::take(&mut self.buf),
            head,
            body,
            resp: pool::take_response(),
            extra: Vec::new(),
        };
        let Some(mut ex) = dispatch(shared, peer, ex).await else {
            // A worker job failed and took the request with it.
            let mut resp = pool::take_response();
            error_response(&mut resp, 500, "");
            respond::write_response(
                io,
                &mut self.out,
                minor,
                is_head,
                &mut resp,
                false,
                timeouts.write,
            )
            .await?;
            pool::give_response(resp);
            self.flush(io, timeouts.write).await?;
            return Ok(false);
        };
        self.buf = std::mem::take(&mut ex.buf);
        // A stop that came while the handler ran ends keep-alive too.
        let keep_alive = keep_alive && !*stop.borrow();
        let status = ex.resp.status;
        // Counted when answered, before its bytes leave.
        self.stats.request();
        let sent = respond::write_response(
            io,
            &mut self.out,
            minor,
            is_head,
            &mut ex.resp,
            keep_alive,
            timeouts.write,
        )
        .await?;
        pool::give_response(ex.resp);
        if crate::access_log::enabled() {
            log_access(
                peer,
                &self.buf,
                Some(&ex.head),
                status,
                sent.body_bytes,
                started,
            );
        }
        // Keep pipelined bytes that follow this request.
        self.buf.drain(..used.min(self.buf.len()));
        if let Some(t) = sent.upgrade {
            // 101: the connection is no longer HTTP; bytes already read belong to the tunnel.
            self.flush(io, timeouts.write).await?;
            let pending = std::mem::take(&mut self.buf);
            let result = tunnel::splice(io, &pending, t, timeouts.keepalive).await;
            pool::give_buffer(pending);
            io.close().await;
            result?;
            return Ok(false);
        }
        if !sent.keep_alive {
            self.flush(io, timeouts.write).await?;
            // Lingering until the peer closes counts as waiting.
            self.stats.set(State::Idle);
            io.close().await;
            return Ok(false);
        }
        // The answer is complete once flushed: the connection waits from here on.
        self.stats.set(if self.buf.is_empty() {
            State::Idle
        } else {
            State::Reading
        });
        let next_head_buffered = memchr::memmem::find(&self.buf, b"\r\n\r\n").is_some();
        if !next_head_buffered || self.out.len() >= FLUSH_AT {
            self.flush(io, timeouts.write).await?;
        }
        Ok(true)
    }

    /// Wait for a complete head. While idle the connection holds no buffer.
    async fn read_head<I: Io>(
        &mut self,
        io: &mut I,
        shared: &Shared,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Box<Head>, HeadError> {
        let limits = &shared.config.limits;
        let timeouts = &shared.timeouts;
        let mut deadline: Option<Instant> = None;
        loop {
            self.stats.set(if self.buf.is_empty() {
                State::Idle
            } else {
                State::Reading
            });
            if !self.buf.is_empty() {
                if let Some(head) = parse(&self.buf, limits).map_err(HeadError::Http)? {
                    // Boxed: kept inline, the head would bloat every idle connection's task.
                    return Ok(Box::new(head));
                }
                deadline.get_or_insert_with(|| Instant::now() + timeouts.header);
            }
            // Before waiting, send what pipelined requests produced (rare here: serve_request
            // flushes unless another head is already buffered; boxed to keep idle tasks small).
            if !self.out.is_empty() {
                let flushing = Box::pin(self.flush(io, timeouts.write));
                flushing.await.map_err(|_| HeadError::Closed)?;
            }
            if self.buf.is_empty() {
                pool::give_buffer(std::mem::take(&mut self.buf));
                pool::give_buffer(std::mem::take(&mut self.out));
            }
            let wait_until = deadline.unwrap_or_else(|| {
                Instant::now()
                    + if self.served == 0 {
                        timeouts.header
                    } else {
                        timeouts.keepalive
                    }
            });
            let idle = self.buf.is_empty();
            tokio::select! {
                ready = tokio::time::timeout_at(wait_until, io.readable()) => match ready {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return Err(HeadError::Closed),
                    Err(_) if idle => return Err(HeadError::Closed),
                    Err(_) => return Err(HeadError::Http(HttpError::new(408, "timed out reading the request headers"))),
                },
                _ = stop.changed(), if idle => return Err(HeadError::Closed),
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

    async fn flush<I: Io>(&mut self, io: &mut I, timeout: Duration) -> std::io::Result<()> {
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
