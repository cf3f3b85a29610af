//! A document that arrives as a stream (a backend's answer with `X-Osprey-SSI: on`): read
//! whole (up to `max_size`), then sent as its assembled page.

use osprey_sdk::abi_stable::std_types::{ROption, RResult, RString, RVec};
use osprey_sdk::subrequest::Parent;
use osprey_sdk::{BodyStream, Composite, FfiContext, FfiPoll, StreamBox};

use crate::page::assemble;
use crate::vars::Vars;

type Chunk = ROption<RResult<RVec<u8>, RString>>;

pub struct SsiStream {
    source: StreamBox,
    doc: Vec<u8>,
    max_size: u64,
    parent: Parent,
    path: String,
    vars: Option<Vars<'static>>,
    marker: String,
    page: Option<Composite>,
}

impl SsiStream {
    pub fn new(
        source: StreamBox,
        max_size: u64,
        parent: Parent,
        path: String,
        vars: Vars<'static>,
        marker: String,
    ) -> SsiStream {
        SsiStream {
            source,
            doc: Vec::new(),
            max_size,
            parent,
            path,
            vars: Some(vars),
            marker,
            page: None,
        }
    }
}

impl BodyStream for SsiStream {
    fn poll_chunk(&mut self, cx: &mut FfiContext<'_>) -> FfiPoll<Chunk> {
        loop {
            if let Some(page) = self.page.as_mut() {
                return page.poll_chunk(cx);
            }
            match self.source.poll_chunk(cx) {
                FfiPoll::Pending => return FfiPoll::Pending,
                FfiPoll::Panicked => return FfiPoll::Panicked,
                FfiPoll::Ready(ROption::RSome(RResult::ROk(chunk))) => {
                    self.doc.extend_from_slice(&chunk);
                    if self.doc.len() as u64 > self.max_size {
                        let why =
                            format!("ssi: {} is over max_size ({})", self.path, self.max_size);
                        osprey_sdk::host::warn(&why);
                        return FfiPoll::Ready(ROption::RSome(RResult::RErr(why.into())));
                    }
                }
                FfiPoll::Ready(ROption::RSome(RResult::RErr(e))) => {
                    return FfiPoll::Ready(ROption::RSome(RResult::RErr(e)));
                }
                FfiPoll::Ready(ROption::RNone) => {
                    let vars = self.vars.take().unwrap_or_default();
                    let doc = std::mem::take(&mut self.doc);
                    self.page = Some(assemble(&self.parent, &self.path, vars, doc, &self.marker));
                }
            }
        }
    }
}
