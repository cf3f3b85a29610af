//! Upstream servers for the proxy, behind host services (as nginx's upstream framework):
//! backends from the configuration, the balancer, per-thread keep-alive pools, health checks,
//! and the request service modules call through the SDK.

mod balance;
mod body;
pub mod config;
mod health;
mod pool;
mod service;
mod state;
mod tunnel;
mod wire;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_ffi::LocalFfiFuture;
use osprey_sdk::abi_stable::std_types::{ROption, RResult, RStr};
use osprey_sdk::{BackendId, UpstreamError, UpstreamFuture, UpstreamRequest};

use config::{BackendSpec, Balance, HealthCheckConfig};
use state::ServerState;

/// A backend, shared by every network thread.
pub struct Backend {
    pub id: u32,
    pub name: String,
    pub servers: Vec<Arc<ServerState>>,
    balance: Balance,
    /// Smooth round robin's current weights.
    rr: Mutex<Vec<i64>>,
    /// Where least_conn starts looking, so that ties spread.
    ties: AtomicUsize,
    pub keepalive: usize,
    pub keepalive_timeout: Duration,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub send_timeout: Duration,
    pub retries: u32,
    pub max_fails: u32,
    pub fail_timeout: Duration,
    pub fail_on_5xx: bool,
    health_check: Option<HealthCheckConfig>,
}

impl Backend {
    fn new(id: u32, spec: &BackendSpec) -> Backend {
        let c = &spec.config;
        let secs = Duration::from_secs_f64;
        Backend {
            id,
            name: spec.name.clone(),
            servers: spec
                .servers
                .iter()
                .map(|(addr, name, weight)| {
                    Arc::new(ServerState::new(*addr, name.clone(), *weight))
                })
                .collect(),
            balance: c.balance,
            rr: Mutex::new(vec![0; spec.servers.len()]),
            ties: AtomicUsize::new(0),
            keepalive: c.keepalive,
            keepalive_timeout: secs(c.keepalive_timeout),
            connect_timeout: secs(c.connect_timeout),
            read_timeout: secs(c.read_timeout),
            send_timeout: secs(c.send_timeout),
            retries: c.retries,
            max_fails: c.max_fails,
            fail_timeout: secs(c.fail_timeout),
            fail_on_5xx: c.fail_on_5xx,
            health_check: c.health_check.clone(),
        }
    }
}

static BACKENDS: OnceLock<Vec<Arc<Backend>>> = OnceLock::new();

/// Set up the configured backends (once, before modules build their handlers).
pub fn init(specs: &[BackendSpec]) {
    let _ = BACKENDS.set(
        specs
            .iter()
            .enumerate()
            .map(|(i, s)| Arc::new(Backend::new(i as u32, s)))
            .collect(),
    );
}

fn backends() -> &'static [Arc<Backend>] {
    BACKENDS.get().map_or(&[], Vec::as_slice)
}

/// Start the active health checks of every backend that has them.
pub fn start_health_checks() {
    health::start(backends());
}

/// Host service: the backend named `name`.
pub extern "C" fn host_backend(name: RStr<'_>) -> ROption<BackendId> {
    backends()
        .iter()
        .find(|b| b.name == name.as_str())
        .map(|b| BackendId(b.id))
        .into()
}

/// Host service: send a request to a backend. The future runs on the calling network thread.
pub extern "C" fn host_upstream_request(
    backend: BackendId,
    request: UpstreamRequest,
) -> UpstreamFuture {
    LocalFfiFuture::new(async move {
        let Some(b) = backends().get(backend.0 as usize) else {
            return RResult::RErr(UpstreamError {
                status: 500,
                message: format!("no backend #{}", backend.0).into(),
            });
        };
        service::request(b, request).await.into()
    })
}
