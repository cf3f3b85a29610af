//! The host services lent to modules.

use abi_stable::{prefix_type::PrefixTypeTrait, std_types::RStr};
use osprey_sdk::host::{Host, HostRef, Level};

extern "C" fn log(level: Level, module: RStr<'_>, message: RStr<'_>) {
    let (module, message) = (module.as_str(), message.as_str());
    match level {
        Level::Error => tracing::error!(target: "module", module, "{message}"),
        Level::Warn => tracing::warn!(target: "module", module, "{message}"),
        Level::Info => tracing::info!(target: "module", module, "{message}"),
        Level::Debug => tracing::debug!(target: "module", module, "{message}"),
    }
}

/// The one host table, shared by every module.
pub fn host() -> HostRef {
    use std::sync::OnceLock;
    static HOST: OnceLock<HostRef> = OnceLock::new();
    *HOST.get_or_init(|| {
        Host {
            log,
            backend: crate::upstream::host_backend,
            upstream_request: crate::upstream::host_upstream_request,
        }
        .leak_into_prefix()
    })
}
