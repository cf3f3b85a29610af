//! `ssi`: server-side includes. A page's `<!--#include virtual="/uri" -->` directives become
//! subrequests (run side by side, through their own routes and filters) and the page goes out
//! as a composite body in document order; `set` and `echo` work on variables. Turned on for
//! `.shtml` / `.shtm` paths, for every answer of the route with `"always": true`, or by the
//! answer's `X-Osprey-SSI: on` (NXWEB's `X-NXWEB-SSI` too) header.
//!
//! ```json
//! "filters": [{"type": "ssi", "error_marker": "<!--[ssi error]-->"}]
//! ```

mod endings;
mod layouts;
mod page;
mod parse;
mod stream;
mod vars;

use osprey_sdk::abi_stable::std_types::RVec;
use osprey_sdk::subrequest::Parent;
use osprey_sdk::Wants;
use osprey_sdk::{
    filter_box, parse_config, Body, Composite, ConfigError, Filter, FilterBox, HeaderPair, Module,
    Request, Response, BODY_ONLY,
};
use stream::SsiStream;
use vars::Vars;

struct SsiModule;

impl Module for SsiModule {
    const NAME: &'static str = "ssi";
    const FILTERS: &'static [&'static str] = &["ssi"];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(SsiModule)
    }

    fn new_filter(&self, _kind: &str, config: &str) -> Result<FilterBox, ConfigError> {
        Ok(filter_box(Ssi::new(config)?))
    }
}

osprey_sdk::export_module!(SsiModule);

/// The server's allocator (mimalloc) for the per-request strings and lists: the C library's
/// costs several times more.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;

fn default_marker() -> String {
    "<!--[ssi error]-->".into()
}

fn default_max_size() -> u64 {
    1 << 20
}

fn default_extensions() -> Vec<String> {
    vec![".shtml".into(), ".shtm".into()]
}

/// The filter's keys in its `filters` entry.
#[derive(serde::Deserialize)]
struct Conf {
    /// Process every 200 answer of the route, whatever its path.
    #[serde(default)]
    always: bool,
    /// Path endings that turn processing on.
    #[serde(default = "default_extensions")]
    extensions: Vec<String>,
    /// What a failed include or a broken directive becomes.
    #[serde(default = "default_marker")]
    error_marker: String,
    /// Larger documents are sent unprocessed (with a warning).
    #[serde(default = "default_max_size")]
    max_size: u64,
}

pub struct Ssi {
    always: bool,
    extensions: endings::Endings,
    marker: String,
    max_size: u64,
    layouts: layouts::Layouts,
}

/// Response headers that turn processing on (removed from the answer).
const SWITCHES: [&str; 2] = ["X-Osprey-SSI", "X-NXWEB-SSI"];

impl Ssi {
    pub fn new(config: &str) -> Result<Ssi, ConfigError> {
        let c: Conf = parse_config(config)?;
        Ok(Ssi {
            always: c.always,
            extensions: endings::Endings::new(&c.extensions),
            marker: c.error_marker,
            max_size: c.max_size,
            layouts: Default::default(),
        })
    }

    /// The parse of a document small enough to keep it (in a memory cache's shared bytes, or
    /// a file range), from [`layouts`] when it is the same document as last time.
    fn kept_layout(
        &self,
        path: &str,
        body: &Body,
    ) -> Option<std::io::Result<std::sync::Arc<layouts::Layout>>> {
        let small = |len: u64| len <= layouts::MAX_DOC.min(self.max_size as usize) as u64;
        match body {
            Body::Shared(doc) if small(doc.len() as u64) => Some(Ok(self.layouts.get(path, doc))),
            Body::File(range) if small(range.len) => Some(self.layouts.get_file(path, range)),
            _ => None,
        }
    }

    /// Fragments that answer at once (inline handlers, caches) make the whole page now: it
    /// goes with Content-Length, as one piece; else it streams as its pieces come.
    fn send(&self, page: Composite, resp: &mut Response) {
        match page.ready_now() {
            Ok(all) => resp.body = Body::Bytes(all),
            Err(page) => {
                resp.body_stream(page);
            }
        }
    }

    /// Known from the request alone: the route says so, or the path's ending does.
    fn on_for_request(&self, req: &Request<'_>) -> bool {
        self.always || self.extensions.end(req.path.as_str())
    }
}

impl Filter for Ssi {
    fn wants(&self) -> Wants {
        Wants::REQUEST_HEADERS | Wants::AFTER
    }

    /// The handler answers the whole page: a 304 or a range of the unprocessed file would
    /// be wrong once the includes are in.
    fn request_headers(&self, req: &Request<'_>, _key: &str, set: &mut RVec<HeaderPair>) {
        if self.on_for_request(req) {
            set.reserve(5);
            // The page's validators would describe the file, not the page: the handler is
            // spared making them (as for includes).
            for name in [
                "If-None-Match",
                "If-Modified-Since",
                "Range",
                "If-Range",
                BODY_ONLY,
            ] {
                set.push(HeaderPair::new(name, ""));
            }
        }
    }

    fn after(&self, req: &Request<'_>, _key: &str, resp: &mut Response) {
        let (present, switched) = switches(resp);
        // (Removing rebuilds the header list: only when there is one to remove.)
        if present {
            resp.remove_headers(&SWITCHES);
        }
        if resp.status != 200 || !(switched || self.on_for_request(req)) {
            return;
        }
        if resp.get_header("Content-Encoding").is_some() {
            return;
        }
        let (parent, vars) = (Parent::of(req), Vars::for_request(req));
        let path = req.path.as_str();
        if let Body::Stream(_) = resp.body {
            let Body::Stream(source) = std::mem::replace(&mut resp.body, Body::Empty) else {
                unreachable!()
            };
            let (path, marker) = (path.to_owned(), self.marker.clone());
            resp.body_stream(SsiStream::new(
                source,
                self.max_size,
                parent,
                path,
                vars.into_owned(),
                marker,
            ));
        } else if let Some(kept) = self.kept_layout(path, &resp.body) {
            let layout = match kept {
                Ok(layout) => layout,
                Err(e) => {
                    let uri = req.uri;
                    osprey_sdk::host::warn(&format!(
                        "ssi: {uri} sent unprocessed: reading it: {e}"
                    ));
                    return;
                }
            };
            let (doc, parts) = (&layout.doc, &layout.parts);
            let page = page::assemble_parts(&parent, path, vars, doc, parts, &self.marker);
            self.send(page, resp);
        } else {
            let doc = match document(&resp.body, self.max_size) {
                Ok(doc) => doc,
                Err(why) => {
                    osprey_sdk::host::warn(&format!("ssi: {} sent unprocessed: {why}", req.uri));
                    return;
                }
            };
            self.send(page::assemble(&parent, path, vars, doc, &self.marker), resp);
        }
        // The page is no longer the document those describe.
        resp.remove_headers(&["ETag", "Last-Modified", "Accept-Ranges", "Content-Length"]);
    }
}

/// Whether the answer carries a [`SWITCHES`] header, and whether one of them says `on`: one
/// pass over its headers (every fragment's answer is looked at, and most have none).
fn switches(resp: &Response) -> (bool, bool) {
    let (mut present, mut on) = (false, false);
    for h in resp.headers.iter() {
        let name = h.name.as_str();
        if SWITCHES.iter().any(|s| name.eq_ignore_ascii_case(s)) {
            present = true;
            on |= h.value.as_str().trim().eq_ignore_ascii_case("on");
        }
    }
    (present, on)
}

/// The document's bytes, if it is in memory or a file, and not larger than `max`.
fn document(body: &Body, max: u64) -> Result<Vec<u8>, String> {
    if let Some(bytes) = body.as_bytes() {
        // In memory (e.g. from a cache) it is held to `max_size` as a file is.
        if bytes.len() as u64 > max {
            return Err(format!("{} bytes is over max_size ({max})", bytes.len()));
        }
        return Ok(bytes.to_vec());
    }
    match body {
        Body::File(range) if range.len <= max => {
            let mut doc = vec![0; range.len as usize];
            range
                .file
                .read_exact_at(&mut doc, range.offset)
                .map_err(|e| format!("reading it: {e}"))?;
            Ok(doc)
        }
        Body::File(range) => Err(format!("{} bytes is over max_size ({max})", range.len)),
        _ => Err("a body that is neither bytes nor a file".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_in_memory_is_held_to_max_size_as_a_file_is() {
        let doc = b"<p><!--#echo var=\"x\" --></p>";
        let n = doc.len() as u64;
        let body = Body::Bytes(RVec::from(doc.to_vec()));
        assert_eq!(document(&body, n).unwrap(), doc);
        let why = document(&body, n - 1).unwrap_err();
        assert_eq!(why, format!("{n} bytes is over max_size ({})", n - 1));
    }

    #[test]
    fn switch_headers_are_found_in_one_pass_whatever_their_case() {
        let with = |headers: &[(&str, &str)]| {
            let mut resp = Response::new();
            for &(n, v) in headers {
                resp.header(n.to_owned(), v.to_owned());
            }
            switches(&resp)
        };
        assert_eq!(with(&[("Content-Type", "text/html")]), (false, false));
        assert_eq!(with(&[("x-osprey-ssi", " On ")]), (true, true));
        assert_eq!(with(&[("X-NXWEB-SSI", "off")]), (true, false));
        // Either one saying `on` is enough.
        let both = [("X-Osprey-SSI", "off"), ("X-Nxweb-Ssi", "on")];
        assert_eq!(with(&both), (true, true));
    }
}
