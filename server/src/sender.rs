//! The one response-body sender. A `Body` is turned once into what is sent ([`Outgoing`]:
//! bytes in memory, a file range, or a stream's next pieces); a protocol only implements
//! [`Sink`] — write bytes, send a file range — and [`send`] does the rest for every protocol
//! (HTTP/1.1 plain and TLS, HTTP/2).

use std::io;
use std::time::Duration;

use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::{Body, FileRange, StreamBox};

use crate::body::Pieces;

/// Body bytes in memory: owned by the response, or shared with a cache.
pub enum Held {
    Owned(RVec<u8>),
    Shared(RArc<RVec<u8>>),
}

impl Held {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Held::Owned(b) => b,
            Held::Shared(b) => b,
        }
    }
}

/// A response body as it is sent.
pub enum Outgoing {
    /// Nothing (left) to send.
    Empty,
    Bytes(Held),
    Range(FileRange),
    /// Pieces as the stream gives them.
    Stream(StreamBox),
}

impl Outgoing {
    /// What is sent of `body` (a tunnel has no body).
    pub fn of(body: Body) -> Outgoing {
        match body {
            Body::Empty | Body::Upgrade(_) => Outgoing::Empty,
            Body::Bytes(b) => Outgoing::Bytes(Held::Owned(b)),
            Body::Shared(b) => Outgoing::Bytes(Held::Shared(b)),
            Body::File(range) => Outgoing::Range(range),
            Body::Stream(s) => Outgoing::Stream(s),
        }
    }

    /// The length, when known before sending (a stream's is checked as it goes).
    pub fn known_len(&self) -> Option<u64> {
        match self {
            Outgoing::Empty => Some(0),
            Outgoing::Bytes(b) => Some(b.as_slice().len() as u64),
            Outgoing::Range(r) => Some(r.len),
            Outgoing::Stream(_) => None,
        }
    }
}

/// What a protocol does to send a body. `last`: the body ends with these bytes.
pub trait Sink {
    /// Write `bytes` from byte `from` on.
    async fn write_bytes(&mut self, bytes: Held, from: usize, last: bool) -> io::Result<()>;

    /// Send `range` from byte `from` of it on.
    async fn send_range(&mut self, range: &FileRange, from: u64, last: bool) -> io::Result<()>;

    /// Send what is pending (a head) before waiting for a stream's first piece.
    async fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// A stream ended (its end is not known in advance).
    async fn end(&mut self) -> io::Result<()>;

    /// A stream failed: the response cannot be completed.
    fn abort(&mut self) {}
}

/// Send `body` from byte `done` on: how many body bytes it had (for a stream, what it gave).
/// `timeout`: how long a stream may take to give its next piece.
pub async fn send<S: Sink>(
    sink: &mut S,
    body: Outgoing,
    done: u64,
    timeout: Duration,
) -> io::Result<u64> {
    let len = body.known_len().unwrap_or(0);
    match body {
        Outgoing::Empty => {}
        Outgoing::Bytes(b) => sink.write_bytes(b, done as usize, true).await?,
        Outgoing::Range(range) => sink.send_range(&range, done, true).await?,
        Outgoing::Stream(stream) => {
            sink.flush().await?;
            let mut pieces = Pieces::new(stream, timeout);
            loop {
                match pieces.next().await {
                    Ok(Some(piece)) => sink.write_bytes(Held::Owned(piece), 0, false).await?,
                    Ok(None) => break,
                    Err(e) => {
                        sink.abort();
                        return Err(e);
                    }
                }
            }
            sink.end().await?;
            return Ok(pieces.sent());
        }
    }
    Ok(len)
}
