//! One HTTP/2 stream: the request's head is written into a buffer in HTTP/1.1 form and parsed
//! by the same strict parser (so a `Head` with spans, the same limits and Host rules), the body
//! is appended after it, the exchange goes through `dispatch`, and the response is sent with
//! flow control respected.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::header::{HeaderName, HeaderValue};
use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::{Body, Response};

use crate::body::Pieces;
use crate::dispatch::incoming::{self, Feed};
use crate::dispatch::{
    dispatch, error_response, finished, start_clock, BodyLoc, Dispatched, Exchange, Finished, Peer,
};
use crate::http::body_buf::BodyBuf;
use crate::http::encode::invalid_header;
use crate::http::parse::{parse, BodyFraming, Head};
use crate::http::status::bodiless;
use crate::http::HttpError;
use crate::server::Shared;

/// Bodies up to this size are handed to h2 at once; larger ones wait for window capacity.
const DIRECT_BODY: usize = 16 * 1024;
/// Bytes read from a file per DATA send.
const FILE_CHUNK: usize = 64 * 1024;

/// Serve one request stream.
pub async fn handle(
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    peer: &Arc<Peer>,
    shared: &Arc<Shared>,
) {
    let started = start_clock();
    let (parts, mut body) = req.into_parts();
    let is_head = parts.method == http::Method::HEAD;
    let mut buf = Vec::with_capacity(1024);
    let mut streamed = None;
    let ex = match read_request(&parts, &mut body, &mut buf, peer, shared).await {
        Ok((head, stream_limit, content)) => {
            let id = (shared.config.request_id).for_request(&peer.remote, &buf, &head);
            let mut ex = Exchange {
                buf,
                head: Box::new(head),
                body: BodyLoc::Owned(content),
                resp: Response::default(),
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
            incoming::beside(dispatch(shared, peer, ex), feeding)
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
}

/// Write the head in HTTP/1.1 form into `buf` and parse it, then read the body into a
/// [`BodyBuf`] (its size once, given back with the request) — unless the handler streams it:
/// then the route's body limit comes back with the head, and the body is fed to the handler as
/// it arrives (`feed_body`).
async fn read_request(
    parts: &http::request::Parts,
    body: &mut RecvStream,
    buf: &mut Vec<u8>,
    peer: &Peer,
    shared: &Shared,
) -> Result<(Head, Option<u64>, BodyBuf), HttpError> {
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
        // :authority wins over a Host header (RFC 9113 §8.3.1).
        if authority.is_some() && name == http::header::HOST {
            continue;
        }
        buf.extend_from_slice(name.as_str().as_bytes());
        buf.extend_from_slice(b": ");
        buf.extend_from_slice(value.as_bytes());
        buf.extend_from_slice(b"\r\n");
    }
    buf.extend_from_slice(b"\r\n");
    let limits = &shared.config.limits;
    let head = parse(buf, limits)?.ok_or(HttpError::new(400, "incomplete request head"))?;
    let intake = shared
        .router
        .body_intake(head.path(buf), head.host(buf), peer.secure);
    let limit = intake.limit;
    if let BodyFraming::Length(n) = head.body {
        if n > limit {
            return Err(HttpError::new(413, "request body too large"));
        }
    }
    if intake.streamed && !body.is_end_stream() {
        return Ok((head, Some(limit), BodyBuf::default()));
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
    Ok((head, None, content))
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
    let body = std::mem::replace(&mut resp.body, Body::Empty);
    let empty = no_body || is_head || body.len() == Some(0);
    let mut stream = respond.send_response(head, empty)?;
    if empty {
        return Ok(0);
    }
    // Streams are counted as their chunks go.
    let mut sent = match &body {
        Body::Stream(_) => 0,
        known => known.len().unwrap_or(0),
    };
    let timeout = shared.timeouts.write;
    match body {
        Body::Empty | Body::Upgrade(_) => stream.send_data(Bytes::new(), true)?,
        Body::Bytes(b) => send_bytes(&mut stream, Bytes::from(b.into_vec()), true, timeout).await?,
        Body::Shared(b) => {
            send_bytes(&mut stream, Bytes::from_owner(SharedBody(b)), true, timeout).await?
        }
        Body::File(range) => {
            let (mut off, end) = (range.offset, range.offset + range.len);
            while off < end {
                let want = ((end - off) as usize).min(FILE_CHUNK);
                let mut chunk = BytesMut::zeroed(want);
                let n = range.file.read_at(&mut chunk, off)?;
                if n == 0 {
                    stream.send_reset(h2::Reason::INTERNAL_ERROR);
                    return Err("file shrank while being sent".into());
                }
                chunk.truncate(n);
                off += n as u64;
                send_bytes(&mut stream, chunk.freeze(), off >= end, timeout).await?;
            }
        }
        Body::Stream(source) => {
            let mut pieces = Pieces::new(source, timeout);
            loop {
                match pieces.next().await {
                    Ok(Some(piece)) => {
                        send_bytes(&mut stream, Bytes::from(piece.into_vec()), false, timeout)
                            .await?
                    }
                    Ok(None) => break stream.send_data(Bytes::new(), true)?,
                    Err(e) => {
                        stream.send_reset(h2::Reason::INTERNAL_ERROR);
                        return Err(e.into());
                    }
                }
            }
            sent = pieces.sent();
        }
    }
    Ok(sent)
}

/// A shared body handed to h2 without a copy.
struct SharedBody(RArc<RVec<u8>>);

impl AsRef<[u8]> for SharedBody {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// Send `data`, waiting for flow-control capacity when it is large (so a slow client holds no
/// more than the send buffer, and the write timeout applies).
async fn send_bytes(
    stream: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
    timeout: Duration,
) -> Result<(), SendError> {
    if data.len() <= DIRECT_BODY {
        stream.send_data(data, end)?;
        return Ok(());
    }
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let capacity =
            tokio::time::timeout(timeout, std::future::poll_fn(|cx| stream.poll_capacity(cx)))
                .await
                .map_err(|_| "write timed out")?
                .ok_or("stream closed")??;
        if capacity == 0 {
            continue;
        }
        let part = data.split_to(capacity.min(data.len()));
        stream.send_data(part, end && data.is_empty())?;
    }
    Ok(())
}

/// Headers HTTP/2 forbids or the core sets itself.
fn skipped(name: &str) -> bool {
    [
        "content-length",
        "transfer-encoding",
        "connection",
        "date",
        "keep-alive",
        "upgrade",
        "proxy-connection",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(name))
}

fn response_head(resp: &Response, length: Option<u64>) -> Result<http::Response<()>, SendError> {
    let mut head = http::Response::new(());
    *head.status_mut() = http::StatusCode::from_u16(resp.status)?;
    let headers = head.headers_mut();
    crate::http::date::with_date(|d| {
        HeaderValue::from_bytes(d).map(|v| headers.insert(http::header::DATE, v))
    })?;
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
