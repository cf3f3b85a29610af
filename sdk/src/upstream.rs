//! Types of the host's upstream service: the reverse-proxy machinery (connection pools, load
//! balancing, health checks, retries) lives in the core; a module asks it to send a request to
//! a configured backend and gets the response head with a streamed body.

use abi_stable::{
    std_types::{RArc, ROption, RResult, RString, RVec},
    StableAbi,
};
use async_ffi::LocalFfiFuture;

use crate::request_body::BodySlot;
use crate::response::{HeaderPair, Response};

/// A backend named in the configuration's `backends`, resolved once with
/// [`host::backend`](crate::host::backend) when a route is built.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackendId(pub u32);

/// A request to send upstream. The host adds the framing headers (`Content-Length`,
/// `Connection`) itself and drops any the module passes; it adds `Host: <server address>`
/// when `headers` has no `Host`.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct UpstreamRequest {
    /// `GET`, `POST`, ...: decides whether a failed attempt may be retried on another server.
    pub method: RString,
    /// Origin-form target: path and query (`/a/b?c`).
    pub target: RString,
    /// End-to-end headers to send.
    pub headers: RVec<HeaderPair>,
    /// The request body.
    pub body: RVec<u8>,
    /// The client's address (without port), for `ip_hash` balancing.
    pub client_ip: RString,
    /// The body as it arrives from the client (`Request::take_body_stream`), sent instead of
    /// `body`: with `Content-Length` when its length is known, else chunked. It cannot be
    /// replayed, so once a byte of it was sent the request is not retried.
    pub body_stream: ROption<RArc<BodySlot>>,
}

/// Why no response came: `status` is what to answer (502 for connection or protocol failures,
/// 504 for timeouts), `message` says what happened, for the log.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct UpstreamError {
    /// The status to answer the client with.
    pub status: u16,
    /// What happened, for the log.
    pub message: RString,
}

/// The answer of [`host::upstream_request`](crate::host::upstream_request): the upstream's
/// status and end-to-end headers, with a body that streams from the upstream connection
/// (its length is known when the upstream sent `Content-Length`).
pub type UpstreamFuture = LocalFfiFuture<RResult<Response, UpstreamError>>;
