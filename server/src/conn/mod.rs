//! A connection's life: read a head, read its body, dispatch, respond; keep-alive and
//! pipelining; timeouts; protocol errors answered with a status and a close.

mod body;
pub mod io;
mod pool;
mod respond;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::dispatch::{dispatch, error_response, Exchange, Peer};
use crate::http::parse::{parse, Head};
use crate::http::HttpError;
use crate::server::Shared;
use io::Io;

/// Pending pipelined output is written once it reaches this size.
const FLUSH_AT: usize = 64 * 1024;

/// Serve one connection until it closes.
pub async fn serve<I: Io>(mut io: I, peer: Arc<Peer>, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut conn = Conn {
        buf: Vec::new(),
        out: Vec::new(),
        served: 0,
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
        let limits = &shared.config.limits;
        let timeouts = &shared.timeouts;
        loop {
            let head = match self.read_head(io, shared, stop).await {
                Ok(head) => head,
                Err(HeadError::Closed) => return self.flush(io, timeouts.write).await,
                Err(HeadError::Http(e)) => return self.fail(io, shared, 1, e).await,
            };
            let limit = body_limit(shared, &self.buf, &head, peer.secure);
            let (body, used) = match body::read_body(io, &mut self.buf, &head, limit, timeouts.body).await {
                Ok(found) => found,
                Err(e) => return self.fail(io, shared, head.minor, e).await,
            };
            self.served += 1;
            let minor = head.minor;
            let is_head = head.method(&self.buf) == "HEAD";
            let keep_alive = head.keep_alive
                && self.served < limits.max_requests_per_connection
                && !*stop.borrow();
            let ex = Exchange {
                buf: std::mem::take(&mut self.buf),
                head,
                body,
                resp: pool::take_response(),
            };
            let Some(mut ex) = dispatch(shared, peer, ex).await else {
                // A worker job failed and took the request with it.
                let mut resp = pool::take_response();
                error_response(&mut resp, 500, "");
                respond::write_response(io, &mut self.out, minor, is_head, &mut resp, false, timeouts.write).await?;
                pool::give_response(resp);
                return self.flush(io, timeouts.write).await;
            };
            self.buf = std::mem::take(&mut ex.buf);
            let sent = respond::write_response(io, &mut self.out, minor, is_head, &mut ex.resp, keep_alive, timeouts.write).await?;
            pool::give_response(ex.resp);
            // Keep pipelined bytes that follow this request.
            self.buf.drain(..used.min(self.buf.len()));
            if !sent.keep_alive {
                self.flush(io, timeouts.write).await?;
                io.close().await;
                return Ok(());
            }
            if self.buf.is_empty() || self.out.len() >= FLUSH_AT {
                self.flush(io, timeouts.write).await?;
            }
        }
    }

    /// Wait for a complete head. While idle the connection holds no buffer.
    async fn read_head<I: Io>(
        &mut self,
        io: &mut I,
        shared: &Shared,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Head, HeadError> {
        let limits = &shared.config.limits;
        let timeouts = &shared.timeouts;
        let mut deadline: Option<Instant> = None;
        loop {
            if !self.buf.is_empty() {
                if let Some(head) = parse(&self.buf, limits).map_err(HeadError::Http)? {
                    return Ok(head);
                }
                deadline.get_or_insert_with(|| Instant::now() + timeouts.header);
            }
            // Before waiting, send what pipelined requests produced.
            self.flush(io, timeouts.write).await.map_err(|_| HeadError::Closed)?;
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
    async fn fail<I: Io>(&mut self, io: &mut I, shared: &Shared, minor: u8, e: HttpError) -> std::io::Result<()> {
        tracing::debug!("protocol error {}: {}", e.status, e.reason);
        let mut resp = pool::take_response();
        error_response(&mut resp, e.status, e.reason);
        let timeout = shared.timeouts.write;
        respond::write_response(io, &mut self.out, minor, false, &mut resp, false, timeout).await?;
        pool::give_response(resp);
        self.flush(io, timeout).await?;
        io.close().await;
        Ok(())
    }
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
