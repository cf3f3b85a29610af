//! Reading a request body into the connection's buffer.

use std::time::Duration;

use super::io::Io;
use crate::dispatch::BodyLoc;
use crate::http::chunked::Decoder;
use crate::http::parse::{BodyFraming, Head, Span};
use crate::http::HttpError;

pub(super) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

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
            if buf.len() < end {
                if head.expect_continue {
                    write_continue(io, timeout).await?;
                }
                // Grow with the bytes that arrive, not with what the client declared.
                buf.reserve((end - buf.len()).min(64 * 1024));
                while buf.len() < end {
                    read_more(io, buf, timeout).await?;
                }
            }
            let span = Span {
                start: head.len as u32,
                end: end as u32,
            };
            Ok((BodyLoc::InBuf(span), end))
        }
        BodyFraming::Chunked => {
            let mut decoder = Decoder::default();
            let mut body = Vec::new();
            let mut pos = head.len;
            // Chunk framing may add overhead, but not without bound.
            let raw_limit = limit.saturating_mul(2).saturating_add(64 * 1024);
            let mut asked = false;
            loop {
                pos += decoder.decode(&buf[pos..], &mut body, limit)?;
                if decoder.is_done() {
                    return Ok((BodyLoc::Owned(body), pos));
                }
                if (pos - head.len) as u64 > raw_limit {
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
