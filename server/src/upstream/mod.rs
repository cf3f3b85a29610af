//! Upstream servers for the proxy, behind host services (as nginx's upstream framework):
//! backends from the configuration, the balancer, per-thread keep-alive pools, health checks,
//! and the request service modules call through the SDK.

mod balance;
mod body;
pub mod config;
mod conn;
mod head;
mod health;
mod pool;
mod resolve;
mod send_body;
mod service;
mod state;
mod tls;
mod tunnel;
mod upkeep;
mod wire;

pub use pool::trim as trim_idle_connections;

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use async_ffi::LocalFfiFuture;
use osprey_sdk::abi_stable::std_types::{ROption, RResult, RStr, RVec};
use osprey_sdk::{BackendId, UpstreamError, UpstreamFuture, UpstreamRequest};

use config::{BackendSpec, Balance, HealthCheckConfig};
use state::ServerState;

/// A backend's servers at one time: re-resolution replaces the list (keeping the state of the
/// addresses that stay); a request keeps the list it started with.
pub struct ServerList {
    pub servers: Vec<Arc<ServerState>>,
    /// Smooth round robin's current weights.
    rr: Mutex<Vec<i64>>,
}

impl ServerList {
    fn new(servers: Vec<Arc<ServerState>>) -> Arc<ServerList> {
        let rr = Mutex::new(vec![0; servers.len()]);
        Arc::new(ServerList { servers, rr })
    }
}

/// A backend, shared by every network thread.
pub struct Backend {
    pub id: u32,
    pub name: String,
    servers: RwLock<Arc<ServerList>>,
    balance: Balance,
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
    /// Its health checks have been started.
    checked: AtomicBool,
    /// Speak TLS to its servers.
    tls: Option<tls::TlsClient>,
    /// Seconds between lookups of its servers' names.
    resolve_interval: Duration,
    /// Its names are being re-resolved.
    resolving: AtomicBool,
    /// `now_ms()` of its last lookup after a failed connect (0: none yet).
    resolved_ms: AtomicU64,
    /// What it was built from: a reload keeps a backend whose spec is unchanged.
    spec: BackendSpec,
}

impl Backend {
    fn new(id: u32, spec: &BackendSpec) -> Backend {
        let c = &spec.config;
        let secs = Duration::from_secs_f64;
        Backend {
            id,
            name: spec.name.clone(),
            servers: RwLock::new(ServerList::new(
                spec.servers
                    .iter()
                    .flat_map(|(addrs, name, weight)| {
                        addrs
                            .iter()
                            .map(|a| Arc::new(ServerState::new(*a, name.clone(), *weight)))
                    })
                    .collect(),
            )),
            balance: c.balance,
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
            checked: AtomicBool::new(false),
            tls: spec.tls.clone(),
            resolve_interval: secs(c.resolve_interval),
            resolving: AtomicBool::new(false),
            resolved_ms: AtomicU64::new(0),
            spec: spec.clone(),
        }
    }

    /// Its servers now.
    pub fn servers(&self) -> Arc<ServerList> {
        self.servers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_servers(&self, servers: Vec<Arc<ServerState>>) {
        *self.servers.write().unwrap_or_else(|e| e.into_inner()) = ServerList::new(servers);
    }
}

/// Every backend a configuration still in use may reach, by id (ids are never reused). The
/// configurations own their backends; this table only finds them again from the `BackendId`
/// a module was given.
static TABLE: Mutex<Vec<Weak<Backend>>> = Mutex::new(Vec::new());

/// The backends of one configuration, built when it is (start-up and each reload).
#[derive(Default)]
pub struct Backends(Vec<Arc<Backend>>);

impl Backends {
    /// A backend whose name and settings are unchanged since a configuration still in use is
    /// the same backend (its pools, ejections and health verdicts go on); an added or changed
    /// one is new. Removed ones live on while requests of older configurations use them.
    pub fn build(specs: &[BackendSpec]) -> Backends {
        let mut table = TABLE.lock().unwrap();
        let live: Vec<Arc<Backend>> = table.iter().filter_map(Weak::upgrade).collect();
        Backends(
            specs
                .iter()
                .map(|spec| {
                    live.iter()
                        .rev()
                        .find(|b| b.name == spec.name && b.spec == *spec)
                        .cloned()
                        .unwrap_or_else(|| {
                            let b = Arc::new(Backend::new(table.len() as u32, spec));
                            table.push(Arc::downgrade(&b));
                            b
                        })
                })
                .collect(),
        )
    }

    fn named(&self, name: &str) -> Option<&Arc<Backend>> {
        self.0.iter().find(|b| b.name == name)
    }

    /// Start the background work of backends new in this configuration: active health
    /// checks, and the re-resolution of server names.
    pub fn start_health_checks(&self) {
        health::start(&self.0);
        resolve::start(&self.0);
    }

    /// Run `build` (which builds the handlers) with these backends as the ones modules find
    /// by name.
    pub fn building<T>(&self, build: impl FnOnce() -> T) -> T {
        BUILDING.with(|b| *b.borrow_mut() = Some(self.0.clone()));
        let built = build();
        BUILDING.with(|b| b.borrow_mut().take());
        built
    }
}

thread_local! {
    /// The backends of the configuration whose handlers are being built on this thread.
    static BUILDING: RefCell<Option<Vec<Arc<Backend>>>> = const { RefCell::new(None) };
}

/// The backend with this id, if a configuration still uses it. Each thread looks it up in its
/// own copy of the table (ids only grow: a miss copies it again), so no lock is taken per
/// proxied request.
fn by_id(id: u32) -> Option<Arc<Backend>> {
    thread_local! {
        static MIRROR: RefCell<Vec<Weak<Backend>>> = const { RefCell::new(Vec::new()) };
    }
    MIRROR.with(|mirror| {
        let mut mirror = mirror.borrow_mut();
        if id as usize >= mirror.len() {
            *mirror = TABLE.lock().unwrap().clone();
        }
        mirror.get(id as usize)?.upgrade()
    })
}

/// Host service: the backend named `name` in the configuration being built (or, outside a
/// build, the current one).
pub extern "C" fn host_backend(name: RStr<'_>) -> ROption<BackendId> {
    let name = name.as_str();
    let found = BUILDING.with(|b| {
        b.borrow()
            .as_ref()
            .map(|list| list.iter().find(|b| b.name == name).map(|b| b.id))
    });
    let found = found.unwrap_or_else(|| {
        crate::reload::current().and_then(|s| s.backends.named(name).map(|b| b.id))
    });
    found.map(BackendId).into()
}

/// Host service: send a request to a backend. It is encoded before the call returns (it
/// borrows the client's headers); the future runs on the calling network thread.
pub extern "C" fn host_upstream_request(
    backend: BackendId,
    request: UpstreamRequest<'_>,
) -> UpstreamFuture {
    let started = match by_id(backend.0) {
        Some(b) => service::start(&b, request).map(|s| (b, s)),
        None => Err(UpstreamError {
            status: 500,
            message: format!("no backend #{}", backend.0).into(),
        }),
    };
    LocalFfiFuture::new(async move {
        match started {
            Ok((b, started)) => service::request(&b, started).await.into(),
            Err(e) => RResult::RErr(e),
        }
    })
}

/// Host service: every server of the current configuration's backends, for the status page.
pub extern "C" fn host_upstream_health() -> RVec<osprey_sdk::ServerHealth> {
    let now = state::now_ms();
    crate::reload::current()
        .map(|s| {
            s.backends
                .0
                .iter()
                .flat_map(|b| {
                    let list = b.servers();
                    list.servers
                        .iter()
                        .map(|srv| srv.health(&b.name, now))
                        .collect::<Vec<_>>()
                })
                .collect()
        })
        .unwrap_or_default()
}
