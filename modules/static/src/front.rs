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
    /// By path as sent: the entries of the routes (and hosts) that serve it, usually one. A
    /// lookup hashes the path alone, with no key to build.
    map: FxHashMap<Box<str>, Vec<Held>>,
    entries: usize,
    bytes: u64,
}

/// An entry of one route (handler instance) and host.
struct Held {
    route: u64,
    host: Box<str>,
    entry: Arc<Entry>,
}

impl Held {
    fn is(&self, route: u64, host: &str) -> bool {
        self.route == route && *self.host == *host
    }
}

thread_local! {
    // Built as a constant: no lazy set-up to check on each lookup.
    static FRONT: RefCell<Front> = const {
        RefCell::new(Front {
            map: FxHashMap::with_hasher(rustc_hash::FxBuildHasher),
            entries: 0,
            bytes: 0,
        })
    };
}

/// Which route (handler instance) a key belongs to: unique for the life of the process, so a
/// reloaded route never finds what an old one cached.
pub fn new_route_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The entry this thread last found for `path` on `route` (`host` for per-host roots, else
/// empty).
pub fn get(route: u64, host: &str, path: &str) -> Option<Arc<Entry>> {
    FRONT.with_borrow(|f| {
        let held = f.map.get(path)?;
        held.iter()
            .find(|h| h.is(route, host))
            .map(|h| h.entry.clone())
    })
}

/// Remember `entry` for `path`.
pub fn put(route: u64, host: &str, path: &str, entry: &Arc<Entry>) {
    FRONT.with_borrow_mut(|f| {
        let size = entry.bytes();
        if f.entries >= MAX_ENTRIES || f.bytes + size > MAX_BYTES {
            *f = Front::default();
        }
        let held = f.map.entry(path.into()).or_default();
        let new = Held {
            route,
            host: host.into(),
            entry: entry.clone(),
        };
        match held.iter_mut().find(|h| h.is(route, host)) {
            Some(old) => {
                f.bytes -= old.entry.bytes();
                *old = new;
            }
            None => {
                held.push(new);
                f.entries += 1;
            }
        }
        f.bytes += size;
    })
}

/// Forget `path` (its entry went stale).
pub fn remove(route: u64, host: &str, path: &str) {
    FRONT.with_borrow_mut(|f| {
        let Some(held) = f.map.get_mut(path) else {
            return;
        };
        if let Some(at) = held.iter().position(|h| h.is(route, host)) {
            let old = held.swap_remove(at);
            f.bytes -= old.entry.bytes();
            f.entries -= 1;
            if held.is_empty() {
                f.map.remove(path);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::files::{Files, Found};

    /// An entry for a small file in memory.
    fn entry() -> Arc<Entry> {
        let dir = std::env::temp_dir().join(format!("osprey-front-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), "a").unwrap();
        let conf = format!(
            r#"{{"dir": {:?}, "memcache": true}}"#,
            dir.to_str().unwrap()
        );
        let files = Files::new(Config::parse(&conf).unwrap());
        let clean = osprey_sdk::http::clean_path("/a.txt").unwrap();
        let Found::File(entry) = files.find("", &clean) else {
            panic!("no entry for a.txt");
        };
        std::fs::remove_dir_all(&dir).unwrap();
        entry
    }

    #[test]
    fn entries_are_kept_apart_by_route_host_and_path() {
        let e = entry();
        put(1, "", "/a.txt", &e);
        put(1, "h", "/a.txt", &e);
        assert!(get(1, "", "/a.txt").is_some_and(|got| Arc::ptr_eq(&got, &e)));
        assert!(get(2, "", "/a.txt").is_none());
        assert!(get(1, "", "/a.tx").is_none());
        assert!(get(1, "h", "/a.txt").is_some());
        // Put again: replaced, not held twice.
        put(1, "", "/a.txt", &e);
        let count = |f: &Front| (f.entries, f.map.get("/a.txt").map_or(0, Vec::len));
        assert_eq!(FRONT.with_borrow(count), (2, 2));
        remove(1, "", "/a.txt");
        assert!(get(1, "", "/a.txt").is_none());
        assert!(get(1, "h", "/a.txt").is_some());
        remove(1, "h", "/a.txt");
        assert_eq!(
            FRONT.with_borrow(|f| (f.entries, f.bytes, f.map.len())),
            (0, 0, 0)
        );
    }
}
