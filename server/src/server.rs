//! Network threads: each runs its own current-thread runtime with its own SO_REUSEPORT
//! listeners (shared-nothing, thread per core); the main thread waits for signals.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use osprey_sdk::Lifecycle;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{watch, Notify};

use crate::config::Config;
use crate::modules::Registry;
use crate::reload::Reloader;
use crate::router::Router;
use crate::upstream::Backends;
use crate::worker::WorkerPool;

/// Timeouts as durations.
pub struct Timeouts {
    pub header: Duration,
    pub body: Duration,
    pub write: Duration,
    pub keepalive: Duration,
    pub shutdown: Duration,
}

/// Everything a request needs that comes from the configuration.
pub struct Shared {
    pub config: Config,
    pub router: Router,
    pub pool: WorkerPool,
    pub timeouts: Timeouts,
    /// The modules this configuration was built from (libraries are never unloaded).
    pub registry: &'static Registry,
    /// TLS configurations of the secure listeners (certificates read at build time).
    pub tls: crate::net::tls::TlsSet,
    /// The upstream backends this configuration's handlers use.
    pub backends: Backends,
}

impl Shared {
    /// A server's shared state from a configuration text, for unit tests that serve a socket.
    #[cfg(test)]
    pub(crate) fn for_tests(json: &str) -> Arc<Shared> {
        let config = Config::parse("t.json", json).unwrap();
        let registry: &'static Registry =
            Box::leak(Box::new(Registry::load(&config, &[]).unwrap()));
        Arc::new(Shared::new(config, registry).unwrap())
    }

    pub fn new(config: Config, registry: &'static Registry) -> Result<Shared, String> {
        // Backends exist before modules build the handlers that name them.
        let backends = Backends::build(&config.backends);
        let router = backends
            .building(|| Router::build(&config, registry))
            .map_err(|e| e.to_string())?;
        let t = &config.timeouts;
        let secs = |s: f64| Duration::from_secs_f64(s.max(0.001));
        Ok(Shared {
            timeouts: Timeouts {
                header: secs(t.header),
                body: secs(t.body),
                write: secs(t.write),
                keepalive: secs(t.keepalive),
                shutdown: secs(t.shutdown),
            },
            pool: WorkerPool::new(config.worker_pool.queue),
            tls: crate::net::tls::build(&config)?,
            router,
            config,
            registry,
            backends,
        })
    }
}

/// A listening socket of one network thread.
struct Listener {
    socket: std::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
}

/// Bind every listener for every thread, run `after_bind` (privilege drop, readiness), start
/// the threads, and serve until SIGTERM/SIGINT; SIGHUP reloads through `reloader`.
pub fn run(
    shared: Shared,
    reloader: &Reloader,
    after_bind: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    let registry = shared.registry;
    let signals = crate::reload::Signals::install()?;
    let config = &shared.config;
    if config.listen.is_empty() {
        return Err(format!(
            "{}: nothing to listen on (add `listen` or use -H)",
            config.file
        ));
    }
    let threads = config.network_threads;
    let mut per_thread = Vec::with_capacity(threads);
    for l in &config.listen {
        let addr = crate::net::parse_interface(&l.interface)?;
        crate::net::check_unused(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    }
    for _ in 0..threads {
        let mut listeners = Vec::new();
        for (i, l) in config.listen.iter().enumerate() {
            let addr = crate::net::parse_interface(&l.interface)?;
            let socket = crate::net::bind(addr, l.backlog, l.deferred)
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            listeners.push(Listener {
                socket,
                tls: shared.tls.get(i),
            });
        }
        per_thread.push(listeners);
    }
    for l in &per_thread[0] {
        if let Ok(addr) = l.socket.local_addr() {
            tracing::info!("listening on {addr}");
        }
    }
    after_bind()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    crate::worker::start(config.worker_pool.threads);
    let cpu_affinity = config.cpu_affinity;
    let shared = Arc::new(shared);
    crate::reload::publish(shared.clone());
    registry.lifecycle(Lifecycle::ServerStart);
    let mut running = Vec::with_capacity(threads);
    for (index, listeners) in per_thread.into_iter().enumerate() {
        let stop = stop_rx.clone();
        let thread = std::thread::Builder::new()
            .name(format!("osprey-net-{index}"))
            .spawn(move || {
                if cpu_affinity {
                    pin_to_core(index);
                }
                let runtime = network_runtime().expect("a tokio runtime");
                runtime.block_on(network_thread(index, listeners, stop, registry));
            })
            .map_err(|e| format!("cannot start a network thread: {e}"))?;
        running.push(thread);
    }
    tracing::info!(
        "osprey {} started with {threads} network threads",
        env!("CARGO_PKG_VERSION")
    );
    drop(shared);
    signals.serve(reloader);
    tracing::info!("stopping: finishing in-flight requests");
    let _ = stop_tx.send(true);
    for t in running {
        let _ = t.join();
    }
    if let Some(last) = crate::reload::current() {
        last.registry.lifecycle(Lifecycle::ServerStop);
    }
    tracing::info!("stopped");
    Ok(())
}

fn pin_to_core(index: usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut set = nix::sched::CpuSet::new();
    if set.set(index % cores).is_ok() {
        if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
            tracing::warn!("cannot pin network thread {index}: {e}");
        }
    }
}

/// Open connections of one thread, and a wake-up for an accept loop waiting under the limit
/// and for a stop waiting for connections to finish.
struct Load {
    active: Cell<usize>,
    freed: Notify,
}

thread_local! {
    static LOAD: Rc<Load> = Rc::new(Load {
        active: Cell::new(0),
        freed: Notify::new(),
    });
}

fn active_connections() -> usize {
    LOAD.with(|l| l.active.get())
}

/// Wait until a connection of this thread ends.
async fn connection_ended() {
    let load = LOAD.with(Rc::clone);
    load.freed.notified().await
}

/// Counts a connection while it lives (on its own thread; it takes no room in the connection).
pub struct Counted(std::marker::PhantomData<*const ()>);

impl Counted {
    fn new() -> Counted {
        LOAD.with(|l| l.active.set(l.active.get() + 1));
        Counted(std::marker::PhantomData)
    }

    #[cfg(test)]
    pub fn for_test() -> Counted {
        Counted::new()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        // `try_with`: a connection still parked when its thread ends is dropped with the
        // thread's locals, perhaps after `LOAD`; there is nothing left to count then.
        let _ = LOAD.try_with(|l| {
            l.active.set(l.active.get() - 1);
            l.freed.notify_waiters();
        });
    }
}

/// A network thread's runtime: a local one, so connection tasks are spawned on this thread and
/// never leave it (no LocalSet layer between them and the scheduler); worker-pool results wake
/// the thread only while it sleeps (its park hooks).
pub fn network_runtime() -> std::io::Result<tokio::runtime::LocalRuntime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(crate::worker::before_park)
        .on_thread_unpark(crate::worker::after_unpark)
        .build_local(tokio::runtime::LocalOptions::default())
}

/// A local runtime without the park hooks, for tests of one piece of a network thread.
#[cfg(test)]
pub fn plain_runtime() -> tokio::runtime::LocalRuntime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build_local(tokio::runtime::LocalOptions::default())
        .unwrap()
}

/// A network thread holds no configuration of its own: connections take the current one
/// (`reload::current`) when they are accepted, so a replaced configuration (and the backends
/// only it uses) goes away with its last request.
async fn network_thread(
    index: usize,
    listeners: Vec<Listener>,
    mut stop: watch::Receiver<bool>,
    registry: &'static Registry,
) {
    crate::modules::tcp::on_network_thread();
    registry.lifecycle(Lifecycle::ThreadStart(index as u32));
    crate::conn::wait::set_stop_signal(stop.clone());
    let mut accepting = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        // SAFETY: the listener owns its descriptor, which stays open and the same for the
        // life of the AsyncFd.
        let listener = unsafe { AsyncFd::register_with_interest(l.socket, Interest::READABLE) }
            .expect("listener registers with tokio");
        accepting.push(tokio::task::spawn_local(accept_loop(listener, i, l.tls)));
    }
    let sweeping = tokio::task::spawn_local(crate::conn::wait::sweep());
    crate::net::park::start();
    tokio::task::spawn_local(crate::worker::serve_inbox());
    tokio::task::spawn_local(async {
        let mut tick = tokio::time::interval(crate::access_log::FLUSH_EVERY);
        loop {
            tick.tick().await;
            crate::access_log::flush_thread();
        }
    });
    let _ = stop.changed().await;
    // Stop accepting; connections waiting between requests close, the others finish their
    // request first (up to the shutdown timeout).
    accepting.iter().for_each(tokio::task::JoinHandle::abort);
    crate::conn::wait::stop();
    crate::net::park::stop();
    let shutdown =
        crate::reload::current().map_or(Duration::from_secs(10), |s| s.timeouts.shutdown);
    let deadline = tokio::time::Instant::now() + shutdown;
    while active_connections() > 0 {
        if tokio::time::timeout_at(deadline, connection_ended())
            .await
            .is_err()
        {
            tracing::warn!(
                "thread {index}: {} connections still open at shutdown timeout",
                active_connections()
            );
            break;
        }
    }
    sweeping.abort();
    crate::access_log::flush_thread();
    registry.lifecycle(Lifecycle::ThreadStop(index as u32));
}

async fn accept_loop(
    listener: AsyncFd<std::net::TcpListener>,
    index: usize,
    bound_tls: Option<Arc<rustls::ServerConfig>>,
) {
    // Published before the network threads start.
    let current = || crate::reload::current().expect("a configuration is published");
    loop {
        let max = current().config.limits.max_connections.max(1);
        // At the limit, new connections wait in the listen backlog.
        while active_connections() >= max {
            connection_ended().await;
        }
        let accepted = match accept(&listener).await {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and friends: keep serving the open connections, retry shortly.
                tracing::error!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (stream, addr) = accepted;
        // TCP_NODELAY comes from the listening socket (see `net::bind`).
        let counted = Counted::new();
        let (remote, shared) = (format_addr(addr), current());
        match &bound_tls {
            None => {
                // Answered at once when the request is there; a task only if it must wait.
                if let Some(serving) = crate::net::serve_plain(stream, remote, shared, counted) {
                    tokio::task::spawn_local(serving);
                }
            }
            Some(bound) => {
                // Certificates as of the latest reload; the listener's own when that
                // configuration has no TLS for it (listener changes need a restart).
                let tls = shared.tls.get(index).unwrap_or_else(|| bound.clone());
                tokio::task::spawn_local(crate::net::serve_tls(
                    stream, remote, tls, shared, counted,
                ));
            }
        }
    }
}

/// The next connection, non-blocking and not registered with the event loop (see
/// `net::Tcp`): accept4(2) with the flags set, no further system call.
async fn accept(
    listener: &AsyncFd<std::net::TcpListener>,
) -> std::io::Result<(std::net::TcpStream, SocketAddr)> {
    use nix::libc::{SOCK_CLOEXEC, SOCK_NONBLOCK};
    loop {
        let mut ready = listener.readable().await?;
        let accepted = ready
            .try_io(|l| socket2::SockRef::from(l.get_ref()).accept4(SOCK_NONBLOCK | SOCK_CLOEXEC));
        if let Ok(result) = accepted {
            let (socket, addr) = result?;
            let addr = addr
                .as_socket()
                .ok_or_else(|| std::io::Error::other("accepted a non-IP socket"))?;
            return Ok((socket.into(), addr));
        }
    }
}

/// `ip:port` (`[v6]:port`; IPv4-mapped addresses as IPv4). IPv4, the common case, is written
/// with `itoa`: `Display` for socket addresses costs more than the rest of a short connection.
fn format_addr(addr: SocketAddr) -> String {
    let v4 = match addr {
        SocketAddr::V4(a) => *a.ip(),
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(v4) => v4,
            None => return a.to_string(),
        },
    };
    let mut text = String::with_capacity(21);
    let mut num = itoa::Buffer::new();
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        text.push_str(num.format(octet));
    }
    text.push(':');
    text.push_str(num.format(addr.port()));
    text
}

#[cfg(test)]
mod tests {
    use super::format_addr;

    #[test]
    fn formats_addresses_as_display_does() {
        for addr in [
            "127.0.0.1:80",
            "10.200.3.255:65535",
            "0.0.0.0:0",
            "[::1]:8055",
        ] {
            assert_eq!(format_addr(addr.parse().unwrap()), addr);
        }
        let mapped = "[::ffff:192.0.2.7]:443".parse().unwrap();
        assert_eq!(format_addr(mapped), "192.0.2.7:443");
    }
}
