//! The shared store: entries in Redis behind the memory (and disk) store, so a fleet of
//! servers fills each fragment from the origin once.
//!
//! - Look-ups: a request that finds no fresh entry locally asks Redis before the origin
//!   (`Step::Wait` while the `GET` runs in the filter's `wait` future); an entry found is
//!   served, and kept in memory.
//! - Writes go behind: `SET` with an expiry (freshness plus `keep`) and `DEL` are queued and
//!   sent by one task on a network thread, so no request waits for them.
//! - Purges: `SCAN` for the host's keys, then `DEL`, then `PUBLISH` of the purge on a channel
//!   every server subscribes to, so each drops its own copies. `SCAN` rather than an index of
//!   keys: purges are rare, `SCAN` walks the key space in small steps without blocking Redis,
//!   and an index would cost a write per fill and keep members whose keys Redis expired.
//! - Failures: Redis unreachable, slow (past `timeout`) or answering nonsense is a store error
//!   (counted, one log line), and for `RETRY` the cache works without it: requests go to the
//!   origin, never to an error page. A server that lost its subscription drops its local
//!   copies when it subscribes again (it may have missed purges).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use osprey_sdk::host;

use crate::entry::{now_ms, Entry};
use crate::purge::Selector;
use crate::redis::{bulk, Redis, Reply};
use crate::serial;
use crate::store::Store;

/// After a failure, Redis is left alone this long.
const RETRY_MS: u64 = 1000;
/// A finished look-up answers for its key this long: for the requests that waited for it
/// (they ask again at once), and those that come while the origin is asked (they then wait
/// for that fill). Later requests ask Redis again.
const PROBE_ANSWERS: Duration = Duration::from_millis(100);
/// Writes waiting for Redis; past it new ones are dropped (and counted as store errors).
const MAX_QUEUED: usize = 1024;
/// Look-ups kept before finished ones are first swept out.
const SWEEP_AT: usize = 1024;
/// With nothing to read for this long, the subscription is checked with a `PING`.
const SUBSCRIBER_IDLE: Duration = Duration::from_secs(30);

pub struct RemoteConf {
    pub redis: Redis,
    pub prefix: String,
    /// Milliseconds an entry stays in Redis past its freshness.
    pub keep_ms: u64,
}

pub struct Remote {
    redis: Redis,
    prefix: String,
    keep_ms: u64,
    store: Weak<Store>,
    /// Distinguishes this server's purge messages from others'.
    instance: u64,
    down_until_ms: AtomicU64,
    probes: Mutex<Probes>,
    writes: Mutex<VecDeque<Write>>,
    writing: AtomicBool,
    subscribed: AtomicBool,
    /// The subscription was lost (or never made): local copies may have missed purges.
    subscription_lost: AtomicBool,
}

enum Write {
    Set {
        key: String,
        data: Vec<u8>,
        ttl_ms: u64,
    },
    Del(String),
    Vary {
        key: String,
        names: String,
    },
}

/// What a request without a fresh local entry should do.
pub enum Look {
    /// Wait: Redis is being asked.
    Wait,
    /// Redis was asked: the entry found, if any; else go on to the origin.
    Asked { found: Option<Arc<Entry>> },
}

/// Look-ups by key: running, or finished and answering for `PROBE_ANSWERS`.
struct Probes {
    by_key: HashMap<String, Arc<Probe>>,
    sweep_at: usize,
}

/// One look-up of a key in Redis, shared by the requests for that key.
struct Probe {
    key: String,
    variant: String,
    state: Mutex<ProbeState>,
}

#[derive(Default)]
struct ProbeState {
    started: bool,
    done: Option<(Instant, Option<Arc<Entry>>)>,
    wakers: Vec<Waker>,
}

impl Probe {
    fn finish(&self, found: Option<Arc<Entry>>) {
        let wakers = {
            let mut s = self.state.lock().unwrap();
            if s.done.is_some() {
                return;
            }
            s.done = Some((Instant::now(), found));
            std::mem::take(&mut s.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// Ends a probe as "not found" if its look-up is dropped unfinished (the core stopped
/// waiting): the requests go on to the origin.
struct Finish(Arc<Probe>);

impl Drop for Finish {
    fn drop(&mut self) {
        self.0.finish(None);
    }
}

impl Remote {
    pub fn new(conf: RemoteConf, store: Weak<Store>) -> Remote {
        Remote {
            redis: conf.redis,
            prefix: conf.prefix,
            keep_ms: conf.keep_ms,
            store,
            instance: osprey_sdk::random::u64(),
            down_until_ms: AtomicU64::new(0),
            probes: Mutex::new(Probes {
                by_key: HashMap::new(),
                sweep_at: SWEEP_AT,
            }),
            writes: Mutex::new(VecDeque::new()),
            writing: AtomicBool::new(false),
            subscribed: AtomicBool::new(false),
            subscription_lost: AtomicBool::new(false),
        }
    }

    /// The Redis server's address, for log lines.
    pub fn addr(&self) -> &str {
        &self.redis.addr
    }

    fn up(&self) -> bool {
        now_ms() >= self.down_until_ms.load(Ordering::Relaxed)
    }

    /// A command failed: count it, say so (once per failure streak), and leave Redis alone
    /// for a while.
    fn failed(&self, what: &str, err: &str) {
        if let Some(store) = self.store.upgrade() {
            store.stats.store_errors.incr();
        }
        let was_up = self
            .down_until_ms
            .swap(now_ms() + RETRY_MS, Ordering::Relaxed)
            <= now_ms();
        if was_up {
            host::warn(&format!(
                "file_cache: Redis at {} failed ({what}: {err}); answering from the origin, \
                 retrying in {}s",
                self.redis.addr,
                RETRY_MS / 1000
            ));
        }
    }

    fn redis_key(&self, key: &str) -> Vec<u8> {
        format!("{}{key}", self.prefix).into_bytes()
    }

    /// A request for `variant` of `key` found no fresh local entry.
    pub fn look(&self, key: &str, variant: &str) -> Look {
        if !self.up() {
            return Look::Asked { found: None };
        }
        let mut probes = self.probes.lock().unwrap();
        if let Some(p) = probes.by_key.get(key) {
            let s = p.state.lock().unwrap();
            match s.done {
                None => return Look::Wait,
                Some((at, ref found)) if p.variant == variant && at.elapsed() < PROBE_ANSWERS => {
                    return Look::Asked {
                        found: found.clone(),
                    };
                }
                Some(_) => {}
            }
        }
        // Finished look-ups hold their entries: drop the old ones now and then (as often as
        // the map doubles, so the sweeps cost O(1) per look-up).
        if probes.by_key.len() >= probes.sweep_at {
            probes.by_key.retain(|_, p| {
                let s = p.state.lock().unwrap();
                s.done
                    .as_ref()
                    .is_none_or(|(at, _)| at.elapsed() < PROBE_ANSWERS)
            });
            probes.sweep_at = SWEEP_AT.max(probes.by_key.len() * 2);
        }
        let probe = Probe {
            key: key.to_owned(),
            variant: variant.to_owned(),
            state: Mutex::default(),
        };
        probes.by_key.insert(key.to_owned(), Arc::new(probe));
        Look::Wait
    }

    /// For a request that `look` told to wait: the look-up of `key` (the first caller runs
    /// it), or `None` when there is none to wait for.
    pub fn wait(self: &Arc<Self>, key: &str) -> Option<Pin<Box<dyn Future<Output = ()>>>> {
        let probe = self.probes.lock().unwrap().by_key.get(key).cloned()?;
        let run = {
            let mut s = probe.state.lock().unwrap();
            if s.done.is_some() {
                return None;
            }
            !std::mem::replace(&mut s.started, true)
        };
        if !run {
            return Some(Box::pin(Done(probe)));
        }
        let this = self.clone();
        Some(Box::pin(async move {
            let finish = Finish(probe);
            let (key, variant) = (finish.0.key.clone(), finish.0.variant.clone());
            let found = this.fetch(&key, &variant).await;
            finish.0.finish(found);
        }))
    }

    /// `GET` the entry of `variant` of `key` (kept in memory too), if there is one. With it
    /// comes what `key` varies on: news of that means the request's variant is another one
    /// (the request looks again).
    async fn fetch(&self, key: &str, variant: &str) -> Option<Arc<Entry>> {
        let (entry_key, vary_key) = (self.redis_key(variant), self.vary_key(key));
        let reply = self.redis.command(&[b"MGET", &entry_key, &vary_key]).await;
        let store = self.store.upgrade()?;
        let (entry, vary) = match reply.and_then(two_values) {
            Ok(values) => values,
            Err(err) => {
                self.failed("MGET", &err);
                return None;
            }
        };
        match entry.map(|data| serial::parse(&data, variant)) {
            Some(Ok(e)) => {
                store.stats.remote_hits.incr();
                let e = Arc::new(e);
                store.remember(variant, e.clone());
                Some(e)
            }
            Some(Err(why)) => {
                self.failed("GET", &format!("an unusable entry for {variant}: {why}"));
                None
            }
            None => {
                if let Some(names) = vary.and_then(|v| String::from_utf8(v).ok()) {
                    let names = names.split(',').map(str::to_owned).collect();
                    store.vary.learn_names(key, names);
                }
                None
            }
        }
    }

    /// Where what `key` varies on is kept (out of the `host|...` keys purges scan).
    fn vary_key(&self, key: &str) -> Vec<u8> {
        format!("{}vary:{key}", self.prefix).into_bytes()
    }

    /// Tell the other servers that `key` varies on `names` (written behind).
    pub fn put_vary(self: &Arc<Self>, key: &str, names: &[String]) {
        self.queue(Write::Vary {
            key: key.to_owned(),
            names: names.join(","),
        });
    }

    /// Store `e` under `key` (written behind).
    pub fn put(self: &Arc<Self>, key: &str, e: &Entry) {
        let ttl_ms = e.fresh_until_ms.saturating_sub(now_ms()) + self.keep_ms;
        let data = serial::encode(key, e);
        self.queue(Write::Set {
            key: key.to_owned(),
            data,
            ttl_ms,
        });
    }

    /// Remove `key` (written behind).
    pub fn forget(self: &Arc<Self>, key: &str) {
        self.queue(Write::Del(key.to_owned()));
    }

    /// Writes that will not reach Redis: store errors, without a log line of their own (the
    /// failure that caused them had one) and without putting off the next try.
    fn dropped(&self, writes: u64) {
        if let Some(store) = self.store.upgrade() {
            store.stats.store_errors.add(writes);
        }
    }

    fn queue(self: &Arc<Self>, w: Write) {
        if !self.up() {
            self.dropped(1);
            return;
        }
        let mut writes = self.writes.lock().unwrap();
        if writes.len() >= MAX_QUEUED {
            drop(writes);
            self.dropped(1);
            return;
        }
        writes.push_back(w);
        drop(writes);
        self.kick();
    }

    /// Start the writer (when writes wait) and the subscriber (when not running), if this
    /// is a network thread. Called on every look-up and write, so work queued off a network
    /// thread starts with the next request.
    pub fn kick(self: &Arc<Self>) {
        if !self.subscribed.load(Ordering::Relaxed)
            && self.up()
            && !self.subscribed.swap(true, Ordering::AcqRel)
            && !host::spawn(self.clone().subscribe())
        {
            self.subscribed.store(false, Ordering::Release);
        }
        if self.writes.lock().unwrap().is_empty() || self.writing.swap(true, Ordering::AcqRel) {
            return;
        }
        if !host::spawn(self.clone().write_behind()) {
            self.writing.store(false, Ordering::Release);
        }
    }

    async fn write_behind(self: Arc<Self>) {
        loop {
            let next = self.writes.lock().unwrap().pop_front();
            let Some(w) = next else { break };
            let (what, result) = match &w {
                Write::Set { key, data, ttl_ms } => {
                    let ttl = ttl_ms.max(&1).to_string();
                    let args: [&[u8]; 5] =
                        [b"SET", &self.redis_key(key), data, b"PX", ttl.as_bytes()];
                    ("SET", self.redis.command(&args).await.map(drop))
                }
                Write::Vary { key, names } => {
                    let keep = self.keep_ms.max(1).to_string();
                    let args: [&[u8]; 5] = [
                        b"SET",
                        &self.vary_key(key),
                        names.as_bytes(),
                        b"PX",
                        keep.as_bytes(),
                    ];
                    ("SET", self.redis.command(&args).await.map(drop))
                }
                Write::Del(key) => (
                    "DEL",
                    self.redis
                        .command(&[b"DEL", &self.redis_key(key)])
                        .await
                        .map(drop),
                ),
            };
            if let Err(err) = result {
                let dropped = std::mem::take(&mut *self.writes.lock().unwrap()).len();
                self.failed(what, &err);
                self.dropped(dropped as u64);
            }
        }
        self.writing.store(false, Ordering::Release);
        // A write queued between the last pop and the flag's clearing starts a new writer.
        if !self.writes.lock().unwrap().is_empty() {
            self.kick();
        }
    }

    fn channel(&self) -> Vec<u8> {
        format!("{}purge", self.prefix).into_bytes()
    }

    /// Remove the entries `selector` matches from Redis and tell every server to drop its
    /// copies; the keys removed from Redis.
    pub async fn purge(&self, selector: &Selector) -> Result<Vec<String>, String> {
        let pattern = format!(
            "{}{}|*",
            glob_escape(&self.prefix),
            glob_escape(selector.host())
        );
        let mut cursor = b"0".to_vec();
        let mut removed = Vec::new();
        loop {
            let reply = self
                .redis
                .command(&[
                    b"SCAN",
                    &cursor,
                    b"MATCH",
                    pattern.as_bytes(),
                    b"COUNT",
                    b"1000",
                ])
                .await?;
            let (next, keys) = scan_page(reply)?;
            let keys: Vec<Vec<u8>> = keys
                .into_iter()
                .filter(|k| {
                    std::str::from_utf8(k)
                        .ok()
                        .and_then(|k| k.strip_prefix(&self.prefix))
                        .is_some_and(|k| selector.matches(k))
                })
                .collect();
            if !keys.is_empty() {
                let mut args: Vec<&[u8]> = vec![b"DEL"];
                args.extend(keys.iter().map(Vec::as_slice));
                self.redis.command(&args).await?;
                let names = keys.iter().map(|k| &k[self.prefix.len()..]);
                removed.extend(names.map(|k| String::from_utf8_lossy(k).into_owned()));
            }
            if next == b"0" {
                break;
            }
            cursor = next;
        }
        let message = serde_json::json!({"from": self.instance.to_string(), "purge": selector});
        self.redis
            .command(&[b"PUBLISH", &self.channel(), message.to_string().as_bytes()])
            .await?;
        Ok(removed)
    }

    /// Listen for other servers' purges while the store lives; ends on a failure (the next
    /// `kick` after `RETRY_MS` subscribes again).
    async fn subscribe(self: Arc<Self>) {
        let err = self.listen().await;
        if self.store.strong_count() > 0 {
            self.failed("SUBSCRIBE", &err);
        }
        self.subscription_lost.store(true, Ordering::Relaxed);
        self.subscribed.store(false, Ordering::Release);
    }

    async fn listen(&self) -> String {
        let mut conn = match self.redis.connect(SUBSCRIBER_IDLE).await {
            Ok(c) => c,
            Err(e) => return e,
        };
        if let Err(e) = conn.call(&[b"SUBSCRIBE", &self.channel()]).await {
            return e;
        }
        if self.subscription_lost.swap(false, Ordering::Relaxed) {
            if let Some(store) = self.store.upgrade() {
                store.purge(&|_| true);
            }
        }
        let mut pinged = false;
        loop {
            let frame = match conn.reply().await {
                Ok(f) => f,
                Err(e) if e == "timed out" && !pinged => {
                    if self.store.strong_count() == 0 {
                        return String::new();
                    }
                    pinged = true;
                    if let Err(e) = conn.send(&[b"PING"]).await {
                        return e;
                    }
                    continue;
                }
                Err(e) => return e,
            };
            pinged = false;
            let Some(store) = self.store.upgrade() else {
                return String::new();
            };
            if let Some(selector) = self.message(frame) {
                store.purge(&|k| selector.matches(k));
            }
        }
    }

    /// Another server's purge, from a subscription message.
    fn message(&self, frame: Reply) -> Option<Selector> {
        let Reply::Array(parts) = frame else {
            return None;
        };
        let [kind, _channel, payload] = parts.as_slice() else {
            return None;
        };
        if !matches!(kind, Reply::BulkString(k) if k == b"message") {
            return None;
        }
        let Reply::BulkString(payload) = payload else {
            return None;
        };
        #[derive(serde::Deserialize)]
        struct Message {
            from: String,
            purge: Selector,
        }
        let m: Message = serde_json::from_slice(payload).ok()?;
        (m.from != self.instance.to_string()).then_some(m.purge)
    }
}

/// Completes when a probe run by another request finishes.
struct Done(Arc<Probe>);

impl Future for Done {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.0.state.lock().unwrap();
        if s.done.is_some() {
            return Poll::Ready(());
        }
        if !s.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            s.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// A value read from Redis (`None`: no such key).
type Value = Option<Vec<u8>>;

/// The two values of an `MGET` of two keys.
fn two_values(reply: Reply) -> Result<(Value, Value), String> {
    match reply {
        Reply::Array(values) if values.len() == 2 => {
            let mut values = values.into_iter().map(bulk);
            Ok((values.next().unwrap()?, values.next().unwrap()?))
        }
        other => Err(format!("an unexpected MGET reply {other:?}")),
    }
}

/// The next cursor and the keys of a `SCAN` reply.
fn scan_page(reply: Reply) -> Result<(Vec<u8>, Vec<Vec<u8>>), String> {
    let unexpected = || "an unexpected SCAN reply".to_owned();
    let Reply::Array(mut parts) = reply else {
        return Err(unexpected());
    };
    let (Some(Reply::Array(keys)), Some(Reply::BulkString(cursor))) = (parts.pop(), parts.pop())
    else {
        return Err(unexpected());
    };
    let keys = keys
        .into_iter()
        .map(|k| bulk(k)?.ok_or_else(unexpected))
        .collect::<Result<_, _>>()?;
    Ok((cursor, keys))
}

/// `text` matched literally by a Redis glob.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_specials_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[test]
    fn scan_replies() {
        let reply = Reply::Array(vec![
            Reply::BulkString(b"17".to_vec()),
            Reply::Array(vec![Reply::BulkString(b"k1".to_vec())]),
        ]);
        assert_eq!(
            scan_page(reply).unwrap(),
            (b"17".to_vec(), vec![b"k1".to_vec()])
        );
        assert!(scan_page(Reply::Integer(1)).is_err());
    }
}
