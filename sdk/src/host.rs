//! Services the host (the Osprey core) lends to modules. A module's own copies of `tracing`
//! or `tokio` are cut off from the host's, so logging goes through here.

use std::sync::OnceLock;

use abi_stable::{std_types::RStr, StableAbi};

/// Severity of a log line.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

/// Function table the host hands each module when it is loaded.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HostRef)))]
#[sabi(missing_field(panic))]
pub struct Host {
    /// Write a line to the host's error log, tagged with the module's name.
    #[sabi(last_prefix_field)]
    pub log: extern "C" fn(level: Level, module: RStr<'_>, message: RStr<'_>),
}

static HOST: OnceLock<(HostRef, &'static str)> = OnceLock::new();

/// Called by the generated module entry point.
#[doc(hidden)]
pub fn install(host: HostRef, module: &'static str) {
    let _ = HOST.set((host, module));
}

/// Log through the host; silently dropped before the module is initialised.
pub fn log(level: Level, message: &str) {
    if let Some((host, module)) = HOST.get() {
        (host.log())(level, RStr::from_str(module), RStr::from_str(message));
    }
}

pub fn error(message: &str) {
    log(Level::Error, message)
}

pub fn warn(message: &str) {
    log(Level::Warn, message)
}

pub fn info(message: &str) {
    log(Level::Info, message)
}

pub fn debug(message: &str) {
    log(Level::Debug, message)
}
