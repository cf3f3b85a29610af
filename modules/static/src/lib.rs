//! `static`: serves files from a directory, as NXWEB's `sendfile` handler does.
//!
//! Small files can live in a memory cache (`memcache`), pre-read into shared bytes with their
//! header values computed once, so a hit costs no system call; larger files stay open in an
//! open-file cache and the core sends them with `sendfile(2)`. Cached entries are revalidated
//! against the file (device, inode, size, mtime) once `cache_ttl` has passed. The handler runs
//! inline on the network thread: see `docs/static.md` for why.

mod autoindex;
mod config;
mod files;
mod front;
mod mime;
mod open;
mod serve;

use osprey_sdk::http::{clean_path, respond_error};
use osprey_sdk::params::percent_decode_path;
use osprey_sdk::serde::Deserialize;
use osprey_sdk::{
    handler_box, parse_config, ConfigError, Handler, HandlerBox, Module, Outcome, Request, Response,
};

use crate::files::{Files, Found};

struct StaticModule;

/// `modules.static` takes no keys yet.
#[derive(Deserialize)]
#[serde(crate = "osprey_sdk::serde")]
struct ModuleConfig {}

impl Module for StaticModule {
    const NAME: &'static str = "static";
    const HANDLERS: &'static [&'static str] = &["sendfile", "static"];

    fn new(config: &str) -> Result<Self, ConfigError> {
        let _: ModuleConfig = parse_config(config)?;
        Ok(StaticModule)
    }

    fn new_handler(&self, _type_name: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        let cfg = config::Config::parse(route)?;
        Ok(handler_box(Static {
            files: Files::new(cfg),
            route: front::new_route_id(),
        }))
    }
}

struct Static {
    files: Files,
    /// This route's key space in the per-thread front cache.
    route: u64,
}

impl Handler for Static {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        let cfg = self.files.config();
        let read_only = matches!(req.method.as_str(), "GET" | "HEAD");
        let front_host = if cfg.per_host { req.host.as_str() } else { "" };
        let raw_path = req.path_info.as_str();
        // A path this thread served lately: straight to its (fresh) entry.
        if read_only {
            if let Some(entry) = front::get(self.route, front_host, raw_path) {
                if self.files.fresh(&entry) {
                    return serve::serve(req, resp, &entry);
                }
                front::remove(self.route, front_host, raw_path);
            }
        }
        let clean = match clean_path(req.path_info.as_str()) {
            Ok(clean) => clean,
            Err(bad) => return refuse(resp, 400, bad.reason()),
        };
        let host = req.host.as_str();
        if cfg.per_host && !host_ok(host) {
            return refuse(resp, 400, "this Host cannot name a document root");
        }
        match self.files.find(host, &clean) {
            Found::Missing => Outcome::Next,
            Found::Redirect => {
                // One leading `/` only: `//host/dir` would be a protocol-relative link to
                // another site (an open redirect).
                let mut location = format!("/{}/", req.path.as_str().trim_start_matches('/'));
                if !req.query.is_empty() {
                    location.push('?');
                    location.push_str(req.query.as_str());
                }
                resp.redirect(301, &location);
                Outcome::Done
            }
            Found::Directory(_) if !cfg.autoindex => Outcome::Next,
            _ if !read_only => {
                refuse(resp, 405, "static files answer GET and HEAD only");
                resp.header("Allow", "GET, HEAD");
                Outcome::Done
            }
            Found::Directory(dir) => {
                let shown = percent_decode_path(req.path.as_str()).unwrap_or_default();
                match autoindex::listing(&dir, &String::from_utf8_lossy(&shown)) {
                    Ok(html) => {
                        resp.html(html);
                        Outcome::Done
                    }
                    Err(e) => {
                        osprey_sdk::host::error(&format!(
                            "static: listing {}: {e}",
                            req.path.as_str()
                        ));
                        Outcome::Error(500)
                    }
                }
            }
            Found::File(entry) => {
                if entry.in_memory() {
                    front::put(self.route, front_host, raw_path, &entry);
                }
                serve::serve(req, resp, &entry)
            }
        }
    }
}

/// An error page with a reason.
fn refuse(resp: &mut Response, status: u16, reason: &str) -> Outcome {
    respond_error(resp, status, reason);
    Outcome::Done
}

/// A host name usable as a directory name in a `{host}` root: not empty, no leading dot, and
/// only the characters of DNS names and IP literals.
fn host_ok(host: &str) -> bool {
    !host.is_empty()
        && !host.starts_with('.')
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:[]".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::testing::{self, TestRequest};

    /// A parent that reads only the body (an SSI include) gets no validators, nor
    /// `Accept-Ranges`; any other request gets them, and the same body.
    #[test]
    fn validators_are_left_out_for_a_parent_that_reads_only_the_body() {
        testing::install();
        let dir =
            std::env::temp_dir().join(format!("osprey-static-body-only-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f.html"), "<i>F</i>").unwrap();
        for memcache in [true, false] {
            let json = format!(
                r#"{{"dir": {:?}, "memcache": {memcache}}}"#,
                dir.display().to_string()
            );
            let handler = Static {
                files: Files::new(config::Config::parse(&json).unwrap()),
                route: front::new_route_id(),
            };
            for body_only in [false, true] {
                let mut resp = Response::new();
                let req = TestRequest::get("/f.html").body_only(body_only);
                req.with_view(|req| handler.handle(req, &mut resp));
                assert_eq!(resp.status, 200);
                let bytes = match &resp.body {
                    osprey_sdk::Body::Shared(b) => b.to_vec(),
                    osprey_sdk::Body::File(range) => {
                        let mut buf = vec![0; range.len as usize];
                        range.file.read_exact_at(&mut buf, range.offset).unwrap();
                        buf
                    }
                    _ => unreachable!(),
                };
                assert_eq!(bytes, b"<i>F</i>");
                for name in ["Last-Modified", "ETag", "Accept-Ranges"] {
                    let has = resp.get_header(name).is_some();
                    assert_eq!(
                        has, !body_only,
                        "{name}, body_only {body_only}, memcache {memcache}"
                    );
                }
                assert!(resp.get_header("Content-Type").is_some());
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn checks_hosts() {
        assert!(host_ok("example.com"));
        assert!(host_ok("[::1]"));
        assert!(!host_ok(""));
        assert!(!host_ok(".."));
        assert!(!host_ok(".hidden"));
        assert!(!host_ok("a/b"));
        assert!(!host_ok("a\\b"));
    }
}

osprey_sdk::export_module!(StaticModule);

/// The server's allocator (mimalloc) for the per-request strings and lists: the C library's
/// costs several times more.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;
