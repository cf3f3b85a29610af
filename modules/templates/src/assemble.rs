//! Assembling a page: its parents fetched raw (a conditional subrequest when a parsed copy is
//! cached), blocks resolved, includes started as subrequests through their own handlers and
//! filters; then `Last-Modified` = the newest part's (none if a part has none or is not known
//! yet) and the client's preconditions against it.

use std::sync::Arc;
use std::time::SystemTime;

use osprey_sdk::http::{self, Precondition, Validators};
use osprey_sdk::{host, Body, Composite, Request, Response, Subrequest};

use crate::cache::Version;
use crate::parse::{parse, Template};
use crate::ready::{now, read_body};
use crate::render::{render, Piece, Tree};
use crate::Templates;

/// The page when a template cannot be assembled (NXWEB's marker); the log says why.
pub const TEMPLATE_ERROR: &[u8] = b"<!--[template error; check error log]-->";

/// Parents of parents at most this deep (NXWEB's limit).
const MAX_INHERITANCE: usize = 32;

/// The request header that marks a parent's subrequest, so the filter on the parent's route
/// passes it through raw. Its value is a per-process secret: a client cannot ask for it.
pub const RAW_HEADER: &str = "X-Osprey-Template-Raw";

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

    fn unknown(&mut self) {
        self.0 = None;
    }
}

/// Why the page cannot be assembled: a syntax error or a loop (logged, marker page).
struct Broken(String);

impl Templates {
    /// Replace `resp` (the page's template, parsed as `page`) by the assembled page.
    pub(crate) fn assemble(&self, req: &Request<'_>, resp: &mut Response, page: Arc<Template>) {
        let mut newest = Newest(Some(SystemTime::UNIX_EPOCH));
        newest.note(resp.get_header("last-modified"));
        let body = self
            .tree(req, page, &mut newest, &mut Vec::new())
            .and_then(|tree| render(&tree, self.max_size).map_err(Broken))
            .map(|pieces| self.compose(req, pieces, &mut newest));
        for name in ["etag", "last-modified", "accept-ranges", "content-length"] {
            resp.remove_header(name);
        }
        match body {
            Ok(body) => {
                if let Some(t) = newest.0 {
                    resp.header("Last-Modified", httpdate::fmt_http_date(t));
                }
                let v = Validators {
                    etag: None,
                    last_modified: newest.0,
                };
                match http::evaluate(req, &v) {
                    Precondition::Proceed => {
                        resp.body_stream(body);
                    }
                    Precondition::NotModified => {
                        resp.status(304).body = Body::Empty;
                    }
                    Precondition::Failed => {
                        resp.remove_header("last-modified");
                        http::respond_error(resp, 412, "a precondition failed");
                    }
                }
            }
            Err(Broken(why)) => {
                host::error(&format!("template error in {}: {why}", req.uri));
                resp.body(TEMPLATE_ERROR);
            }
        }
    }

    /// `template` with its parents (each after its own parents); a parent that cannot be
    /// fetched is logged and left out (its blocks are missing).
    fn tree(
        &self,
        req: &Request<'_>,
        template: Arc<Template>,
        newest: &mut Newest,
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
            let parent = match self.parent(req, uri, newest)? {
                Some(t) => Some(self.tree(req, t, newest, chain)?),
                None => None,
            };
            parents.push(parent);
        }
        chain.pop();
        Ok(Tree { template, parents })
    }

    /// The parent at `uri`, parsed: from the cache when it answers `304` to the cached
    /// version; `None` (logged) when it cannot be had.
    fn parent(
        &self,
        req: &Request<'_>,
        uri: &str,
        newest: &mut Newest,
    ) -> Result<Option<Arc<Template>>, Broken> {
        let cached = self.cache.get(req.host.as_str(), uri);
        let mut sub = Subrequest::get(uri).header(RAW_HEADER, crate::secret());
        if let Some(c) = &cached {
            if let Some(etag) = &c.version.etag {
                sub = sub.header("If-None-Match", etag.clone());
            } else if let Some(lm) = &c.version.last_modified {
                sub = sub.header("If-Modified-Since", lm.clone());
            }
        }
        let failed = |why: String| {
            host::warn(&format!(
                "template {}: parent {uri} left out: {why}",
                req.uri
            ));
        };
        let mut fetch = sub.start(req);
        let resp = match now(&mut fetch) {
            Some(Ok(resp)) => resp,
            Some(Err(e)) => {
                failed(e.to_string());
                newest.unknown();
                return Ok(None);
            }
            None => {
                failed("it did not answer at once (parents must be files or cached)".into());
                newest.unknown();
                return Ok(None);
            }
        };
        match (resp.status, cached) {
            (304, Some(c)) => {
                newest.note(c.version.last_modified.as_deref());
                Ok(Some(c.template.clone()))
            }
            (200, _) => {
                newest.note(resp.get_header("last-modified"));
                let version = Version::of(&resp);
                let text = match read_body(resp.body, self.max_size) {
                    Ok(text) => text,
                    Err(why) => {
                        failed(why);
                        newest.unknown();
                        return Ok(None);
                    }
                };
                let t = parse(uri, text).map_err(|e| Broken(format!("in parent {uri} {e}")))?;
                let t = Arc::new(t);
                self.cache.put(req.host.as_str(), uri, version, t.clone());
                Ok(Some(t))
            }
            (status, _) => {
                failed(format!("it answered {status}"));
                newest.unknown();
                Ok(None)
            }
        }
    }

    /// The page's body: text, and each include's answer (started now, taken now when it is
    /// ready, else streamed when it comes).
    fn compose(&self, req: &Request<'_>, pieces: Vec<Piece>, newest: &mut Newest) -> Composite {
        let mut body = Composite::new().error_marker(self.error_marker.clone());
        for piece in pieces {
            match piece {
                Piece::Text(text) => body.push_bytes(text),
                Piece::Include(uri) => {
                    let mut fetch = Subrequest::get(uri.as_str()).start(req);
                    match now(&mut fetch) {
                        Some(Ok(resp)) if resp.status == 200 => {
                            newest.note(resp.get_header("last-modified"));
                            body.push_body(resp.body);
                        }
                        Some(answer) => {
                            let why = match answer {
                                Ok(resp) => format!("it answered {}", resp.status),
                                Err(e) => e.to_string(),
                            };
                            host::warn(&format!("template {}: include {uri}: {why}", req.uri));
                            newest.unknown();
                            body.push_bytes(self.error_marker.clone());
                        }
                        None => {
                            newest.unknown();
                            body.push_fetch(fetch);
                        }
                    }
                }
            }
        }
        body
    }
}
