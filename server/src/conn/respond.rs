//! Writing a response: head and small bodies are gathered in `out` (so pipelined responses
//! leave in one write); large, file and streamed bodies are written at once.

use std::io;
use std::time::Duration;

use osprey_sdk::{Body, FileRange, Response, TunnelBox};

use super::io::{FilePart, Io};
use crate::dispatch::error_response;
use crate::http::encode::{invalid_header, write_chunk, write_head, ResponseFraming, LAST_CHUNK};
use crate::http::status::bodiless;
use crate::sender::{self, Held, Outgoing, Sink};

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
    /// What is left to write after `out`.
    rest: Outgoing,
    /// Bytes of `rest` already written.
    done: u64,
    framing: ResponseFraming,
}

impl Started {
    /// Everything is in `out`: the response is answered once `out` is flushed.
    pub fn into_sent(self) -> Result<Sent, Started> {
        match self.rest {
            Outgoing::Empty => Ok(self.sent),
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
            rest: Outgoing::Empty,
            done: 0,
            framing,
        };
    }
    let rest = match Outgoing::of(std::mem::replace(&mut resp.body, Body::Empty)) {
        Outgoing::Bytes(b) if b.as_slice().len() <= INLINE_BODY => {
            out.extend_from_slice(b.as_slice());
            sent.body_bytes = b.as_slice().len() as u64;
            Outgoing::Empty
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
    let done = started.done;
    let (head_sent, body_sent) = match &started.rest {
        Outgoing::Range(range) => {
            let part = FilePart::rest_of(range, done, !started.sent.keep_alive);
            io.try_send_file(out, part)?
        }
        Outgoing::Bytes(b) => {
            let written = write_now(io, &[out, &b.as_slice()[done as usize..]])?;
            (
                written.min(out.len()),
                written.saturating_sub(out.len()) as u64,
            )
        }
        _ => return Ok(Err(started)),
    };
    out.drain(..head_sent);
    started.done += body_sent;
    if out.is_empty() && Some(started.done) == started.rest.known_len() {
        started.sent.body_bytes = started.done;
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

/// Write `out` and what [`start_response`] left of the body.
pub async fn send_rest<I: Io>(
    io: &mut I,
    out: &mut Vec<u8>,
    started: Started,
    timeout: Duration,
) -> io::Result<Sent> {
    let Started {
        mut sent,
        rest,
        done,
        framing,
    } = started;
    if let Outgoing::Empty = rest {
        return Ok(sent);
    }
    let mut sink = Http1 {
        io,
        out,
        chunked: framing == ResponseFraming::Chunked,
        closing: !sent.keep_alive,
        timeout,
    };
    sent.body_bytes = sender::send(&mut sink, rest, done, timeout).await?;
    Ok(sent)
}

/// An HTTP/1 connection (plain or TLS) as a body's sink: the bytes in `out` (the head, when
/// not yet written) go first; the last chunk of a chunked body is left in `out` to flush.
struct Http1<'a, I> {
    io: &'a mut I,
    out: &'a mut Vec<u8>,
    chunked: bool,
    /// The connection closes after this response (how a large file is corked).
    closing: bool,
    timeout: Duration,
}

impl<I: Io> Sink for Http1<'_, I> {
    async fn write_bytes(&mut self, bytes: Held, from: usize, _last: bool) -> io::Result<()> {
        let bytes = &bytes.as_slice()[from..];
        if self.chunked {
            write_chunk(self.out, bytes);
            self.io.write_all(&[self.out], self.timeout).await?;
        } else {
            self.io.write_all(&[self.out, bytes], self.timeout).await?;
        }
        self.out.clear();
        Ok(())
    }

    async fn send_range(&mut self, range: &FileRange, from: u64, _last: bool) -> io::Result<()> {
        let part = FilePart::rest_of(range, from, self.closing);
        self.io.send_file(self.out, part, self.timeout).await?;
        self.out.clear();
        Ok(())
    }

    async fn flush(&mut self) -> io::Result<()> {
        self.io.write_all(&[self.out], self.timeout).await?;
        self.out.clear();
        Ok(())
    }

    async fn end(&mut self) -> io::Result<()> {
        if self.chunked {
            self.out.extend_from_slice(LAST_CHUNK);
        }
        Ok(())
    }
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
