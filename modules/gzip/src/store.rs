//! Compressed variants: in memory (moka, bounded by bytes) and optionally on disk. A variant
//! remembers the validators of the response it was made from and is used only while they
//! still match, so a changed source is compressed again.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::{host, Response};
use sha2::{Digest, Sha256};

/// What identifies the source response a variant was compressed from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Source {
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub len: u64,
}

impl Source {
    pub fn of(resp: &Response, len: u64) -> Source {
        Source {
            etag: resp.get_header("etag").map(str::to_owned),
            last_modified: resp.get_header("last-modified").map(str::to_owned),
            len,
        }
    }

    /// Without a validator the same length says nothing about the content: such responses
    /// (typically dynamic ones) are compressed every time and never cached.
    pub fn cacheable(&self) -> bool {
        self.etag.is_some() || self.last_modified.is_some()
    }
}

pub struct Variant {
    pub source: Source,
    pub gz: RArc<RVec<u8>>,
}

pub struct Store {
    memory: moka::sync::Cache<String, Arc<Variant>>,
    dir: Option<PathBuf>,
}

const MAGIC: &[u8] = b"OSPREY-GZIP 1\n";

#[derive(serde::Serialize, serde::Deserialize)]
struct DiskHead {
    key: String,
    source: Source,
    crc: u32,
}

impl Store {
    pub fn new(memory_bytes: u64, dir: Option<PathBuf>) -> Store {
        let memory = moka::sync::Cache::builder()
            .max_capacity(memory_bytes)
            .weigher(|k: &String, v: &Arc<Variant>| {
                (k.len() + v.gz.len() + 128).try_into().unwrap_or(u32::MAX)
            })
            .build();
        Store { memory, dir }
    }

    /// A variant of `key` made from `source`, from memory or disk.
    pub fn get(&self, key: &str, source: &Source) -> Option<Arc<Variant>> {
        if let Some(v) = self.memory.get(key) {
            if v.source == *source {
                return Some(v);
            }
        }
        let v = Arc::new(self.read_disk(key, source)?);
        self.memory.insert(key.to_owned(), v.clone());
        Some(v)
    }

    pub fn put(&self, key: &str, variant: Arc<Variant>) {
        if let Some(dir) = &self.dir {
            if let Err(e) = write_disk(dir, key, &variant) {
                host::warn(&format!("gzip: cannot write the cache file for {key}: {e}"));
            }
        }
        self.memory.insert(key.to_owned(), variant);
    }

    fn read_disk(&self, key: &str, source: &Source) -> Option<Variant> {
        let path = file_name(self.dir.as_ref()?, key);
        let data = std::fs::read(&path).ok()?;
        match parse_disk(&data, key) {
            Ok((head, gz)) if head.source == *source => Some(Variant {
                source: head.source,
                gz: RArc::new(RVec::from(gz.to_vec())),
            }),
            Ok(_) => None, // made from an older source; replaced when recompressed
            Err(why) => {
                host::warn(&format!(
                    "gzip: discarding corrupt cache file {}: {why}",
                    path.display()
                ));
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }
}

/// `<dir>/<sha-256 of key>.gz`.
fn file_name(dir: &Path, key: &str) -> PathBuf {
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{hex}.gz"))
}

fn parse_disk<'d>(data: &'d [u8], key: &str) -> Result<(DiskHead, &'d [u8]), String> {
    let rest = data.strip_prefix(MAGIC).ok_or("bad magic")?;
    let nl = rest
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header line")?;
    let head: DiskHead = serde_json::from_slice(&rest[..nl]).map_err(|e| e.to_string())?;
    let gz = &rest[nl + 1..];
    if head.key != key {
        return Err("key mismatch".into());
    }
    if crc32fast::hash(gz) != head.crc {
        return Err("checksum mismatch".into());
    }
    Ok((head, gz))
}

/// Write to a temporary file in the same directory, then rename: a crash never leaves a
/// half-written entry under the real name.
fn write_disk(dir: &Path, key: &str, v: &Variant) -> std::io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let head = DiskHead {
        key: key.to_owned(),
        source: v.source.clone(),
        crc: crc32fast::hash(&v.gz),
    };
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(MAGIC)?;
        serde_json::to_writer(&mut f, &head)?;
        f.write_all(b"\n")?;
        f.write_all(&v.gz)?;
        std::fs::rename(&tmp, file_name(dir, key))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
