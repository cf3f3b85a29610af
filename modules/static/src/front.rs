//! A small map per thread in front of the shared caches, keyed by the request path as sent.
//!
//! The shared caches (moka) are safe to use from every thread, and pay for it on every hit:
//! hashing with SipHash, a concurrent map, an access-order update, a clock read. The paths a
//! thread serves again and again are found here with one hash lookup and no allocation. The
//! entry found is still checked for freshness (`Files::fresh`) before it is served, so files
//! that change on disk are seen as before; a stale entry leaves this map too.
//!
//! The map only ever holds what the shared caches gave out, and is bounded in entries and in
//! bytes: past either bound it starts again empty.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::files::Entry;

/// Entries per thread before the map starts again.
const MAX_ENTRIES: usize = 4096;
/// File bytes per thread the map may keep alive.
const MAX_BYTES: u64 = 32 * 1024 * 1024;

#[derive(Default)]
struct Front {
    map: FxHashMap<Box<[u8]>, Arc<Entry>>,
    bytes: u64,
    /// The key being built (reused: a lookup allocates nothing).
    scratch: Vec<u8>,
}

thread_local! {
    static FRONT: RefCell<Front> = RefCell::new(Front::default());
}

/// Which route (handler instance) a key belongs to: unique for the life of the process, so a
/// reloaded route never finds what an old one cached.
pub fn new_route_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The key of `path` on `route` (`host` for per-host roots, else empty).
fn key<'s>(scratch: &'s mut Vec<u8>, route: u64, host: &str, path: &str) -> &'s [u8] {
    scratch.clear();
    scratch.extend_from_slice(&route.to_le_bytes());
    scratch.extend_from_slice(host.as_bytes());
    scratch.push(0);
    scratch.extend_from_slice(path.as_bytes());
    scratch
}

/// The entry this thread last found for `path`.
pub fn get(route: u64, host: &str, path: &str) -> Option<Arc<Entry>> {
    FRONT.with(|f| {
        let f = &mut *f.borrow_mut();
        let k = key(&mut f.scratch, route, host, path);
        f.map.get(k).cloned()
    })
}

/// Remember `entry` for `path`.
pub fn put(route: u64, host: &str, path: &str, entry: &Arc<Entry>) {
    FRONT.with(|f| {
        let f = &mut *f.borrow_mut();
        let size = entry.bytes();
        if f.map.len() >= MAX_ENTRIES || f.bytes + size > MAX_BYTES {
            f.map.clear();
            f.bytes = 0;
        }
        let k: Box<[u8]> = key(&mut f.scratch, route, host, path).into();
        if let Some(old) = f.map.insert(k, entry.clone()) {
            f.bytes -= old.bytes();
        }
        f.bytes += size;
    })
}

/// Forget `path` (its entry went stale).
pub fn remove(route: u64, host: &str, path: &str) {
    FRONT.with(|f| {
        let f = &mut *f.borrow_mut();
        let k = key(&mut f.scratch, route, host, path);
        if let Some(old) = f.map.remove(k) {
            f.bytes -= old.bytes();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_routes_hosts_and_paths_apart() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        assert_ne!(key(&mut a, 1, "", "/x"), key(&mut b, 2, "", "/x"));
        assert_ne!(key(&mut a, 1, "h", "/x"), key(&mut b, 1, "", "h/x"));
        assert_eq!(key(&mut a, 1, "h", "/x"), key(&mut b, 1, "h", "/x"));
    }
}
