//! The error log (tracing), to standard error or a file that SIGUSR1 reopens (logrotate).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Mutex, MutexGuard, OnceLock};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

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

/// Set up logging at `level` (`error`, `warn`, `info`, `debug`), to `file` when given.
pub fn init(level: &str, file: Option<&str>) -> Result<(), String> {
    let level = parse_level(level)?;
    let filter = EnvFilter::try_new(&level).map_err(|e| e.to_string())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match file {
        Some(path) => {
            let file = open(path)?;
            let _ = FILE.set(LogFile {
                path: path.to_owned(),
                file: Mutex::new(file),
            });
            builder.with_ansi(false).with_writer(Reopenable).init();
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
    Ok(())
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

struct Reopenable;

/// One log line is formatted in tracing's buffer and written under the lock.
struct Guard(MutexGuard<'static, File>);

impl Write for Guard {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<'a> MakeWriter<'a> for Reopenable {
    type Writer = Guard;

    fn make_writer(&'a self) -> Guard {
        Guard(
            FILE.get()
                .expect("error log file set before use")
                .file
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }
}
