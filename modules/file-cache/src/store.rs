//! One cache's entries: in memory (size-bounded moka), optionally on disk, and optionally in
//! Redis shared with other servers (see [`crate::remote`]), with its counters. Shared by its
//! filter, the streams that store bodies at their end, and the purge handler (through the
//! zone registry).

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use osprey_sdk::host;

use crate::disk::{Disk, ReadError};
use crate::entry::Entry;
use crate::remote::{Remote, RemoteConf};
use crate::stats::Stats;
use crate::vary::Vary;

pub struct Store {
    memory: moka::sync::Cache<String, Arc<Entry>>,
    disk: Option<Disk>,
    remote: Option<Arc<Remote>>,
    /// What each key's answers vary on. Entries are stored per variant; fills in flight and
    /// passes are per key (all variants).
    pub vary: Vary,
    pub stats: Stats,
}

impl Store {
    pub fn new(
        memory_size: u64,
        disk: Option<Disk>,
        remote: Option<RemoteConf>,
        stats: Stats,
    ) -> Arc<Store> {
        let memory = moka::sync::Cache::builder()
            .max_capacity(memory_size)
            .weigher(|k: &String, e: &Arc<Entry>| {
                let headers: usize = e.headers.iter().map(|(n, v)| n.len() + v.len() + 16).sum();
                (k.len() + headers + e.body.len() + 64)
                    .try_into()
                    .unwrap_or(u32::MAX)
            })
            .build();
        Arc::new_cyclic(|me: &Weak<Store>| Store {
            memory,
            disk,
            remote: remote.map(|conf| Arc::new(Remote::new(conf, me.clone()))),
            vary: Vary::new(),
            stats,
        })
    }

    /// The shared store (Redis), if the cache has one.
    pub fn remote(&self) -> Option<&Arc<Remote>> {
        self.remote.as_ref()
    }

    /// Keep `e`, found in the shared store, in memory.
    pub fn remember(&self, key: &str, e: Arc<Entry>) {
        self.memory.insert(key.to_owned(), e);
    }

    pub fn has_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// The entry in memory only (no disk read).
    pub fn in_memory(&self, key: &str) -> Option<Arc<Entry>> {
        self.memory.get(key)
    }

    /// The entry for `key`, from memory or else from disk.
    pub fn lookup(&self, key: &str) -> Option<Arc<Entry>> {
        if let Some(e) = self.memory.get(key) {
            if let Some(disk) = &self.disk {
                disk.touch(key);
            }
            return Some(e);
        }
        match self.disk.as_ref()?.read(key) {
            Ok(e) => {
                let e = Arc::new(e);
                self.memory.insert(key.to_owned(), e.clone());
                Some(e)
            }
            Err(ReadError::Missing) => None,
            Err(ReadError::Corrupt(why)) => {
                self.stats.store_errors.incr();
                host::warn(&format!("file_cache: discarded corrupt cache file {why}"));
                None
            }
        }
    }

    pub fn put(&self, key: &str, e: Arc<Entry>) {
        if let Some(disk) = &self.disk {
            if let Err(err) = disk.write(key, &e) {
                self.stats.store_errors.incr();
                host::warn(&format!(
                    "file_cache: cannot write the cache file for {key}: {err}"
                ));
            }
        }
        if let Some(remote) = &self.remote {
            remote.put(key, &e);
        }
        self.memory.insert(key.to_owned(), e);
    }

    /// Remove `key`, here and in the shared store; whether it was here.
    pub fn forget(&self, key: &str) -> bool {
        if let Some(remote) = &self.remote {
            remote.forget(key);
        }
        self.forget_local(key)
    }

    fn forget_local(&self, key: &str) -> bool {
        let in_memory = self.memory.remove(key).is_some();
        let on_disk = self.disk.as_ref().is_some_and(|d| d.remove(key));
        in_memory || on_disk
    }

    /// Remove every entry of this server whose key `matches` (the purge handler purges the
    /// shared store itself); the keys that went.
    pub fn purge(&self, matches: &dyn Fn(&str) -> bool) -> HashSet<String> {
        let mut keys: HashSet<String> = self
            .memory
            .iter()
            .filter(|(k, _)| matches(k))
            .map(|(k, _)| (*k).clone())
            .collect();
        if let Some(disk) = &self.disk {
            keys.extend(disk.keys().into_iter().filter(|k| matches(k)));
        }
        keys.retain(|k| self.forget_local(k));
        self.stats.purges.add(keys.len() as u64);
        keys
    }
}
