//! One request through a connection, as steps: dispatch and answer without waiting when
//! nothing has to wait ([`Conn::serve_now`]), else go on through the steps that wait
//! ([`Conn::continue_request`], boxed by the caller).

use tokio::time::Instant;

use super::respond::{self, Sent, Started};
use super::streamed::{self, Fed, Streamed};
use super::{body, pool, tunnel, Conn, Io};
use crate::dispatch::incoming;
use crate::dispatch::{
    dispatch_now, error_response, finish, finished, start_clock, BodyLoc, Dispatched, Exchange,
    Finished, Routed, Unfinished,
};
use crate::http::parse::{BodyFraming, Head, Span};
use crate::http::HttpError;
use crate::stats::Activity;

/// Pending pipelined output is written once it reaches this size.
const FLUSH_AT: usize = 64 * 1024;

/// What a request needs to remember on its way through.
pub(super) struct Flight {
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

/// Where a request stands; each step may have to wait. (Short-lived, on
/// the stack or in the boxed request future: its size does not matter.)
#[allow(clippy::large_enum_variant)]
pub(super) enum Stage {
    /// Waiting for the handler, with the body it reads as it arrives, if it streams one.
    Dispatching(Box<Unfinished>, Flight, Option<Box<Streamed>>),
    Sending(Exchange, Started, Flight),
    /// A worker job failed and took the request with it: 500, close.
    Lost(Flight),
    /// Answered; flush if asked (else more pipelined requests are buffered), then read the
    /// next request.
    KeepAlive {
        flush: bool,
    },
    /// Answered; flush and close (lingering unless the client asked for the close).
    Close {
        linger: bool,
    },
    /// Answered and flushed; the transport is writing its last bytes (`Io::close_now`).
    Closing,
    /// After a 101: the connection belongs to this tunnel.
    Upgrade(osprey_sdk::TunnelBox),
}

impl Flight {
    /// The request's body was not read to its end: the connection cannot be reused, and
    /// closing must linger so that the unread bytes do not reset the response away.
    fn cut_if(mut self, cut: bool) -> Flight {
        if cut {
            self.keep_alive = false;
            self.client_close = false;
        }
        self
    }
}

impl<I: Io> Conn<I> {
    /// Read the body of a request that has one, then serve it. `None`: the body was refused
    /// (answered, connection closed).
    pub(super) async fn read_request_body(
        &mut self,
        head: Box<Head>,
    ) -> std::io::Result<Option<Stage>> {
        self.stats.set(Activity::Writing);
        let shared = &self.shared;
        let (path, host) = (head.path(&self.buf), head.host(&self.buf));
        let intake = shared.router.body_intake(path, host, self.peer.secure);
        let read = if intake.streamed {
            self.stream_body(&head, intake.limit)
        } else {
            let timeout = shared.timeouts.body;
            body::read_body(&mut self.io, &mut self.buf, &head, intake.limit, timeout)
                .await
                .map(|(body, used)| (body, used, None))
        };
        match read {
            Ok((body, used, streamed)) => Ok(Some(self.serve_now(head, body, used, streamed))),
            Err(e) => {
                let minor = head.minor;
                pool::give_head(head);
                self.fail(minor, e).await?;
                Ok(None)
            }
        }
    }

    /// Set up a body the handler streams: the bytes that came with the head go to the stream,
    /// the rest is read while the handler runs.
    #[allow(clippy::type_complexity)]
    fn stream_body(
        &mut self,
        head: &Head,
        limit: u64,
    ) -> Result<(BodyLoc, usize, Option<Box<Streamed>>), HttpError> {
        let len = match head.body {
            BodyFraming::Length(n) if n > limit => {
                return Err(HttpError::new(413, "request body too large"))
            }
            BodyFraming::Length(n) => Some(n),
            _ => None,
        };
        let (feed, slot) = incoming::channel(len);
        let streamed = Streamed {
            framing: head.body,
            expect_continue: head.expect_continue,
            read: self.buf.split_off(head.len),
            limit,
            feed,
            slot: Some(slot),
        };
        Ok((
            BodyLoc::InBuf(Span::default()),
            head.len,
            Some(Box::new(streamed)),
        ))
    }

    /// Dispatch and answer a request whose body is read (or streams), as far as that goes
    /// without waiting.
    pub(super) fn serve_now(
        &mut self,
        head: Box<Head>,
        body: BodyLoc,
        used: usize,
        mut streamed: Option<Box<Streamed>>,
    ) -> Stage {
        self.stats.set(Activity::Writing);
        let served = self.stats.count_served();
        let flight = Flight {
            minor: head.minor,
            is_head: head.method(&self.buf) == "HEAD",
            keep_alive: head.keep_alive
                && u64::from(served) < self.shared.config.limits.max_requests_per_connection
                && !super::wait::stopping(),
            client_close: !head.keep_alive,
            used,
            started: start_clock(),
        };
        let id = (self.shared.config.request_id).for_request(&self.peer.remote, &self.buf, &head);
        let ex = Exchange {
            buf: std::mem::take(&mut self.buf),
            head,
            body,
            resp: pool::take_response(),
            extra: Vec::new(),
            stream: streamed.as_mut().and_then(|s| s.slot.take()).map(Box::new),
            id,
            lineage: None,
        };
        match dispatch_now(&self.shared, &self.peer, ex) {
            // Answered before its streamed body was read: the body is left unread.
            Routed::Answered(ex) => self.respond(ex, flight.cut_if(streamed.is_some())),
            Routed::Waits(rest) => Stage::Dispatching(rest, flight, streamed),
        }
    }

    /// Put the response in `out`; done unless its body has to be sent on its own.
    fn respond(&mut self, mut ex: Exchange, flight: Flight) -> Stage {
        ex.stamp_id(&self.shared.config.request_id);
        self.buf = std::mem::take(&mut ex.buf);
        // A stop that came while the handler ran ends keep-alive too.
        let keep_alive = flight.keep_alive && !super::wait::stopping();
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
        let started = match started.into_sent() {
            Ok(sent) => return self.answered(ex, flight, sent),
            Err(started) => started,
        };
        // A large or file body: send what the socket takes now; wait only for the rest.
        match respond::send_now(&mut self.io, &mut self.out, started) {
            Ok(Ok(sent)) => self.answered(ex, flight, sent),
            Ok(Err(started)) => Stage::Sending(ex, started, flight),
            Err(e) => {
                tracing::debug!(peer = %self.peer.remote, "connection ended: {e}");
                Stage::Close { linger: false }
            }
        }
    }

    /// The response is in `out` (or sent): log it, drop the request's bytes, and say what
    /// the connection does next.
    fn answered(&mut self, ex: Exchange, flight: Flight, sent: Sent) -> Stage {
        finished(Finished {
            peer: &self.peer,
            request: Some((&self.buf, &ex.head)),
            status: ex.resp.status,
            body_bytes: sent.body_bytes,
            started: flight.started,
            id: Some(ex.id),
            set_cookies: &ex.resp.headers,
        });
        pool::give_response(ex.resp);
        pool::give_head(ex.head);
        // Keep pipelined bytes that follow this request.
        self.buf.drain(..flight.used.min(self.buf.len()));
        if let Some(tunnel) = sent.upgrade {
            return Stage::Upgrade(tunnel);
        }
        if !sent.keep_alive {
            return Stage::Close {
                linger: !(flight.client_close && self.buf.is_empty()),
            };
        }
        // The answer is complete once flushed: the connection waits from here on.
        self.stats.set(if self.buf.is_empty() {
            Activity::Idle
        } else {
            Activity::Reading
        });
        // Pipelined requests' answers are gathered into one write.
        let next_head_buffered = memchr::memmem::find(&self.buf, b"\r\n\r\n").is_some();
        Stage::KeepAlive {
            flush: !next_head_buffered || self.out.len() >= FLUSH_AT,
        }
    }

    /// Take a request through the steps that wait. Returns whether the connection stays open.
    pub(super) async fn continue_request(&mut self, mut step: Stage) -> std::io::Result<bool> {
        let timeout = self.shared.timeouts.write;
        loop {
            step = match step {
                Stage::Dispatching(rest, flight, None) => {
                    match finish(&self.shared, &self.peer, *rest).await {
                        Dispatched::Answered(ex) => self.respond(ex, flight),
                        Dispatched::Lost => Stage::Lost(flight),
                    }
                }
                Stage::Dispatching(rest, flight, Some(body)) => {
                    // The body is read while the handler runs, and no longer once it answered.
                    let finishing = finish(&self.shared, &self.peer, *rest);
                    let feeding = streamed::feed(&mut self.io, *body, self.shared.timeouts.body);
                    match incoming::beside(finishing, feeding).await {
                        (Dispatched::Answered(mut ex), Some(Fed::Whole(next))) => {
                            // Pipelined bytes that followed the body.
                            ex.buf.extend_from_slice(&next);
                            self.respond(ex, flight)
                        }
                        (Dispatched::Answered(ex), _) => self.respond(ex, flight.cut_if(true)),
                        (Dispatched::Lost, _) => Stage::Lost(flight),
                    }
                }
                Stage::Sending(ex, started, flight) => {
                    let sent =
                        respond::send_rest(&mut self.io, &mut self.out, started, timeout).await?;
                    self.answered(ex, flight, sent)
                }
                Stage::Lost(flight) => {
                    let mut resp = pool::take_response();
                    error_response(&mut resp, 500, "");
                    let sent = respond::write_response(
                        &mut self.io,
                        &mut self.out,
                        flight.minor,
                        flight.is_head,
                        &mut resp,
                        false,
                        timeout,
                    )
                    .await?;
                    // The request's bytes went with the failed job.
                    finished(Finished {
                        peer: &self.peer,
                        request: None,
                        status: resp.status,
                        body_bytes: sent.body_bytes,
                        started: flight.started,
                        id: None,
                        set_cookies: &[],
                    });
                    pool::give_response(resp);
                    self.flush(timeout).await?;
                    return Ok(false);
                }
                Stage::KeepAlive { flush } => {
                    if flush {
                        self.flush(timeout).await?;
                    }
                    return Ok(true);
                }
                Stage::Close { linger } => {
                    self.flush(timeout).await?;
                    // Lingering until the peer closes counts as waiting.
                    self.stats.set(Activity::Idle);
                    if linger {
                        self.io.close().await;
                    } else if !self.io.close_now() {
                        self.io.finish_close().await;
                    }
                    return Ok(false);
                }
                Stage::Closing => {
                    self.io.finish_close().await;
                    return Ok(false);
                }
                Stage::Upgrade(tunnel) => {
                    // 101: the connection is no longer HTTP; bytes already read belong to the
                    // tunnel.
                    self.flush(timeout).await?;
                    let pending = std::mem::take(&mut self.buf);
                    let idle = self.shared.timeouts.keepalive;
                    let result = tunnel::splice(&mut self.io, &pending, tunnel, idle).await;
                    pool::give_buffer(pending);
                    self.io.close().await;
                    result?;
                    return Ok(false);
                }
            };
        }
    }
}
