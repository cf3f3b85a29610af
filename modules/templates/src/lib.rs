//! `templates`: NXWEB's templates filter. A page names its parents (`{% extends %}`, `{% use %}`)
//! and includes (`{% include %}`); the filter fetches them with subrequests and assembles the
//! page from the winning blocks. See docs/composition.md.
//!
//! ```json
//! "filters": [{"type": "templates"}]
//! ```

mod assemble;
mod cache;
mod parse;
mod ready;
mod render;
mod uri;

#[cfg(test)]
mod tests;

use std::sync::{Arc, OnceLock};

use osprey_sdk::abi_stable::std_types::RVec;
use osprey_sdk::http::{self, Precondition, Validators};
use osprey_sdk::subrequest::DEFAULT_ERROR_MARKER;
use osprey_sdk::Wants;
use osprey_sdk::{
    filter_box, parse_config, random, Body, ConfigError, Filter, FilterBox, HeaderPair, Module,
    Request, Response,
};

use assemble::RAW_HEADER;

/// The server's allocator (mimalloc) for this module's per-request strings and lists: the C
/// library's costs several times more.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;

struct TemplatesModule;

impl Module for TemplatesModule {
    const NAME: &'static str = "templates";
    const FILTERS: &'static [&'static str] = &["templates"];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(TemplatesModule)
    }

    fn new_filter(&self, _kind: &str, config: &str) -> Result<FilterBox, ConfigError> {
        Ok(filter_box(Templates::new(config)?))
    }
}

osprey_sdk::export_module!(TemplatesModule);

fn default_types() -> Vec<String> {
    vec!["text/html".into()]
}

fn default_max_size() -> usize {
    1_000_000
}

fn default_marker() -> String {
    String::from_utf8_lossy(DEFAULT_ERROR_MARKER).into_owned()
}

/// The filter's keys in its `filters` entry.
#[derive(serde::Deserialize)]
struct Conf {
    /// Media types parsed as templates (exact, without parameters).
    #[serde(default = "default_types")]
    types: Vec<String>,
    /// Largest template file, and largest assembled text, in bytes.
    #[serde(default = "default_max_size")]
    max_size: usize,
    /// What an include that fails becomes.
    #[serde(default = "default_marker")]
    error_marker: String,
}

struct Templates {
    types: Vec<String>,
    shared: Arc<assemble::Shared>,
}

/// Request headers that would let the handler answer `304`, `412` or `206` for the template
/// itself: the filter answers them for the assembled page instead.
const CONDITIONAL: &[&str] = &[
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "if-range",
    "range",
];

impl Templates {
    fn new(config: &str) -> Result<Templates, ConfigError> {
        let conf: Conf = parse_config(config)?;
        Ok(Templates {
            types: conf.types.iter().map(|t| t.to_ascii_lowercase()).collect(),
            shared: Arc::new(assemble::Shared {
                cache: cache::Cache::new(),
                max_size: conf.max_size,
                error_marker: conf.error_marker.into_bytes(),
            }),
        })
    }

    /// Whether `resp` is a template this filter assembles.
    fn applies(&self, resp: &Response) -> bool {
        let media = |ct: &str| {
            ct.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        };
        resp.status == 200
            && !matches!(resp.body, Body::Stream(_) | Body::Upgrade(_))
            && resp
                .get_header("content-encoding")
                .is_none_or(|e| e.trim().eq_ignore_ascii_case("identity"))
            && resp
                .get_header("content-type")
                .is_some_and(|ct| self.types.contains(&media(ct)))
    }

    /// The page's template, parsed (or from the cache while its version is the same); `None`,
    /// logged, when the response is already final: a file over `max_size` (sent as it is), a
    /// body that cannot be read (500), a syntax error (the error marker).
    fn page(&self, req: &Request<'_>, resp: &mut Response) -> Option<Arc<parse::Template>> {
        let version = cache::Version::of(resp);
        if let Some(entry) = self.shared.cache.get(req.host.as_str(), req.uri.as_str()) {
            if version.identifies() && entry.version == version {
                return Some(entry.template.clone());
            }
        }
        let body = std::mem::replace(&mut resp.body, Body::Empty);
        let text = match body.len() {
            Some(n) if n > self.shared.max_size as u64 => {
                osprey_sdk::host::warn(&format!(
                    "template {} is over {} bytes (max_size): sent as it is",
                    req.uri, self.shared.max_size
                ));
                resp.body = body;
                return None;
            }
            _ => match ready::read_body(body, self.shared.max_size) {
                Ok(text) => text,
                Err(why) => {
                    osprey_sdk::host::error(&format!("template {}: {why}", req.uri));
                    resp.status(500).body = Body::Empty;
                    return None;
                }
            },
        };
        let template = match parse::parse(req.uri.as_str(), text) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                osprey_sdk::host::error(&format!("template error in {}: {e}", req.uri));
                resp.body(assemble::TEMPLATE_ERROR);
                for name in ["etag", "last-modified", "accept-ranges"] {
                    resp.remove_header(name);
                }
                return None;
            }
        };
        if template.is_plain() {
            resp.body(template.text.clone()); // read to find out: sent from memory
        }
        self.shared.cache.put(
            req.host.as_str(),
            req.uri.as_str(),
            version,
            template.clone(),
        );
        Some(template)
    }
}

/// This process's value of [`RAW_HEADER`].
fn secret() -> &'static str {
    static SECRET: OnceLock<String> = OnceLock::new();
    SECRET.get_or_init(|| {
        let mut bytes = [0u8; 16];
        random::os_bytes(&mut bytes);
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    })
}

/// Whether `req` is a parent's subrequest from this filter (answered raw).
fn raw(req: &Request<'_>) -> bool {
    req.header(RAW_HEADER) == Some(secret())
}

/// Answer the client's preconditions for a response passed through, against its own
/// validators (the handler did not see them; see [`CONDITIONAL`]).
fn preconditions(req: &Request<'_>, resp: &mut Response) {
    if resp.status != 200 {
        return;
    }
    let etag = resp.get_header("etag").map(str::to_owned);
    let v = Validators::from_headers(etag.as_deref(), resp.get_header("last-modified"));
    match http::evaluate(req, &v) {
        Precondition::Proceed => {}
        Precondition::NotModified => resp.status(304).body = Body::Empty,
        Precondition::Failed => http::respond_error(resp, 412, "a precondition failed"),
    }
}

impl Filter for Templates {
    fn wants(&self) -> Wants {
        Wants::CACHE_KEY | Wants::REQUEST_HEADERS | Wants::AFTER
    }

    fn cache_key(&self, req: &Request<'_>, key: &mut String) {
        if raw(req) {
            key.push_str("|template-raw");
        }
    }

    fn request_headers(&self, req: &Request<'_>, _key: &str, set: &mut RVec<HeaderPair>) {
        if raw(req) {
            return; // a parent's conditional subrequest: the handler answers it
        }
        for &name in CONDITIONAL {
            if req.header(name).is_some() {
                set.push(HeaderPair::new(name, ""));
            }
        }
    }

    fn after(&self, req: &Request<'_>, _key: &str, resp: &mut Response) {
        if raw(req) {
            return;
        }
        if !self.applies(resp) {
            return preconditions(req, resp);
        }
        let Some(page) = self.page(req, resp) else {
            return;
        };
        if page.is_plain() {
            return preconditions(req, resp);
        }
        assemble::respond(&self.shared, req, resp, page);
    }
}
