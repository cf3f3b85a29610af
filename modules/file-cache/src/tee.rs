//! Caching a streamed body (proxied content, for one): the chunks go to the client as they
//! come, and when the stream ends whole and within the size limit, the copy is stored.

use osprey_sdk::abi_stable::std_types::{ROption, RResult, RString, RVec};
use osprey_sdk::{BodyStream, FfiContext, FfiPoll, StreamBox};

type Chunk = ROption<RResult<RVec<u8>, RString>>;

pub struct Tee {
    inner: StreamBox,
    /// What went by so far; `None` once past the limit or after an error.
    copy: Option<Vec<u8>>,
    limit: u64,
    /// Called with the whole body at its end. Dropped unused if the stream fails or the
    /// client goes away, which also releases whatever it holds (waiting requests, say).
    on_end: Option<Box<dyn FnOnce(Vec<u8>) + Send>>,
}

impl Tee {
    pub fn new(inner: StreamBox, limit: u64, on_end: Box<dyn FnOnce(Vec<u8>) + Send>) -> Tee {
        Tee {
            inner,
            copy: Some(Vec::new()),
            limit,
            on_end: Some(on_end),
        }
    }
}

impl BodyStream for Tee {
    fn poll_chunk(&mut self, cx: &mut FfiContext<'_>) -> FfiPoll<Chunk> {
        let poll = self.inner.poll_chunk(cx);
        match &poll {
            FfiPoll::Ready(ROption::RSome(RResult::ROk(chunk))) => {
                let fits = self
                    .copy
                    .as_ref()
                    .is_some_and(|c| (c.len() + chunk.len()) as u64 <= self.limit);
                match (&mut self.copy, fits) {
                    (Some(copy), true) => copy.extend_from_slice(chunk),
                    _ => self.copy = None,
                }
            }
            FfiPoll::Ready(ROption::RNone) => {
                if let (Some(copy), Some(on_end)) = (self.copy.take(), self.on_end.take()) {
                    on_end(copy);
                }
            }
            FfiPoll::Pending => {}
            _ => self.copy = None,
        }
        poll
    }

    fn known_len(&self) -> ROption<u64> {
        self.inner.known_len()
    }
}
