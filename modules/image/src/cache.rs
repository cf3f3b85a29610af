//! Thumbnails cached in memory (moka, bounded by bytes) and on disk (temp file + rename).
//! An entry is valid while its source file's stamp (mtime, size, inode) is unchanged;
//! concurrent requests for one missing thumbnail wait for a single computation.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use moka::ops::compute::{CompResult, Op};
use moka::sync::Cache;
use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use sha2::{Digest, Sha256};

/// What identifies one version of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stamp {
    pub mtime_ns: i128,
    pub len: u64,
    pub ino: u64,
}

impl Stamp {
    /// The stamp of the file at `path` (following symlinks), `None` if it is gone.
    pub fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
            len: m.len(),
            ino: m.ino(),
        })
    }

    /// The modification time, for `Last-Modified`.
    pub fn modified(&self) -> std::time::SystemTime {
        let secs = self.mtime_ns.div_euclid(1_000_000_000);
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0) as u64)
    }
}

/// Where a response came from (reported in `X-Image-Cache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Memory,
    Disk,
    Rendered,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Memory => "memory",
            Source::Disk => "disk",
            Source::Rendered => "render",
        }
    }
}

/// One cached thumbnail.
pub struct Entry {
    /// The source file (canonical) and its stamp when the thumbnail was made.
    pub src: PathBuf,
    pub stamp: Stamp,
    /// A strong validator: the digest of everything the bytes depend on.
    pub etag: String,
    /// The disk-cache file holding the same bytes, if any.
    pub disk: Option<PathBuf>,
    pub body: RArc<RVec<u8>>,
    /// How this entry was first obtained (disk or rendered).
    pub origin: Source,
}

impl Entry {
    /// Is the source file unchanged? One `stat`.
    pub fn is_fresh(&self) -> bool {
        Stamp::of(&self.src) == Some(self.stamp)
    }
}

/// The memory cache shared by every image filter of the module.
pub type MemCache = Cache<String, Arc<Entry>>;

pub fn mem_cache(max_bytes: u64) -> MemCache {
    Cache::builder()
        .max_capacity(max_bytes)
        .weigher(|k: &String, v: &Arc<Entry>| {
            (k.len() + v.body.len() + 256)
                .try_into()
                .unwrap_or(u32::MAX)
        })
        .build()
}

/// A memory hit whose source is unchanged.
pub fn lookup(cache: &MemCache, key: &str) -> Option<Arc<Entry>> {
    cache.get(key).filter(|e| e.is_fresh())
}

/// The `ETag` of the thumbnail made from `identity` (what its bytes depend on).
pub fn etag_for(identity: &str) -> String {
    format!("\"{}\"", digest_hex(identity))
}

fn digest_hex(identity: &str) -> String {
    hex::encode(&Sha256::digest(identity.as_bytes())[..16])
}

/// The disk cache of one filter.
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    pub fn new(dir: PathBuf) -> std::io::Result<DiskCache> {
        std::fs::create_dir_all(&dir)?;
        Ok(DiskCache { dir })
    }

    /// The file for one version of one thumbnail: the name hashes everything the bytes
    /// depend on, so a changed source (or watermark) never matches an old file.
    pub fn path_for(&self, identity: &str, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", digest_hex(identity)))
    }

    pub fn read(&self, path: &Path) -> Option<Vec<u8>> {
        std::fs::read(path).ok()
    }

    /// Write atomically: a crash leaves at worst a stray temporary file, never a torn entry.
    pub fn write(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        static N: AtomicU64 = AtomicU64::new(0);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_data()?;
            std::fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

/// The entry for `key`: the memory entry if still fresh for `stamp`, otherwise `make()`'s,
/// stored. Concurrent callers for one key run `make` once; the others get its entry.
pub fn get_or_make<E: Send + Sync + 'static>(
    cache: &MemCache,
    key: &str,
    stamp: Stamp,
    make: impl FnOnce() -> Result<Entry, E>,
) -> Result<(Arc<Entry>, Source), E> {
    let mut made_here = None;
    let result = cache.entry_by_ref(key).and_try_compute_with(|current| {
        if let Some(e) = current {
            let e = e.into_value();
            if e.stamp == stamp && e.is_fresh() {
                return Ok(Op::Nop);
            }
            // Outdated: its disk file will never be asked for again.
            if let Some(old) = &e.disk {
                let _ = std::fs::remove_file(old);
            }
        }
        let entry = make()?;
        made_here = Some(entry.origin);
        Ok(Op::Put(Arc::new(entry)))
    })?;
    let entry = match result {
        CompResult::Inserted(e) | CompResult::ReplacedWith(e) | CompResult::Unchanged(e) => {
            e.into_value()
        }
        CompResult::StillNone(_) | CompResult::Removed(_) => unreachable!("never removes"),
    };
    Ok((entry, made_here.unwrap_or(Source::Memory)))
}
