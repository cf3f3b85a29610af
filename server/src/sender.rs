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

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::abi_stable::std_types::{ROption, RResult, RString};
    use osprey_sdk::{BodyStream, FfiContext, FfiPoll, OpenFile, Response};

    /// What a protocol was asked to do, in order.
    #[derive(Debug, PartialEq)]
    enum Call {
        Bytes(Vec<u8>, bool),
        Range(u64, u64, bool),
        Flush,
        End,
        Abort,
    }

    #[derive(Default)]
    struct Recorder(Vec<Call>);

    impl Sink for Recorder {
        async fn write_bytes(&mut self, bytes: Held, from: usize, last: bool) -> io::Result<()> {
            let bytes = bytes.as_slice()[from..].to_vec();
            self.0.push(Call::Bytes(bytes, last));
            Ok(())
        }
        async fn send_range(&mut self, r: &FileRange, from: u64, last: bool) -> io::Result<()> {
            self.0
                .push(Call::Range(r.offset + from, r.len - from, last));
            Ok(())
        }
        async fn flush(&mut self) -> io::Result<()> {
            self.0.push(Call::Flush);
            Ok(())
        }
        async fn end(&mut self) -> io::Result<()> {
            self.0.push(Call::End);
            Ok(())
        }
        fn abort(&mut self) {
            self.0.push(Call::Abort);
        }
    }

    /// A stream giving `pieces` in turn, declaring `declared` bytes.
    struct Given {
        pieces: Vec<&'static [u8]>,
        declared: Option<u64>,
    }

    impl BodyStream for Given {
        fn poll_chunk(
            &mut self,
            _cx: &mut FfiContext<'_>,
        ) -> FfiPoll<ROption<RResult<RVec<u8>, RString>>> {
            if self.pieces.is_empty() {
                return FfiPoll::Ready(ROption::RNone);
            }
            let piece = self.pieces.remove(0);
            FfiPoll::Ready(ROption::RSome(RResult::ROk(piece.to_vec().into())))
        }
        fn known_len(&self) -> ROption<u64> {
            self.declared.into()
        }
    }

    fn sent(body: Body, done: u64) -> (io::Result<u64>, Vec<Call>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut sink = Recorder::default();
        let timeout = Duration::from_secs(5);
        let n = runtime.block_on(send(&mut sink, Outgoing::of(body), done, timeout));
        (n, sink.0)
    }

    fn stream(pieces: Vec<&'static [u8]>, declared: Option<u64>) -> Body {
        let mut resp = Response::default();
        resp.body_stream(Given { pieces, declared });
        std::mem::replace(&mut resp.body, Body::Empty)
    }

    #[test]
    fn bytes_and_ranges_go_once_from_where_they_stand_as_the_last_part() {
        let bytes = Body::Bytes(b"0123456789".to_vec().into());
        let (n, calls) = sent(bytes, 4);
        assert_eq!(n.unwrap(), 10);
        assert_eq!(calls, [Call::Bytes(b"456789".to_vec(), true)]);

        let file = OpenFile::new(std::fs::File::open("/proc/self/exe").unwrap());
        let range = FileRange {
            file: RArc::new(file),
            offset: 100,
            len: 50,
        };
        let (n, calls) = sent(Body::File(range), 10);
        assert_eq!(n.unwrap(), 50);
        assert_eq!(calls, [Call::Range(110, 40, true)]);

        assert_eq!(sent(Body::Empty, 0).1, []);
    }

    #[test]
    fn a_stream_flushes_the_head_then_sends_its_pieces_then_ends() {
        let (n, calls) = sent(stream(vec![b"ab", b"", b"cde"], None), 0);
        assert_eq!(n.unwrap(), 5);
        let expected = [
            Call::Flush,
            Call::Bytes(b"ab".to_vec(), false),
            Call::Bytes(b"cde".to_vec(), false),
            Call::End,
        ];
        assert_eq!(calls, expected);
    }

    #[test]
    fn a_stream_shorter_than_it_declared_is_aborted_not_ended() {
        let (n, calls) = sent(stream(vec![b"ab"], Some(5)), 0);
        assert!(n.is_err());
        let expected = [Call::Flush, Call::Bytes(b"ab".to_vec(), false), Call::Abort];
        assert_eq!(calls, expected);
    }
}
