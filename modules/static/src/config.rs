//! The route configuration of a `sendfile` / `static` handler.

use std::time::Duration;

use osprey_sdk::{parse_config, serde::Deserialize, ConfigError};

/// Keys of a static route, with their defaults (see `docs/static.md`).
#[derive(Deserialize, Debug)]
#[serde(crate = "osprey_sdk::serde")]
struct Raw {
    dir: String,
    #[serde(default = "default_index")]
    index_file: String,
    #[serde(default)]
    charset: Option<String>,
    #[serde(default)]
    memcache: bool,
    #[serde(default)]
    autoindex: bool,
    #[serde(default = "default_max_cache_file_size")]
    max_cache_file_size: u64,
    #[serde(default = "default_memcache_size")]
    memcache_size: u64,
    #[serde(default = "default_open_files")]
    open_files: u64,
    #[serde(default = "default_cache_ttl")]
    cache_ttl: f64,
    #[serde(default)]
    follow_symlinks: bool,
    #[serde(default = "default_true")]
    gzip_static: bool,
}

fn default_index() -> String {
    "index.html".into()
}
fn default_max_cache_file_size() -> u64 {
    64 * 1024
}
fn default_memcache_size() -> u64 {
    64 * 1024 * 1024
}
fn default_open_files() -> u64 {
    1000
}
fn default_cache_ttl() -> f64 {
    1.0
}
fn default_true() -> bool {
    true
}

/// A checked static route configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The document root; may contain `{host}`.
    pub dir: String,
    pub per_host: bool,
    /// Empty: no index file.
    pub index_file: String,
    pub charset: Option<String>,
    pub memcache: bool,
    pub autoindex: bool,
    pub max_cache_file_size: u64,
    pub memcache_size: u64,
    pub open_files: u64,
    pub cache_ttl: Duration,
    pub follow_symlinks: bool,
    pub gzip_static: bool,
}

impl Config {
    pub fn parse(json: &str) -> Result<Config, ConfigError> {
        let raw: Raw = parse_config(json)?;
        let err = |key: &str, msg: &str| ConfigError::at_key(json, key, format!("`{key}`: {msg}"));
        if raw.dir.is_empty() {
            return Err(err("dir", "must not be empty"));
        }
        if raw.dir.replace("{host}", "").contains(['{', '}']) {
            return Err(err("dir", "the only placeholder is `{host}`"));
        }
        if raw.index_file.contains(['/', '\\', '\0'])
            || raw.index_file == "."
            || raw.index_file == ".."
        {
            return Err(err("index_file", "must be a plain file name"));
        }
        if let Some(cs) = &raw.charset {
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if cs.is_empty() || !cs.bytes().all(token) {
                return Err(err("charset", "must be a charset name such as `utf-8`"));
            }
        }
        if !raw.cache_ttl.is_finite() || raw.cache_ttl < 0.0 || raw.cache_ttl > 1e9 {
            return Err(err("cache_ttl", "must be a number of seconds, 0 or more"));
        }
        if raw.open_files == 0 {
            return Err(err("open_files", "must be at least 1"));
        }
        Ok(Config {
            per_host: raw.dir.contains("{host}"),
            dir: raw.dir,
            index_file: raw.index_file,
            charset: raw.charset,
            memcache: raw.memcache,
            autoindex: raw.autoindex,
            max_cache_file_size: raw.max_cache_file_size,
            memcache_size: raw.memcache_size,
            open_files: raw.open_files,
            cache_ttl: Duration::from_secs_f64(raw.cache_ttl),
            follow_symlinks: raw.follow_symlinks,
            gzip_static: raw.gzip_static,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = Config::parse(r#"{"handler": "sendfile", "dir": "www"}"#).unwrap();
        assert_eq!(c.index_file, "index.html");
        assert!(!c.memcache && !c.per_host && c.gzip_static);
        assert_eq!(c.cache_ttl, Duration::from_secs(1));
    }

    #[test]
    fn errors_name_the_key_and_line() {
        let e = Config::parse("{\"dir\": \"www\",\n\"cache_ttl\": -1}").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("cache_ttl"), "{}", e.message);
        let e = Config::parse("{\"dir\": \"www\",\n\"index_file\": \"../x\"}").unwrap_err();
        assert!(e.message.contains("index_file"));
        assert!(Config::parse(r#"{"dir": "{hots}"}"#).is_err());
        assert!(Config::parse(r#"{"dir": "w", "charset": "a b"}"#).is_err());
        assert!(Config::parse(r#"{"dri": "w"}"#).is_err());
    }
}
