//! The host services lent to modules.

use abi_stable::{prefix_type::PrefixTypeTrait, std_types::RStr};
use osprey_sdk::host::{Host, HostRef, Level, Stats};

extern "C" fn log(level: Level, module: RStr<'_>, message: RStr<'_>) {
    let (module, message) = (module.as_str(), message.as_str());
    match level {
        Level::Error => tracing::error!(target: "module", module, "{message}"),
        Level::Warn => tracing::warn!(target: "module", module, "{message}"),
        Level::Info => tracing::info!(target: "module", module, "{message}"),
        Level::Debug => tracing::debug!(target: "module", module, "{message}"),
    }
}

extern "C" fn stats() -> Stats {
    crate::stats::snapshot()
}

extern "C" fn counter(name: RStr<'_>) -> u32 {
    crate::stats::counter(name.as_str())
}

extern "C" fn counter_add(id: u32, delta: u64) {
    crate::stats::counter_add(id, delta)
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
            stats,
            counter,
            counter_add,
            subrequest: crate::dispatch::subrequest::host_subrequest,
            subrequest_parent: crate::dispatch::subrequest::host_subrequest_parent,
            tcp_connect: super::tcp::tcp_connect,
            spawn: super::tcp::spawn,
            upstream_health: crate::upstream::host_upstream_health,
        }
        .leak_into_prefix()
    })
}
