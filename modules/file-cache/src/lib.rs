//! `file_cache`: a filter that caches the responses of any handler in memory, optionally on
//! disk and optionally in Redis shared by a fleet of servers, revalidates expired entries with the origin, serves a stale entry when the origin
//! fails (NXWEB's behaviour), and lets concurrent misses for one key share one origin request.
//! The `cache_purge` handler removes entries from the caches of a zone.
//!
//! ```json
//! "filters": [{"type": "file_cache", "zone": "api", "cache_dir": "/var/cache/osprey/api", "ttl": 60}]
//! ```

mod disk;
mod entry;
mod inflight;
mod purge;
mod redis;
mod remote;
mod serial;
mod stats;
mod store;
mod tee;
mod vary;
mod zones;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use osprey_sdk::abi_stable::std_types::RVec;
use osprey_sdk::Wants;
use osprey_sdk::{
    filter_box, handler_box, host, parse_config, Body, ConfigError, Filter, FilterBox, HandlerBox,
    HeaderPair, Mode, Module, Request, Response, Step, WaitFuture,
};

use disk::Disk;
use entry::{client_wants_validation, now_ms, storable, Entry};
use inflight::{InFlight, Role};
use remote::{Look, RemoteConf};
use stats::Stats;
use store::Store;

/// The server's allocator (mimalloc) for this module's per-request strings and lists: the C
/// library's costs several times more.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;

struct FileCacheModule;

impl Module for FileCacheModule {
    const NAME: &'static str = "file_cache";
    const FILTERS: &'static [&'static str] = &["file_cache"];
    const HANDLERS: &'static [&'static str] = &["cache_purge"];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(FileCacheModule)
    }

    fn new_filter(&self, _kind: &str, config: &str) -> Result<FilterBox, ConfigError> {
        Ok(filter_box(FileCache::new(config)?))
    }

    fn new_handler(&self, _kind: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        Ok(handler_box(purge::Purge::new(route)?))
    }
}

fn default_memory() -> u64 {
    64 << 20
}

fn default_max_entry() -> u64 {
    16 << 20
}

fn default_lock_timeout() -> f64 {
    5.0
}

/// The filter's keys in its `filters` entry.
#[derive(serde::Deserialize)]
struct Conf {
    /// The name `cache_purge` routes and the counters know this cache by.
    zone: Option<String>,
    /// Also keep entries on disk here (they survive a restart).
    cache_dir: Option<PathBuf>,
    /// Bytes of files kept in `cache_dir` (least recently used evicted; default: no limit).
    max_disk_size: Option<u64>,
    /// Serve fresh entries even when the client asks for revalidation (`no-cache`,
    /// `max-age=0`), as CDNs can.
    #[serde(default)]
    ignore_client_no_cache: bool,
    /// Freshness in seconds for responses that give none (no max-age, no Expires).
    #[serde(default)]
    ttl: u64,
    /// Do not cache requests that have a query string.
    #[serde(default)]
    dont_cache_queries: bool,
    /// Bytes of entries kept in memory.
    #[serde(default = "default_memory")]
    memory_cache_size: u64,
    /// Larger bodies are not cached.
    #[serde(default = "default_max_entry")]
    max_entry_size: u64,
    /// How many seconds past its freshness an entry may still be served when the origin
    /// fails (default: no limit).
    max_stale: Option<u64>,
    /// Seconds a request waits for another request's fetch of the same key before it goes
    /// to the origin itself.
    #[serde(default = "default_lock_timeout")]
    lock_timeout: f64,
    /// A store shared with other servers, behind the memory (and disk) store.
    store: Option<StoreConf>,
}

/// `"store": {"redis": "host:port", ...}`.
#[derive(serde::Deserialize)]
struct StoreConf {
    /// The Redis server, `host:port`.
    redis: String,
    /// Put before each key in Redis (and the purge channel's name).
    #[serde(default = "default_key_prefix")]
    key_prefix: String,
    /// Seconds to connect to Redis.
    #[serde(default = "default_redis_timeout")]
    connect_timeout: f64,
    /// Seconds a command may wait on Redis (each read or write).
    #[serde(default = "default_redis_timeout")]
    timeout: f64,
    /// Idle connections kept per network thread.
    #[serde(default = "default_pool_size")]
    pool_size: usize,
    /// Seconds an entry stays in Redis past its freshness (for revalidation and serving
    /// stale); default `max_stale`, else a day.
    keep: Option<u64>,
}

fn default_key_prefix() -> String {
    "osprey:".into()
}

fn default_redis_timeout() -> f64 {
    0.25
}

fn default_pool_size() -> usize {
    16
}

impl StoreConf {
    /// Check the keys; the store's settings.
    fn into_remote(self, json: &str, max_stale: Option<u64>) -> Result<RemoteConf, ConfigError> {
        let port_ok = self.redis.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !port_ok {
            return Err(ConfigError::at_key(
                json,
                "redis",
                format!(
                    "`redis` `{}` must be host:port (127.0.0.1:6379)",
                    self.redis
                ),
            ));
        }
        let seconds = |key: &str, value: f64| {
            if (0.001..=60.0).contains(&value) {
                Ok(Duration::from_secs_f64(value))
            } else {
                Err(ConfigError::at_key(
                    json,
                    key,
                    format!("`{key}` must be 0.001 to 60 seconds"),
                ))
            }
        };
        let connect = seconds("connect_timeout", self.connect_timeout)?;
        let timeout = seconds("timeout", self.timeout)?;
        if self.key_prefix.contains(['*', '?', '[', ']', '\\']) {
            return Err(ConfigError::at_key(
                json,
                "key_prefix",
                "`key_prefix` must not contain glob characters (* ? [ ] \\)",
            ));
        }
        Ok(RemoteConf {
            redis: redis::Redis::new(self.redis, connect, timeout, self.pool_size),
            prefix: self.key_prefix,
            keep_ms: self
                .keep
                .or(max_stale)
                .unwrap_or(86_400)
                .saturating_mul(1000),
        })
    }
}

struct FileCache {
    ttl: u64,
    dont_cache_queries: bool,
    ignore_client_no_cache: bool,
    max_entry_size: u64,
    max_stale: Option<u64>,
    lock_timeout: Duration,
    store: Arc<Store>,
    in_flight: InFlight,
    /// Keys whose last origin answer was not cacheable: requests for them go straight to the
    /// origin for a while instead of queueing behind each other.
    passes: moka::sync::Cache<String, ()>,
}

impl FileCache {
    fn new(json: &str) -> Result<FileCache, ConfigError> {
        let conf: Conf = parse_config(json)?;
        if !(conf.lock_timeout >= 0.0 && conf.lock_timeout <= 3600.0) {
            return Err(ConfigError::at_key(
                json,
                "lock_timeout",
                "`lock_timeout` must be 0 to 3600 seconds",
            ));
        }
        if let Some(zone) = conf.zone.as_deref().filter(|z| !zones::valid_name(z)) {
            return Err(ConfigError::at_key(
                json,
                "zone",
                format!("`zone` `{zone}` must be lower-case letters, digits and `_`"),
            ));
        }
        if conf.max_disk_size.is_some() && conf.cache_dir.is_none() {
            return Err(ConfigError::at_key(
                json,
                "max_disk_size",
                "`max_disk_size` needs `cache_dir`",
            ));
        }
        let stats = Stats::register(conf.zone.as_deref());
        let disk = match &conf.cache_dir {
            Some(dir) => {
                osprey_sdk::config::create_dir(json, "cache_dir", dir)?;
                let (disk, removed) = Disk::open(dir.clone(), conf.max_disk_size);
                for name in removed {
                    stats.store_errors.incr();
                    host::warn(&format!(
                        "file_cache: discarded corrupt cache file {}",
                        dir.join(name).display()
                    ));
                }
                Some(disk)
            }
            None => None,
        };
        let remote = match conf.store {
            Some(store) => Some(store.into_remote(json, conf.max_stale)?),
            None => None,
        };
        let store = Store::new(conf.memory_cache_size, disk, remote, stats);
        zones::register(conf.zone.as_deref(), &store);
        Ok(FileCache {
            ttl: conf.ttl,
            dont_cache_queries: conf.dont_cache_queries,
            ignore_client_no_cache: conf.ignore_client_no_cache,
            max_entry_size: conf.max_entry_size,
            max_stale: conf.max_stale,
            lock_timeout: Duration::from_secs_f64(conf.lock_timeout),
            store,
            in_flight: InFlight::default(),
            passes: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(10))
                .build(),
        })
    }

    /// Is this request one the cache deals with at all?
    fn applies(&self, req: &Request<'_>) -> bool {
        matches!(req.method.as_str(), "GET" | "HEAD")
            && (!self.dont_cache_queries || req.query.is_empty())
    }

    /// Let a streamed 200 through to the client and store it when it has ended whole.
    /// `done` (the fill other requests may wait on) is released after the store.
    fn store_at_end(&self, key: &str, resp: &mut Response, done: Option<inflight::Done>) {
        let Body::Stream(inner) = std::mem::replace(&mut resp.body, Body::Empty) else {
            return;
        };
        let mut head = Response::new();
        head.status = resp.status;
        head.headers = resp.headers.clone();
        let (store, key, ttl) = (self.store.clone(), key.to_owned(), self.ttl);
        let on_end = move |body: Vec<u8>| {
            let e = Arc::new(Entry::from_response(&head, body, ttl, now_ms()));
            if e.worth_storing() {
                store.put(&key, e);
            }
            drop(done);
        };
        resp.body_stream(tee::Tee::new(inner, self.max_entry_size, Box::new(on_end)));
    }

    /// Learn what a storable answer varies on; the key to store it under. The entry under
    /// the key the request was looked up with goes if that key is no longer right.
    fn learn_vary(&self, req: &Request<'_>, key: &str, looked_up: &str, resp: &Response) -> String {
        let names = self.store.vary.learn(key, resp);
        if let (Some(remote), false) = (self.store.remote(), names.is_empty()) {
            remote.put_vary(key, &names);
        }
        let variant = self.store.vary.key(req, key);
        if variant != looked_up {
            self.store.forget(looked_up);
        }
        variant
    }

    /// The body of an origin response as bytes, if it can be stored.
    fn body_bytes(&self, body: &Body) -> Option<Vec<u8>> {
        if body.len().is_none_or(|n| n > self.max_entry_size) {
            return None;
        }
        match body {
            Body::File(range) => {
                let mut data = vec![0; range.len as usize];
                range.file.read_exact_at(&mut data, range.offset).ok()?;
                Some(data)
            }
            body => body.as_bytes().map(<[u8]>::to_vec),
        }
    }
}

impl Filter for FileCache {
    fn wants(&self) -> Wants {
        Wants::KEY
            | Wants::BEFORE
            | Wants::REQUEST_HEADERS
            | Wants::CANCEL
            | Wants::AFTER_MODE
            | Wants::AFTER
    }

    fn before(&self, req: &Request<'_>, key: &str, resp: &mut Response) -> Step {
        if !self.applies(req) {
            return Step::Continue;
        }
        let now = now_ms();
        let variant = self.store.vary.key(req, key);
        let mut entry = self.store.lookup(&variant);
        let stats = &self.store.stats;
        let validate =
            |e: &Entry| !self.ignore_client_no_cache && client_wants_validation(req, e.age(now));
        let fresh = |e: &Option<Arc<Entry>>| e.as_ref().filter(|e| e.is_fresh(now)).cloned();
        // Nothing fresh here: another server may have stored it in the shared store.
        if let Some(remote) = self.store.remote() {
            remote.kick();
            let ask = fresh(&entry).is_none()
                && req.method.as_str() == "GET"
                && !self.passes.contains_key(key);
            if ask {
                match remote.look(key, &variant) {
                    Look::Wait => return Step::Wait,
                    Look::Asked { found: Some(e) } => entry = Some(e),
                    Look::Asked { found: None } => {}
                }
            }
        }
        if let Some(e) = fresh(&entry) {
            if !validate(&e) {
                stats.hits.incr();
                e.serve(req, resp, now, false);
                return Step::Respond;
            }
        }
        let to_origin = || {
            match &entry {
                Some(_) => stats.revalidations.incr(),
                None => stats.misses.incr(),
            }
            Step::Continue
        };
        // A miss or a stale entry: one request goes to the origin, the others wait for it.
        if req.method.as_str() != "GET" || self.passes.contains_key(key) {
            return to_origin();
        }
        // Within stale-while-revalidate, the others get the stale entry instead of waiting.
        let swr = entry
            .clone()
            .filter(|e| !validate(e) && e.may_serve_while_revalidating(now));
        match self.in_flight.join(key, entry.clone(), self.lock_timeout) {
            Role::Lead => to_origin(),
            Role::Wait => match swr {
                Some(e) => {
                    stats.stale.incr();
                    e.serve(req, resp, now, true);
                    Step::Respond
                }
                None => Step::Wait,
            },
        }
    }

    /// The handler declined or the request was lost: let waiters go on without us.
    fn cancel(&self, key: &str) {
        self.in_flight.take(key);
    }

    fn wait(&self, key: &str) -> WaitFuture {
        match self.store.remote().and_then(|r| r.wait(key)) {
            Some(look_up) => WaitFuture::new(look_up),
            None => WaitFuture::new(self.in_flight.wait(key)),
        }
    }

    /// The cache answers the client's conditionals itself, so the origin gets the cache's:
    /// the validators of the entry being revalidated, or none (a full response to store).
    fn request_headers(&self, req: &Request<'_>, key: &str, set: &mut RVec<HeaderPair>) {
        if !self.applies(req) {
            return;
        }
        let stale = self
            .in_flight
            .get(key)
            .and_then(|f| f.stale.clone())
            .or_else(|| self.store.in_memory(&self.store.vary.key(req, key)));
        let validator = |name: &str| {
            stale
                .as_ref()
                .and_then(|e| e.header(name))
                .unwrap_or("")
                .to_owned()
        };
        set.push(HeaderPair::new("If-None-Match", validator("etag")));
        set.push(HeaderPair::new(
            "If-Modified-Since",
            validator("last-modified"),
        ));
    }

    fn after_mode(&self, req: &Request<'_>, resp: &Response) -> Mode {
        // Reading a file body, or writing the disk cache, is blocking work.
        let writes = self.store.has_disk() && matches!(resp.status, 200 | 304);
        if self.applies(req) && (writes || matches!(resp.body, Body::File(_))) {
            Mode::Worker
        } else {
            Mode::Inline
        }
    }

    fn after(&self, req: &Request<'_>, key: &str, resp: &mut Response) {
        if !self.applies(req) {
            return;
        }
        // Waiters wake when `_done` drops, after this request has stored what it got.
        let _done = if req.method.as_str() == "GET" {
            self.in_flight.take(key)
        } else {
            None
        };
        let now = now_ms();
        let variant = self.store.vary.key(req, key);
        let known = _done
            .as_ref()
            .and_then(|d| d.0.stale.clone())
            .or_else(|| self.store.lookup(&variant));
        match resp.status {
            304 if known.is_some() => {
                let e = Arc::new(known.unwrap().refreshed(resp, self.ttl, now));
                self.store.put(&variant, e.clone());
                e.serve(req, resp, now, false);
            }
            500..=599 => {
                let usable = known.filter(|e| e.may_serve_on_error(now, self.max_stale));
                match usable {
                    Some(e) => {
                        self.store.stats.stale.incr();
                        host::info(&format!(
                            "file_cache: origin answered {} for {}; serving a stale entry",
                            resp.status, req.uri
                        ));
                        e.serve(req, resp, now, !e.is_fresh(now));
                    }
                    None => {
                        self.passes.insert(key.to_owned(), ());
                    }
                }
            }
            // A HEAD answer has no body to store and says nothing against the entry.
            _ if req.is_head() => {}
            _ if matches!(resp.body, Body::Stream(_))
                && storable(req, resp)
                && resp.body.len().is_none_or(|n| n <= self.max_entry_size) =>
            {
                let variant = self.learn_vary(req, key, &variant, resp);
                self.store_at_end(&variant, resp, _done);
            }
            _ => {
                let body = if storable(req, resp) {
                    self.body_bytes(&resp.body)
                } else {
                    None
                };
                let e = body.map(|b| Arc::new(Entry::from_response(resp, b, self.ttl, now)));
                match e {
                    Some(e) if e.worth_storing() => {
                        let variant = self.learn_vary(req, key, &variant, resp);
                        self.store.put(&variant, e.clone());
                        e.serve(req, resp, now, false);
                    }
                    _ => {
                        // The resource is not (or no longer) cacheable.
                        if known.is_some() {
                            self.store.forget(&variant);
                        }
                        self.passes.insert(key.to_owned(), ());
                    }
                }
            }
        }
    }
}

osprey_sdk::export_module!(FileCacheModule);
