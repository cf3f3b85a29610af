//! # osprey-image
//!
//! The `image` filter: thumbnails named in the URL (`pic.100x100.jpg`, `pic.c100x100t.jpg`,
//! `pic.f100x100xFF8800.jpg`), with EXIF orientation applied, metadata stripped, an optional
//! watermark, cached in memory and on disk. Requests without a command pass on to the
//! route's handler. See `docs/image.md`.
//!
//! Module settings live in `modules.image` (or NXWEB's `modules.image_filter`); a route's
//! filter serves the route's `dir` unless it names its own:
//!
//! ```json
//! "modules": {"image": {"allowed_cmds": ["100x100", "c50x50"], "sign_key": "00ff..."}},
//! "routing": [{"prefix": "/img/", "handler": "sendfile", "dir": "www/img",
//!              "filters": [{"type": "image", "dir": "www/img", "cache_dir": "cache/img"}]}]
//! ```

pub mod budget;
pub mod cache;
pub mod command;
mod filter;
mod nxweb;
pub mod path;
pub mod render;
pub mod sign;
pub mod watermark;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use osprey_sdk::{filter_box, parse_config, ConfigError, FilterBox, Module};

pub use command::{parse_command, split_name, Command, Format, Gravity, ParseError, Thumb};

/// The server's allocator (mimalloc) for this module's per-request strings and lists: the C
/// library's costs several times more.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;

/// `modules.image`.
#[derive(serde::Deserialize)]
struct ModuleConf {
    /// Commands anyone may ask for (e.g. `"100x100"`, `"c50x50"`, or NXWEB's objects).
    #[serde(default)]
    allowed_cmds: Vec<nxweb::AllowedCmd>,
    /// Key for signed commands (`?sig=`): hex, or any other string as its bytes (NXWEB).
    #[serde(default)]
    sign_key: Option<String>,
    /// A PNG to stamp on thumbnails (else `watermark.png` found next to the images).
    #[serde(default)]
    watermark: Option<PathBuf>,
    #[serde(default = "default_watermark_min")]
    watermark_min: u32,
    #[serde(default = "default_max_side")]
    max_width: u32,
    #[serde(default = "default_max_side")]
    max_height: u32,
    #[serde(default = "default_max_alloc")]
    max_alloc: u64,
    #[serde(default = "default_memory_cache")]
    memory_cache_size: u64,
    #[serde(default = "default_quality")]
    jpeg_quality: u8,
    /// Bytes all renders may hold at once (estimated); 0: no limit.
    #[serde(default = "default_render_memory")]
    max_render_memory: u64,
    /// Seconds a render waits for that memory before a 503.
    #[serde(default = "default_render_wait")]
    render_wait: f64,
}

fn default_render_memory() -> u64 {
    1 << 30
}
fn default_render_wait() -> f64 {
    5.0
}

fn default_watermark_min() -> u32 {
    200
}
fn default_max_side() -> u32 {
    10_000
}
fn default_max_alloc() -> u64 {
    256 << 20
}
fn default_memory_cache() -> u64 {
    64 << 20
}
fn default_quality() -> u8 {
    85
}

/// A route's `{"type": "image", ...}`.
#[derive(serde::Deserialize)]
struct FilterConf {
    /// The directory of the source images; by default the route's `dir` (NXWEB).
    #[serde(default)]
    dir: Option<PathBuf>,
    /// Given by the core: the route's `dir`.
    #[serde(default)]
    route_dir: Option<PathBuf>,
    /// Where computed thumbnails are kept across restarts; none: memory only.
    #[serde(default)]
    cache_dir: Option<PathBuf>,
}

/// The module-wide settings every image filter shares.
pub(crate) struct Settings {
    pub allowed: HashSet<Command>,
    pub sign_key: Option<Vec<u8>>,
    pub watermark: Option<PathBuf>,
    pub watermark_min: u32,
    pub limits: render::DecodeLimits,
    pub jpeg_quality: u8,
    pub mem: cache::MemCache,
    pub marks: watermark::Marks,
    pub budget: budget::Budget,
}

pub struct ImageModule {
    settings: Arc<Settings>,
}

impl Module for ImageModule {
    const NAME: &'static str = "image";
    const FILTERS: &'static [&'static str] = &["image"];

    fn new(json: &str) -> Result<Self, ConfigError> {
        let conf: ModuleConf = parse_config(json)?;
        let mut allowed = HashSet::new();
        for entry in &conf.allowed_cmds {
            let text = nxweb::command_text(entry).map_err(|e| {
                ConfigError::at_key(json, "allowed_cmds", format!("allowed_cmds: {e}"))
            })?;
            let cmd = parse_command(&text).map_err(|e| {
                ConfigError::at_key(json, "allowed_cmds", format!("allowed_cmds: `{text}`: {e}"))
            })?;
            allowed.insert(cmd);
        }
        let sign_key = match &conf.sign_key {
            None => None,
            Some(text) => Some(nxweb::sign_key(text).ok_or_else(|| {
                ConfigError::at_key(
                    json,
                    "sign_key",
                    "sign_key must be at least 16 bytes (hex, or any string as its bytes)",
                )
            })?),
        };
        if let Some(path) = &conf.watermark {
            if !path.is_file() {
                return Err(ConfigError::at_key(
                    json,
                    "watermark",
                    format!("watermark `{}` is not a readable file", path.display()),
                ));
            }
        }
        if !(1..=100).contains(&conf.jpeg_quality) {
            return Err(ConfigError::at_key(
                json,
                "jpeg_quality",
                "jpeg_quality is 1 to 100",
            ));
        }
        if conf.max_width == 0 || conf.max_height == 0 {
            return Err(ConfigError::at_key(
                json,
                "max_width",
                "max_width and max_height must be positive",
            ));
        }
        if !(0.0..=3600.0).contains(&conf.render_wait) {
            return Err(ConfigError::at_key(
                json,
                "render_wait",
                "render_wait is 0 to 3600 seconds",
            ));
        }
        Ok(ImageModule {
            settings: Arc::new(Settings {
                allowed,
                sign_key,
                watermark: conf.watermark,
                watermark_min: conf.watermark_min,
                limits: render::DecodeLimits {
                    max_width: conf.max_width,
                    max_height: conf.max_height,
                    max_alloc: conf.max_alloc,
                },
                jpeg_quality: conf.jpeg_quality,
                mem: cache::mem_cache(conf.memory_cache_size),
                marks: watermark::Marks::default(),
                budget: budget::Budget::new(
                    conf.max_render_memory,
                    std::time::Duration::from_secs_f64(conf.render_wait),
                ),
            }),
        })
    }

    fn new_filter(&self, _kind: &str, json: &str) -> Result<FilterBox, ConfigError> {
        let conf: FilterConf = parse_config(json)?;
        let dir = conf
            .dir
            .or(conf.route_dir)
            .ok_or_else(|| ConfigError::new("missing field `dir` (set it here or on the route)"))?;
        let root = std::fs::canonicalize(&dir)
            .ok()
            .filter(|d| d.is_dir())
            .ok_or_else(|| {
                ConfigError::at_key(
                    json,
                    "dir",
                    format!("dir `{}` is not a directory", dir.display()),
                )
            })?;
        let disk = match conf.cache_dir {
            None => None,
            Some(dir) => Some(cache::DiskCache::new(dir.clone()).map_err(|e| {
                ConfigError::at_key(
                    json,
                    "cache_dir",
                    format!("cache_dir `{}`: {e}", dir.display()),
                )
            })?),
        };
        Ok(filter_box(filter::ImageFilter::new(
            self.settings.clone(),
            root,
            disk,
        )))
    }
}

osprey_sdk::export_module!(ImageModule);
