//! `osprey`: command line, configuration, start-up.

// The server lives in the library (`lib.rs`); this file is its command line.
use osprey::{access_log, check, config, daemon, log, net, reload, server, stats};

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

use config::{Config, ListenConfig};
use daemon::DEFAULT_PID_FILE;

mod allocator;

/// mimalloc: per-thread free lists make the per-request allocations (boxed request state,
/// buffers) cheap and avoid glibc's consolidation passes; measured in bench/.
#[global_allocator]
static ALLOCATOR: allocator::Allocator = allocator::Allocator;

/// The allocator, exported (`build.rs`) for modules that opt in with
/// `osprey_sdk::alloc::HostAlloc`, so their per-request allocations cost what the core's do.
mod exported_alloc {
    use std::alloc::{GlobalAlloc, Layout};

    use super::ALLOCATOR;

    /// # Safety
    /// As `GlobalAlloc::alloc`, `size` and `align` being a valid `Layout`.
    #[no_mangle]
    pub unsafe extern "C" fn osprey_alloc(size: usize, align: usize) -> *mut u8 {
        unsafe { ALLOCATOR.alloc(Layout::from_size_align_unchecked(size, align)) }
    }

    /// # Safety
    /// As `GlobalAlloc::alloc_zeroed`.
    #[no_mangle]
    pub unsafe extern "C" fn osprey_alloc_zeroed(size: usize, align: usize) -> *mut u8 {
        unsafe { ALLOCATOR.alloc_zeroed(Layout::from_size_align_unchecked(size, align)) }
    }

    /// # Safety
    /// As `GlobalAlloc::dealloc`.
    #[no_mangle]
    pub unsafe extern "C" fn osprey_dealloc(ptr: *mut u8, size: usize, align: usize) {
        unsafe { ALLOCATOR.dealloc(ptr, Layout::from_size_align_unchecked(size, align)) }
    }

    /// # Safety
    /// As `GlobalAlloc::realloc`.
    #[no_mangle]
    pub unsafe extern "C" fn osprey_realloc(
        ptr: *mut u8,
        size: usize,
        align: usize,
        new_size: usize,
    ) -> *mut u8 {
        let layout = unsafe { Layout::from_size_align_unchecked(size, align) };
        unsafe { ALLOCATOR.realloc(ptr, layout, new_size) }
    }
}

/// A small, fast, event-driven HTTP application server with stable-ABI modules.
#[derive(Parser, Debug, Clone)]
#[command(name = "osprey", disable_version_flag = true)]
struct Cli {
    /// Configuration file (default: the embedded configuration).
    #[arg(short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen for HTTP on [ip]:port (repeatable; replaces the configuration's listeners).
    #[arg(short = 'H', value_name = "[IP]:PORT")]
    http: Vec<String>,
    /// Listen for HTTPS (and HTTP/2) on [ip]:port (repeatable; with -H, replaces the
    /// configuration's listeners). Certificate: --cert/--key, else the `tls` section.
    #[arg(short = 'S', value_name = "[IP]:PORT")]
    https: Vec<String>,
    /// PEM certificate chain for -S listeners.
    #[arg(long = "cert", value_name = "FILE", requires = "key")]
    cert: Option<String>,
    /// PEM private key for -S listeners.
    #[arg(long = "key", value_name = "FILE", requires = "cert")]
    key: Option<String>,
    /// Working directory, entered before anything else.
    #[arg(short = 'w', value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Error log file.
    #[arg(short = 'l', value_name = "FILE")]
    error_log: Option<String>,
    /// Log level: error, warn, info, debug.
    #[arg(short = 'L', value_name = "LEVEL")]
    log_level: Option<String>,
    /// Access log file (default: off, or `logging.access_log`).
    #[arg(short = 'a', value_name = "FILE")]
    access_log: Option<String>,
    /// Run as a daemon, with a supervisor that relaunches the server if it dies.
    #[arg(short = 'd')]
    daemon: bool,
    /// Pid file (default in daemon mode and for -s: osprey.pid).
    #[arg(short = 'p', value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Signal the running server named by the pid file: stop, reload or reopen (log files).
    #[arg(short = 's', value_name = "ACTION")]
    signal: Option<String>,
    /// Switch to this user after binding the listeners.
    #[arg(short = 'u', value_name = "USER")]
    user: Option<String>,
    /// Switch to this group after binding (default: the user's primary group).
    #[arg(short = 'g', value_name = "GROUP")]
    group: Option<String>,
    /// Load a module library (repeatable), after those in `load`.
    #[arg(short = 'M', value_name = "PATH")]
    modules: Vec<String>,
    /// Number of network threads (`--workers` is accepted too).
    #[arg(long = "network-threads", visible_alias = "workers", value_name = "N")]
    network_threads: Option<usize>,
    /// Check the configuration (and load its modules), then exit.
    #[arg(short = 't')]
    test: bool,
    /// Print the version and exit.
    #[arg(short = 'v')]
    version: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand, Debug, Clone)]
enum Command {
    /// Create a module crate: a handler, its config struct, a unit test and a configuration
    /// to run it (`cargo test` and `osprey -c NAME.json` work on it as written).
    NewModule {
        /// The module's name (crate, handler type and route prefix).
        name: String,
        /// Where to create it (default: ./NAME); must not exist or be empty.
        dir: Option<PathBuf>,
        /// The osprey-sdk source to depend on by path (default: the one this server was
        /// built from, else the crates.io version).
        #[arg(long, value_name = "DIR")]
        sdk: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    allocator::small_pages();
    let cli = Cli::parse();
    if cli.version {
        println!(
            "osprey {} (osprey-sdk {})",
            env!("CARGO_PKG_VERSION"),
            env!("CARGO_PKG_VERSION")
        );
        return ExitCode::SUCCESS;
    }
    if let Some(Command::NewModule { name, dir, sdk }) = &cli.command {
        return match osprey::scaffold::new_module(name, dir.as_deref(), sdk.as_deref()) {
            Ok(done) => {
                println!("{done}");
                ExitCode::SUCCESS
            }
            Err(message) => {
                eprintln!("osprey: {message}");
                ExitCode::FAILURE
            }
        };
    }
    match start(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            daemon::report_failure(&message);
            tracing::error!("{message}");
            // Once: the line above already went to standard error when the log goes there.
            if !log::on_stderr() {
                eprintln!("osprey: {message}");
            }
            ExitCode::FAILURE
        }
    }
}

fn start(cli: Cli) -> Result<(), String> {
    if let Some(dir) = &cli.work_dir {
        std::env::set_current_dir(dir)
            .map_err(|e| format!("cannot enter {}: {e}", dir.display()))?;
    }
    let pid_file = cli
        .pid_file
        .clone()
        .unwrap_or_else(|| DEFAULT_PID_FILE.into());
    if let Some(action) = &cli.signal {
        if action == "reload" {
            check_before_reload(&cli, &pid_file)?;
        }
        return daemon::send(action, &pid_file);
    }
    let cli = std::rc::Rc::new(cli);
    let cli2 = cli.clone();
    // Read the same way at start and at each reload.
    let load = move || read_config(&cli2);
    let config = load()?;
    let identity = daemon::resolve_identity(cli.user.as_deref(), cli.group.as_deref())?;
    let level = cli
        .log_level
        .clone()
        .or_else(|| config.logging.log_level.clone())
        .unwrap_or_else(|| "info".into());
    log::parse_level(&level)?;
    let mut error_log = cli
        .error_log
        .clone()
        .or_else(|| config.logging.error_log.clone());
    if !cli.test && (cli.daemon || cli.pid_file.is_some()) {
        daemon::refuse_if_running(&pid_file)?;
    }
    if cli.daemon && !cli.test {
        let log = error_log.get_or_insert_with(|| daemon::DEFAULT_ERROR_LOG.into());
        daemon::set_supervisor_log(Path::new(log));
        // Returns in the server process only.
        daemon::daemonize(&pid_file, identity.as_ref())?;
    }
    let own_pid_file = match (&cli.pid_file, cli.daemon || cli.test) {
        (Some(path), false) => Some(daemon::write_pid_file(path, std::process::id())?),
        _ => None,
    };
    if !cli.test {
        log::init(&level, error_log.as_deref())?;
    }
    stats::init();
    let shared = check::build(config, &cli.modules)?;
    let registry = shared.registry;
    if cli.test {
        println!("osprey: configuration {} is valid", shared.config.file);
        return Ok(());
    }
    shared.backends.start_health_checks();
    access_log::configure(&shared.config.logging)?;
    for (name, path) in registry.modules() {
        tracing::info!("module {name} loaded from {path}");
    }
    let reloader = reload::Reloader {
        load: Box::new(load),
        extra_modules: cli.modules.clone(),
    };
    let after_bind = || {
        if let Some(who) = &identity {
            let access = access_log::path();
            let mut files: Vec<&Path> = Vec::new();
            files.extend(log::path().map(Path::new));
            files.extend(access.as_deref().map(Path::new));
            files.extend(own_pid_file.as_deref());
            daemon::drop_privileges(who, &files)?;
            tracing::info!(
                "running as user {} (uid {}, gid {})",
                who.name,
                who.uid,
                who.gid
            );
        }
        daemon::report_ready();
        Ok(())
    };
    let result = server::run(shared, &reloader, after_bind);
    access_log::flush_thread();
    log::flush_suppressed();
    if let Some(path) = &own_pid_file {
        daemon::remove_pid_file(path, std::process::id());
    }
    result
}

/// The configuration file (or the embedded one), then the command line's overrides.
fn read_config(cli: &Cli) -> Result<Config, String> {
    let mut config = match &cli.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => Config::embedded(),
    };
    apply_cli(&mut config, cli)?;
    Ok(config)
}

/// `-s reload`: check the configuration the way the running server will read it (its own
/// command line, in its working directory, when /proc shows them; else this command line's),
/// with the checks of `-t`, and signal nothing when it is bad.
fn check_before_reload(cli: &Cli, pid_file: &Path) -> Result<(), String> {
    let pid = daemon::read_pid(pid_file)?;
    let here = std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?;
    let running = daemon::command_line(pid)
        .and_then(|(args, dir)| Some((Cli::try_parse_from(args).ok()?, dir)));
    let server_cli = match running {
        Some((mut server_cli, dir)) => {
            std::env::set_current_dir(&dir)
                .map_err(|e| format!("cannot enter {}: {e}", dir.display()))?;
            // Already applied: `dir` is where it went.
            server_cli.work_dir = None;
            server_cli
        }
        None => cli.clone(),
    };
    let refused = |e: String| format!("{e}\nreload not signalled: the configuration is invalid");
    let checked = read_config(&server_cli).and_then(|config| {
        stats::init();
        check::build(config, &server_cli.modules).map(drop)
    });
    // Back where this command started: its own paths (the pid file) are relative to it.
    std::env::set_current_dir(&here)
        .map_err(|e| format!("cannot enter {}: {e}", here.display()))?;
    checked.map_err(refused)
}

fn apply_cli(config: &mut Config, cli: &Cli) -> Result<(), String> {
    if !cli.http.is_empty() || !cli.https.is_empty() {
        config.listen.clear();
        let plain = cli.http.iter().map(|i| (i, false));
        for (interface, secure) in plain.chain(cli.https.iter().map(|i| (i, true))) {
            let flag = if secure { "-S" } else { "-H" };
            net::parse_interface(interface).map_err(|e| format!("{flag} {interface}: {e}"))?;
            let listen = ListenConfig {
                interface: interface.clone(),
                backlog: 4096,
                deferred: true,
                secure,
                cert: cli.cert.clone().filter(|_| secure),
                key: cli.key.clone().filter(|_| secure),
                certificates: None,
            };
            if secure && !config.tls.for_listener(&listen).has_certificate() {
                return Err(format!("-S {interface}: no certificate: give --cert and --key, or a `tls` section with `cert` and `key`"));
            }
            config.listen.push(listen);
        }
    } else if cli.cert.is_some() {
        return Err("--cert and --key apply to -S listeners; none was given".into());
    }
    if let Some(path) = &cli.access_log {
        config.logging.access_log = Some(path.clone());
    }
    if let Some(n) = cli.network_threads {
        if n == 0 {
            return Err("--network-threads must be at least 1".into());
        }
        config.network_threads = n;
    }
    Ok(())
}
