//! Services the host (the Osprey core) lends to modules. A module's own copies of `tracing`
//! or `tokio` are cut off from the host's, so logging and network I/O go through here.

use std::sync::OnceLock;

use abi_stable::{
    std_types::{ROption, RResult, RStr, RString, RVec, Tuple2},
    StableAbi,
};
use async_ffi::LocalFfiFuture;

use crate::request::Request;
use crate::subrequest::{ParentBox, SubrequestError, SubrequestStarted, SubrequestTarget};
use crate::tcp::ConnectFuture;
use crate::upstream::{BackendId, ServerHealth, UpstreamError, UpstreamFuture, UpstreamRequest};

/// Severity of a log line.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Something failed.
    Error = 1,
    /// Something looks wrong but the server goes on.
    Warn = 2,
    /// Normal events worth a line.
    Info = 3,
    /// Details for finding a problem.
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
    pub upstream_request:
        extern "C" fn(backend: BackendId, request: UpstreamRequest) -> UpstreamFuture,
    /// A snapshot of the server's counters (see [`stats`]).
    pub stats: extern "C" fn() -> Stats,
    /// The id of the named counter, registering it on first use (see [`Counter`]).
    pub counter: extern "C" fn(name: RStr<'_>) -> u32,
    /// Add to a counter by id.
    #[sabi(last_prefix_field)]
    pub counter_add: extern "C" fn(id: u32, delta: u64),
    /// Start an internal `GET` for the request (`parent_host`, `parent_uri`) being handled on
    /// this thread (see [`subrequest`](crate::subrequest)).
    pub subrequest: extern "C" fn(
        parent_host: RStr<'_>,
        parent_uri: RStr<'_>,
        target: &SubrequestTarget,
    ) -> SubrequestStarted,
    /// A handle that starts subrequests for the request (`parent_host`, `parent_uri`) being
    /// handled on this thread, usable after the call returns (see [`Parent`](crate::subrequest::Parent)).
    pub subrequest_parent: extern "C" fn(
        parent_host: RStr<'_>,
        parent_uri: RStr<'_>,
    ) -> RResult<ParentBox, SubrequestError>,
    /// Connect to `addr` (`host:port`) within `connect_ms`; reads and writes that wait longer
    /// than `io_ms` fail (0: no limit). See [`crate::tcp`].
    #[sabi(missing_field(option))]
    pub tcp_connect: extern "C" fn(addr: RStr<'_>, connect_ms: u64, io_ms: u64) -> ConnectFuture,
    /// Run a future to its end on the calling network thread, detached; `false` (the future
    /// dropped unpolled) when the caller is not on a network thread. See [`spawn`].
    #[sabi(missing_field(option))]
    pub spawn: extern "C" fn(task: LocalFfiFuture<()>) -> bool,
    /// Every upstream server of the current configuration's backends (see [`upstream_health`]).
    pub upstream_health: extern "C" fn() -> RVec<ServerHealth>,
}

/// The server's counters at one moment, summed over every network thread.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default)]
pub struct Stats {
    /// Seconds since the server started.
    pub uptime_secs: u64,
    /// Configuration reloads that succeeded.
    pub reloads: u64,
    /// Connections accepted since start.
    pub accepted: u64,
    /// Open connections (`reading + writing + idle`).
    pub active: u64,
    /// Connections receiving a request head.
    pub reading: u64,
    /// Connections whose request is being answered (handler or response write).
    pub writing: u64,
    /// Idle keep-alive connections (and new ones that sent nothing yet).
    pub idle: u64,
    /// Requests answered since start (including protocol errors).
    pub requests: u64,
    /// Requests answered per module (the module of the route's handler), by module name.
    pub modules: RVec<Tuple2<RString, u64>>,
    /// Counters that modules registered through [`Counter`], by name.
    pub counters: RVec<Tuple2<RString, u64>>,
}

/// The server's counters now; `None` before the module is initialised.
pub fn stats() -> Option<Stats> {
    HOST.get().map(|(host, _)| (host.stats())())
}

/// A named counter kept by the host and shown by the status handler (e.g. a cache's hits and
/// misses). Adding costs one relaxed atomic add; register once (in `Module::new`) and keep it.
#[derive(Clone, Copy, Debug)]
pub struct Counter(u32);

impl Counter {
    /// The counter named `name` (shared by every module using the same name). Names should
    /// look like Prometheus metric names: `[a-z_][a-z0-9_]*`, e.g. `cache_hits`.
    pub fn register(name: &str) -> Counter {
        Counter(
            HOST.get()
                .map_or(u32::MAX, |(host, _)| (host.counter())(RStr::from_str(name))),
        )
    }

    /// Add `delta`.
    pub fn add(&self, delta: u64) {
        if let Some((host, _)) = HOST.get() {
            (host.counter_add())(self.0, delta);
        }
    }

    /// Add one.
    pub fn incr(&self) {
        self.add(1)
    }
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

/// The state of every upstream server of the current configuration's backends, in the order
/// of the configuration; empty before the module is initialised.
pub fn upstream_health() -> Vec<ServerHealth> {
    HOST.get()
        .map(|(host, _)| (host.upstream_health())().into_vec())
        .unwrap_or_default()
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

/// Start a subrequest for `parent` (see [`Subrequest`](crate::subrequest::Subrequest), which
/// builds `target`).
pub fn subrequest(parent: &Request<'_>, target: &SubrequestTarget) -> SubrequestStarted {
    match HOST.get() {
        Some((host, _)) => (host.subrequest())(parent.host, parent.uri, target),
        None => SubrequestStarted::refused(
            500,
            "subrequests are not available (module not initialised)".into(),
        ),
    }
}

/// Ask the host to connect (see [`TcpStream::connect`](crate::tcp::TcpStream::connect)).
pub(crate) fn tcp_connect(addr: &str, connect_ms: u64, io_ms: u64) -> ConnectFuture {
    // A host older than this SDK has no such field: its prefix table ends before it.
    let connect = HOST.get().and_then(|(host, _)| host.tcp_connect());
    match connect {
        Some(connect) => connect(RStr::from_str(addr), connect_ms, io_ms),
        None => LocalFfiFuture::new(async {
            abi_stable::std_types::RResult::RErr("the host lends no TCP connections".into())
        }),
    }
}

/// The host's subrequest handle for `parent` (see [`Parent`](crate::subrequest::Parent)).
pub fn subrequest_parent(parent: &Request<'_>) -> Result<ParentBox, SubrequestError> {
    match HOST.get() {
        Some((host, _)) => (host.subrequest_parent())(parent.host, parent.uri).into_result(),
        None => Err(SubrequestError {
            status: 500,
            message: "subrequests are not available (module not initialised)".into(),
        }),
    }
}

/// Run `task` to its end on this network thread, detached from the request that started it
/// (a write-behind to a cache store, say). Returns `false` and drops the task when called off
/// a network thread (in a `Worker` step, or before the server runs): keep the work queued and
/// start it from the next call on a network thread.
pub fn spawn(task: impl std::future::Future<Output = ()> + 'static) -> bool {
    let spawn = HOST.get().and_then(|(host, _)| host.spawn());
    spawn.is_some_and(|spawn| spawn(LocalFfiFuture::new(task)))
}

/// Log at [`Level::Error`].
pub fn error(message: &str) {
    log(Level::Error, message)
}

/// Log at [`Level::Warn`].
pub fn warn(message: &str) {
    log(Level::Warn, message)
}

/// Log at [`Level::Info`].
pub fn info(message: &str) {
    log(Level::Info, message)
}

/// Log at [`Level::Debug`].
pub fn debug(message: &str) {
    log(Level::Debug, message)
}
