//! Entries on disk: one file per key, `<cache_dir>/<sha-256 of key>.cache`, holding a magic
//! line, a JSON header line and the body. Written to a temporary file and renamed, so a crash
//! never leaves a half-written entry; read back only if the key and the body's CRC-32 match,
//! so a corrupt file is discarded, never served.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use sha2::{Digest, Sha256};

use crate::entry::Entry;

const MAGIC: &[u8] = b"OSPREY-FILE-CACHE 1\n";

#[derive(serde::Serialize, serde::Deserialize)]
struct Head {
    key: String,
    headers: Vec<(String, String)>,
    stored_ms: u64,
    fresh_until_ms: u64,
    len: u64,
    crc: u32,
}

pub struct Disk {
    dir: PathBuf,
}

/// Why a file was not usable.
pub enum ReadError {
    Missing,
    Corrupt(String),
}

impl Disk {
    pub fn new(dir: PathBuf) -> Disk {
        Disk { dir }
    }

    pub fn path(&self, key: &str) -> PathBuf {
        let hex: String = Sha256::digest(key.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.dir.join(format!("{hex}.cache"))
    }

    /// The entry stored for `key`. A corrupt file is removed.
    pub fn read(&self, key: &str) -> Result<Entry, ReadError> {
        let path = self.path(key);
        let data = std::fs::read(&path).map_err(|_| ReadError::Missing)?;
        parse(&data, key).map_err(|why| {
            let _ = std::fs::remove_file(&path);
            ReadError::Corrupt(format!("{}: {why}", path.display()))
        })
    }

    pub fn write(&self, key: &str, e: &Entry) -> std::io::Result<()> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let head = Head {
            key: key.to_owned(),
            headers: e.headers.clone(),
            stored_ms: e.stored_ms,
            fresh_until_ms: e.fresh_until_ms,
            len: e.body.len() as u64,
            crc: crc32fast::hash(&e.body),
        };
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let result =
            write_file(&tmp, &head, &e.body).and_then(|_| std::fs::rename(&tmp, self.path(key)));
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    pub fn remove(&self, key: &str) {
        let _ = std::fs::remove_file(self.path(key));
    }
}

fn write_file(path: &Path, head: &Head, body: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(MAGIC)?;
    serde_json::to_writer(&mut f, head)?;
    f.write_all(b"\n")?;
    f.write_all(body)
}

fn parse(data: &[u8], key: &str) -> Result<Entry, String> {
    let rest = data.strip_prefix(MAGIC).ok_or("not a cache file")?;
    let nl = rest
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header line")?;
    let head: Head = serde_json::from_slice(&rest[..nl]).map_err(|e| format!("bad header: {e}"))?;
    let body = &rest[nl + 1..];
    if head.key != key {
        return Err("stored for another key".into());
    }
    if body.len() as u64 != head.len {
        return Err(format!(
            "body is {} bytes, header says {}",
            body.len(),
            head.len
        ));
    }
    if crc32fast::hash(body) != head.crc {
        return Err("checksum mismatch".into());
    }
    Ok(Entry {
        headers: head.headers,
        body: RArc::new(RVec::from(body.to_vec())),
        stored_ms: head.stored_ms,
        fresh_until_ms: head.fresh_until_ms,
    })
}
