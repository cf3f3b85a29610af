//! A request body handed to its handler as it arrives (`Handler::streams_request_body`), for
//! every protocol: the protocol side feeds pieces in as it reads them ([`Feed`]), the handler
//! reads them from the stream in its request view. At most a few pieces wait between the two,
//! so memory stays bounded whatever the body's size, and the client is not read faster than
//! the handler takes the body.

use std::future::Future;

use osprey_sdk::abi_stable::sabi_trait::TD_Opaque;
use osprey_sdk::abi_stable::std_types::{ROption, RResult, RString, RVec};
use osprey_sdk::response::BodyStream_TO;
use osprey_sdk::{BodySlot, BodyStream, FfiContext, FfiPoll};
use tokio::sync::{mpsc, oneshot};

/// Pieces read but not yet taken by the handler (each at most one read, 64 KiB).
const IN_FLIGHT: usize = 4;

type Piece = Result<Vec<u8>, String>;

/// The protocol's end: what it reads goes in here.
pub struct Feed {
    pieces: mpsc::Sender<Piece>,
    wanted: Option<oneshot::Receiver<()>>,
}

impl Feed {
    /// Wait until the handler first reads the body (the moment to send `100 Continue`).
    /// `false`: it never will (it answered, or dropped the stream).
    pub async fn wanted(&mut self) -> bool {
        match self.wanted.take() {
            Some(first_read) => first_read.await.is_ok(),
            None => true,
        }
    }

    /// Hand a piece over, waiting while the handler has enough unread. `false`: the handler
    /// dropped the stream; stop reading.
    pub async fn send(&self, piece: Vec<u8>) -> bool {
        piece.is_empty() || self.pieces.send(Ok(piece)).await.is_ok()
    }

    /// The body cannot be read to its end: the handler's next read gets `reason`.
    pub async fn fail(self, reason: &str) {
        let _ = self.pieces.send(Err(reason.to_owned())).await;
    }

    /// Resolves when the handler dropped the stream.
    pub async fn abandoned(&self) {
        self.pieces.closed().await
    }
}

/// The handler's end.
struct Incoming {
    pieces: mpsc::Receiver<Piece>,
    first_read: Option<oneshot::Sender<()>>,
    len: Option<u64>,
}

impl BodyStream for Incoming {
    fn poll_chunk(
        &mut self,
        cx: &mut FfiContext<'_>,
    ) -> FfiPoll<ROption<RResult<RVec<u8>, RString>>> {
        if let Some(first_read) = self.first_read.take() {
            let _ = first_read.send(());
        }
        cx.with_context(|cx| match self.pieces.poll_recv(cx) {
            std::task::Poll::Pending => FfiPoll::Pending,
            std::task::Poll::Ready(None) => FfiPoll::Ready(ROption::RNone),
            std::task::Poll::Ready(Some(Ok(piece))) => {
                FfiPoll::Ready(ROption::RSome(RResult::ROk(piece.into())))
            }
            std::task::Poll::Ready(Some(Err(reason))) => {
                FfiPoll::Ready(ROption::RSome(RResult::RErr(reason.into())))
            }
        })
    }

    fn known_len(&self) -> ROption<u64> {
        self.len.into()
    }
}

/// A new body stream of `len` bytes when known: the protocol's feed, and the slot the
/// handler takes the stream from.
pub fn channel(len: Option<u64>) -> (Feed, BodySlot) {
    let (tx, rx) = mpsc::channel(IN_FLIGHT);
    let (first_read, wanted) = oneshot::channel();
    let stream = Incoming {
        pieces: rx,
        first_read: Some(first_read),
        len,
    };
    let feed = Feed {
        pieces: tx,
        wanted: Some(wanted),
    };
    (
        feed,
        BodySlot::new(BodyStream_TO::from_value(stream, TD_Opaque)),
    )
}

/// Run `main` with `side` beside it until `main` is done: `side`'s output if it finished
/// first. (`side` is dropped unfinished otherwise.)
pub async fn beside<A: Future, B: Future>(main: A, side: B) -> (A::Output, Option<B::Output>) {
    tokio::pin!(main, side);
    let mut side_out = None;
    loop {
        tokio::select! {
            biased;
            out = &mut main => return (out, side_out),
            out = &mut side, if side_out.is_none() => side_out = Some(out),
        }
    }
}
