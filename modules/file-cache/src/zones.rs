//! The module's registry of caches, so that the `cache_purge` handler (a separate handler
//! instance) can reach the caches of `file_cache` filters. Each filter registers its store
//! under its `zone` (or none); the registry holds weak references, so the caches of a
//! replaced configuration go away with it.

use std::sync::{Arc, Mutex, Weak};

use crate::store::Store;

type Zones = Vec<(Option<String>, Weak<Store>)>;

fn zones() -> &'static Mutex<Zones> {
    static Z: Mutex<Zones> = Mutex::new(Vec::new());
    &Z
}

pub fn register(zone: Option<&str>, store: &Arc<Store>) {
    let mut z = zones().lock().unwrap();
    z.retain(|(_, s)| s.strong_count() > 0);
    z.push((zone.map(str::to_owned), Arc::downgrade(store)));
}

/// The live caches of `zone`, or every cache when `zone` is `None`.
pub fn find(zone: Option<&str>) -> Vec<Arc<Store>> {
    let z = zones().lock().unwrap();
    z.iter()
        .filter(|(name, _)| zone.is_none() || name.as_deref() == zone)
        .filter_map(|(_, s)| s.upgrade())
        .collect()
}

/// A zone name is part of counter names: `[a-z0-9_]+`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}
