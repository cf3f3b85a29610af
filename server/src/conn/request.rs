//! One request through a connection: dispatch and answer without waiting when nothing has to
//! wait ([`Conn::serve_now`]), else in the step of the state it is in ([`Conn::step`]: the
//! futures the driver awaits, boxed so that an idle connection's task stays small).

use std::future::Future;
use std::pin::Pin;

use tokio::time::Instant;

use super::respond::{self, Sent};
use super::state::{Close, Dispatching, Failure, State, Writing};
use super::streamed::{self, Fed, Streamed};
use super::{body, pool, tunnel, Conn, Io};
use crate::dispatch::incoming;
use crate::dispatch::{
    dispatch_now, error_response, finish, finished, start_clock, BodyLoc, Dispatched, Exchange,
    Finished, Routed,
};
use crate::http::parse::{BodyFraming, Head, Span};
use crate::http::HttpError;
use crate::stats::Activity;

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

/// A response whose body is sent on its own (large, a file, a stream), and its request's facts.
pub(super) struct Large {
    started: respond::Started,
    flight: Flight,
}

impl<I: Io> Conn<I> {
    /// Read the body of a request that has one, then serve it.
    async fn read_request_body(&mut self, head: Box<Head>) -> State {
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
            Ok((body, used, streamed)) => self.serve_now(head, body, used, streamed),
            Err(e) => {
                let minor = head.minor;
                pool::give_head(head);
                State::failing(minor, e)
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
    ) -> State {
        self.stats.set(Activity::Writing);
        let served = self.stats.count_served();
        let flight = Flight {
            minor: head.minor,
            is_head: head.method.get(&self.buf) == b"HEAD",
            keep_alive: head.keep_alive
                && u64::from(served) < self.shared.config.limits.max_requests_per_connection
                && !super::wait::stopping(),
            client_close: !head.keep_alive,
            used,
            started: start_clock(),
        };
        let ex = Exchange::client(
            &self.shared.config.request_id,
            &self.peer,
            (self.buf.take_vec(), head),
            body,
            streamed.as_mut().and_then(|s| s.slot.take()).map(Box::new),
        );
        let mut routed = dispatch_now(&self.shared, &self.peer, ex);
        match &mut routed {
            // Answered before its streamed body was read: the body is left unread.
            Routed::Answered(ex) => match self.respond(ex, flight.cut_if(streamed.is_some())) {
                Ok(next) => {
                    // Only the head moves out (`Routed::Answered(ex)` would copy it all).
                    if let Routed::Answered(Exchange { head, .. }) = routed {
                        pool::give_head(head);
                    }
                    next
                }
                Err(large) => match routed {
                    Routed::Answered(ex) => self.send_large(ex, large),
                    Routed::Waits(_) => unreachable!("answered above"),
                },
            },
            Routed::Waits(_) => match routed {
                Routed::Waits(rest) => State::Dispatching(Box::new(Dispatching {
                    rest,
                    flight,
                    streamed,
                })),
                Routed::Answered(_) => unreachable!("waits above"),
            },
        }
    }

    /// Answer a request that waited: its exchange comes boxed.
    fn respond_boxed(&mut self, mut ex: Box<Exchange>, flight: Flight) -> State {
        match self.respond(&mut ex, flight) {
            Ok(next) => {
                pool::give_head(ex.head);
                next
            }
            Err(large) => self.send_large(*ex, large),
        }
    }

    /// Put the response in `out`: the next state when that is all of it (the usual answer,
    /// done on a borrowed exchange: moving one, a few hundred bytes, cost some 60
    /// instructions a request each time), else what is left for [`Conn::send_large`]. The
    /// caller gives the request's head back to the pool.
    // `Large` is moved once, and only for a body sent on its own: not worth a box.
    #[allow(clippy::result_large_err)]
    fn respond(&mut self, ex: &mut Exchange, flight: Flight) -> Result<State, Large> {
        ex.stamp_id(&self.shared.config.request_id);
        self.buf.put_vec(std::mem::take(&mut ex.buf));
        // A stop that came while the handler ran ends keep-alive too.
        let keep_alive = flight.keep_alive && !super::wait::stopping();
        let started = respond::start_response(
            self.out.ready(),
            flight.minor,
            flight.is_head,
            &mut ex.resp,
            keep_alive,
        );
        match started.into_sent() {
            Ok(sent) => Ok(self.answered(ex, flight, sent)),
            Err(started) => Err(Large { started, flight }),
        }
    }

    /// A large or file body: send what the socket takes now; wait only for the rest.
    fn send_large(&mut self, mut ex: Exchange, large: Large) -> State {
        let Large { started, flight } = large;
        match respond::send_now(&mut self.io, &mut self.out, started) {
            Ok(Ok(sent)) => {
                let next = self.answered(&mut ex, flight, sent);
                pool::give_head(ex.head);
                next
            }
            Ok(Err(started)) => State::Writing(Box::new(Writing {
                ex,
                started,
                flight,
            })),
            Err(e) => {
                tracing::debug!(peer = %self.peer.remote, "connection ended: {e}");
                State::Closed
            }
        }
    }

    /// The response is in `out` (or sent): log it, drop the request's bytes, and say what
    /// the connection does next.
    fn answered(&mut self, ex: &mut Exchange, flight: Flight, sent: Sent) -> State {
        finished(Finished {
            peer: &self.peer,
            request: Some((&self.buf, &ex.head)),
            status: ex.resp.status,
            body_bytes: sent.body_bytes,
            started: flight.started,
            id: Some(ex.id),
            set_cookies: &ex.resp.headers,
        });
        pool::recycle_response(&mut ex.resp);
        // Keep pipelined bytes that follow this request (in place while it stays open).
        let used = flight.used.min(self.buf.len());
        if used == self.buf.len() {
            self.buf.clear();
            self.spent = 0;
        } else if sent.keep_alive && sent.upgrade.is_none() {
            self.spent = used as u32;
        } else {
            self.buf.drain(..used);
            self.spent = 0;
        }
        if let Some(tunnel) = sent.upgrade {
            return State::Tunnel(Box::new(tunnel));
        }
        if !sent.keep_alive {
            let unread = !(flight.client_close && self.buf.is_empty());
            return State::Closing(if unread { Close::Linger } else { Close::Now });
        }
        // Idle once this answer is out (counted before it is, so that a client holding the
        // answer never sees the connection as writing); between pipelined requests the
        // gauge stays put, and moves if the connection waits (`wait_for_head`).
        if self.buf.is_empty() {
            self.stats.set(Activity::Idle);
        }
        State::Idle
    }

    /// The step of a state that waits on something other than the socket's readiness: it
    /// runs to its end and gives the next state. Boxing copies the future whole, once per
    /// step: the step of most (a handler on the worker pool or answering later) is in it, the
    /// larger futures of the others each in a box of their own (in one future for all, every
    /// step copied the largest: 160 instructions of copying per in-worker request, now 76).
    pub(super) fn step(&mut self) -> Pin<Box<impl Future<Output = State> + '_>> {
        let state = std::mem::replace(&mut self.state, State::Closed);
        Box::pin(async move {
            match state {
                State::Body(head) => Box::pin(self.read_request_body(head)).await,
                State::Dispatching(d) => self.dispatching(*d).await,
                State::Writing(w) => Box::pin(self.write_rest(*w)).await,
                State::Failing(f) => Box::pin(self.fail(*f)).await.unwrap_or_else(ended),
                State::Closing(close) => Box::pin(self.closing(close)).await,
                State::Tunnel(tunnel) => Box::pin(self.tunnel(*tunnel)).await,
                // The states `advance` handles.
                other => other,
            }
        })
    }

    /// Write the rest of a large, file or streamed body.
    async fn write_rest(&mut self, w: Writing) -> State {
        let Writing {
            mut ex,
            started,
            flight,
        } = w;
        let timeout = self.shared.timeouts.write;
        match respond::send_rest(&mut self.io, &mut self.out, started, timeout).await {
            Ok(sent) => {
                let next = self.answered(&mut ex, flight, sent);
                pool::give_head(ex.head);
                next
            }
            Err(e) => ended(e),
        }
    }

    /// Write what is left, then close as `close` says.
    async fn closing(&mut self, close: Close) -> State {
        if let Err(e) = self.flush(self.shared.timeouts.write).await {
            return ended(e);
        }
        // Lingering until the peer closes counts as waiting.
        self.stats.set(Activity::Idle);
        match close {
            Close::Linger => self.io.close().await,
            Close::Now if self.io.close_now() => {}
            Close::Now | Close::Finish => self.io.finish_close().await,
        }
        State::Closed
    }

    /// 101: the connection is no longer HTTP; bytes already read belong to the tunnel.
    async fn tunnel(&mut self, tunnel: osprey_sdk::TunnelBox) -> State {
        if let Err(e) = self.flush(self.shared.timeouts.write).await {
            return ended(e);
        }
        let pending = self.buf.take();
        let idle = self.shared.timeouts.keepalive;
        let result = tunnel::splice(&mut self.io, &pending, tunnel, idle).await;
        self.io.close().await;
        result.map_or_else(ended, |()| State::Closed)
    }

    /// Wait for the handler, feeding it the body it streams; then answer.
    async fn dispatching(&mut self, d: Dispatching) -> State {
        let Dispatching {
            rest,
            flight,
            streamed,
        } = d;
        let Some(body) = streamed else {
            return match finish(&self.shared, &self.peer, rest).await {
                Dispatched::Answered(ex) => self.respond_boxed(ex, flight),
                Dispatched::Lost => self.lost(flight),
            };
        };
        // The body is read while the handler runs, and no longer once it answered.
        let finishing = finish(&self.shared, &self.peer, rest);
        let feeding = streamed::feed(&mut self.io, *body, self.shared.timeouts.body);
        // Boxed: every step's future is moved whole into its box, and this one is large.
        match Box::pin(incoming::beside(finishing, feeding)).await {
            (Dispatched::Answered(mut ex), Some(Fed::Whole(next))) => {
                // Pipelined bytes that followed the body.
                ex.buf.extend_from_slice(&next);
                self.respond_boxed(ex, flight)
            }
            (Dispatched::Answered(ex), _) => self.respond_boxed(ex, flight.cut_if(true)),
            (Dispatched::Lost, _) => self.lost(flight),
        }
    }

    /// A worker job failed and took the request (and its bytes) with it: 500, close.
    fn lost(&mut self, flight: Flight) -> State {
        State::Failing(Box::new(Failure {
            minor: flight.minor,
            is_head: flight.is_head,
            error: HttpError::new(500, ""),
            started: flight.started,
            then: Close::Now,
        }))
    }

    /// Answer an error, then close.
    async fn fail(&mut self, f: Failure) -> std::io::Result<State> {
        tracing::debug!("protocol error {}: {}", f.error.status, f.error.reason);
        self.stats.set(Activity::Writing);
        let mut resp = osprey_sdk::Response::default();
        error_response(&mut resp, f.error.status, f.error.reason);
        let timeout = self.shared.timeouts.write;
        let sent = respond::write_response(
            &mut self.io,
            self.out.ready(),
            f.minor,
            f.is_head,
            &mut resp,
            false,
            timeout,
        )
        .await?;
        finished(Finished {
            peer: &self.peer,
            request: None,
            status: f.error.status,
            body_bytes: sent.body_bytes,
            started: f.started,
            id: None,
            set_cookies: &[],
        });
        Ok(State::Closing(f.then))
    }
}

/// The connection failed while a step wrote or read: it is over.
fn ended(e: std::io::Error) -> State {
    tracing::debug!("connection ended: {e}");
    State::Closed
}
