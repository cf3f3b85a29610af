//! A response body streamed from the upstream connection as the client takes it: Content-Length,
//! chunked (decoded strictly) or until close. At its clean end the connection goes back to the
//! thread's pool; a client that goes away drops it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::conn::Conn;
use osprey_sdk::abi_stable::std_types::{ROption, RResult, RString, RVec};
use osprey_sdk::{BodyStream, FfiContext, FfiPoll};
use tokio::time::{Instant, Sleep};

use super::head::UpstreamFraming;
use super::state::{ActiveGuard, ServerState};
use super::{pool, Backend};
use crate::http::chunked::Decoder;

/// Read at most this much per chunk.
const READ_SIZE: usize = 64 * 1024;

enum Remaining {
    Length(u64),
    Chunked(Decoder),
    Close,
    Done,
}

pub struct UpstreamBody {
    backend: Arc<Backend>,
    server: Arc<ServerState>,
    stream: Option<Conn>,
    /// Bytes read and not yet passed on.
    buf: Vec<u8>,
    state: Remaining,
    keep_alive: bool,
    known_len: Option<u64>,
    timer: Pin<Box<Sleep>>,
    /// The timer runs from the first wait after bytes arrived (a slow client does not count).
    waiting: bool,
    read_timeout: Duration,
    /// Counts the request as in flight on its server until the body is done.
    guard: Option<ActiveGuard>,
}

type Chunk = ROption<RResult<RVec<u8>, RString>>;

impl UpstreamBody {
    /// Must be called on the network thread, inside its runtime.
    pub fn new(
        backend: Arc<Backend>,
        server: Arc<ServerState>,
        stream: Conn,
        buf: Vec<u8>,
        framing: UpstreamFraming,
        keep_alive: bool,
        guard: ActiveGuard,
    ) -> UpstreamBody {
        let (state, known_len) = match framing {
            UpstreamFraming::Length(n) => (Remaining::Length(n), Some(n)),
            UpstreamFraming::Chunked => (Remaining::Chunked(Decoder::default()), None),
            UpstreamFraming::Close => (Remaining::Close, None),
            UpstreamFraming::None => (Remaining::Length(0), Some(0)),
        };
        let read_timeout = backend.read_timeout;
        UpstreamBody {
            backend,
            server,
            stream: Some(stream),
            buf,
            state,
            keep_alive,
            known_len,
            timer: Box::pin(tokio::time::sleep(read_timeout)),
            waiting: false,
            read_timeout,
            guard: Some(guard),
        }
    }

    /// The body ended cleanly: reuse the connection when nothing is left over.
    fn finish(&mut self) {
        self.state = Remaining::Done;
        self.guard = None;
        if let Some(stream) = self.stream.take() {
            if self.keep_alive && self.buf.is_empty() {
                pool::put(&self.server, stream, self.backend.keepalive);
            }
        }
    }

    fn fail(&mut self, message: &str) -> Chunk {
        self.state = Remaining::Done;
        self.stream = None;
        self.guard = None;
        let server = &self.server;
        tracing::warn!(backend = %self.backend.name, server = %server.name, "upstream response body failed: {message}");
        server.record_failure(self.backend.max_fails, self.backend.fail_timeout);
        ROption::RSome(RResult::RErr(RString::from(message)))
    }

    /// Pass on what is buffered, if anything can be.
    fn emit(&mut self) -> Option<Chunk> {
        match &mut self.state {
            Remaining::Done => Some(ROption::RNone),
            Remaining::Length(0) => {
                self.finish();
                Some(ROption::RNone)
            }
            Remaining::Length(left) => {
                if self.buf.is_empty() {
                    return None;
                }
                let take = (*left).min(self.buf.len() as u64) as usize;
                *left -= take as u64;
                let chunk = if take == self.buf.len() {
                    std::mem::take(&mut self.buf)
                } else {
                    self.buf.drain(..take).collect()
                };
                if *left == 0 {
                    self.finish();
                }
                Some(ROption::RSome(RResult::ROk(RVec::from(chunk))))
            }
            Remaining::Chunked(decoder) => {
                if self.buf.is_empty() {
                    return None;
                }
                let mut out = Vec::new();
                let used = match decoder.decode(&self.buf, &mut out, u64::MAX) {
                    Ok(n) => n,
                    Err(e) => {
                        return Some(
                            self.fail(&format!("bad chunked encoding from upstream: {}", e.reason)),
                        )
                    }
                };
                let done = decoder.is_done();
                self.buf.drain(..used);
                if done {
                    self.finish();
                }
                match (out.is_empty(), done) {
                    (false, _) => Some(ROption::RSome(RResult::ROk(RVec::from(out)))),
                    (true, true) => Some(ROption::RNone),
                    (true, false) => None,
                }
            }
            Remaining::Close => {
                if self.buf.is_empty() {
                    return None;
                }
                Some(ROption::RSome(RResult::ROk(RVec::from(std::mem::take(
                    &mut self.buf,
                )))))
            }
        }
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Chunk> {
        loop {
            if let Some(chunk) = self.emit() {
                return Poll::Ready(chunk);
            }
            let Some(stream) = self.stream.as_mut() else {
                return Poll::Ready(ROption::RNone);
            };
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(READ_SIZE);
            }
            match stream.poll_read_buf(cx, &mut self.buf) {
                Poll::Pending => {
                    if !self.waiting {
                        self.waiting = true;
                        let deadline = Instant::now() + self.read_timeout;
                        self.timer.as_mut().reset(deadline);
                    }
                    if self.timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(self.fail("upstream read timed out"));
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Ok(0)) => {
                    if matches!(self.state, Remaining::Close) {
                        self.keep_alive = false;
                        self.finish();
                        return Poll::Ready(ROption::RNone);
                    }
                    return Poll::Ready(
                        self.fail("upstream closed the connection inside the response body"),
                    );
                }
                Poll::Ready(Ok(_)) => self.waiting = false,
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(self.fail(&format!("reading from upstream: {e}")))
                }
            }
        }
    }
}

use std::future::Future;

impl BodyStream for UpstreamBody {
    fn poll_chunk(&mut self, cx: &mut FfiContext<'_>) -> FfiPoll<Chunk> {
        cx.with_context(|cx| match self.poll_next(cx) {
            Poll::Ready(v) => FfiPoll::Ready(v),
            Poll::Pending => FfiPoll::Pending,
        })
    }

    fn known_len(&self) -> ROption<u64> {
        self.known_len.into()
    }
}

/// The body of a HEAD response: nothing, but the length the upstream declared.
pub struct LengthOnly(pub u64);

impl BodyStream for LengthOnly {
    fn poll_chunk(&mut self, _cx: &mut FfiContext<'_>) -> FfiPoll<Chunk> {
        FfiPoll::Ready(ROption::RNone)
    }

    fn known_len(&self) -> ROption<u64> {
        ROption::RSome(self.0)
    }
}
