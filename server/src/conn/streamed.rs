//! An HTTP/1 request body fed to a handler that streams it (see `dispatch::incoming`), read
//! while the handler runs: after the head, in pieces of at most one read, decoded from chunks
//! when it is chunked, never more than the route's limit.

use std::time::Duration;

use super::io::Io;
use crate::dispatch::incoming::Feed;
use crate::http::chunked::Decoder;
use crate::http::parse::BodyFraming;
use crate::http::HttpError;

/// Bytes asked of the socket per read.
const READ_SIZE: usize = 64 * 1024;

/// A streamed body still to be read.
pub struct Streamed {
    pub framing: BodyFraming,
    pub expect_continue: bool,
    /// Body bytes that arrived with the head.
    pub read: Vec<u8>,
    pub limit: u64,
    pub feed: Feed,
    /// Where the handler takes the stream (moved to the exchange when it is built).
    pub slot: Option<osprey_sdk::BodySlot>,
}

/// How feeding the body ended.
pub enum Fed {
    /// Read to its end: the bytes that followed it (pipelined requests).
    Whole(Vec<u8>),
    /// Not read to its end (the handler stopped reading, or the body was bad): the
    /// connection cannot be reused.
    Cut,
}

/// Read the body into its feed as the handler takes it.
pub async fn feed<I: Io>(io: &mut I, body: Streamed, timeout: Duration) -> Fed {
    let Streamed {
        framing,
        expect_continue,
        mut read,
        limit,
        mut feed,
        slot: _,
    } = body;
    if !feed.wanted().await {
        return Fed::Cut;
    }
    if expect_continue && read.is_empty() {
        let sent = io.write_all(&[super::body::CONTINUE], timeout).await;
        if sent.is_err() {
            return Fed::Cut;
        }
    }
    let result = match framing {
        BodyFraming::None => Ok(Fed::Whole(read)),
        BodyFraming::Length(n) => feed_length(io, &mut read, n, &feed, timeout).await,
        BodyFraming::Chunked => feed_chunked(io, &mut read, limit, &feed, timeout).await,
    };
    match result {
        Ok(fed) => fed,
        Err(e) => {
            tracing::debug!("streamed request body failed: {}", e.reason);
            feed.fail(e.reason).await;
            Fed::Cut
        }
    }
}

async fn feed_length<I: Io>(
    io: &mut I,
    read: &mut Vec<u8>,
    len: u64,
    feed: &Feed,
    timeout: Duration,
) -> Result<Fed, HttpError> {
    let mut left = len;
    loop {
        let take = (left as usize).min(read.len());
        let rest = read.split_off(take);
        left -= take as u64;
        if !feed.send(std::mem::replace(read, rest)).await {
            return Ok(Fed::Cut);
        }
        if left == 0 {
            return Ok(Fed::Whole(std::mem::take(read)));
        }
        read_more(io, read, feed, timeout).await?;
    }
}

async fn feed_chunked<I: Io>(
    io: &mut I,
    read: &mut Vec<u8>,
    limit: u64,
    feed: &Feed,
    timeout: Duration,
) -> Result<Fed, HttpError> {
    let mut decoder = Decoder::default();
    let mut total = 0u64;
    loop {
        let mut piece = Vec::with_capacity(read.len());
        let used = decoder.decode(read, &mut piece, limit - total)?;
        read.drain(..used);
        total += piece.len() as u64;
        if !feed.send(piece).await {
            return Ok(Fed::Cut);
        }
        if decoder.is_done() {
            return Ok(Fed::Whole(std::mem::take(read)));
        }
        read_more(io, read, feed, timeout).await?;
    }
}

/// Read what the socket has (at most one read's worth), unless the handler drops the stream
/// meanwhile.
async fn read_more<I: Io>(
    io: &mut I,
    read: &mut Vec<u8>,
    feed: &Feed,
    timeout: Duration,
) -> Result<(), HttpError> {
    read.reserve(READ_SIZE);
    let more = super::body::read_more(io, read, timeout);
    tokio::select! {
        more = more => more,
        _ = feed.abandoned() => Err(HttpError::new(400, "the handler stopped reading the body")),
    }
}
