//! Compressing a body of unknown length as it is produced (sent chunked to the client).

use std::io::Write;

use flate2::{write::GzEncoder, Compression};
use osprey_sdk::abi_stable::std_types::{ROption, RResult, RString, RVec};
use osprey_sdk::{BodyStream, FfiContext, FfiPoll, StreamBox};

pub struct GzipStream {
    inner: StreamBox,
    encoder: Option<GzEncoder<Vec<u8>>>,
}

impl GzipStream {
    pub fn new(inner: StreamBox, level: u32) -> GzipStream {
        GzipStream {
            inner,
            encoder: Some(GzEncoder::new(Vec::new(), Compression::new(level))),
        }
    }
}

type Chunk = ROption<RResult<RVec<u8>, RString>>;

fn chunk(bytes: Vec<u8>) -> FfiPoll<Chunk> {
    FfiPoll::Ready(ROption::RSome(RResult::ROk(bytes.into())))
}

fn failed(why: String) -> FfiPoll<Chunk> {
    FfiPoll::Ready(ROption::RSome(RResult::RErr(why.into())))
}

impl BodyStream for GzipStream {
    fn poll_chunk(&mut self, cx: &mut FfiContext<'_>) -> FfiPoll<Chunk> {
        loop {
            let Some(encoder) = self.encoder.as_mut() else {
                return FfiPoll::Ready(ROption::RNone);
            };
            match self.inner.poll_chunk(cx) {
                FfiPoll::Pending => return FfiPoll::Pending,
                FfiPoll::Panicked => return FfiPoll::Panicked,
                FfiPoll::Ready(ROption::RSome(RResult::RErr(e))) => {
                    return FfiPoll::Ready(ROption::RSome(RResult::RErr(e)))
                }
                // A sync flush per source chunk: what the handler produced reaches the client
                // now, decodable, rather than when the compressor's window fills.
                FfiPoll::Ready(ROption::RSome(RResult::ROk(data))) => {
                    if let Err(e) = encoder.write_all(&data).and_then(|_| encoder.flush()) {
                        return failed(format!("gzip: {e}"));
                    }
                    let out = std::mem::take(encoder.get_mut());
                    if !out.is_empty() {
                        return chunk(out);
                    }
                }
                FfiPoll::Ready(ROption::RNone) => {
                    let encoder = self.encoder.take().expect("checked above");
                    return match encoder.finish() {
                        Ok(out) => chunk(out),
                        Err(e) => failed(format!("gzip: {e}")),
                    };
                }
            }
        }
    }
}
