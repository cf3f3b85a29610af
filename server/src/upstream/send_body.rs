//! A request body that goes upstream as it arrives from the client (nginx's
//! `proxy_request_buffering off`): one piece at a time, so memory stays bounded whatever its
//! size, with `Content-Length` when the client declared one and chunked framing otherwise.

use std::io;
use std::time::Duration;

use osprey_sdk::{next_chunk, StreamBox};
use tokio::io::{AsyncWrite, AsyncWriteExt};

pub struct StreamedBody {
    stream: StreamBox,
    len: Option<u64>,
    /// A piece was taken from the client: the body can no longer be sent again.
    pub started: bool,
}

/// Why a streamed body did not reach the upstream.
#[derive(Debug)]
pub enum BodyFail {
    /// The client's body could not be read (it went away, timed out, passed the limit).
    Client(String),
    Upstream(io::Error),
    Timeout,
}

impl StreamedBody {
    /// `None` for a body known to be empty (the request is then sent as one without a body,
    /// and stays replayable).
    pub fn new(stream: StreamBox) -> Option<StreamedBody> {
        let len = stream.known_len().into_option();
        (len != Some(0)).then_some(StreamedBody {
            stream,
            len,
            started: false,
        })
    }

    /// The framing header it is sent with.
    pub fn framing(&self) -> (&'static str, String) {
        match self.len {
            Some(n) => ("Content-Length", n.to_string()),
            None => ("Transfer-Encoding", "chunked".into()),
        }
    }

    /// Copy the body to `to`, each write within `limit`. Waiting for the client is bounded by
    /// the core's own body timeouts (the stream then fails).
    pub async fn send(
        &mut self,
        to: &mut (impl AsyncWrite + Unpin),
        limit: Duration,
    ) -> Result<(), BodyFail> {
        let mut sent = 0u64;
        let chunked = self.len.is_none();
        loop {
            self.started = true;
            let piece = match next_chunk(&mut self.stream).await {
                None => break,
                Some(Ok(piece)) => piece,
                Some(Err(reason)) => return Err(BodyFail::Client(reason.into())),
            };
            if piece.is_empty() {
                continue;
            }
            sent += piece.len() as u64;
            if self.len.is_some_and(|n| sent > n) {
                return Err(BodyFail::Client("the body is longer than declared".into()));
            }
            if chunked {
                let size = format!("{:x}\r\n", piece.len());
                write(to, size.as_bytes(), limit).await?;
                write(to, &piece, limit).await?;
                write(to, b"\r\n", limit).await?;
            } else {
                write(to, &piece, limit).await?;
            }
        }
        if self.len.is_some_and(|n| sent != n) {
            return Err(BodyFail::Client("the body is shorter than declared".into()));
        }
        if chunked {
            write(to, b"0\r\n\r\n", limit).await?;
        }
        tokio::time::timeout(limit, to.flush())
            .await
            .map_err(|_| BodyFail::Timeout)?
            .map_err(BodyFail::Upstream)
    }
}

async fn write(
    to: &mut (impl AsyncWrite + Unpin),
    bytes: &[u8],
    limit: Duration,
) -> Result<(), BodyFail> {
    tokio::time::timeout(limit, to.write_all(bytes))
        .await
        .map_err(|_| BodyFail::Timeout)?
        .map_err(BodyFail::Upstream)
}
