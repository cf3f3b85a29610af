//! Origins for the cache and compression tests: `counter` counts the requests that reach
//! it (and can be switched to failing with a flag file), `count` reports those counts, and
//! `file` serves a file with validators derived from its length and mtime.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use osprey_sdk::abi_stable::std_types::RArc;
use osprey_sdk::{Handler, Mode, OpenFile, Outcome, Request, Response};

#[derive(serde::Deserialize, Default)]
pub struct OriginConf {
    /// Counter name (several routes may share one).
    #[serde(default)]
    counter: String,
    /// Body text after the `hit N` line.
    #[serde(default)]
    text: String,
    /// Response headers to add (e.g. Cache-Control, ETag, Last-Modified).
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Sleep this long on the worker pool before answering.
    #[serde(default)]
    sleep_ms: u64,
    /// While this file exists, answer with `fail_status` instead.
    fail_flag: Option<String>,
    #[serde(default)]
    fail_status: u16,
    /// For `file`: the file to serve and its content type.
    path: Option<String>,
    content_type: Option<String>,
}

/// Hits per counter name: (all requests, conditional requests answered 304).
fn counters() -> &'static Mutex<HashMap<String, (u64, u64)>> {
    static C: std::sync::OnceLock<Mutex<HashMap<String, (u64, u64)>>> = std::sync::OnceLock::new();
    C.get_or_init(Default::default)
}

pub struct Counter(pub Arc<OriginConf>);

impl Handler for Counter {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        let c = &self.0;
        if c.sleep_ms > 0 {
            std::thread::sleep(Duration::from_millis(c.sleep_ms));
        }
        let header = |name: &str| {
            c.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        };
        let not_modified = (header("etag").is_some()
            && req.header("if-none-match") == header("etag").map(|s| s.as_str()))
            || (header("last-modified").is_some()
                && req.header("if-modified-since") == header("last-modified").map(|s| s.as_str()));
        let hits = {
            let mut map = counters().lock().unwrap();
            let e = map.entry(c.counter.clone()).or_default();
            e.0 += 1;
            e.1 += not_modified as u64;
            e.0
        };
        if c.fail_flag
            .as_ref()
            .is_some_and(|f| std::path::Path::new(f).exists())
        {
            return Outcome::Error(if c.fail_status == 0 {
                503
            } else {
                c.fail_status
            });
        }
        for (k, v) in &c.headers {
            resp.header(k.clone(), v.clone());
        }
        resp.header("X-Hits", hits.to_string());
        if not_modified {
            resp.status(304);
            return Outcome::Done;
        }
        if resp.get_header("content-type").is_none() {
            resp.content_type("text/plain");
        }
        resp.body(format!("hit {hits}\n{}", c.text));
        Outcome::Done
    }

    fn mode(&self) -> Mode {
        if self.0.sleep_ms > 0 {
            Mode::Worker
        } else {
            Mode::Inline
        }
    }
}

/// `count`: `<hits> <conditional hits>` of the counter named by the query string.
pub struct Count;

impl Handler for Count {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        let (all, cond) = counters()
            .lock()
            .unwrap()
            .get(req.query.as_str())
            .copied()
            .unwrap_or_default();
        resp.text(format!("{all} {cond}"));
        Outcome::Done
    }
}

/// `file`: the file at `path` as a file body, `ETag: "<len>-<mtime ns>"`.
pub struct File(pub Arc<OriginConf>);

impl Handler for File {
    fn handle(&self, _req: &Request<'_>, resp: &mut Response) -> Outcome {
        let Some(path) = &self.0.path else {
            return Outcome::Error(500);
        };
        let Ok(file) = std::fs::File::open(path) else {
            return Outcome::Error(404);
        };
        let Ok(meta) = file.metadata() else {
            return Outcome::Error(500);
        };
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .unwrap_or_default();
        resp.content_type(
            self.0
                .content_type
                .clone()
                .unwrap_or_else(|| "text/plain".into()),
        )
        .header("ETag", format!("\"{}-{}\"", meta.len(), mtime.as_nanos()))
        .body_file(RArc::new(OpenFile::new(file)), 0, meta.len());
        for (k, v) in &self.0.headers {
            resp.header(k.clone(), v.clone());
        }
        Outcome::Done
    }

    fn mode(&self) -> Mode {
        Mode::Worker
    }
}
