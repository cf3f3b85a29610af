//! One proxied request: choose a server, take a pooled connection or connect, send, read the
//! response head; on failure try another server where that is safe.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::task::Poll;

use osprey_sdk::{Response, UpstreamError, UpstreamRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::body::{LengthOnly, UpstreamBody};
use super::conn::Conn;
use super::head::{self, Parsed, RespHead, UpstreamFraming};
use super::send_body::{BodyFail, StreamedBody};
use super::state::{ActiveGuard, ServerState};
use super::wire::Encoded;
use super::{pool, Backend};
use crate::conn::wait::{Deadline, Waiting};

/// Why an attempt failed.
#[derive(Debug)]
enum Fail {
    /// The request never left: safe to retry anywhere.
    Connect(io::Error),
    ConnectTimeout,
    /// The TLS handshake failed (an untrusted or expired certificate, a name mismatch...).
    Tls(io::Error),
    /// Writing failed before the first byte left (the upstream had closed the connection):
    /// nothing was sent, so any method may be retried.
    NotSent(io::Error),
    /// The request may have reached the server.
    Send(io::Error),
    SendTimeout,
    Read {
        error: io::Error,
        got_bytes: bool,
    },
    ReadTimeout,
    Protocol(&'static str),
    /// A pooled connection the upstream closed after a request that cannot be replayed (not
    /// idempotent, or its streamed body was sent) was written to it: not retried (it may have
    /// been processed), and not a failure of the server.
    Closed(Box<Fail>),
    /// The client's streamed body could not be read: not the server's fault.
    ClientBody(String),
}

impl Fail {
    fn reached_upstream(&self) -> bool {
        !matches!(
            self,
            Fail::Connect(_) | Fail::ConnectTimeout | Fail::Tls(_) | Fail::NotSent(_)
        )
    }

    /// What a pooled connection the server had closed looks like: the write failed, or the
    /// connection ended before any byte of a response.
    fn stale(&self) -> bool {
        matches!(
            self,
            Fail::NotSent(_)
                | Fail::Send(_)
                | Fail::Read {
                    got_bytes: false,
                    ..
                }
        )
    }

    fn status(&self) -> u16 {
        match self {
            Fail::ConnectTimeout | Fail::SendTimeout | Fail::ReadTimeout => 504,
            Fail::ClientBody(_) => 400,
            _ => 502,
        }
    }

    fn describe(&self) -> String {
        match self {
            Fail::Connect(e) => format!("connect failed: {e}"),
            Fail::ConnectTimeout => "connect timed out".into(),
            Fail::Tls(e) => format!("TLS handshake failed: {e}"),
            Fail::NotSent(e) => format!("the connection was closed before the request: {e}"),
            Fail::Send(e) => format!("sending the request failed: {e}"),
            Fail::SendTimeout => "sending the request timed out".into(),
            Fail::Read { error, .. } => format!("reading the response failed: {error}"),
            Fail::ReadTimeout => "timed out waiting for the response".into(),
            Fail::Protocol(m) => format!("invalid response: {m}"),
            Fail::Closed(f) => format!(
                "the kept-alive connection was closed ({}); not retried: the request may have been processed",
                f.describe()
            ),
            Fail::ClientBody(m) => format!("the request body could not be read: {m}"),
        }
    }
}

/// The methods RFC 9110 calls idempotent: a retry cannot do harm.
fn idempotent(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
    )
}

/// A request encoded for its first server, before anything was sent: what `request` sends.
pub struct Started {
    safe: bool,
    /// For `ip_hash` only (empty otherwise, not copied).
    client_ip: String,
    list: Arc<super::ServerList>,
    first: usize,
    encoded: Encoded,
    streamed: Option<StreamedBody>,
}

/// Pick the first server and encode the request for it, at once: the module's request
/// borrows the client's headers only for the call.
pub fn start(backend: &Backend, req: UpstreamRequest<'_>) -> Result<Started, UpstreamError> {
    let safe = idempotent(&req.method);
    let client_ip = match backend.balance {
        super::config::Balance::IpHash => req.client_ip.to_string(),
        _ => String::new(),
    };
    let list = backend.servers();
    let Some(first) = backend.pick(&list, &client_ip, &[]) else {
        return Err(no_server(backend));
    };
    // Encoded once, for the first server's `Host`.
    let (encoded, streamed) = Encoded::new(req, backend.keepalive > 0, &list.servers[first].name)
        .map_err(|m| UpstreamError {
        status: 500,
        message: format!("backend `{}`: {m}", backend.name).into(),
    })?;
    Ok(Started {
        safe,
        client_ip,
        list,
        first,
        encoded,
        streamed,
    })
}

fn no_server(backend: &Backend) -> UpstreamError {
    UpstreamError {
        status: 502,
        message: format!("backend `{}`: no server is available", backend.name).into(),
    }
}

pub async fn request(backend: &Arc<Backend>, started: Started) -> Result<Response, UpstreamError> {
    let Started {
        safe,
        client_ip,
        list,
        first,
        encoded,
        mut streamed,
    } = started;
    let tries = (backend.retries as usize + 1).min(list.servers.len());
    // The servers that failed, for the next pick: allocated only when one does.
    let mut tried: Vec<usize> = Vec::new();
    let mut last: Option<(&Arc<ServerState>, Fail)> = None;
    let mut next = Some(first);
    while let Some(i) = next {
        let server = &list.servers[i];
        match attempt(backend, server, &encoded, &mut streamed, safe).await {
            Ok(resp) => return Ok(resp),
            Err(fail) => {
                tried.push(i);
                tracing::warn!(backend = %backend.name, server = %server.name, "upstream attempt failed: {}", fail.describe());
                let counts = !matches!(fail, Fail::Closed(_) | Fail::ClientBody(_));
                if counts && server.record_failure(backend.max_fails, backend.fail_timeout) {
                    tracing::warn!(backend = %backend.name, server = %server.name, "server ejected for {:?}", backend.fail_timeout);
                }
                let retry = match fail {
                    Fail::Protocol(_) | Fail::Closed(_) | Fail::ClientBody(_) => false,
                    ref f => !f.reached_upstream() || (safe && replayable(&streamed)),
                };
                last = Some((server, fail));
                if !retry {
                    break;
                }
            }
        }
        next = if tried.len() < tries {
            backend.pick(&list, &client_ip, &tried)
        } else {
            None
        };
    }
    Err(match last {
        Some((server, fail)) => UpstreamError {
            status: fail.status(),
            message: format!(
                "backend `{}`, server {} ({}): {}",
                backend.name,
                server.name,
                server.addr,
                fail.describe()
            )
            .into(),
        },
        None => no_server(backend),
    })
}

/// A streamed body can be sent again until a piece of it was taken from the client.
fn replayable(streamed: &Option<StreamedBody>) -> bool {
    streamed.as_ref().is_none_or(|b| !b.started)
}

/// One server: a pooled connection first, else a new one. A pooled connection the upstream
/// closed is replaced by a new one once: for any request when nothing was sent on it, for
/// idempotent ones when no byte of a response came (as Go's `net/http` transport does).
async fn attempt(
    backend: &Arc<Backend>,
    server: &Arc<ServerState>,
    req: &Encoded,
    streamed: &mut Option<StreamedBody>,
    safe: bool,
) -> Result<Response, Fail> {
    let guard = ActiveGuard::new(server.clone());
    let began = std::time::Instant::now();
    let resendable = safe && replayable(streamed);
    if let Some(stream) = pool::take(server, backend.keepalive_timeout, resendable) {
        match exchange(backend, stream, req, streamed, &server.name).await {
            Ok(x) => {
                server.record_response(began.elapsed());
                return Ok(respond(backend, server, req, x, guard));
            }
            Err(f) if f.stale() && (!f.reached_upstream() || (safe && replayable(streamed))) => {
                tracing::debug!(backend = %backend.name, server = %server.name, "pooled connection was closed; reconnecting: {}", f.describe());
            }
            Err(f) if f.stale() => return Err(Fail::Closed(Box::new(f))),
            Err(f) => return Err(f),
        }
    }
    // Boxed: a new connection (and its TLS handshake) is the rare path, and its future
    // would otherwise swell the one boxed for every proxied request.
    let stream = match Box::pin(connect(backend, server)).await {
        Ok(stream) => stream,
        Err(f) => {
            if server.named && !matches!(f, Fail::Tls(_)) {
                super::resolve::after_connect_failure(backend);
            }
            return Err(f);
        }
    };
    let x = exchange(backend, stream, req, streamed, &server.name).await?;
    server.record_response(began.elapsed());
    Ok(respond(backend, server, req, x, guard))
}

/// A new connection to the server, TLS when the backend says so; the handshake is part of
/// the connect (and of its timeout).
async fn connect(backend: &Backend, server: &ServerState) -> Result<Conn, Fail> {
    let connect = async {
        let tcp = TcpStream::connect(server.addr)
            .await
            .map_err(Fail::Connect)?;
        let _ = tcp.set_nodelay(true);
        match &backend.tls {
            None => Ok(Conn::Plain(tcp)),
            Some(tls) => tls.connect(tcp, &server.name).await.map_err(Fail::Tls),
        }
    };
    tokio::time::timeout(backend.connect_timeout, connect)
        .await
        .map_err(|_| Fail::ConnectTimeout)?
}

struct Exchanged {
    stream: Conn,
    head: RespHead,
    /// Body bytes read with the head.
    rest: Vec<u8>,
}

async fn exchange(
    backend: &Backend,
    mut stream: Conn,
    req: &Encoded,
    streamed: &mut Option<StreamedBody>,
    host: &str,
) -> Result<Exchanged, Fail> {
    let bytes = req.for_server(host);
    let send = async {
        // The first write tells whether anything left: a connection the upstream closed fails
        // it (reset) before a byte is taken.
        let first = stream.write(&bytes).await.map_err(Fail::NotSent)?;
        stream
            .write_all(&bytes[first..])
            .await
            .map_err(Fail::Send)?;
        stream
            .write_all(req.large_body())
            .await
            .map_err(Fail::Send)?;
        // TLS: what the session still holds goes out now.
        stream.flush().await.map_err(Fail::Send)
    };
    // A request the socket takes at once (the common case) needs no timer.
    let mut send = std::pin::pin!(send);
    let sent = std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await;
    match sent {
        Poll::Ready(sent) => sent?,
        Poll::Pending => tokio::time::timeout(backend.send_timeout, send)
            .await
            .map_err(|_| Fail::SendTimeout)??,
    }
    // Reused per network thread: a fresh 8 KiB for every proxied request cost ~490 instructions.
    let mut buf = crate::conn::pool::take_buffer();
    let mut got_bytes = false;
    if let Some(body) = streamed {
        // Read from the client only now, so that `100 Continue` goes out once the upstream
        // connection is there to take the body.
        // Boxed, as `connect` is: most requests have no streamed body.
        let early = Box::pin(send_watching(
            backend,
            &mut stream,
            body,
            req,
            &mut buf,
            &mut got_bytes,
        ))
        .await?;
        if let Some(head) = early {
            return Ok(Exchanged {
                stream,
                head,
                rest: buf,
            });
        }
    }
    // The thread's deadline table, not a tokio timer per read: arming it is two stores, and
    // the network thread's sweep wakes it (up to one tick late) if the upstream stalls.
    let deadline = Deadline::new();
    loop {
        if let Some(head) = take_head(&mut buf, req)? {
            return Ok(Exchanged {
                stream,
                head,
                rest: buf,
            });
        }
        if buf.capacity() - buf.len() < 2048 {
            buf.reserve(8 * 1024);
        }
        let n = read_within(&deadline, &mut stream, &mut buf, backend.read_timeout)
            .await
            .ok_or(Fail::ReadTimeout)?
            .map_err(|error| Fail::Read { error, got_bytes })?;
        if n == 0 {
            let error = io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the upstream closed the connection",
            );
            return Err(Fail::Read { error, got_bytes });
        }
        got_bytes = true;
    }
}

/// Read what the connection has into `buf`; `None` when `deadline`'s wait of `read_timeout`
/// (armed here: it runs from this read) ends first.
async fn read_within(
    deadline: &Deadline,
    stream: &mut Conn,
    buf: &mut Vec<u8>,
    read_timeout: std::time::Duration,
) -> Option<io::Result<usize>> {
    deadline.arm(read_timeout, Waiting::Request);
    std::future::poll_fn(|cx| match stream.poll_read_buf(cx, buf) {
        Poll::Ready(read) => Poll::Ready(Some(read)),
        Poll::Pending => match deadline.check(cx.waker()) {
            Some(_) => Poll::Ready(None),
            None => Poll::Pending,
        },
    })
    .await
}

/// The final response head at the start of `buf`, once it is all there; interim (1xx)
/// responses before it are dropped.
fn take_head(buf: &mut Vec<u8>, req: &Encoded) -> Result<Option<RespHead>, Fail> {
    while !buf.is_empty() {
        match head::parse_response(buf, req.head_request, req.upgrade).map_err(Fail::Protocol)? {
            Parsed::Partial => break,
            Parsed::Interim(n) => {
                buf.drain(..n);
            }
            Parsed::Head(head) => {
                buf.drain(..head.len);
                return Ok(Some(head));
            }
        }
    }
    Ok(None)
}

/// Send the streamed body while reading the connection: an upstream may give its final
/// answer (a 413, a 401) before it has read the whole body, and that answer goes to the client
/// at once, not after the rest of the upload (RFC 9112 §9.6; nginx does the same). Returns that
/// early head: the body is then left unsent, so the upstream connection is out of step and
/// never pooled, and the core closes the client connection after the answer (lingering, so the
/// unread upload cannot reset it away).
async fn send_watching(
    backend: &Backend,
    stream: &mut Conn,
    body: &mut StreamedBody,
    req: &Encoded,
    buf: &mut Vec<u8>,
    got_bytes: &mut bool,
) -> Result<Option<RespHead>, Fail> {
    let (mut from, mut to) = tokio::io::split(stream);
    let sending = body.send(&mut to, backend.send_timeout);
    tokio::pin!(sending);
    loop {
        if buf.capacity() - buf.len() < 2048 {
            buf.reserve(8 * 1024);
        }
        tokio::select! {
            sent = &mut sending => {
                sent.map_err(|f| match f {
                    BodyFail::Client(m) => Fail::ClientBody(m),
                    BodyFail::Upstream(e) => Fail::Send(e),
                    BodyFail::Timeout => Fail::SendTimeout,
                })?;
                return Ok(None);
            }
            read = from.read_buf(buf) => {
                let n = read.map_err(|error| Fail::Read { error, got_bytes: *got_bytes })?;
                if n == 0 {
                    let error = io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the upstream closed the connection during the request body",
                    );
                    return Err(Fail::Read { error, got_bytes: *got_bytes });
                }
                *got_bytes = true;
                if let Some(mut head) = take_head(buf, req)? {
                    head.keep_alive = false;
                    return Ok(Some(head));
                }
            }
        }
    }
}

/// Turn a response head into the module's response; the body streams from the connection.
fn respond(
    backend: &Arc<Backend>,
    server: &Arc<ServerState>,
    req: &Encoded,
    x: Exchanged,
    guard: ActiveGuard,
) -> Response {
    let Exchanged { stream, head, rest } = x;
    if head.status >= 500 && backend.fail_on_5xx {
        if server.record_failure(backend.max_fails, backend.fail_timeout) {
            tracing::warn!(backend = %backend.name, server = %server.name, "server ejected for {:?} after status {}", backend.fail_timeout, head.status);
        }
    } else if server.record_success() {
        tracing::info!(backend = %backend.name, server = %server.name, "server answered: back in service");
    }
    let mut resp = Response::new();
    resp.status = head.status;
    resp.headers = head.headers.into();
    if head.status == 101 {
        // Switching protocols: the socket becomes the client's tunnel, never pooled.
        resp.body = osprey_sdk::Body::Upgrade(osprey_sdk::tunnel::Tunnel_TO::from_value(
            super::tunnel::UpstreamTunnel {
                stream,
                early: rest,
                _guard: guard,
            },
            osprey_sdk::abi_stable::sabi_trait::TD_Opaque,
        ));
        return resp;
    }
    // The whole body (none, or the common small one) came with the head: it goes on as
    // bytes, which the core writes together with the head, and the connection is free at
    // once — no stream, no body timer.
    let whole = match head.framing {
        UpstreamFraming::None => Some(0),
        UpstreamFraming::Length(n) if n == 0 || n == rest.len() as u64 => Some(n as usize),
        _ => None,
    };
    let Some(body_len) = whole else {
        resp.body_stream(UpstreamBody::new(
            backend.clone(),
            server.clone(),
            stream,
            rest,
            head.framing,
            head.keep_alive,
            guard,
        ));
        return resp;
    };
    // Bytes past the body: the connection is out of step, never pooled.
    if head.keep_alive && rest.len() == body_len {
        pool::put(server, stream, backend.keepalive);
    }
    drop(guard);
    if body_len > 0 {
        resp.body = osprey_sdk::Body::Bytes(rest[..body_len].to_vec().into());
    } else if req.head_request {
        if let Some(n) = head.declared_len {
            resp.body_stream(LengthOnly(n));
        }
    }
    crate::conn::pool::give_buffer(rest);
    resp
}

/// For the health checker: send `GET path` (over TLS when the backend speaks it) and return
/// the status.
pub async fn check(backend: &Backend, server: &ServerState, path: &str) -> Result<u16, String> {
    let tcp = TcpStream::connect(server.addr)
        .await
        .map_err(|e| format!("connect failed: {e}"))?;
    let mut stream = match &backend.tls {
        None => Conn::Plain(tcp),
        Some(tls) => tls
            .connect(tcp, &server.name)
            .await
            .map_err(|e| format!("TLS handshake failed: {e}"))?,
    };
    let host = &server.name;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: osprey-health-check\r\nConnection: close\r\n\r\n");
    let send = async {
        stream.write_all(req.as_bytes()).await?;
        stream.flush().await
    };
    send.await.map_err(|e| format!("send failed: {e}"))?;
    let mut buf = Vec::with_capacity(4096);
    loop {
        if stream
            .read_buf(&mut buf)
            .await
            .map_err(|e| format!("read failed: {e}"))?
            == 0
        {
            return Err("connection closed before a response".into());
        }
        match head::parse_response(&buf, false, false)? {
            Parsed::Partial => {}
            Parsed::Interim(n) => {
                buf.drain(..n);
            }
            Parsed::Head(h) => return Ok(h.status),
        }
    }
}
