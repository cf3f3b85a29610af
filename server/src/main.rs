//! `osprey`: command line, configuration, start-up.

mod config;
mod conn;
mod dispatch;
mod http;
mod http2;
mod log;
mod modules;
mod net;
mod router;
mod server;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use config::{Config, ListenConfig};
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
        println!("osprey {} (osprey-sdk {})", env!("CARGO_PKG_VERSION"), env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    match start(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("osprey: {message}");
            ExitCode::FAILURE
        }
    }
}

fn start(cli: Cli) -> Result<(), String> {
    if let Some(dir) = &cli.work_dir {
        std::env::set_current_dir(dir).map_err(|e| format!("cannot enter {}: {e}", dir.display()))?;
    }
    let mut config = match &cli.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => Config::embedded(),
    };
    apply_cli(&mut config, &cli)?;
    let level = cli
        .log_level
        .clone()
        .or_else(|| config.logging.log_level.clone())
        .unwrap_or_else(|| "info".into());
    let error_log = cli.error_log.clone().or_else(|| config.logging.error_log.clone());
    if !cli.test {
        log::init(&level, error_log.as_deref())?;
    }
    // Libraries are never unloaded: the registry lives as long as the process.
    let registry: &'static Registry = Box::leak(Box::new(Registry::load(&config, &cli.modules)?));
    let shared = server::Shared::new(config, registry)?;
    if cli.test {
        println!("osprey: configuration {} is valid", shared.config.file);
        return Ok(());
    }
    for (name, path) in registry.modules() {
        tracing::info!("module {name} loaded from {path}");
    }
    server::run(shared, registry)
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
    if let Some(n) = cli.workers {
        if n == 0 {
            return Err("--workers must be at least 1".into());
        }
        config.workers = n;
    }
    Ok(())
}
