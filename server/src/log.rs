//! The error log (tracing), to standard error or a file that SIGUSR1 reopens (logrotate);
//! identical warnings are rate-limited (`log_limit`).

use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use tracing_subscriber::EnvFilter;

use crate::log_limit::Limiter;

/// The error log file, when there is one.
struct LogFile {
    path: String,
    file: Mutex<File>,
}

static FILE: OnceLock<LogFile> = OnceLock::new();

fn open(path: &str) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open error log {path}: {e}"))
}

/// Set up logging at `level` (`error`, `warn`, `info`, `debug`), to `file` when given, else to
/// standard error (in colour only when it is a terminal).
pub fn init(level: &str, file: Option<&str>) -> Result<(), String> {
    let level = parse_level(level)?;
    let filter = EnvFilter::try_new(&level).map_err(|e| e.to_string())?;
    if let Some(path) = file {
        let file = open(path)?;
        let _ = FILE.set(LogFile {
            path: path.to_owned(),
            file: Mutex::new(file),
        });
    }
    let ansi = file.is_none() && std::io::stderr().is_terminal();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .with_writer(|| Line(Vec::with_capacity(256)))
        .init();
    STARTED.set(()).ok();
    Ok(())
}

/// Does the error log go to standard error (so that a message printed there too would be
/// printed twice)?
pub fn on_stderr() -> bool {
    STARTED.get().is_some() && FILE.get().is_none()
}

/// Set once the logger runs.
static STARTED: OnceLock<()> = OnceLock::new();

/// The current time as every error-log line starts with it (also the supervisor's lines).
pub fn timestamp() -> String {
    use tracing_subscriber::fmt::format::Writer;
    use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
    let mut out = String::new();
    let _ = SystemTime.format_time(&mut Writer::new(&mut out));
    out
}

/// A line in the error log's format, for a process without a logger (the supervisor).
pub fn format_line(level: &str, message: &str) -> String {
    format!("{} {level:>5} {message}\n", timestamp())
}

/// The tracing level for `level` (`warning` is `warn`).
pub fn parse_level(level: &str) -> Result<String, String> {
    match level.to_ascii_lowercase().as_str() {
        l @ ("error" | "warn" | "info" | "debug" | "trace") => Ok(l.to_owned()),
        "warning" => Ok("warn".into()),
        other => Err(format!(
            "unknown log level `{other}` (error, warn, info, debug)"
        )),
    }
}

/// The error log file's path, if logging to one.
pub fn path() -> Option<&'static str> {
    FILE.get().map(|f| f.path.as_str())
}

/// Open the error log file again by name.
pub fn reopen() -> Result<(), String> {
    if let Some(f) = FILE.get() {
        let new = open(&f.path)?;
        *f.file.lock().unwrap_or_else(|e| e.into_inner()) = new;
    }
    Ok(())
}

/// One formatted event (tracing writes each in one piece), passed through the rate limiter
/// and written when dropped.
struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

static LIMITER: Mutex<Option<Limiter>> = Mutex::new(None);

impl Drop for Line {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let out = {
            let mut limiter = LIMITER.lock().unwrap_or_else(|e| e.into_inner());
            limiter
                .get_or_insert_with(Limiter::default)
                .admit(&text, Instant::now(), timestamp)
        };
        write_out(&out);
    }
}

/// At exit: say how many lines are still counted as suppressed.
pub fn flush_suppressed() {
    let out = {
        let mut limiter = LIMITER.lock().unwrap_or_else(|e| e.into_inner());
        limiter.as_mut().map(|l| l.drain(timestamp))
    };
    write_out(&out.unwrap_or_default());
}

fn write_out(out: &str) {
    if out.is_empty() {
        return;
    }
    match FILE.get() {
        Some(f) => {
            let _ = f
                .file
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .write_all(out.as_bytes());
        }
        None => {
            let _ = std::io::stderr().write_all(out.as_bytes());
        }
    }
}
