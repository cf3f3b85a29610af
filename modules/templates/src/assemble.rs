//! Assembling a page: its parents fetched raw, level by level (a conditional subrequest when a
//! parsed copy is cached), blocks resolved, includes started as subrequests through their own
//! handlers and filters. `Last-Modified` is the newest part's, none if a part has none.
//!
//! The work is one future. The filter polls it once while the core calls it: when every
//! parent answers at once (files, cache hits) the page's head gets its `Last-Modified` and the
//! client's preconditions are answered against it. Otherwise the head goes without
//! `Last-Modified` and the body finishes the work as the parents arrive.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::SystemTime;

use osprey_sdk::abi_stable::std_types::{ROption, RResult, RString, RVec};
use osprey_sdk::http::{self, Precondition, Validators};
use osprey_sdk::subrequest::{Fetch, Parent};
use osprey_sdk::{host, Body, BodyStream, Composite, FfiContext, FfiPoll, Response, Subrequest};

use crate::cache::{Cache, Entry, Version};
use crate::parse::{parse, Template};
use crate::ready::{now, read_body};
use crate::render::{render, Piece, Tree};

/// The page when a template cannot be assembled (NXWEB's marker); the log says why.
pub const TEMPLATE_ERROR: &[u8] = b"<!--[template error; check error log]-->";

/// Parents of parents at most this deep (NXWEB's limit).
const MAX_INHERITANCE: usize = 32;

/// The request header that marks a parent's subrequest, so the filter on the parent's route
/// passes it through raw. Its value is a per-process secret: a client cannot ask for it.
pub const RAW_HEADER: &str = "X-Osprey-Template-Raw";

/// What every request of one filter shares, also with bodies still being assembled.
pub struct Shared {
    pub cache: Cache,
    pub max_size: usize,
    pub error_marker: Vec<u8>,
}

/// The newest `Last-Modified` of the parts so far; `None` once a part had none.
struct Newest(Option<SystemTime>);

impl Newest {
    fn note(&mut self, last_modified: Option<&str>) {
        let t = Validators::from_headers(None, last_modified).last_modified;
        self.0 = match (self.0, t) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }
}

/// Why the page cannot be assembled: a syntax error in a parent, a loop, too big.
struct Broken(String);

type Assembly = Pin<Box<dyn Future<Output = Result<(Body, Option<SystemTime>), Broken>> + Send>>;

/// One page being assembled: who asked, for the log and the cache.
struct Page {
    shared: Arc<Shared>,
    parent: Parent,
    host: String,
    uri: String,
}

/// Replace `resp`, the template `page`, with the assembled page.
pub fn respond(
    shared: &Arc<Shared>,
    req: &osprey_sdk::Request<'_>,
    resp: &mut Response,
    page: Arc<Template>,
) {
    let p = Page {
        shared: shared.clone(),
        parent: Parent::of(req),
        host: req.host.to_string(),
        uri: req.uri.to_string(),
    };
    let page_lm = resp.get_header("last-modified").map(str::to_owned);
    let mut work: Assembly = Box::pin(p.assemble(page, page_lm));
    for name in ["etag", "last-modified", "accept-ranges", "content-length"] {
        resp.remove_header(name);
    }
    let last_modified = match now(&mut work) {
        Some(Ok((body, newest))) => {
            resp.body = body;
            newest
        }
        Some(Err(Broken(why))) => {
            host::error(&format!("template error in {}: {why}", req.uri));
            resp.body(TEMPLATE_ERROR);
            return;
        }
        None => {
            resp.body_stream(Deferred::Assembling(work, req.uri.to_string()));
            None
        }
    };
    if let Some(t) = last_modified {
        resp.header("Last-Modified", httpdate::fmt_http_date(t));
    }
    let v = Validators {
        etag: None,
        last_modified,
    };
    match http::evaluate(req, &v) {
        Precondition::Proceed => {}
        Precondition::NotModified => resp.status(304).body = Body::Empty,
        Precondition::Failed => {
            resp.remove_header("last-modified");
            http::respond_error(resp, 412, "a precondition failed");
        }
    }
}

impl Page {
    async fn assemble(
        self,
        page: Arc<Template>,
        page_lm: Option<String>,
    ) -> Result<(Body, Option<SystemTime>), Broken> {
        let mut newest = Newest(Some(SystemTime::UNIX_EPOCH));
        newest.note(page_lm.as_deref());
        let mut loaded: HashMap<String, Option<Arc<Template>>> = HashMap::new();
        let mut level: Vec<String> = page.parents.clone();
        // Each level's parents are fetched side by side; each URI once.
        while !level.is_empty() {
            level.sort();
            level.dedup();
            level.retain(|u| !loaded.contains_key(u));
            let fetches: Vec<_> = level.iter().map(|uri| self.start_parent(uri)).collect();
            let mut next = Vec::new();
            for (uri, cached, fetch) in fetches {
                let answer = fetch.await;
                let template = self.parent_answer(&uri, cached, answer, &mut newest)?;
                if let Some(t) = &template {
                    next.extend(t.parents.iter().cloned());
                }
                loaded.insert(uri, template);
            }
            level = next;
        }
        let tree = tree(page, &loaded, &mut Vec::new())?;
        let pieces = render(&tree, self.shared.max_size).map_err(Broken)?;
        Ok((self.compose(pieces, &mut newest), newest.0))
    }

    /// Start the raw subrequest for the parent at `uri`, conditional when it is cached.
    fn start_parent(&self, uri: &str) -> (String, Option<Arc<Entry>>, Fetch) {
        let cached = self.shared.cache.get(&self.host, uri);
        let mut sub = Subrequest::get(uri).header(RAW_HEADER, crate::secret());
        if let Some(c) = &cached {
            if let Some(etag) = &c.version.etag {
                sub = sub.header("If-None-Match", etag.clone());
            } else if let Some(lm) = &c.version.last_modified {
                sub = sub.header("If-Modified-Since", lm.clone());
            }
        }
        let fetch = self.parent.start(sub);
        (uri.to_string(), cached, fetch)
    }

    /// The parent parsed from its answer (the cached parse on a `304`); `None`, logged, when
    /// it cannot be had: its blocks are missing from the page.
    fn parent_answer(
        &self,
        uri: &str,
        cached: Option<Arc<Entry>>,
        answer: Result<Response, osprey_sdk::SubrequestError>,
        newest: &mut Newest,
    ) -> Result<Option<Arc<Template>>, Broken> {
        let left_out = |why: String, newest: &mut Newest| {
            host::warn(&format!(
                "template {}: parent {uri} left out: {why}",
                self.uri
            ));
            newest.0 = None;
            Ok(None)
        };
        let resp = match answer {
            Ok(resp) => resp,
            Err(e) => return left_out(e.to_string(), newest),
        };
        match (resp.status, cached) {
            (304, Some(c)) => {
                newest.note(c.version.last_modified.as_deref());
                Ok(Some(c.template.clone()))
            }
            (200, _) => {
                newest.note(resp.get_header("last-modified"));
                let version = Version::of(&resp);
                let text = match read_body(resp.body, self.shared.max_size) {
                    Ok(text) => text,
                    Err(why) => return left_out(why, newest),
                };
                let t = parse(uri, text).map_err(|e| Broken(format!("in parent {uri} {e}")))?;
                let t = Arc::new(t);
                self.shared.cache.put(&self.host, uri, version, t.clone());
                Ok(Some(t))
            }
            (status, _) => left_out(format!("it answered {status}"), newest),
        }
    }

    /// The page's body: text, and each include's answer (started now; taken now when it is
    /// ready, else streamed when it comes). When every part is ready and known in size, the
    /// page is one buffer (sent with `Content-Length`, storable by a cache).
    fn compose(&self, pieces: Vec<Piece>, newest: &mut Newest) -> Body {
        let marker = &self.shared.error_marker;
        let mut parts = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let part = match piece {
                Piece::Text(text) => Part::Ready(Body::Bytes(text.into())),
                Piece::Include(uri) => {
                    let mut fetch = self.parent.start(Subrequest::get(uri.as_str()));
                    match now(&mut fetch) {
                        Some(Ok(resp)) if resp.status == 200 => {
                            newest.note(resp.get_header("last-modified"));
                            Part::Ready(resp.body)
                        }
                        Some(answer) => {
                            let why = match answer {
                                Ok(resp) => format!("it answered {}", resp.status),
                                Err(e) => e.to_string(),
                            };
                            host::warn(&format!("template {}: include {uri}: {why}", self.uri));
                            newest.0 = None;
                            Part::Ready(Body::Bytes(marker.clone().into()))
                        }
                        None => {
                            newest.0 = None;
                            Part::Later(fetch)
                        }
                    }
                }
            };
            parts.push(part);
        }
        match whole(&parts, self.shared.max_size) {
            Some(len) => {
                let mut page = Vec::with_capacity(len);
                for part in parts {
                    if let Part::Ready(body) = part {
                        match read_body(body, len) {
                            Ok(bytes) => page.extend_from_slice(&bytes),
                            Err(why) => {
                                host::warn(&format!("template {}: a part: {why}", self.uri));
                                page.extend_from_slice(marker);
                            }
                        }
                    }
                }
                Body::Bytes(page.into())
            }
            None => {
                let mut body = Composite::new().error_marker(marker.clone());
                for part in parts {
                    match part {
                        Part::Ready(b) => body.push_body(b),
                        Part::Later(fetch) => body.push_fetch(fetch),
                    }
                }
                stream(body)
            }
        }
    }
}

/// A part of the page's body.
enum Part {
    Ready(Body),
    Later(Fetch),
}

/// The page's length when every part is ready, in memory or a file, and they add up to at
/// most `max` bytes.
fn whole(parts: &[Part], max: usize) -> Option<usize> {
    let mut len: u64 = 0;
    for part in parts {
        match part {
            Part::Ready(b @ (Body::Empty | Body::Bytes(_) | Body::Shared(_) | Body::File(_))) => {
                len += b.len()?
            }
            _ => return None,
        }
    }
    (len <= max as u64).then_some(len as usize)
}

fn stream(composite: Composite) -> Body {
    let mut resp = Response::new();
    resp.body_stream(composite);
    resp.body
}

/// `template` with its parents (each after its own parents) from `loaded`; a loop or a chain
/// deeper than [`MAX_INHERITANCE`] is an error.
fn tree(
    template: Arc<Template>,
    loaded: &HashMap<String, Option<Arc<Template>>>,
    chain: &mut Vec<String>,
) -> Result<Tree, Broken> {
    if chain.len() >= MAX_INHERITANCE {
        return Err(Broken(format!(
            "parents nest deeper than {MAX_INHERITANCE}"
        )));
    }
    chain.push(template.uri.clone());
    let mut parents = Vec::with_capacity(template.parents.len());
    for uri in &template.parents {
        if chain.contains(uri) {
            return Err(Broken(format!(
                "{uri} extends itself (through {})",
                chain.join(" → ")
            )));
        }
        let parent = match loaded.get(uri).cloned().flatten() {
            Some(t) => Some(tree(t, loaded, chain)?),
            None => None,
        };
        parents.push(parent);
    }
    chain.pop();
    Ok(Tree { template, parents })
}

/// The body of a page whose parents did not all answer at once: the assembly goes on as they
/// arrive, then the page is sent.
enum Deferred {
    Assembling(Assembly, String),
    Sending(Composite),
}

impl BodyStream for Deferred {
    fn poll_chunk(
        &mut self,
        cx: &mut FfiContext<'_>,
    ) -> FfiPoll<ROption<RResult<RVec<u8>, RString>>> {
        if let Deferred::Assembling(work, uri) = self {
            let polled = cx.with_context(|cx| work.as_mut().poll(cx));
            match polled {
                Poll::Pending => return FfiPoll::Pending,
                Poll::Ready(Ok((body, _))) => {
                    let mut page = Composite::new();
                    page.push_body(body);
                    *self = Deferred::Sending(page);
                }
                Poll::Ready(Err(Broken(why))) => {
                    host::error(&format!("template error in {uri}: {why}"));
                    *self = Deferred::Sending(Composite::new().bytes(TEMPLATE_ERROR));
                }
            }
        }
        match self {
            Deferred::Sending(body) => body.poll_chunk(cx),
            Deferred::Assembling(..) => FfiPoll::Pending,
        }
    }
}
