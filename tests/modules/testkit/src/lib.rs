//! Test handlers: each exercises one promise of the core (panics, decline, streams, async
//! answers, the worker pool, filters).

mod origin;
mod steps;
mod upload;

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use osprey_sdk::abi_stable::std_types::{ROption, RResult, RString, RVec};
use osprey_sdk::{
    filter_box, handler_box, parse_config, BodyStream, ConfigError, FfiContext, FfiPoll, Filter,
    FilterBox, Handler, HandlerBox, Mode, Module, Outcome, Reply, Request, Response, Step,
};

#[derive(serde::Deserialize, Default)]
struct Conf {
    #[serde(default)]
    status: u16,
    #[serde(default)]
    chunks: u32,
    #[serde(default)]
    text: String,
    /// `big`: body bytes.
    #[serde(default)]
    size: usize,
    /// `sleep-worker`: how long to sleep (default 200 ms).
    #[serde(default)]
    sleep_ms: u64,
    /// Run this handler on the worker pool.
    #[serde(default)]
    worker: bool,
    /// `text`: response headers to set as they are, unchecked (as a careless handler might).
    #[serde(default)]
    headers: Vec<(String, String)>,
}

struct TestKit {
    /// Reported to the host: how many `text` answers were given.
    served: osprey_sdk::host::Counter,
}

impl Module for TestKit {
    const NAME: &'static str = "testkit";
    const HANDLERS: &'static [&'static str] = &[
        "panic",
        "decline",
        "echo",
        "stream",
        "fail",
        "async",
        "sleep-worker",
        "bad-header",
        "text",
        "counter",
        "count",
        "file",
        "big",
        "upload",
        "allocator",
        "steps-report",
    ];
    const FILTERS: &'static [&'static str] = &["tag", "before-worker", "count", "steps"];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(TestKit {
            served: osprey_sdk::host::Counter::register("testkit_text_served"),
        })
    }

    fn new_handler(&self, kind: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        match kind {
            "counter" => {
                return Ok(handler_box(origin::Counter(
                    parse_config::<origin::OriginConf>(route)?.into(),
                )))
            }
            "file" => {
                return Ok(handler_box(origin::File(
                    parse_config::<origin::OriginConf>(route)?.into(),
                )))
            }
            "count" => return Ok(handler_box(origin::Count)),
            "upload" => return Ok(handler_box(upload::Upload)),
            "steps-report" => return Ok(handler_box(steps::Report)),
            _ => {}
        }
        let conf: Conf = parse_config(route)?;
        Ok(handler_box(Kit {
            kind: kind.to_owned(),
            conf,
            served: self.served,
        }))
    }

    fn new_filter(&self, kind: &str, config: &str) -> Result<FilterBox, ConfigError> {
        if kind == "steps" {
            return Ok(filter_box(steps::Steps::new(config)?));
        }
        let conf: Conf = parse_config(config)?;
        match kind {
            "before-worker" => return Ok(filter_box(BeforeWorker)),
            "count" => return Ok(filter_box(Count)),
            _ => {}
        }
        Ok(filter_box(Tag(conf.text)))
    }
}

struct Kit {
    kind: String,
    conf: Conf,
    served: osprey_sdk::host::Counter,
}

impl Handler for Kit {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        match self.kind.as_str() {
            "panic" => panic!("testkit panics on purpose"),
            "decline" => Outcome::Next,
            "fail" => {
                // Headers set before an error answer stay on the error page (but not the
                // Content-Type of the body it replaces).
                if !self.conf.text.is_empty() {
                    resp.header("X-Fail-Note", self.conf.text.clone())
                        .content_type("application/json");
                }
                Outcome::Error(self.conf.status)
            }
            "allocator" => {
                let from = if osprey_sdk::alloc::from_host() {
                    "server"
                } else {
                    "system"
                };
                resp.text(from);
                Outcome::Done
            }
            "text" => {
                self.served.incr();
                for (name, value) in &self.conf.headers {
                    resp.header(name.clone(), value.clone());
                }
                resp.text(self.conf.text.clone());
                Outcome::Done
            }
            "big" => {
                resp.content_type("application/octet-stream")
                    .body(vec![b'x'; self.conf.size]);
                Outcome::Done
            }
            "bad-header" => {
                resp.header("X-Bad", "a\r\nInjected: yes").text("x");
                Outcome::Done
            }
            "stream" => {
                resp.content_type("text/plain");
                resp.body_stream(Chunks {
                    left: self.conf.chunks,
                    n: 0,
                    declared: (self.conf.size > 0).then_some(self.conf.size as u64),
                });
                Outcome::Done
            }
            "async" => {
                let uri = req.uri.to_string();
                Outcome::later(async move {
                    let mut r = Response::new();
                    r.text(format!("async answer for {uri}"));
                    Reply::Done(r)
                })
            }
            "sleep-worker" => {
                let ms = if self.conf.sleep_ms == 0 {
                    200
                } else {
                    self.conf.sleep_ms
                };
                std::thread::sleep(Duration::from_millis(ms));
                resp.text(format!(
                    "slept on {}",
                    std::thread::current().name().unwrap_or("?")
                ));
                Outcome::Done
            }
            _ => {
                let mut out = String::new();
                let _ = writeln!(out, "method={}", req.method);
                let _ = writeln!(out, "path={}", req.path);
                let _ = writeln!(out, "path_info={}", req.path_info);
                let _ = writeln!(out, "prefix={}", req.route_prefix);
                let _ = writeln!(out, "host={}", req.host);
                let _ = writeln!(out, "http=1.{}", req.http_minor);
                for (k, v) in req.query_params().iter() {
                    let _ = writeln!(out, "query.{k}={v}");
                }
                for (k, v) in req.form_params().iter() {
                    let _ = writeln!(out, "form.{k}={v}");
                }
                for (k, v) in req.cookies() {
                    let _ = writeln!(out, "cookie.{k}={v}");
                }
                if let Some(cookie) = req.header("cookie") {
                    let _ = writeln!(out, "header.cookie={cookie}");
                }
                let _ = writeln!(out, "body={}", String::from_utf8_lossy(&req.body));
                resp.header("X-Secure", if req.secure { "1" } else { "0" });
                resp.header("X-Http2", if req.http2 { "1" } else { "0" });
                resp.text(out);
                Outcome::Done
            }
        }
    }

    fn mode(&self) -> Mode {
        if self.kind == "sleep-worker" || self.conf.worker {
            Mode::Worker
        } else {
            Mode::Inline
        }
    }
}

/// A stream of numbered chunks; `declared`: the length it claims (`size`), right or not.
struct Chunks {
    left: u32,
    n: u32,
    declared: Option<u64>,
}

impl BodyStream for Chunks {
    fn poll_chunk(
        &mut self,
        _cx: &mut FfiContext<'_>,
    ) -> FfiPoll<ROption<RResult<RVec<u8>, RString>>> {
        if self.left == 0 {
            return FfiPoll::Ready(ROption::RNone);
        }
        self.left -= 1;
        self.n += 1;
        FfiPoll::Ready(ROption::RSome(RResult::ROk(
            format!("chunk {}\n", self.n).into_bytes().into(),
        )))
    }

    fn known_len(&self) -> ROption<u64> {
        self.declared.into()
    }
}

/// Adds `X-Tag` after the handler; answers itself when the query says `short-circuit`.
struct Tag(String);

impl Filter for Tag {
    fn cache_key(&self, _req: &Request<'_>, key: &mut String) {
        key.push_str("|tag");
    }

    fn before(&self, req: &Request<'_>, key: &str, resp: &mut Response) -> Step {
        if req.query.as_str() == "short-circuit" {
            resp.text(format!("from filter, key {key}"));
            return Step::Respond;
        }
        Step::Continue
    }

    fn after(&self, _req: &Request<'_>, _key: &str, resp: &mut Response) {
        resp.header("X-Tag", self.0.clone());
    }
}

/// Asks for its `before` to run on the worker pool and reports the thread it ran on in
/// `X-Before-Thread`.
struct BeforeWorker;

impl Filter for BeforeWorker {
    fn before_mode(&self, _req: &Request<'_>, _key: &str) -> Mode {
        Mode::Worker
    }

    fn before(&self, _req: &Request<'_>, _key: &str, resp: &mut Response) -> Step {
        let name = std::thread::current().name().unwrap_or("?").to_owned();
        resp.header("X-Before-Thread", name);
        Step::Continue
    }
}

/// Counts `before` and `cancel` calls of every `count` filter in the process and reports
/// both, as they were when `after` ran, in `X-Befores` and `X-Cancels`: each step must run
/// once per request.
struct Count;

static BEFORES: AtomicU64 = AtomicU64::new(0);
static CANCELS: AtomicU64 = AtomicU64::new(0);

impl Filter for Count {
    fn before(&self, _req: &Request<'_>, _key: &str, _resp: &mut Response) -> Step {
        BEFORES.fetch_add(1, Ordering::Relaxed);
        Step::Continue
    }

    fn cancel(&self, _key: &str) {
        CANCELS.fetch_add(1, Ordering::Relaxed);
    }

    fn after(&self, _req: &Request<'_>, _key: &str, resp: &mut Response) {
        resp.header("X-Befores", BEFORES.load(Ordering::Relaxed).to_string());
        resp.header("X-Cancels", CANCELS.load(Ordering::Relaxed).to_string());
    }
}

osprey_sdk::export_module!(TestKit);

/// As the stock modules on the request path (`static`, `ssi`): see the `allocator` handler.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;
