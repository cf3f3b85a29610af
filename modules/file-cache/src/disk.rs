//! Entries on disk: one file per key, `<cache_dir>/<sha-256 of key>.cache`, holding the
//! entry as [`serial`] writes it (a magic line, a JSON header line and the body). Written to a temporary file and renamed, so a crash
//! never leaves a half-written entry; read back only if the key and the body's CRC-32 match,
//! so a corrupt file is discarded, never served.
//!
//! An index of the files (key, size, last use) is kept in memory, rebuilt at start from each
//! file's header line and modification time without reading bodies. It lists keys for purges
//! and bounds the directory to `max_size` bytes, evicting the least recently used files. A
//! file's modification time is its last use (set on each read), so the order survives restarts.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::entry::Entry;
use crate::serial::{self, Head, MAGIC, MAX_HEAD};

/// Hits served from memory mark their file used at most this often.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

struct Indexed {
    bytes: u64,
    used: SystemTime,
}

#[derive(Default)]
struct Index {
    files: HashMap<String, Indexed>,
    bytes: u64,
}

impl Index {
    fn insert(&mut self, key: String, bytes: u64, used: SystemTime) {
        self.bytes += bytes;
        if let Some(old) = self.files.insert(key, Indexed { bytes, used }) {
            self.bytes -= old.bytes;
        }
    }

    fn remove(&mut self, key: &str) -> bool {
        let old = self.files.remove(key);
        if let Some(old) = &old {
            self.bytes -= old.bytes;
        }
        old.is_some()
    }
}

pub struct Disk {
    dir: PathBuf,
    max_size: Option<u64>,
    index: Mutex<Index>,
}

/// Why a file was not usable.
pub enum ReadError {
    Missing,
    Corrupt(String),
}

impl Disk {
    /// The store in `dir`, indexing the files already there. Returns the names of the
    /// unreadable files it removed.
    pub fn open(dir: PathBuf, max_size: Option<u64>) -> (Disk, Vec<String>) {
        let mut index = Index::default();
        let mut removed = Vec::new();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".tmp-") {
                // Left by a crash mid-write (a recent one may be a write by the instance a
                // reload replaces).
                let old = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() > 60));
                if old {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            if !name.ends_with(".cache") {
                continue;
            }
            match read_head(&path) {
                Ok((head, meta)) if path == file_path(&dir, &head.key) => {
                    let used = meta.modified().unwrap_or(UNIX_EPOCH);
                    index.insert(head.key, meta.len(), used);
                }
                _ => {
                    let _ = std::fs::remove_file(&path);
                    removed.push(name);
                }
            }
        }
        let disk = Disk {
            dir,
            max_size,
            index: Mutex::new(index),
        };
        disk.evict();
        (disk, removed)
    }

    pub fn path(&self, key: &str) -> PathBuf {
        file_path(&self.dir, key)
    }

    /// The entry stored for `key`. A corrupt file is removed. A read marks the file used.
    pub fn read(&self, key: &str) -> Result<Entry, ReadError> {
        // Not only indexed files: during a reload the replaced instance may still write some.
        let path = self.path(key);
        let data = match std::fs::read(&path) {
            Ok(data) => data,
            Err(_) => {
                self.index.lock().unwrap().remove(key);
                return Err(ReadError::Missing);
            }
        };
        match serial::parse(&data, key) {
            Ok(e) => {
                let now = SystemTime::now();
                set_used(&path, now);
                self.index
                    .lock()
                    .unwrap()
                    .insert(key.to_owned(), data.len() as u64, now);
                Ok(e)
            }
            Err(why) => {
                self.remove(key);
                Err(ReadError::Corrupt(format!("{}: {why}", path.display())))
            }
        }
    }

    pub fn write(&self, key: &str, e: &Entry) -> std::io::Result<()> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let result = write_file(&tmp, &serial::encode(key, e))
            .and_then(|bytes| std::fs::rename(&tmp, self.path(key)).map(|_| bytes));
        match result {
            Ok(bytes) => {
                let mut index = self.index.lock().unwrap();
                index.insert(key.to_owned(), bytes, SystemTime::now());
                drop(index);
                self.evict();
                Ok(())
            }
            Err(err) => {
                let _ = std::fs::remove_file(&tmp);
                Err(err)
            }
        }
    }

    /// A hit of `key` served from memory: mark its file used (at most once a minute).
    pub fn touch(&self, key: &str) {
        let now = SystemTime::now();
        {
            let mut index = self.index.lock().unwrap();
            let Some(i) = index.files.get_mut(key) else {
                return;
            };
            if now.duration_since(i.used).is_ok_and(|d| d < TOUCH_EVERY) {
                return;
            }
            i.used = now;
        }
        set_used(&self.path(key), now);
    }

    /// Remove the file of `key`; whether there was one.
    pub fn remove(&self, key: &str) -> bool {
        let listed = self.index.lock().unwrap().remove(key);
        let removed = std::fs::remove_file(self.path(key)).is_ok();
        listed || removed
    }

    /// The keys of the files, as indexed.
    pub fn keys(&self) -> Vec<String> {
        self.index.lock().unwrap().files.keys().cloned().collect()
    }

    /// Past `max_size`, remove the least recently used files down to 90% of it (so that
    /// eviction does not run on every write).
    fn evict(&self) {
        let Some(max) = self.max_size else { return };
        let mut index = self.index.lock().unwrap();
        if index.bytes <= max {
            return;
        }
        let mut by_use: Vec<(SystemTime, String)> = index
            .files
            .iter()
            .map(|(k, i)| (i.used, k.clone()))
            .collect();
        by_use.sort();
        let target = max - max / 10;
        for (_, key) in by_use {
            if index.bytes <= target {
                break;
            }
            index.remove(&key);
            let _ = std::fs::remove_file(file_path(&self.dir, &key));
        }
    }
}

/// The file's modification time is its last use.
fn set_used(path: &Path, when: SystemTime) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(when);
    }
}

fn file_path(dir: &Path, key: &str) -> PathBuf {
    let hex: String = Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(format!("{hex}.cache"))
}

/// The header of a cache file, reading only its first lines.
fn read_head(path: &Path) -> Result<(Head, std::fs::Metadata), String> {
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    let mut r = BufReader::new(f).take(MAGIC.len() as u64 + MAX_HEAD);
    let mut magic = vec![0; MAGIC.len()];
    r.read_exact(&mut magic).map_err(|e| e.to_string())?;
    if magic != MAGIC {
        return Err("not a cache file".into());
    }
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
    let head: Head = serde_json::from_slice(&line).map_err(|e| e.to_string())?;
    let expected = MAGIC.len() as u64 + line.len() as u64 + head.len;
    if meta.len() != expected {
        return Err("truncated".into());
    }
    Ok((head, meta))
}

/// Writes the file; its size in bytes.
fn write_file(path: &Path, data: &[u8]) -> std::io::Result<u64> {
    std::fs::File::create(path)?.write_all(data)?;
    Ok(data.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::abi_stable::std_types::{RArc, RVec};

    fn entry() -> Entry {
        Entry {
            headers: Vec::new(),
            body: RArc::new(RVec::from(vec![b'x'; 1000])),
            stored_ms: 0,
            fresh_until_ms: 0,
        }
    }

    #[test]
    fn hits_from_memory_keep_a_file_from_eviction_across_a_restart() {
        let dir = std::env::temp_dir().join(format!("osprey-fc-disk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Files are about 1.1 kB: three fit in 3500 bytes.
        let (disk, _) = Disk::open(dir.clone(), Some(3500));
        for key in ["a", "b", "c"] {
            disk.write(key, &entry()).unwrap();
        }
        // As if written two minutes ago, in order.
        let long_ago = SystemTime::now() - Duration::from_secs(120);
        for (n, key) in ["a", "b", "c"].iter().enumerate() {
            let when = long_ago + Duration::from_secs(n as u64);
            disk.index.lock().unwrap().files.get_mut(*key).unwrap().used = when;
            set_used(&disk.path(key), when);
        }
        disk.touch("a");
        drop(disk);
        let (disk, removed) = Disk::open(dir.clone(), Some(3500));
        assert!(removed.is_empty());
        disk.write("d", &entry()).unwrap();
        let mut kept = disk.keys();
        kept.sort();
        assert_eq!(kept, ["a", "d"], "b and c were the least recently used");
        assert!(disk.read("b").is_err() && disk.read("a").is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
