//! The configuration file's shape. Every struct rejects unknown keys; a route's and a filter's
//! own keys are checked by the module that reads them.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

/// The file as written (NXWEB's keys plus Osprey's `network_threads`, `limits`, `timeouts`, ...).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig<'a> {
    #[serde(default)]
    pub load: Vec<LoadEntry>,
    #[serde(default)]
    pub listen: Vec<ListenConfig>,
    #[serde(default)]
    pub backends: BTreeMap<String, crate::upstream::config::BackendConfig>,
    #[serde(default)]
    pub logging: LoggingConfig,
    #[serde(default, borrow)]
    pub modules: BTreeMap<String, &'a RawValue>,
    #[serde(default, borrow)]
    pub routing: Vec<&'a RawValue>,
    /// Network threads; default: one per core. `workers` is accepted too (the name the first
    /// versions used; "worker" now means only the blocking pool's threads).
    #[serde(alias = "workers")]
    pub network_threads: Option<usize>,
    /// Pin network thread i to core i.
    #[serde(default)]
    pub cpu_affinity: bool,
    #[serde(default)]
    pub worker_pool: PoolConfig,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub timeouts: TimeoutsConfig,
    /// Default certificates and TLS settings of secure listeners.
    #[serde(default)]
    pub tls: super::TlsConfig,
    #[serde(default)]
    pub http2: super::Http2Config,
    #[serde(default)]
    pub request_id: crate::request_id::RequestIdConfig,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct LoadEntry {
    /// Path of a module library, or a bare module name found next to the binary.
    pub so: String,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct ListenConfig {
    /// `":8055"`, `"127.0.0.1:8055"`, `"[::1]:8055"`.
    pub interface: String,
    #[serde(default = "default_backlog")]
    pub backlog: i32,
    /// TCP_DEFER_ACCEPT, as nginx's `deferred`: a connection is accepted once its first bytes
    /// arrive, and answered at once.
    #[serde(default = "default_deferred")]
    pub deferred: bool,
    #[serde(default)]
    pub secure: bool,
    /// PEM certificate chain and key of a secure listener (else the `tls` section's).
    pub cert: Option<String>,
    pub key: Option<String>,
    /// Certificates chosen by SNI, for this listener only.
    pub certificates: Option<Vec<super::CertConfig>>,
}

fn default_backlog() -> i32 {
    4096
}

fn default_deferred() -> bool {
    true
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct LoggingConfig {
    /// `error`, `warn`, `info` or `debug`.
    pub log_level: Option<String>,
    /// Error log file (default: standard error).
    pub error_log: Option<String>,
    /// Access log file (default: off).
    pub access_log: Option<String>,
    /// Fields added at the end of each access log line: `request_id`, `cookie:NAME`.
    #[serde(default)]
    pub access_log_fields: Vec<String>,
}

/// The blocking pool for `worker` handlers and heavy filter steps.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// Threads of the blocking pool.
    pub threads: usize,
    /// Jobs waiting or running at once before new ones are answered 503.
    pub queue: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            threads: 8,
            queue: 1024,
        }
    }
}

/// Size and count limits (nginx-like defaults).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Request line and headers together; past it, 431 (414 when the request line alone is).
    pub max_header_bytes: usize,
    /// The request line; past it, 414.
    pub max_request_line: usize,
    /// Number of request headers; past it, 431.
    pub max_headers: usize,
    /// Request body; past it, 413 (a route may lower or raise it with `max_body_size`).
    pub max_body_bytes: u64,
    /// Requests served on one connection before it is closed.
    pub max_requests_per_connection: u64,
    /// Open connections per network thread; past it, new ones wait in the backlog.
    pub max_connections: usize,
    /// How deep subrequests may nest (a page's include is depth 1); deeper ones are refused.
    pub max_subrequest_depth: u32,
    /// Subrequests one client request may start, at every depth together.
    pub max_subrequests: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 * 1024,
            max_request_line: 8 * 1024,
            max_headers: 100,
            max_body_bytes: 1024 * 1024,
            max_requests_per_connection: 10_000,
            max_connections: 16_384,
            max_subrequest_depth: 8,
            max_subrequests: 64,
        }
    }
}

/// Timeouts in seconds (fractions allowed).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutsConfig {
    /// From a request's first byte to the end of its headers (slowloris).
    pub header: f64,
    /// Between two reads of a request body.
    pub body: f64,
    /// Between two writes that make progress (slow readers).
    pub write: f64,
    /// An idle keep-alive connection.
    pub keepalive: f64,
    /// How long SIGTERM waits for in-flight requests.
    pub shutdown: f64,
}

impl Default for TimeoutsConfig {
    fn default() -> Self {
        TimeoutsConfig {
            header: 30.0,
            body: 60.0,
            write: 60.0,
            keepalive: 65.0,
            shutdown: 10.0,
        }
    }
}

/// The keys of a route that the core reads; the rest belong to its handler.
#[derive(Deserialize, Clone, Debug)]
pub struct RouteCore {
    pub prefix: Option<String>,
    pub vhost: Option<String>,
    pub handler: String,
    #[serde(default)]
    pub secure_only: bool,
    #[serde(default)]
    pub insecure_only: bool,
    pub methods: Option<Vec<String>>,
    /// Lower runs first; routes of equal priority keep their order in the file.
    #[serde(default)]
    pub priority: i32,
    pub max_body_size: Option<u64>,
}

/// The keys of a filter entry that the core reads.
#[derive(Deserialize, Clone, Debug)]
pub struct FilterCore {
    #[serde(rename = "type")]
    pub kind: String,
}

/// Just the `filters` list of a route, borrowed.
#[derive(Deserialize)]
pub struct RouteFilters<'a> {
    #[serde(default, borrow)]
    pub filters: Vec<&'a RawValue>,
}
