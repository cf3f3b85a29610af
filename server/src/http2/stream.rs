//! One HTTP/2 stream: the request's head is written into a buffer in HTTP/1.1 form and parsed
//! by the same strict parser (so a `Head` with spans, the same limits and Host rules), the body
//! is appended after it, the exchange goes through `dispatch`, and the response is sent with
//! flow control respected.

use std::cell::RefCell;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::header::{HeaderName, HeaderValue};
use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::{Body, FileRange, Response};

use super::fields;
use crate::conn::pool;
use crate::dispatch::incoming::{self, Feed};
use crate::dispatch::{
    dispatch, error_response, finished, start_clock, BodyLoc, Dispatched, Exchange, Finished, Peer,
};
use crate::http::body_buf::BodyBuf;
use crate::http::encode::invalid_header;
use crate::http::parse::{parse_into, BodyFraming, Head};
use crate::http::status::bodiless;
use crate::http::HttpError;
use crate::router::BodyIntake;
use crate::sender::{self, Held, Outgoing, Sink};
use crate::server::Shared;

/// Bodies up to this size are handed to h2 at once; larger ones wait for window capacity.
const DIRECT_BODY: usize = 16 * 1024;
/// Bytes read from a file per DATA send.
const FILE_CHUNK: usize = 64 * 1024;

/// Serve one request stream. Its future is kept small (it is boxed and moved once per
/// stream): the head is parsed into a pooled box, and a route that has to wait finishes in a
/// future of its own.
pub async fn handle(
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    peer: Arc<Peer>,
    shared: Arc<Shared>,
) {
    let (peer, shared) = (&peer, &shared);
    let started = start_clock();
    let (parts, mut body) = req.into_parts();
    let is_head = parts.method == http::Method::HEAD;
    let mut buf = Vec::with_capacity(1024);
    let mut streamed = None;
    let read = match request_head(&parts, &mut buf, peer, shared) {
        Ok((head, intake)) => read_body(&mut body, &head, intake, shared)
            .await
            .map(|(limit, content)| (head, limit, content)),
        Err(e) => Err(e),
    };
    let ex = match read {
        Ok((head, stream_limit, content)) => {
            let id = (shared.config.request_id).for_request(&peer.remote, &buf, &head);
            let mut ex = Exchange {
                buf,
                head,
                body: BodyLoc::Owned(content),
                resp: pool::take_response(),
                extra: Vec::new(),
                stream: None,
                id,
                lineage: None,
            };
            if let Some(limit) = stream_limit {
                let len = match ex.head.body {
                    BodyFraming::Length(n) => Some(n),
                    _ => None,
                };
                let (feed, slot) = incoming::channel(len);
                ex.stream = Some(Box::new(slot));
                streamed = Some((feed, limit));
            }
            ex
        }
        Err(e) => {
            tracing::debug!("HTTP/2 request error {}: {}", e.status, e.reason);
            let mut resp = Response::default();
            error_response(&mut resp, e.status, e.reason);
            let body_bytes = send(&mut respond, resp, is_head, shared).await.unwrap_or(0);
            finished(Finished {
                peer,
                request: None,
                status: e.status,
                body_bytes,
                started,
                id: None,
                set_cookies: &[],
            });
            drain(&mut body).await;
            return;
        }
    };
    let dispatched = match streamed {
        None => dispatch(shared, peer, ex).await,
        Some((feed, limit)) => {
            let feeding = feed_body(&mut body, feed, limit, shared.timeouts.body);
            Box::pin(incoming::beside(dispatch(shared, peer, ex), feeding))
                .await
                .0
        }
    };
    let (mut resp, ex) = match dispatched {
        Dispatched::Answered(mut ex) => {
            ex.stamp_id(&shared.config.request_id);
            (std::mem::take(&mut ex.resp), Some(ex))
        }
        // The request's bytes went with a failed worker job.
        Dispatched::Lost => {
            let mut resp = Response::default();
            error_response(&mut resp, 500, "");
            (resp, None)
        }
    };
    refuse_unsendable(&mut resp);
    let status = resp.status;
    // The access log may record a cookie the response sets; the response goes to h2 below.
    let set_cookies = crate::access_log::set_cookies(&resp.headers);
    let body_bytes = send(&mut respond, resp, is_head, shared)
        .await
        .unwrap_or_else(|e| {
            tracing::debug!("HTTP/2 response not completed: {e}");
            0
        });
    finished(Finished {
        peer,
        request: ex.as_ref().map(|ex| (&ex.buf[..], &*ex.head)),
        status,
        body_bytes,
        started,
        id: ex.as_ref().map(|ex| ex.id),
        set_cookies: &set_cookies,
    });
    if let Some(ex) = ex {
        pool::give_head(ex.head);
    }
}

/// Write the head in HTTP/1.1 form into `buf` and parse it (into a head from the pool), with
/// the body intake of the route it goes to.
fn request_head(
    parts: &http::request::Parts,
    buf: &mut Vec<u8>,
    peer: &Peer,
    shared: &Shared,
) -> Result<(Box<Head>, BodyIntake), HttpError> {
    let authority = parts.uri.authority().map(|a| a.as_str());
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    buf.extend_from_slice(parts.method.as_str().as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(if target.is_empty() {
        b"/"
    } else {
        target.as_bytes()
    });
    buf.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(a) = authority {
        buf.extend_from_slice(b"host: ");
        buf.extend_from_slice(a.as_bytes());
        buf.extend_from_slice(b"\r\n");
    }
    for (name, value) in &parts.headers {
        fields::check_value(value.as_bytes())?;
        // :authority wins over a Host header, which must agree with it (RFC 9113 §8.3.1).
        if let (Some(a), true) = (authority, name == http::header::HOST) {
            fields::check_host(value.as_bytes(), a, parts.uri.scheme_str())?;
            continue;
        }
        buf.extend_from_slice(name.as_str().as_bytes());
        buf.extend_from_slice(b": ");
        buf.extend_from_slice(value.as_bytes());
        buf.extend_from_slice(b"\r\n");
    }
    buf.extend_from_slice(b"\r\n");
    let mut head = pool::take_head();
    match parse_into(buf, &shared.config.limits, &mut head) {
        Ok(true) => {}
        Ok(false) => {
            pool::give_head(head);
            return Err(HttpError::new(400, "incomplete request head"));
        }
        Err(e) => {
            pool::give_head(head);
            return Err(e);
        }
    }
    let intake = shared
        .router
        .body_intake(head.path(buf), head.host(buf), peer.secure);
    Ok((head, intake))
}

/// Read the body into a [`BodyBuf`] (its size once, given back with the request) — unless the
/// handler streams it: then the route's body limit comes back, and the body is fed to the
/// handler as it arrives (`feed_body`).
async fn read_body(
    body: &mut RecvStream,
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
    if body.is_end_stream() {
        return Ok((None, BodyBuf::default()));
    }
    if intake.streamed {
        return Ok((Some(limit), BodyBuf::default()));
    }
    let mut content = match head.body {
        BodyFraming::Length(n) => BodyBuf::with_capacity(n)?,
        _ => BodyBuf::default(),
    };
    let timeout = shared.timeouts.body;
    while let Some(data) = next_data(body, timeout).await? {
        if (content.len() + data.len()) as u64 > limit {
            return Err(HttpError::new(413, "request body too large"));
        }
        content.extend(&data)?;
        let _ = body.flow_control().release_capacity(data.len());
    }
    Ok((None, content))
}

/// Feed a streamed body to its handler as DATA frames arrive. Flow-control capacity is given
/// back only once the handler has taken a piece, so a client sends no faster than it reads.
async fn feed_body(body: &mut RecvStream, mut feed: Feed, limit: u64, timeout: Duration) {
    if !feed.wanted().await {
        return;
    }
    let mut total = 0u64;
    loop {
        let data = tokio::select! {
            data = next_data(body, timeout) => data,
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
                if !feed.send(data.to_vec()).await {
                    return;
                }
                let _ = body.flow_control().release_capacity(data.len());
            }
            Err(e) => return feed.fail(e.reason).await,
        }
    }
}

/// After an early answer, read and drop what the client still sends of the body (a bounded
/// amount, for a short while), so the stream ends with the client's END_STREAM rather than a
/// reset that some clients report as a failure.
async fn drain(body: &mut RecvStream) {
    const DRAIN_BYTES: usize = 1024 * 1024;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut drained = 0;
    while drained < DRAIN_BYTES && !body.is_end_stream() {
        match tokio::time::timeout_at(deadline, body.data()).await {
            Ok(Some(Ok(data))) => {
                drained += data.len();
                let _ = body.flow_control().release_capacity(data.len());
            }
            _ => return,
        }
    }
}

async fn next_data(body: &mut RecvStream, timeout: Duration) -> Result<Option<Bytes>, HttpError> {
    match tokio::time::timeout(timeout, body.data()).await {
        Err(_) => Err(HttpError::new(408, "timed out reading the request body")),
        Ok(None) => Ok(None),
        Ok(Some(Ok(data))) => Ok(Some(data)),
        Ok(Some(Err(_))) => Err(HttpError::new(400, "request body stream failed")),
    }
}

type SendError = Box<dyn std::error::Error>;

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

/// Send the response head and body: the body bytes sent.
async fn send(
    respond: &mut SendResponse<Bytes>,
    mut resp: Response,
    is_head: bool,
    shared: &Shared,
) -> Result<u64, SendError> {
    let no_body = bodiless(resp.status);
    let head = response_head(&resp, if no_body { None } else { resp.body.len() })?;
    let body = Outgoing::of(std::mem::replace(&mut resp.body, Body::Empty));
    pool::give_response(resp);
    let empty = no_body || is_head || body.known_len() == Some(0);
    let stream = respond.send_response(head, empty)?;
    if empty {
        return Ok(0);
    }
    let timeout = shared.timeouts.write;
    let mut sink = Http2 { stream, timeout };
    Ok(sender::send(&mut sink, body, 0, timeout).await?)
}

/// An HTTP/2 stream as a body's sink: DATA frames within flow control, END_STREAM with the
/// last.
struct Http2 {
    stream: SendStream<Bytes>,
    timeout: Duration,
}

impl Sink for Http2 {
    async fn write_bytes(&mut self, bytes: Held, from: usize, last: bool) -> io::Result<()> {
        let bytes = match bytes {
            Held::Owned(b) => Bytes::from(b.into_vec()),
            Held::Shared(b) => Bytes::from_owner(SharedBody(b)),
        };
        self.send_bytes(bytes.slice(from..), last).await
    }

    /// Read in large chunks with pread(2), each sent as it is read.
    async fn send_range(&mut self, range: &FileRange, from: u64, last: bool) -> io::Result<()> {
        let (mut off, end) = (range.offset + from, range.offset + range.len);
        while off < end {
            let want = ((end - off) as usize).min(FILE_CHUNK);
            let mut chunk = BytesMut::zeroed(want);
            let n = range.file.read_at(&mut chunk, off)?;
            if n == 0 {
                self.abort();
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while being sent",
                ));
            }
            chunk.truncate(n);
            off += n as u64;
            self.send_bytes(chunk.freeze(), last && off >= end).await?;
        }
        Ok(())
    }

    async fn end(&mut self) -> io::Result<()> {
        self.stream
            .send_data(Bytes::new(), true)
            .map_err(io::Error::other)
    }

    fn abort(&mut self) {
        self.stream.send_reset(h2::Reason::INTERNAL_ERROR);
    }
}

impl Http2 {
    /// Send `data`, waiting for flow-control capacity when it is large (so a slow client holds
    /// no more than the send buffer, and the write timeout applies).
    async fn send_bytes(&mut self, mut data: Bytes, end: bool) -> io::Result<()> {
        let stream = &mut self.stream;
        if data.len() <= DIRECT_BODY {
            return stream.send_data(data, end).map_err(io::Error::other);
        }
        while !data.is_empty() {
            stream.reserve_capacity(data.len());
            let capacity = tokio::time::timeout(
                self.timeout,
                std::future::poll_fn(|cx| stream.poll_capacity(cx)),
            )
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "write timed out"))?
            .ok_or_else(|| io::Error::other("stream closed"))?
            .map_err(io::Error::other)?;
            if capacity == 0 {
                continue;
            }
            let part = data.split_to(capacity.min(data.len()));
            stream
                .send_data(part, end && data.is_empty())
                .map_err(io::Error::other)?;
        }
        Ok(())
    }
}

/// A shared body handed to h2 without a copy.
struct SharedBody(RArc<RVec<u8>>);

impl AsRef<[u8]> for SharedBody {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// Headers HTTP/2 forbids (RFC 9113 §8.2.2; h2 refuses to send a response with any of them)
/// or the core sets itself.
fn skipped(name: &str) -> bool {
    [
        "content-length",
        "transfer-encoding",
        "connection",
        "date",
        "keep-alive",
        "upgrade",
        "proxy-connection",
        "te",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(name))
}

fn response_head(resp: &Response, length: Option<u64>) -> Result<http::Response<()>, SendError> {
    let mut head = http::Response::new(());
    *head.status_mut() = http::StatusCode::from_u16(resp.status)?;
    let headers = head.headers_mut();
    // Sized once: grown an insert at a time, the map rehashes past six entries.
    headers.reserve(resp.headers.len() + 3);
    headers.insert(http::header::DATE, date_value()?);
    let mut has_server = false;
    for h in resp.headers.iter() {
        if skipped(&h.name) {
            continue;
        }
        has_server |= h.name.eq_ignore_ascii_case("server");
        let name = HeaderName::from_bytes(h.name.as_bytes())?;
        headers.append(name, HeaderValue::from_bytes(h.value.as_bytes())?);
    }
    if !has_server {
        headers.insert(http::header::SERVER, HeaderValue::from_static("osprey"));
    }
    if let Some(n) = length {
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    Ok(head)
}

/// The `date` value, made once a second per thread: a clone shares its bytes.
fn date_value() -> Result<HeaderValue, SendError> {
    thread_local! {
        static DATE: RefCell<Option<HeaderValue>> = const { RefCell::new(None) };
    }
    crate::http::date::with_date(|text| {
        DATE.with(|cell| {
            let mut cached = cell.borrow_mut();
            match &*cached {
                Some(value) if value.as_bytes() == text => Ok(value.clone()),
                _ => {
                    let value = HeaderValue::from_bytes(text)?;
                    *cached = Some(value.clone());
                    Ok(value)
                }
            }
        })
    })
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
