//! Reading a request body. A body that fits the connection's buffer is read into it (no copy);
//! a larger one, or a chunked one, goes into a [`BodyBuf`] of its own, and the connection's
//! buffer stays small: the body costs its size once, and all of it goes back when the request
//! ends.

use std::time::Duration;

use super::io::Io;
use crate::dispatch::BodyLoc;
use crate::http::body_buf::BodyBuf;
use crate::http::chunked::Decoder;
use crate::http::parse::{BodyFraming, Head, Span};
use crate::http::HttpError;

pub(super) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Content-Length bodies up to this size are read into the connection's buffer.
const IN_BUF_MAX: u64 = 32 * 1024;
/// Room kept in the connection's buffer for each read of a larger body (the pool keeps
/// buffers up to 64 KiB).
const READ_ROOM: usize = 64 * 1024;

/// Read the body that follows `head` in `buf`. Returns where the body is and how many bytes
/// of `buf` the request used.
pub async fn read_body<I: Io>(
    io: &mut I,
    buf: &mut Vec<u8>,
    head: &Head,
    limit: u64,
    timeout: Duration,
) -> Result<(BodyLoc, usize), HttpError> {
    match head.body {
        BodyFraming::None => Ok((BodyLoc::InBuf(Span::default()), head.len)),
        BodyFraming::Length(n) => {
            if n > limit {
                return Err(HttpError::new(413, "request body too large"));
            }
            let end = head.len + n as usize;
            if buf.len() < end && head.expect_continue {
                write_continue(io, timeout).await?;
            }
            if buf.len() >= end || n <= IN_BUF_MAX {
                while buf.len() < end {
                    read_more(io, buf, timeout).await?;
                }
                let span = Span {
                    start: head.len as u32,
                    end: end as u32,
                };
                return Ok((BodyLoc::InBuf(span), end));
            }
            let mut body = BodyBuf::with_capacity(n)?;
            loop {
                let take = (buf.len() - head.len).min(n as usize - body.len());
                body.extend(&buf[head.len..head.len + take])?;
                buf.drain(head.len..head.len + take);
                if body.len() as u64 == n {
                    return Ok((BodyLoc::Owned(body), head.len));
                }
                read_more(io, buf, timeout).await?;
            }
        }
        BodyFraming::Chunked => {
            let mut decoder = Decoder::default();
            let mut body = BodyBuf::default();
            // Chunk framing may add overhead, but not without bound.
            let raw_limit = limit.saturating_mul(2).saturating_add(64 * 1024);
            let mut raw = 0u64;
            let mut asked = false;
            loop {
                let used = decoder.decode(&buf[head.len..], &mut body, limit)?;
                // What is decoded leaves the buffer (bytes after the body stay: the next
                // request).
                buf.drain(head.len..head.len + used);
                raw += used as u64;
                if decoder.is_done() {
                    return Ok((BodyLoc::Owned(body), head.len));
                }
                if raw > raw_limit {
                    return Err(HttpError::new(413, "request body too large"));
                }
                if head.expect_continue && !asked {
                    asked = true;
                    write_continue(io, timeout).await?;
                }
                read_more(io, buf, timeout).await?;
            }
        }
    }
}

async fn write_continue<I: Io>(io: &mut I, timeout: Duration) -> Result<(), HttpError> {
    io.write_all(&[CONTINUE], timeout)
        .await
        .map_err(|_| HttpError::new(400, "connection failed"))
}

pub(super) async fn read_more<I: Io>(
    io: &mut I,
    buf: &mut Vec<u8>,
    timeout: Duration,
) -> Result<(), HttpError> {
    // Reads of a good size; the buffer grows with the bytes that arrive, never with what the
    // client declared.
    buf.reserve(READ_ROOM.saturating_sub(buf.len()).max(4096));
    let timed_out = HttpError::new(408, "timed out reading the request body");
    loop {
        tokio::time::timeout(timeout, io.readable())
            .await
            .map_err(|_| timed_out)?
            .map_err(|_| HttpError::new(400, "connection failed"))?;
        match io.try_read(buf) {
            Ok(0) => {
                return Err(HttpError::new(
                    400,
                    "connection closed inside the request body",
                ))
            }
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return Err(HttpError::new(400, "connection failed")),
        }
    }
}
