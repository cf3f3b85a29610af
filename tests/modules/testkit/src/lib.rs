//! Test handlers: each exercises one promise of the core (panics, decline, streams, async
//! answers, the worker pool, filters).

use std::fmt::Write;
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
    /// `file`: the file to serve.
    #[serde(default)]
    file: String,
}

struct TestKit;

impl Module for TestKit {
    const NAME: &'static str = "testkit";
    const HANDLERS: &'static [&'static str] =
        &["panic", "decline", "echo", "stream", "fail", "async", "sleep-worker", "bad-header", "text", "file"];
    const FILTERS: &'static [&'static str] = &["tag"];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(TestKit)
    }

    fn new_handler(&self, kind: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        let conf: Conf = parse_config(route)?;
        Ok(handler_box(Kit { kind: kind.to_owned(), conf }))
    }

    fn new_filter(&self, _kind: &str, config: &str) -> Result<FilterBox, ConfigError> {
        let conf: Conf = parse_config(config)?;
        Ok(filter_box(Tag(conf.text)))
    }
}

struct Kit {
    kind: String,
    conf: Conf,
}

impl Handler for Kit {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        match self.kind.as_str() {
            "panic" => panic!("testkit panics on purpose"),
            "decline" => Outcome::Next,
            "fail" => Outcome::Error(self.conf.status),
            "text" => {
                resp.text(self.conf.text.clone());
                Outcome::Done
            }
            "file" => match std::fs::File::open(&self.conf.file) {
                Ok(file) => {
                    let len = file.metadata().map_or(0, |m| m.len());
                    let file = osprey_sdk::abi_stable::std_types::RArc::new(osprey_sdk::OpenFile::new(file));
                    resp.content_type("application/octet-stream").body_file(file, 0, len);
                    Outcome::Done
                }
                Err(_) => Outcome::Error(404),
            },
            "bad-header" => {
                resp.header("X-Bad", "a\r\nInjected: yes").text("x");
                Outcome::Done
            }
            "stream" => {
                resp.content_type("text/plain");
                resp.body_stream(Chunks { left: self.conf.chunks, n: 0 });
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
                std::thread::sleep(Duration::from_millis(200));
                resp.text(format!("slept on {}", std::thread::current().name().unwrap_or("?")));
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
                let _ = writeln!(out, "body={}", String::from_utf8_lossy(&req.body));
                resp.header("X-Secure", if req.secure { "1" } else { "0" });
                resp.header("X-Http2", if req.http2 { "1" } else { "0" });
                resp.text(out);
                Outcome::Done
            }
        }
    }

    fn mode(&self) -> Mode {
        if self.kind == "sleep-worker" {
            Mode::Worker
        } else {
            Mode::Inline
        }
    }
}

/// A stream of numbered chunks.
struct Chunks {
    left: u32,
    n: u32,
}

impl BodyStream for Chunks {
    fn poll_chunk(&mut self, _cx: &mut FfiContext<'_>) -> FfiPoll<ROption<RResult<RVec<u8>, RString>>> {
        if self.left == 0 {
            return FfiPoll::Ready(ROption::RNone);
        }
        self.left -= 1;
        self.n += 1;
        FfiPoll::Ready(ROption::RSome(RResult::ROk(format!("chunk {}\n", self.n).into_bytes().into())))
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

osprey_sdk::export_module!(TestKit);
