//! Handlers: what answers a request.

use std::panic::{catch_unwind, AssertUnwindSafe};

use abi_stable::{
    sabi_trait,
    sabi_trait::TD_Opaque,
    std_types::{RBox, RString},
    StableAbi,
};
use async_ffi::LocalFfiFuture;

use crate::{host, request::Request, response::Response};

/// Where a handler runs.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// On the network thread, between reads: for quick, non-blocking work.
    Inline,
    /// On the bounded blocking pool: for file I/O, CPU-heavy or blocking work.
    Worker,
}

/// A handler's answer.
#[repr(C, u8)]
#[derive(StableAbi)]
pub enum Outcome {
    /// The response is ready.
    Done,
    /// Decline: routing goes on to the next matching route (NXWEB's fall-through).
    Next,
    /// Answer with the core's error page for this status. Headers already set on the
    /// response stay (CORS, `Cache-Control`, `Set-Cookie`, ...), except those that describe
    /// the replaced body (`Content-*`, `ETag`, `Last-Modified`, `Accept-Ranges`). For an error
    /// with your own body, set the status and body and answer `Done`.
    Error(u16),
    /// The answer comes later, from a future polled on the connection's network thread. The
    /// future owns what it needs; it must not block.
    Later(LocalFfiFuture<Reply>),
}

/// The result of an asynchronous handler.
#[repr(C, u8)]
#[derive(StableAbi, Debug)]
pub enum Reply {
    /// The response is ready.
    Done(Response),
    /// The core's error page; headers set on the response before `Later` was returned stay,
    /// as with [`Outcome::Error`].
    Error(u16),
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Done => write!(f, "Done"),
            Outcome::Next => write!(f, "Next"),
            Outcome::Error(status) => write!(f, "Error({status})"),
            Outcome::Later(_) => write!(f, "Later(..)"),
        }
    }
}

impl Outcome {
    /// An asynchronous answer. Use only the host's services for I/O inside it: a module's own
    /// copy of tokio has no reactor.
    pub fn later(fut: impl std::future::Future<Output = Reply> + 'static) -> Self {
        Outcome::Later(LocalFfiFuture::new(fut))
    }
}

/// What a module implements to answer requests.
pub trait Handler: Send + Sync + 'static {
    /// Answer `req` by filling `resp`.
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome;

    /// Where `handle` runs; read once when the route is built.
    fn mode(&self) -> Mode {
        Mode::Inline
    }

    /// Take request bodies as they arrive (`Request::take_body_stream`) instead of buffered
    /// whole before `handle` runs; read once when the route is built. For uploads and proxies:
    /// memory stays bounded whatever the body's size. The route's body limit still applies.
    fn streams_request_body(&self) -> bool {
        false
    }
}

/// The ABI-stable face of a [`Handler`], as the core holds it. Module authors do not implement
/// this: [`handler_box`] wraps a `Handler` so that a panic becomes a 500.
#[sabi_trait]
pub trait FfiHandler: Send + Sync {
    /// See [`Handler::handle`].
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome;

    /// See [`Handler::mode`].
    #[sabi(last_prefix_field)]
    fn mode(&self) -> Mode;

    /// See [`Handler::streams_request_body`].
    fn streams_request_body(&self) -> bool;
}

/// A handler object that crosses the module boundary.
pub type HandlerBox = FfiHandler_TO<'static, RBox<()>>;

/// Build a [`HandlerBox`] from any [`Handler`].
pub fn handler_box(handler: impl Handler) -> HandlerBox {
    FfiHandler_TO::from_value(Guarded(handler), TD_Opaque)
}

/// Catches panics inside the module so they never cross the boundary.
struct Guarded<H>(H);

impl<H: Handler> FfiHandler for Guarded<H> {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        match catch_unwind(AssertUnwindSafe(|| Handler::handle(&self.0, req, resp))) {
            Ok(outcome) => outcome,
            Err(panic) => {
                host::error(&format!(
                    "handler panicked on {} {}: {}",
                    req.method,
                    req.uri,
                    panic_message(&panic)
                ));
                *resp = Response::default();
                Outcome::Error(500)
            }
        }
    }

    fn mode(&self) -> Mode {
        catch_unwind(AssertUnwindSafe(|| Handler::mode(&self.0))).unwrap_or(Mode::Inline)
    }

    fn streams_request_body(&self) -> bool {
        catch_unwind(AssertUnwindSafe(|| Handler::streams_request_body(&self.0))).unwrap_or(false)
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> RString {
    panic
        .downcast_ref::<&str>()
        .map(|s| RString::from(*s))
        .or_else(|| {
            panic
                .downcast_ref::<String>()
                .map(|s| RString::from(s.as_str()))
        })
        .unwrap_or_else(|| "(non-text panic)".into())
}
