//! The error log (tracing), to standard error or a file.

use std::fs::OpenOptions;
use std::sync::Mutex;

use tracing_subscriber::EnvFilter;

/// Set up logging at `level` (`error`, `warn`, `info`, `debug`), to `file` when given.
pub fn init(level: &str, file: Option<&str>) -> Result<(), String> {
    let level = match level.to_ascii_lowercase().as_str() {
        l @ ("error" | "warn" | "info" | "debug" | "trace") => l.to_owned(),
        "warning" => "warn".into(),
        other => {
            return Err(format!(
                "unknown log level `{other}` (error, warn, info, debug)"
            ))
        }
    };
    let filter = EnvFilter::try_new(&level).map_err(|e| e.to_string())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match file {
        Some(path) => {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("cannot open error log {path}: {e}"))?;
            builder.with_ansi(false).with_writer(Mutex::new(f)).init();
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
    Ok(())
}
