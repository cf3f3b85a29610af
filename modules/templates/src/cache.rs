//! Parsed templates kept between requests, by host and URI, each with the validators of the
//! answer it was parsed from. An entry is used only while the part still answers with those
//! validators (for parents: a conditional subrequest answered `304`), so a changed file is
//! parsed again and replaces its entry.

use std::sync::Arc;

use osprey_sdk::Response;

use crate::parse::Template;

/// Bytes of template text kept in memory.
const CAPACITY: u64 = 16 << 20;

/// What identifies the version of a part: its `ETag`, `Last-Modified` and body length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub len: Option<u64>,
}

impl Version {
    /// The version a response describes.
    pub fn of(resp: &Response) -> Version {
        Version {
            etag: resp.get_header("etag").map(str::to_owned),
            last_modified: resp.get_header("last-modified").map(str::to_owned),
            len: resp.body.len(),
        }
    }

    /// Whether it can tell one version of a part from another (a length alone cannot).
    pub fn identifies(&self) -> bool {
        self.etag.is_some() || self.last_modified.is_some()
    }
}

/// A parsed template and the version of the part it was parsed from.
pub struct Entry {
    pub version: Version,
    pub template: Arc<Template>,
}

pub struct Cache(moka::sync::Cache<String, Arc<Entry>>);

impl Cache {
    pub fn new() -> Cache {
        Cache(
            moka::sync::Cache::builder()
                .max_capacity(CAPACITY)
                .weigher(|key: &String, e: &Arc<Entry>| {
                    (key.len() + e.template.text.len())
                        .try_into()
                        .unwrap_or(u32::MAX)
                })
                .build(),
        )
    }

    pub fn get(&self, host: &str, uri: &str) -> Option<Arc<Entry>> {
        self.0.get(&key(host, uri))
    }

    /// Keep `template` when its version can be recognised again.
    pub fn put(&self, host: &str, uri: &str, version: Version, template: Arc<Template>) {
        if version.identifies() {
            self.0
                .insert(key(host, uri), Arc::new(Entry { version, template }));
        }
    }
}

fn key(host: &str, uri: &str) -> String {
    format!("{host}|{uri}")
}
