//! `osprey`: command line, configuration, start-up.

// The server lives in the library (`lib.rs`); this file is its command line.
use osprey::{access_log, config, daemon, log, modules, net, reload, server, stats};

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

use config::{Config, ListenConfig};
use daemon::DEFAULT_PID_FILE;

/// mimalloc: per-thread free lists make the per-request allocations (boxed request state,
/// buffers) cheap and avoid glibc's consolidation passes; measured in bench/.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use modules::Registry;

/// A small, fast, event-driven HTTP application server with stable-ABI modules.
#[derive(Parser, Debug)]
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
    /// Number of network threads.
    #[arg(long = "workers", value_name = "N")]
    workers: Option<usize>,
    /// Check the configuration (and load its modules), then exit.
    #[arg(short = 't')]
    test: bool,
    /// Print the version and exit.
    #[arg(short = 'v')]
    version: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.version {
        println!(
            "osprey {} (osprey-sdk {})",
            env!("CARGO_PKG_VERSION"),
            env!("CARGO_PKG_VERSION")
        );
        return ExitCode::SUCCESS;
    }
    match start(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            daemon::report_failure(&message);
            tracing::error!("{message}");
            eprintln!("osprey: {message}");
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
        return daemon::send(action, &pid_file);
    }
    let config_path = cli.config.clone();
    let cli = std::rc::Rc::new(cli);
    let cli2 = cli.clone();
    // Read the same way at start and at each reload.
    let load = move || -> Result<Config, String> {
        let mut config = match &config_path {
            Some(path) => Config::load(path).map_err(|e| e.to_string())?,
            None => Config::embedded(),
        };
        apply_cli(&mut config, &cli2)?;
        Ok(config)
    };
    let config = load()?;
    let identity = daemon::resolve_identity(cli.user.as_deref(), cli.group.as_deref())?;
    let level = cli
        .log_level
        .clone()
        .or_else(|| config.logging.log_level.clone())
        .unwrap_or_else(|| "info".into());
    let mut error_log = cli
        .error_log
        .clone()
        .or_else(|| config.logging.error_log.clone());
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
    // Libraries are never unloaded: the registry lives as long as the process.
    let registry: &'static Registry = Box::leak(Box::new(Registry::load(&config, &cli.modules)?));
    let shared = server::Shared::new(config, registry)?;
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
    if let Some(path) = &own_pid_file {
        let _ = std::fs::remove_file(path);
    }
    result
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
    if let Some(n) = cli.workers {
        if n == 0 {
            return Err("--workers must be at least 1".into());
        }
        config.workers = n;
    }
    Ok(())
}
