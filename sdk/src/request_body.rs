//! Request bodies that stream: a handler that says so ([`Handler::streams_request_body`](crate::Handler::streams_request_body))
//! gets the body as it arrives instead of buffered whole, with bounded memory (NXWEB's upload
//! sinks, nginx's `proxy_request_buffering off`).
//!
//! The handler takes the stream from the request ([`Request::take_body_stream`](crate::Request::take_body_stream))
//! and reads it inside its [`Outcome::later`](crate::Outcome::later) future with [`next_chunk`].
//! The client is sent `100 Continue` (when it asked for it) only once the stream is first read,
//! so a handler that answers without reading refuses the body cheaply. The body must be read
//! before the answer is given: once the handler has answered, the rest of the body is no longer
//! read (the connection then closes after the response).

use abi_stable::std_types::{ROption, RResult, RString, RVec};
use abi_stable::StableAbi;

use crate::response::StreamBox;

/// Where the core puts a request's body stream for the handler to take (once).
#[repr(C)]
#[derive(StableAbi)]
pub struct BodySlot {
    stream: abi_stable::external_types::RMutex<ROption<StreamBox>>,
}

impl BodySlot {
    /// A slot holding `stream` (the core builds these).
    pub fn new(stream: StreamBox) -> BodySlot {
        BodySlot {
            stream: abi_stable::external_types::RMutex::new(ROption::RSome(stream)),
        }
    }

    /// The stream, the first time it is asked for.
    pub fn take(&self) -> Option<StreamBox> {
        std::mem::replace(&mut *self.stream.lock(), ROption::RNone).into_option()
    }
}

impl std::fmt::Debug for BodySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BodySlot")
    }
}

/// The next piece of a streamed body: `None` at its end, `Some(Err(reason))` when it cannot be
/// read to the end (the client went away, a timeout, the body limit).
pub async fn next_chunk(stream: &mut StreamBox) -> Option<Result<RVec<u8>, RString>> {
    use async_ffi::ContextExt;
    let polled =
        std::future::poll_fn(
            |cx| match cx.with_ffi_context(|fcx| stream.poll_chunk(fcx)) {
                async_ffi::FfiPoll::Ready(v) => std::task::Poll::Ready(Some(v)),
                async_ffi::FfiPoll::Pending => std::task::Poll::Pending,
                async_ffi::FfiPoll::Panicked => std::task::Poll::Ready(None),
            },
        )
        .await;
    match polled {
        None => Some(Err("the body stream panicked".into())),
        Some(ROption::RNone) => None,
        Some(ROption::RSome(RResult::ROk(bytes))) => Some(Ok(bytes)),
        Some(ROption::RSome(RResult::RErr(e))) => Some(Err(e)),
    }
}
