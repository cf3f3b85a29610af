//! A streamed response body as every protocol sends it: the next piece, within the write
//! timeout, and exactly the length the stream declared (`BodyStream::known_len`, sent as
//! `Content-Length`), or an error that makes the protocol cut the response.

use std::io;
use std::time::Duration;

use osprey_sdk::abi_stable::std_types::RVec;
use osprey_sdk::{next_chunk, StreamBox};

/// The pieces of a streamed response body.
pub struct Pieces {
    stream: StreamBox,
    declared: Option<u64>,
    sent: u64,
    timeout: Duration,
}

impl Pieces {
    /// `timeout`: how long the stream may take to give its next piece.
    pub fn new(stream: StreamBox, timeout: Duration) -> Pieces {
        Pieces {
            declared: stream.known_len().into_option(),
            stream,
            sent: 0,
            timeout,
        }
    }

    /// The next non-empty piece; `None` at the end. An error (logged here) when the stream
    /// fails, panics, stalls, or gives more or fewer bytes than it declared.
    pub async fn next(&mut self) -> io::Result<Option<RVec<u8>>> {
        loop {
            let next = tokio::time::timeout(self.timeout, next_chunk(&mut self.stream));
            let piece = match next.await {
                Err(_) => return Err(failed("response stream timed out".into())),
                Ok(None) => return self.ended().map(|()| None),
                Ok(Some(Err(e))) => return Err(failed(format!("response stream failed: {e}"))),
                Ok(Some(Ok(piece))) => piece,
            };
            if piece.is_empty() {
                continue;
            }
            self.sent += piece.len() as u64;
            if let Some(n) = self.declared.filter(|&n| self.sent > n) {
                return Err(failed(format!(
                    "response stream is longer than its declared {n} bytes"
                )));
            }
            return Ok(Some(piece));
        }
    }

    /// Body bytes given so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    fn ended(&self) -> io::Result<()> {
        match self.declared {
            Some(n) if n != self.sent => Err(failed(format!(
                "response stream ended after {} of its declared {n} bytes",
                self.sent
            ))),
            _ => Ok(()),
        }
    }
}

fn failed(message: String) -> io::Error {
    tracing::error!("{message}");
    io::Error::other(message)
}
