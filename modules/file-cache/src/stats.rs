//! A cache's counters, kept by the host and shown by the `status` handler:
//! `file_cache_<zone>_hits` and so on (`file_cache_hits` for caches without a zone).

use osprey_sdk::host::Counter;

pub struct Stats {
    /// Fresh entries served (including 304s answered from an entry).
    pub hits: Counter,
    /// Requests that went to the origin with no entry.
    pub misses: Counter,
    /// Stale entries served (stale-while-revalidate, or the origin failing).
    pub stale: Counter,
    /// Conditional requests sent to the origin for an expired or client-refreshed entry.
    pub revalidations: Counter,
    /// Entries removed by the purge handler.
    pub purges: Counter,
    /// Fresh hits found in the shared store (Redis) rather than locally.
    pub remote_hits: Counter,
    /// Disk writes that failed, corrupt files found, and failed Redis commands.
    pub store_errors: Counter,
}

impl Stats {
    pub fn register(zone: Option<&str>) -> Stats {
        let prefix = match zone {
            Some(z) => format!("file_cache_{z}_"),
            None => "file_cache_".to_owned(),
        };
        let c = |name: &str| Counter::register(&format!("{prefix}{name}"));
        Stats {
            hits: c("hits"),
            misses: c("misses"),
            stale: c("stale"),
            revalidations: c("revalidations"),
            purges: c("purges"),
            remote_hits: c("remote_hits"),
            store_errors: c("store_errors"),
        }
    }
}
