//! The open-file cache and the small-file memory cache: what a request for a path finds, and
//! how a cached answer is kept fresh (revalidated against the file's identity after `cache_ttl`).

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use moka::sync::Cache;
use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::clock;
use osprey_sdk::http::CleanPath;
use osprey_sdk::OpenFile;

use crate::config::Config;
use crate::mime;
use crate::open::{open_beneath, open_root};

/// Where a representation's bytes are.
pub enum Source {
    /// Read once into memory, shared by every response.
    Memory(RArc<RVec<u8>>),
    /// An open descriptor; the core sends ranges of it with `sendfile(2)`.
    File(RArc<OpenFile>),
}

/// What identifies a file's version: if any of it changes, cached answers are dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        }
    }
}

/// One representation of a file (the file itself or its `.gz` sibling), with its header values
/// computed once.
pub struct Variant {
    pub source: Source,
    pub size: u64,
    pub mtime: SystemTime,
    /// Strong validator from size and modification time, quoted.
    pub etag: String,
    pub last_modified: String,
    id: Identity,
    path: PathBuf,
}

/// A cached file: its plain and (optional) gzip representations.
pub struct Entry {
    pub plain: Variant,
    pub gz: Option<Variant>,
    pub content_type: &'static str,
    /// When the entry was last known fresh (nanoseconds since [`epoch`]).
    checked: AtomicU64,
}

impl Entry {
    /// Whether the file's bytes are in memory (not an open descriptor).
    pub fn in_memory(&self) -> bool {
        matches!(self.plain.source, Source::Memory(_))
    }

    /// Bytes of file content this entry holds in memory.
    pub fn bytes(&self) -> u64 {
        let held = |v: &Variant| match v.source {
            Source::Memory(_) => v.size,
            Source::File(_) => 0,
        };
        held(&self.plain) + self.gz.as_ref().map_or(0, held)
    }
}

/// What a request path leads to.
pub enum Found {
    File(Arc<Entry>),
    /// A directory named without the final `/`.
    Redirect,
    /// A directory with `/` and no index file; the open directory, for a listing.
    Directory(File),
    Missing,
}

/// The caches of one route.
pub struct Files {
    cfg: Config,
    mem: Option<Cache<Vec<u8>, Arc<Entry>>>,
    fds: Cache<Vec<u8>, Arc<Entry>>,
}

impl Files {
    pub fn new(cfg: Config) -> Files {
        let mem = cfg.memcache.then(|| {
            Cache::builder()
                .max_capacity(cfg.memcache_size)
                .weigher(|_k: &Vec<u8>, e: &Arc<Entry>| {
                    let bytes = e.plain.size + e.gz.as_ref().map_or(0, |g| g.size) + 256;
                    bytes.min(u32::MAX as u64) as u32
                })
                .build()
        });
        let fds = Cache::builder().max_capacity(cfg.open_files).build();
        Files { cfg, mem, fds }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Find what `clean` names for `host`. A fresh cache hit makes no system call.
    pub fn find(&self, host: &str, clean: &CleanPath) -> Found {
        let mut key = Vec::with_capacity(host.len() + clean.rel.len() + 2);
        if self.cfg.per_host {
            key.extend_from_slice(host.as_bytes());
            key.push(0);
        }
        key.extend_from_slice(&clean.rel);
        if clean.trailing_slash {
            key.push(b'/');
        }
        let cached = self
            .mem
            .as_ref()
            .and_then(|m| m.get(&key))
            .or_else(|| self.fds.get(&key));
        if let Some(entry) = cached {
            if self.fresh(&entry) {
                return Found::File(entry);
            }
            self.forget(&key);
        }
        match self.load(host, clean) {
            Ok(Found::File(entry)) => {
                let in_memory = matches!(entry.plain.source, Source::Memory(_));
                match (&self.mem, in_memory) {
                    (Some(mem), true) => mem.insert(key, entry.clone()),
                    _ => self.fds.insert(key, entry.clone()),
                }
                Found::File(entry)
            }
            Ok(other) => other,
            Err(e) => {
                if !matches!(e.kind(), io::ErrorKind::NotFound) {
                    osprey_sdk::host::debug(&format!(
                        "static: {}: {e}",
                        String::from_utf8_lossy(&clean.rel)
                    ));
                }
                Found::Missing
            }
        }
    }

    fn forget(&self, key: &[u8]) {
        if let Some(m) = &self.mem {
            m.invalidate(key);
        }
        self.fds.invalidate(key);
    }

    /// Fresh when checked within `cache_ttl`, or when the files on disk are still the ones
    /// cached (one `stat` per representation).
    pub fn fresh(&self, entry: &Entry) -> bool {
        let now = clock::monotonic_ns();
        let checked = entry.checked.load(Ordering::Relaxed);
        if now.saturating_sub(checked) < self.cfg.cache_ttl.as_nanos() as u64 {
            return true;
        }
        let same = |path: &Path, id: Option<Identity>| {
            std::fs::metadata(path).ok().map(|m| Identity::of(&m)) == id
        };
        let plain_same = same(&entry.plain.path, Some(entry.plain.id));
        let gz_same = !self.cfg.gzip_static
            || !gz_usable(&entry.plain)
            || same(&gz_path(&entry.plain.path), entry.gz.as_ref().map(|g| g.id));
        if plain_same && gz_same {
            entry.checked.store(now, Ordering::Relaxed);
            return true;
        }
        false
    }

    fn load(&self, host: &str, clean: &CleanPath) -> io::Result<Found> {
        let root_path = if self.cfg.per_host {
            PathBuf::from(self.cfg.dir.replace("{host}", host))
        } else {
            PathBuf::from(&self.cfg.dir)
        };
        let root = open_root(&root_path)?;
        let follow = self.cfg.follow_symlinks;
        let mut rel = clean.rel.clone();
        let mut file = open_beneath(&root, &rel, follow)?;
        let mut meta = file.metadata()?;
        if meta.is_dir() {
            if !clean.trailing_slash {
                return Ok(Found::Redirect);
            }
            let index = self.cfg.index_file.as_bytes();
            let mut index_rel = rel.clone();
            if !index_rel.is_empty() {
                index_rel.push(b'/');
            }
            index_rel.extend_from_slice(index);
            let index_file = match index.is_empty() {
                true => None,
                false => open_beneath(&root, &index_rel, follow).ok(),
            };
            match index_file.map(|f| f.metadata().map(|m| (f, m))) {
                Some(Ok((f, m))) if m.is_file() => {
                    (file, meta, rel) = (f, m, index_rel);
                }
                _ => return Ok(Found::Directory(file)),
            }
        } else if clean.trailing_slash {
            return Ok(Found::Missing);
        }
        if !meta.is_file() {
            return Ok(Found::Missing);
        }
        let path = root_path.join(Path::new(std::ffi::OsStr::from_bytes(&rel)));
        let plain = self.variant(file, &meta, path)?;
        let gz = match self.cfg.gzip_static && gz_usable(&plain) {
            true => self.load_gz(&root, &rel, &plain),
            false => None,
        };
        Ok(Found::File(Arc::new(Entry {
            content_type: mime::content_type(&rel, self.cfg.charset.as_deref()),
            plain,
            gz,
            checked: AtomicU64::new(clock::monotonic_ns()),
        })))
    }

    /// The `.gz` sibling, when it is a regular file at least as new as the original.
    fn load_gz(&self, root: &std::os::fd::OwnedFd, rel: &[u8], plain: &Variant) -> Option<Variant> {
        let mut gz_rel = rel.to_vec();
        gz_rel.extend_from_slice(b".gz");
        let file = open_beneath(root, &gz_rel, self.cfg.follow_symlinks).ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.modified().ok()? < plain.mtime {
            return None;
        }
        self.variant(file, &meta, gz_path(&plain.path)).ok()
    }

    fn variant(
        &self,
        mut file: File,
        meta: &std::fs::Metadata,
        path: PathBuf,
    ) -> io::Result<Variant> {
        let mut id = Identity::of(meta);
        let mtime = meta.modified()?;
        let source = if self.cfg.memcache && id.size <= self.cfg.max_cache_file_size {
            let mut bytes = Vec::with_capacity(id.size as usize);
            file.read_to_end(&mut bytes)?;
            id.size = bytes.len() as u64;
            Source::Memory(RArc::new(RVec::from(bytes)))
        } else {
            Source::File(RArc::new(OpenFile::new(file)))
        };
        let secs = mtime
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Ok(Variant {
            source,
            size: id.size,
            mtime,
            etag: format!("\"{:x}-{:x}\"", id.size, secs.as_nanos()),
            last_modified: httpdate::fmt_http_date(mtime),
            id,
            path,
        })
    }
}

/// Whether a `.gz` sibling is worth looking for (not for files that are already `.gz`).
fn gz_usable(plain: &Variant) -> bool {
    !plain.path.as_os_str().as_bytes().ends_with(b".gz")
}

fn gz_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".gz");
    PathBuf::from(p)
}
