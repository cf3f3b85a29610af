//! Writing a response: head and small bodies are gathered in `out` (so pipelined responses
//! leave in one write); large, file and streamed bodies are written at once.

use std::io;
use std::time::Duration;

use osprey_sdk::{Body, FfiPoll, Response};

use super::io::Io;
use crate::dispatch::error_response;
use crate::http::encode::{invalid_header, write_chunk, write_head, Framing, LAST_CHUNK};
use crate::http::status::bodiless;

/// Bodies up to this size are copied next to the head.
const INLINE_BODY: usize = 16 * 1024;

/// Large bodies go out in pieces of this size, each bounded by the write timeout: a peer that
/// takes no whole piece within `timeouts.write` is dropped, one that keeps reading is not.
pub const WRITE_PIECE: usize = 256 * 1024;

/// What the connection should do after a response.
pub struct Sent {
    pub keep_alive: bool,
}

/// Serialise `resp`; bytes may remain in `out` for the caller to flush.
pub async fn write_response<I: Io>(
    io: &mut I,
    out: &mut Vec<u8>,
    minor: u8,
    is_head: bool,
    resp: &mut Response,
    mut keep_alive: bool,
    timeout: Duration,
) -> io::Result<Sent> {
    if let Some(bad) = resp.headers.iter().find(|h| invalid_header(h)) {
        tracing::error!("handler set an invalid header {:?}; answering 500", bad.name.as_str());
        error_response(resp, 500, "");
    }
    let no_body = bodiless(resp.status);
    let framing = match (no_body, resp.body.len()) {
        (true, _) => Framing::None,
        (false, Some(n)) => Framing::Length(n),
        (false, None) if minor == 1 => Framing::Chunked,
        (false, None) => {
            keep_alive = false;
            Framing::Close
        }
    };
    write_head(out, minor, resp.status, &resp.headers, framing, keep_alive);
    if is_head || no_body {
        return Ok(Sent { keep_alive });
    }
    let body = std::mem::replace(&mut resp.body, Body::Empty);
    match body {
        Body::Empty => {}
        Body::Bytes(ref b) if b.len() <= INLINE_BODY => out.extend_from_slice(b),
        Body::Shared(ref b) if b.len() <= INLINE_BODY => out.extend_from_slice(b),
        Body::Bytes(b) => {
            write_pieces(io, timeout, out, &b).await?;
            out.clear();
        }
        Body::Shared(b) => {
            write_pieces(io, timeout, out, &b).await?;
            out.clear();
        }
        Body::File(range) => {
            with_timeout(timeout, io.write_all(&[out])).await?;
            out.clear();
            let end = range.offset + range.len;
            let mut at = range.offset;
            while at < end {
                let len = (end - at).min(WRITE_PIECE as u64);
                with_timeout(timeout, io.send_file(&range.file, at, len)).await?;
                at += len;
            }
        }
        Body::Stream(mut stream) => {
            with_timeout(timeout, io.write_all(&[out])).await?;
            out.clear();
            let chunked = framing == Framing::Chunked;
            loop {
                let next = std::future::poll_fn(|cx| {
                    use async_ffi::ContextExt;
                    match cx.with_ffi_context(|fcx| stream.poll_chunk(fcx)) {
                        FfiPoll::Ready(v) => std::task::Poll::Ready(Some(v)),
                        FfiPoll::Pending => std::task::Poll::Pending,
                        FfiPoll::Panicked => std::task::Poll::Ready(None),
                    }
                });
                match timed_value(timeout, next).await? {
                    Some(osprey_sdk::abi_stable::std_types::ROption::RSome(
                        osprey_sdk::abi_stable::std_types::RResult::ROk(chunk),
                    )) => {
                        if chunk.is_empty() {
                            continue;
                        }
                        if chunked {
                            write_chunk(out, &chunk);
                            write_pieces(io, timeout, &[], out).await?;
                            out.clear();
                        } else {
                            write_pieces(io, timeout, &[], &chunk).await?;
                        }
                    }
                    Some(osprey_sdk::abi_stable::std_types::ROption::RNone) => break,
                    Some(osprey_sdk::abi_stable::std_types::ROption::RSome(
                        osprey_sdk::abi_stable::std_types::RResult::RErr(e),
                    )) => {
                        tracing::error!("response stream failed: {e}");
                        return Err(io::Error::other("stream failed"));
                    }
                    None => {
                        tracing::error!("response stream panicked");
                        return Err(io::Error::other("stream panicked"));
                    }
                }
            }
            if chunked {
                out.extend_from_slice(LAST_CHUNK);
            }
        }
    }
    Ok(Sent { keep_alive })
}

/// Write `head` then `body`, in pieces of at most `WRITE_PIECE` body bytes, each within
/// `limit`.
async fn write_pieces<I: Io>(io: &mut I, limit: Duration, head: &[u8], body: &[u8]) -> io::Result<()> {
    let first = body.len().min(WRITE_PIECE);
    with_timeout(limit, io.write_all(&[head, &body[..first]])).await?;
    for piece in body[first..].chunks(WRITE_PIECE) {
        with_timeout(limit, io.write_all(&[piece])).await?;
    }
    Ok(())
}

async fn with_timeout(limit: Duration, fut: impl std::future::Future<Output = io::Result<()>>) -> io::Result<()> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "write timed out"))?
}

async fn timed_value<T>(limit: Duration, fut: impl std::future::Future<Output = T>) -> io::Result<T> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "stream timed out"))
}
