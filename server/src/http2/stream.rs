//! One HTTP/2 stream's glue to `dispatch`: the request head (made by `request` from the
//! fields, with the checks and limits of HTTP/1.1), the body read from the stream's slot, the
//! exchange through `dispatch`, and the response written into the connection's output within
//! the windows.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use osprey_sdk::{Body, FileRange, HeaderPair, Response};

use super::core::StreamIo;
use super::request::Request;
use super::response;
use crate::conn::pool;
use crate::dispatch::incoming::{self, Feed};
use crate::dispatch::{
    dispatch, dispatch_now, error_response, finish, finished, start_clock, BodyLoc, Dispatched,
    Exchange, Finished, Peer, Routed, Unfinished,
};
use crate::http::body_buf::BodyBuf;
use crate::http::encode::invalid_header;
use crate::http::parse::{BodyFraming, Head};
use crate::http::status::bodiless;
use crate::http::HttpError;
use crate::router::BodyIntake;
use crate::sender::{self, Held, Outgoing, Sink};
use crate::server::Shared;
use tokio::time::Instant;

/// Bytes read from a file per window reservation.
const FILE_CHUNK: usize = 64 * 1024;

/// Where a stream's future starts: what [`begin`] could not finish at once.
pub enum Rest {
    /// Nothing done yet: a body comes, or the head was refused.
    Fresh(Request),
    /// Routed as far as it goes without waiting: a filter, the pool or a `Later` answer next.
    Waits(Box<Unfinished>, Start),
    /// Answered (and checked), the body not within the windows now, or not in memory.
    Answered(Box<Exchange>, Start),
}

/// What the access log and the sender keep from the request's start.
pub struct Start {
    started: Option<Instant>,
    is_head: bool,
}

/// Serve a stream without a future when it can be, as HTTP/1.1's `dispatch_now` does: no
/// body comes, the route answers inline, and the answer (head and body in memory) fits the
/// windows and the output — most requests. Each stream's future costs a box, a task in the
/// connection's set and the moves of the exchange through `dispatch`'s future. What is left
/// comes back for [`handle`].
pub fn begin(
    io: StreamIo,
    req: Request,
    peer: &Arc<Peer>,
    shared: &Arc<Shared>,
) -> Option<(StreamIo, Rest)> {
    // A body (or a length declared without one: `read_body` answers that) takes the future.
    let no_body = matches!(&req.head, Ok(head) if matches!(head.body, BodyFraming::None));
    if !no_body || !io.is_end_stream() {
        return Some((io, Rest::Fresh(req)));
    }
    let Ok(head) = req.head else {
        unreachable!("checked above")
    };
    let start = Start {
        started: start_clock(),
        is_head: req.is_head,
    };
    let ids = &shared.config.request_id;
    let ex = Exchange::client(
        ids,
        peer,
        (req.buf, head),
        BodyLoc::Owned(BodyBuf::default()),
        None,
    );
    let mut routed = dispatch_now(shared, peer, ex);
    let Routed::Answered(ex) = &mut routed else {
        let Routed::Waits(rest) = routed else {
            unreachable!("answered above")
        };
        return Some((io, Rest::Waits(rest, start)));
    };
    prepare(ex, shared);
    let mut io = io;
    let Some(body_bytes) = send_now(&mut io, &mut ex.resp, start.is_head) else {
        let Routed::Answered(ex) = routed else {
            unreachable!("answered above")
        };
        return Some((io, Rest::Answered(Box::new(ex), start)));
    };
    drop(io);
    let status = ex.resp.status;
    let set_cookies = crate::access_log::set_cookies(&ex.resp.headers);
    done(
        peer,
        Some(ex),
        status,
        body_bytes,
        start.started,
        &set_cookies,
    );
    // Only the head and the response move out (`Routed::Answered(ex)` would copy it all).
    if let Routed::Answered(Exchange { head, resp, .. }) = routed {
        pool::give_head(head);
        pool::give_response(resp);
    }
    None
}

/// Serve what [`begin`] left of a request stream. Its future is kept small (it is boxed and
/// moved once per stream): the head is in a pooled box, and a route that has to wait
/// finishes in a future of its own.
pub async fn handle(mut io: StreamIo, rest: Rest, peer: Arc<Peer>, shared: Arc<Shared>) {
    let (peer, shared) = (&peer, &shared);
    let (mut dispatched, start, prepared) = match rest {
        Rest::Fresh(req) => match fresh(&io, req, peer, shared).await {
            Ok((dispatched, start)) => (dispatched, start, false),
            Err((e, start)) => return refused(io, e, start, peer, shared).await,
        },
        Rest::Waits(rest, start) => {
            let dispatched = match Box::pin(finish(shared, peer, rest)).await {
                Dispatched::Answered(ex) => Dispatched::Answered(*ex),
                Dispatched::Lost => Dispatched::Lost,
            };
            (dispatched, start, false)
        }
        Rest::Answered(ex, start) => (Dispatched::Answered(*ex), start, true),
    };
    // The response is sent from where the handler left it, by reference.
    let mut lost;
    let resp = match &mut dispatched {
        Dispatched::Answered(ex) => {
            if !prepared {
                prepare(ex, shared);
            }
            &mut ex.resp
        }
        // The request's bytes went with a failed worker job.
        Dispatched::Lost => {
            lost = Response::default();
            error_response(&mut lost, 500, "");
            &mut lost
        }
    };
    let status = resp.status;
    // The access log may record a cookie the response sets; the response is sent below.
    let set_cookies = crate::access_log::set_cookies(&resp.headers);
    let body_bytes = send(&mut io, resp, start.is_head, shared)
        .await
        .unwrap_or_else(|e| {
            tracing::debug!("HTTP/2 response not completed: {e}");
            0
        });
    let ex = match &dispatched {
        Dispatched::Answered(ex) => Some(ex),
        Dispatched::Lost => None,
    };
    done(peer, ex, status, body_bytes, start.started, &set_cookies);
    if let Dispatched::Answered(Exchange { head, resp, .. }) = dispatched {
        pool::give_head(head);
        pool::give_response(resp);
    }
}

/// A fresh stream: its body read (or fed to the handler), then dispatched.
async fn fresh(
    io: &StreamIo,
    req: Request,
    peer: &Arc<Peer>,
    shared: &Arc<Shared>,
) -> Result<(Dispatched, Start), (HttpError, Start)> {
    let start = Start {
        started: start_clock(),
        is_head: req.is_head,
    };
    let buf = req.buf;
    let mut streamed = None;
    let read = match req.head {
        Ok(head) => {
            let intake = shared
                .router
                .body_intake(head.path(&buf), head.host(&buf), peer.secure);
            read_body(io, &head, intake, shared)
                .await
                .map(|(limit, content)| (head, limit, content))
        }
        Err(e) => Err(e),
    };
    // Built where it is used (not in a match arm): each move of the exchange is a `memcpy`.
    let (head, stream_limit, content) = match read {
        Ok(read) => read,
        Err(e) => return Err((e, start)),
    };
    let ids = &shared.config.request_id;
    let mut ex = Exchange::client(ids, peer, (buf, head), BodyLoc::Owned(content), None);
    if let Some(limit) = stream_limit {
        let len = match ex.head.body {
            BodyFraming::Length(n) => Some(n),
            _ => None,
        };
        let (feed, slot) = incoming::channel(len);
        ex.stream = Some(Box::new(slot));
        streamed = Some((feed, limit));
    }
    let dispatched = match streamed {
        None => dispatch(shared, peer, ex).await,
        Some((feed, limit)) => {
            let feeding = feed_body(io, feed, limit, shared.timeouts.body);
            Box::pin(incoming::beside(dispatch(shared, peer, ex), feeding))
                .await
                .0
        }
    };
    Ok((dispatched, start))
}

/// A request refused before dispatch (its head, its body): the error's answer.
async fn refused(mut io: StreamIo, e: HttpError, start: Start, peer: &Peer, shared: &Shared) {
    tracing::debug!("HTTP/2 request error {}: {}", e.status, e.reason);
    let mut resp = Response::default();
    error_response(&mut resp, e.status, e.reason);
    let body_bytes = send(&mut io, &mut resp, start.is_head, shared)
        .await
        .unwrap_or(0);
    pool::give_response(resp);
    done(peer, None, e.status, body_bytes, start.started, &[]);
}

/// An answer made ready to send: the request id stamped, what HTTP/2 cannot carry refused.
fn prepare(ex: &mut Exchange, shared: &Shared) {
    ex.stamp_id(&shared.config.request_id);
    refuse_unsendable(&mut ex.resp);
}

/// The request counted and logged, once its response has left.
fn done(
    peer: &Peer,
    ex: Option<&Exchange>,
    status: u16,
    body_bytes: u64,
    started: Option<Instant>,
    set_cookies: &[HeaderPair],
) {
    finished(Finished {
        peer,
        request: ex.map(|ex| (&ex.buf[..], &*ex.head)),
        status,
        body_bytes,
        started,
        id: ex.map(|ex| ex.id),
        set_cookies,
    });
}

/// Read the body into a [`BodyBuf`] (its size once, given back with the request) — unless the
/// handler streams it: then the route's body limit comes back, and the body is fed to the
/// handler as it arrives (`feed_body`).
async fn read_body(
    io: &StreamIo,
    head: &Head,
    intake: BodyIntake,
    shared: &Shared,
) -> Result<(Option<u64>, BodyBuf), HttpError> {
    let limit = intake.limit;
    if let BodyFraming::Length(n) = head.body {
        if n > limit {
            return Err(HttpError::new(413, "request body too large"));
        }
    }
    if io.is_end_stream() {
        return Ok((None, BodyBuf::default()));
    }
    if intake.streamed {
        return Ok((Some(limit), BodyBuf::default()));
    }
    let mut content = match head.body {
        BodyFraming::Length(n) => BodyBuf::with_capacity(n)?,
        _ => BodyBuf::default(),
    };
    while let Some(data) = io.data(shared.timeouts.body).await? {
        if (content.len() + data.len()) as u64 > limit {
            return Err(HttpError::new(413, "request body too large"));
        }
        content.extend(&data)?;
        io.release(data.len());
    }
    Ok((None, content))
}

/// Feed a streamed body to its handler as DATA frames arrive. Window is given back only once
/// the handler has taken a piece, so a client sends no faster than it reads.
async fn feed_body(io: &StreamIo, mut feed: Feed, limit: u64, timeout: Duration) {
    if !feed.wanted().await {
        return;
    }
    let mut total = 0u64;
    loop {
        let data = tokio::select! {
            data = io.data(timeout) => data,
            _ = feed.abandoned() => return,
        };
        match data {
            // The end: dropping the feed ends the handler's stream.
            Ok(None) => return,
            Ok(Some(data)) => {
                total += data.len() as u64;
                if total > limit {
                    return feed.fail("request body too large").await;
                }
                let n = data.len();
                if !feed.send(data).await {
                    return;
                }
                io.release(n);
            }
            Err(e) => return feed.fail(e.reason).await,
        }
    }
}

/// A response HTTP/2 cannot carry (an invalid header, an informational status, a tunnel)
/// becomes a 500.
fn refuse_unsendable(resp: &mut Response) {
    if let Some(bad) = resp.headers.iter().find(|h| invalid_header(h)) {
        tracing::error!(
            "handler set an invalid header {:?}; answering 500",
            bad.name.as_str()
        );
        error_response(resp, 500, "");
    }
    // HTTP/2 has no connection upgrade (101); a tunnel can only ride HTTP/1.1.
    if resp.status < 200 || resp.status > 999 || matches!(resp.body, Body::Upgrade(_)) {
        tracing::error!(
            "handler answered status {} over HTTP/2; answering 500",
            resp.status
        );
        error_response(resp, 500, "");
    }
}

/// Send the response head and body (taken from `resp`): the body bytes sent.
async fn send(
    io: &mut StreamIo,
    resp: &mut Response,
    is_head: bool,
    shared: &Shared,
) -> io::Result<u64> {
    let no_body = bodiless(resp.status);
    let length = if no_body { None } else { resp.body.len() };
    let body = Outgoing::of(std::mem::replace(&mut resp.body, Body::Empty));
    let empty = no_body || is_head || body.known_len() == Some(0);
    {
        let mut core = io.core.borrow_mut();
        if core.closed || !core.streams.contains_key(&io.id) {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        response::head(&mut core, io.id, resp, length, empty);
    }
    if empty {
        io.done = true;
        return Ok(0);
    }
    let timeout = shared.timeouts.write;
    let mut sink = Http2 { io, timeout };
    sender::send(&mut sink, body, 0, timeout).await
}

/// Send the response at once, with no future: the head and a body in memory when all of it
/// fits the windows and the output (else nothing is done: `None`, for [`send`]). The body
/// bytes sent.
fn send_now(io: &mut StreamIo, resp: &mut Response, is_head: bool) -> Option<u64> {
    let no_body = bodiless(resp.status);
    let length = if no_body { None } else { resp.body.len() };
    let empty = no_body || is_head || length == Some(0);
    let len = match &resp.body {
        _ if empty => 0,
        Body::Bytes(b) => b.len(),
        Body::Shared(b) => b.len(),
        _ => return None,
    };
    if !io.take_all(len) {
        return None;
    }
    let body = Outgoing::of(std::mem::replace(&mut resp.body, Body::Empty));
    let mut core = io.core.borrow_mut();
    response::head(&mut core, io.id, resp, length, empty);
    io.done = true;
    match body {
        Outgoing::Bytes(bytes) if !empty => {
            response::data_held(&mut core, io.id, bytes, 0..len, true);
            Some(len as u64)
        }
        _ => Some(0),
    }
}

/// An HTTP/2 stream as a body's sink: DATA frames within flow control, END_STREAM with the
/// last.
struct Http2<'a> {
    io: &'a mut StreamIo,
    timeout: Duration,
}

impl Sink for Http2<'_> {
    async fn write_bytes(&mut self, bytes: Held, from: usize, last: bool) -> io::Result<()> {
        let total = bytes.as_slice().len();
        let mut at = from;
        loop {
            let left = total - at;
            let n = self.io.reserve(left, self.timeout).await?;
            let end = last && n == left;
            let mut core = self.io.core.borrow_mut();
            if n == left {
                // The rest in one go: the bytes themselves go to the output.
                response::data_held(&mut core, self.io.id, bytes, at..total, end);
                self.io.done |= last;
                return Ok(());
            }
            response::data(&mut core, self.io.id, &bytes.as_slice()[at..at + n], end);
            at += n;
        }
    }

    /// Read in large chunks with pread(2), straight into DATA frames.
    async fn send_range(&mut self, range: &FileRange, from: u64, last: bool) -> io::Result<()> {
        let (mut off, end) = (range.offset + from, range.offset + range.len);
        if off >= end {
            return self
                .write_bytes(Held::Owned(Default::default()), 0, last)
                .await;
        }
        while off < end {
            let want = ((end - off) as usize).min(FILE_CHUNK);
            let n = self.io.reserve(want, self.timeout).await?;
            let fin = last && off + n as u64 >= end;
            response::file_data(
                &mut self.io.core.borrow_mut(),
                self.io.id,
                range,
                off,
                n,
                fin,
            )?;
            off += n as u64;
        }
        self.io.done |= last;
        Ok(())
    }

    async fn end(&mut self) -> io::Result<()> {
        self.write_bytes(Held::Owned(Default::default()), 0, true)
            .await
    }

    fn abort(&mut self) {
        self.io
            .core
            .borrow_mut()
            .reset(self.io.id, super::frame::Reason::Internal);
        self.io.done = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns (a future, for an async fn), without calling it.
    fn output_size<A, B, C, D, F>(_: fn(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Each stream's future is boxed and moved once: the request head and a waiting route's
    /// run live in boxes of their own, or every stream copies kilobytes (with `dispatch` awaited
    /// inline it is 5.5 KiB in a debug build, 2.3 KiB without).
    #[test]
    fn a_streams_future_stays_small() {
        let size = output_size(handle);
        assert!(size <= 4096, "stream future: {size} bytes");
    }
}
