//! `gzip`: a filter that compresses responses for clients that accept gzip, and keeps the
//! compressed variants (in memory, and on disk with `cache_dir`) so a source that has not
//! changed is compressed only once.
//!
//! ```json
//! "filters": [{"type": "gzip", "compression": 6, "min_length": 100, "cache_dir": "/var/cache/osprey/gzip"}]
//! ```

mod eligible;
mod store;
mod stream;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use flate2::{write::GzEncoder, Compression};
use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::http::{self, Precondition, Validators};
use osprey_sdk::Wants;
use osprey_sdk::{
    filter_box, host, parse_config, Body, ConfigError, FileRange, Filter, FilterBox, Mode, Module,
    Request, Response,
};

use eligible::{add_vary, eligible, weaken_etag, DEFAULT_TYPES};
use store::{Source, Store, Variant};

/// The server's allocator (mimalloc) for this module's per-request strings and lists: the C
/// library's costs several times more.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;

struct GzipModule;

impl Module for GzipModule {
    const NAME: &'static str = "gzip";
    const FILTERS: &'static [&'static str] = &["gzip"];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(GzipModule)
    }

    fn new_filter(&self, _kind: &str, config: &str) -> Result<FilterBox, ConfigError> {
        Ok(filter_box(Gzip::new(config)?))
    }
}

fn default_level() -> u32 {
    6
}

fn default_min_length() -> u64 {
    100
}

fn default_memory() -> u64 {
    32 << 20
}

/// The filter's keys in its `filters` entry.
#[derive(serde::Deserialize)]
struct Conf {
    /// zlib level 1 (fastest) to 9 (smallest).
    #[serde(default = "default_level")]
    compression: u32,
    /// Bodies shorter than this are sent as they are.
    #[serde(default = "default_min_length")]
    min_length: u64,
    /// Keep compressed variants on disk here too (they survive a restart).
    cache_dir: Option<PathBuf>,
    /// Bytes of compressed variants kept in memory.
    #[serde(default = "default_memory")]
    memory_cache_size: u64,
    /// Media types to compress: `text/` (prefix), `+json` (suffix) or exact types.
    types: Option<Vec<String>>,
}

struct Gzip {
    level: u32,
    min_length: u64,
    types: Vec<String>,
    store: Store,
}

impl Gzip {
    fn new(json: &str) -> Result<Gzip, ConfigError> {
        let conf: Conf = parse_config(json)?;
        if !(1..=9).contains(&conf.compression) {
            return Err(ConfigError::at_key(
                json,
                "compression",
                "`compression` must be 1 to 9",
            ));
        }
        if let Some(dir) = &conf.cache_dir {
            osprey_sdk::config::create_dir(json, "cache_dir", dir)?;
        }
        let types = conf
            .types
            .unwrap_or_else(|| DEFAULT_TYPES.iter().map(|t| t.to_string()).collect())
            .into_iter()
            .map(|t| t.to_ascii_lowercase())
            .collect();
        Ok(Gzip {
            level: conf.compression,
            min_length: conf.min_length,
            types,
            store: Store::new(conf.memory_cache_size, conf.cache_dir),
        })
    }

    /// Will `after` compress this response for this client?
    fn compresses(&self, req: &Request<'_>, resp: &Response) -> bool {
        accepts_gzip(req) && eligible(resp, &self.types, self.min_length)
    }

    fn compress(&self, data: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut enc = GzEncoder::new(
            Vec::with_capacity(data.len() / 3 + 64),
            Compression::new(self.level),
        );
        enc.write_all(data)?;
        enc.finish()
    }

    fn compress_file(&self, range: &FileRange) -> std::io::Result<Vec<u8>> {
        let mut data = vec![0; range.len as usize];
        range.file.read_exact_at(&mut data, range.offset)?;
        self.compress(&data)
    }
}

impl Filter for Gzip {
    /// The variant cache is keyed by the cache key.
    fn wants(&self) -> Wants {
        Wants::KEY | Wants::CACHE_KEY | Wants::AFTER_MODE | Wants::AFTER
    }

    fn cache_key(&self, req: &Request<'_>, key: &mut String) {
        if accepts_gzip(req) {
            key.push_str("|gzip");
        }
    }

    fn after_mode(&self, req: &Request<'_>, resp: &Response) -> Mode {
        // A stream is compressed chunk by chunk as it is sent; everything else is compressed
        // (or looked up in the variant cache, possibly on disk) on the worker pool.
        if self.compresses(req, resp) && !matches!(resp.body, Body::Stream(_)) {
            Mode::Worker
        } else {
            Mode::Inline
        }
    }

    fn after(&self, req: &Request<'_>, key: &str, resp: &mut Response) {
        if !eligible(resp, &self.types, self.min_length) {
            return;
        }
        add_vary(resp);
        if !accepts_gzip(req) {
            return;
        }
        if variant_not_modified(req, resp) {
            // The client holds this compressed variant: nothing to compress.
            resp.status(304);
            resp.body = Body::Empty;
            mark_encoded(resp);
            return;
        }
        let body = std::mem::replace(&mut resp.body, Body::Empty);
        let gz = match body {
            Body::Stream(inner) => {
                resp.body_stream(stream::GzipStream::new(inner, self.level));
                mark_encoded(resp);
                return;
            }
            body => {
                let source = Source::of(resp, body.len().unwrap_or(0));
                match self.variant(key, &source, &body) {
                    Ok(gz) => gz,
                    Err(e) => {
                        host::warn(&format!("gzip: sending {} uncompressed: {e}", req.uri));
                        resp.body = body;
                        return;
                    }
                }
            }
        };
        resp.body = Body::Shared(gz);
        mark_encoded(resp);
    }
}

impl Gzip {
    /// The compressed bytes of `body`: a cached variant when the source is unchanged, else
    /// freshly compressed (and cached when the source has a validator).
    fn variant(&self, key: &str, source: &Source, body: &Body) -> std::io::Result<RArc<RVec<u8>>> {
        let cacheable = source.cacheable();
        if cacheable {
            if let Some(v) = self.store.get(key, source) {
                return Ok(v.gz.clone());
            }
        }
        let gz = match body {
            Body::File(range) => self.compress_file(range)?,
            body => self.compress(body.as_bytes().unwrap_or_default())?,
        };
        let gz = RArc::new(RVec::from(gz));
        if cacheable {
            self.store.put(
                key,
                Arc::new(Variant {
                    source: source.clone(),
                    gz: gz.clone(),
                }),
            );
        }
        Ok(gz)
    }
}

fn accepts_gzip(req: &Request<'_>) -> bool {
    http::accepts(req, "gzip")
}

/// Whether the client's `If-None-Match` / `If-Modified-Since` match the compressed variant's
/// validators (its ETag is the weakened one). Only a 304 is decided here: the handler has
/// already answered the other preconditions against its own representation.
fn variant_not_modified(req: &Request<'_>, resp: &Response) -> bool {
    let etag = resp.get_header("etag").map(|t| match t.starts_with("W/") {
        true => t.to_owned(),
        false => format!("W/{t}"),
    });
    let validators = Validators::from_headers(etag.as_deref(), resp.get_header("last-modified"));
    http::evaluate(req, &validators) == Precondition::NotModified
}

fn mark_encoded(resp: &mut Response) {
    resp.set_header("Content-Encoding", "gzip");
    resp.remove_header("Accept-Ranges");
    weaken_etag(resp);
}

osprey_sdk::export_module!(GzipModule);
