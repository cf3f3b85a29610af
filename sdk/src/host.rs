//! Services the host (the Osprey core) lends to modules. A module's own copies of `tracing`
//! or `tokio` are cut off from the host's, so logging and network I/O go through here.

use std::sync::OnceLock;

use abi_stable::{
    std_types::{ROption, RStr},
    StableAbi,
};
use async_ffi::LocalFfiFuture;

use crate::upstream::{BackendId, UpstreamError, UpstreamFuture, UpstreamRequest};

/// Severity of a log line.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

/// Function table the host hands each module when it is loaded.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HostRef)))]
#[sabi(missing_field(panic))]
pub struct Host {
    /// Write a line to the host's error log, tagged with the module's name.
    pub log: extern "C" fn(level: Level, module: RStr<'_>, message: RStr<'_>),
    /// The backend configured under this name in `backends`.
    pub backend: extern "C" fn(name: RStr<'_>) -> ROption<BackendId>,
    /// Send a request to a server of `backend` (balanced, pooled, retried) and resolve to its
    /// response. The future must be polled on the network thread that created it.
    #[sabi(last_prefix_field)]
    pub upstream_request:
        extern "C" fn(backend: BackendId, request: UpstreamRequest) -> UpstreamFuture,
}

static HOST: OnceLock<(HostRef, &'static str)> = OnceLock::new();

/// Called by the generated module entry point.
#[doc(hidden)]
pub fn install(host: HostRef, module: &'static str) {
    let _ = HOST.set((host, module));
}

/// Log through the host; silently dropped before the module is initialised.
pub fn log(level: Level, message: &str) {
    if let Some((host, module)) = HOST.get() {
        (host.log())(level, RStr::from_str(module), RStr::from_str(message));
    }
}

/// The backend configured under `name` (call it when building a handler, not per request).
pub fn backend(name: &str) -> Option<BackendId> {
    let (host, _) = HOST.get()?;
    (host.backend())(RStr::from_str(name)).into_option()
}

/// Send `request` to `backend` through the host's upstream service. Await it only on the
/// network thread that called this (inside an [`Outcome::later`](crate::Outcome::later) future).
pub fn upstream_request(backend: BackendId, request: UpstreamRequest) -> UpstreamFuture {
    match HOST.get() {
        Some((host, _)) => (host.upstream_request())(backend, request),
        None => LocalFfiFuture::new(async {
            abi_stable::std_types::RResult::RErr(UpstreamError {
                status: 500,
                message: "the module is not initialised".into(),
            })
        }),
    }
}

pub fn error(message: &str) {
    log(Level::Error, message)
}

pub fn warn(message: &str) {
    log(Level::Warn, message)
}

pub fn info(message: &str) {
    log(Level::Info, message)
}

pub fn debug(message: &str) {
    log(Level::Debug, message)
}
