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

/// Where an upstream server stands, as the balancer sees it.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamState {
    /// In service.
    Up,
    /// Its active health checks say it is down.
    Down,
    /// Passively ejected (`max_fails` failures), for `fail_timeout`.
    Ejected,
    /// Its ejection is over: the next request to it is the probe that decides.
    Checking,
}

impl UpstreamState {
    /// `up`, `down`, `ejected`, `checking`.
    pub fn name(self) -> &'static str {
        match self {
            UpstreamState::Up => "up",
            UpstreamState::Down => "down",
            UpstreamState::Ejected => "ejected",
            UpstreamState::Checking => "checking",
        }
    }
}

/// One upstream server of a backend of the current configuration, for the status page
/// ([`host::upstream_health`](crate::host::upstream_health)).
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct ServerHealth {
    /// The backend's name in `backends`.
    pub backend: RString,
    /// The server's address as configured.
    pub server: RString,
    /// The address it is reached at now (a name's current resolution).
    pub address: RString,
    /// Its state now.
    pub state: UpstreamState,
    /// Requests in flight to it, over every network thread.
    pub in_flight: u64,
    /// Responses it gave since start (or since its backend was last changed by a reload).
    pub responses: u64,
    /// Failed attempts since then (connect errors, timeouts, invalid responses, ...).
    pub fails: u64,
    /// Time to its response heads, a moving average in microseconds (0 before the first).
    pub response_us: u64,
}
