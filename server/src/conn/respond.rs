//! Writing a response: head and small bodies are gathered in `out` (so pipelined responses
//! leave in one write); large, file and streamed bodies are written at once.

use std::io;
use std::time::Duration;

use osprey_sdk::{Body, Response, TunnelBox};

use super::io::{Cork, Io};
use crate::body::Pieces;
use crate::dispatch::error_response;
use crate::http::encode::{invalid_header, write_chunk, write_head, ResponseFraming, LAST_CHUNK};
use crate::http::status::bodiless;

/// Bodies up to this size are copied next to the head.
const INLINE_BODY: usize = 16 * 1024;

/// What the connection should do after a response.
pub struct Sent {
    pub keep_alive: bool,
    /// After a 101: the tunnel the connection now belongs to.
    pub upgrade: Option<TunnelBox>,
    /// Body bytes sent (0 for HEAD and bodiless statuses).
    pub body_bytes: u64,
}

/// Serialise `resp`; bytes may remain in `out` for the caller to flush.
pub async fn write_response<I: Io>(
    io: &mut I,
    out: &mut Vec<u8>,
    minor: u8,
    is_head: bool,
    resp: &mut Response,
    keep_alive: bool,
    timeout: Duration,
) -> io::Result<Sent> {
    let started = start_response(out, minor, is_head, resp, keep_alive);
    send_rest(io, out, started, timeout).await
}

/// A response whose head (and small body) is in `out`.
pub struct Started {
    sent: Sent,
    /// What is left to write after `out` (`Empty` when nothing).
    rest: Body,
    /// Bytes of `rest` already written.
    done: u64,
    framing: ResponseFraming,
}

impl Started {
    /// Everything is in `out`: the response is answered once `out` is flushed.
    pub fn into_sent(self) -> Result<Sent, Started> {
        match self.rest {
            Body::Empty => Ok(self.sent),
            _ => Err(self),
        }
    }
}

/// Put the head of `resp`, and its body when it is small and in memory, in `out`; the rest
/// goes with [`send_rest`]. Never waits.
pub fn start_response(
    out: &mut Vec<u8>,
    minor: u8,
    is_head: bool,
    resp: &mut Response,
    mut keep_alive: bool,
) -> Started {
    if let Some(bad) = resp.headers.iter().find(|h| invalid_header(h)) {
        tracing::error!(
            "handler set an invalid header {:?}; answering 500",
            bad.name.as_str()
        );
        error_response(resp, 500, "");
    }
    let upgrade = take_upgrade(resp, minor);
    if upgrade.is_some() {
        keep_alive = true;
    }
    let no_body = bodiless(resp.status);
    let framing = match (no_body, resp.body.len()) {
        (true, _) => ResponseFraming::None,
        (false, Some(n)) => ResponseFraming::Length(n),
        (false, None) if minor == 1 => ResponseFraming::Chunked,
        (false, None) => {
            keep_alive = false;
            ResponseFraming::Close
        }
    };
    write_head(out, minor, resp.status, &resp.headers, framing, keep_alive);
    let mut sent = Sent {
        keep_alive,
        upgrade,
        body_bytes: 0,
    };
    if is_head || no_body {
        return Started {
            sent,
            rest: Body::Empty,
            done: 0,
            framing,
        };
    }
    // A stream's bytes are counted as they go.
    sent.body_bytes = match resp.body {
        Body::Stream(_) => 0,
        _ => resp.body.len().unwrap_or(0),
    };
    let rest = match std::mem::replace(&mut resp.body, Body::Empty) {
        // Taken by `take_upgrade` (a 101 has no body).
        Body::Empty | Body::Upgrade(_) => Body::Empty,
        Body::Bytes(ref b) if b.len() <= INLINE_BODY => {
            out.extend_from_slice(b);
            Body::Empty
        }
        Body::Shared(ref b) if b.len() <= INLINE_BODY => {
            out.extend_from_slice(b);
            Body::Empty
        }
        other => other,
    };
    Started {
        sent,
        rest,
        done: 0,
        framing,
    }
}

/// Write what the transport takes now of `out` and of a large or file body: `Ok(Ok(_))` when
/// all of it went, `Ok(Err(_))` with what is left for [`send_rest`]. Never waits.
pub fn send_now<I: Io>(
    io: &mut I,
    out: &mut Vec<u8>,
    mut started: Started,
) -> io::Result<Result<Sent, Started>> {
    let done = started.done as usize;
    let (head_sent, body_sent) = match &started.rest {
        Body::File(range) => {
            let from = range.offset + started.done;
            let cork = Cork::for_file(range.len, !started.sent.keep_alive);
            io.try_send_file(out, &range.file, from, range.len - started.done, cork)?
        }
        Body::Bytes(b) => written(out.len(), write_now(io, &[out, &b[done..]])?),
        Body::Shared(b) => written(out.len(), write_now(io, &[out, &b[done..]])?),
        _ => return Ok(Err(started)),
    };
    out.drain(..head_sent);
    started.done += body_sent;
    if out.is_empty() && Some(started.done) == started.rest.len() {
        return Ok(Ok(started.sent));
    }
    Ok(Err(started))
}

/// What the transport takes now of `bufs` (`WouldBlock` is none of it).
fn write_now<I: Io>(io: &mut I, bufs: &[&[u8]]) -> io::Result<usize> {
    match io.try_write(bufs) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        other => other,
    }
}

/// `n` bytes written of a head of `head` bytes and a body: how many of each.
fn written(head: usize, n: usize) -> (usize, u64) {
    (n.min(head), n.saturating_sub(head) as u64)
}

/// Write `out` and what [`start_response`] left of the body.
pub async fn send_rest<I: Io>(
    io: &mut I,
    out: &mut Vec<u8>,
    started: Started,
    timeout: Duration,
) -> io::Result<Sent> {
    let Started {
        sent,
        rest,
        done,
        framing,
    } = started;
    let mut body_bytes = sent.body_bytes;
    match rest {
        Body::Empty | Body::Upgrade(_) => return Ok(sent),
        Body::Bytes(b) => {
            io.write_all(&[out, &b[done as usize..]], timeout).await?;
            out.clear();
        }
        Body::Shared(b) => {
            io.write_all(&[out, &b[done as usize..]], timeout).await?;
            out.clear();
        }
        Body::File(range) => {
            let (from, len) = (range.offset + done, range.len - done);
            let cork = Cork::for_file(range.len, !sent.keep_alive);
            io.send_file(out, &range.file, from, len, cork, timeout)
                .await?;
            out.clear();
        }
        Body::Stream(stream) => {
            io.write_all(&[out], timeout).await?;
            out.clear();
            let mut pieces = Pieces::new(stream, timeout);
            while let Some(piece) = pieces.next().await? {
                if framing == ResponseFraming::Chunked {
                    write_chunk(out, &piece);
                    io.write_all(&[out], timeout).await?;
                    out.clear();
                } else {
                    io.write_all(&[&piece], timeout).await?;
                }
            }
            body_bytes += pieces.sent();
            if framing == ResponseFraming::Chunked {
                out.extend_from_slice(LAST_CHUNK);
            }
        }
    }
    Ok(Sent { body_bytes, ..sent })
}

/// A 101 must carry a tunnel and a tunnel needs a 101 (on HTTP/1.1); anything else is a
/// handler bug, answered 500.
fn take_upgrade(resp: &mut Response, minor: u8) -> Option<TunnelBox> {
    let is_upgrade = matches!(resp.body, Body::Upgrade(_));
    if !is_upgrade && resp.status != 101 {
        return None;
    }
    if is_upgrade && resp.status == 101 && minor == 1 {
        if let Body::Upgrade(t) = std::mem::replace(&mut resp.body, Body::Empty) {
            return Some(t);
        }
    }
    tracing::error!("a 101 response needs an upgrade body and an HTTP/1.1 request; answering 500");
    error_response(resp, 500, "");
    None
}
