//! NXWEB routing: routes in priority order, matched by prefix (at a segment boundary),
//! virtual host, secure flag and method; a declining handler passes to the next route.

use osprey_sdk::abi_stable::std_types::{RStr, RVec};
use osprey_sdk::{FilterBox, HandlerBox, HeaderPair, Mode, Request, Response, Wants};

use crate::config::{Config, ConfigError};
use crate::modules::Registry;

/// Which hosts a route answers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum VHost {
    Exact(String),
    /// `.example.com`: example.com and every subdomain.
    Domain(String),
}

impl VHost {
    fn parse(text: &str) -> VHost {
        let text = text.to_ascii_lowercase();
        match text.strip_prefix('.') {
            Some(domain) => VHost::Domain(domain.to_owned()),
            None => VHost::Exact(text),
        }
    }

    fn matches(&self, host: &str) -> bool {
        match self {
            VHost::Exact(h) => host == h,
            VHost::Domain(d) => {
                host == d
                    || (host.len() > d.len()
                        && host.ends_with(d.as_str())
                        && host.as_bytes()[host.len() - d.len() - 1] == b'.')
            }
        }
    }
}

/// A filter on a route's request path, with the steps it takes part in (`Filter::wants`,
/// asked once when the route is built).
pub struct RouteFilter {
    pub filter: FilterBox,
    pub wants: Wants,
}

impl RouteFilter {
    pub fn wants(&self, step: Wants) -> bool {
        self.wants.contains(step)
    }

    /// Its steps are inline `before`, `request_headers` and `after` only (`cache_key` too,
    /// unless a filter of the route reads the key, `keyed`, which is not plain).
    fn plain(&self) -> bool {
        let plain = Wants::BEFORE
            | Wants::BEFORE_OPTIONS
            | Wants::REQUEST_HEADERS
            | Wants::AFTER
            | Wants::CACHE_KEY;
        plain.contains(self.wants)
    }

    /// Whether `before` runs for a request with this method (`Wants::BEFORE_OPTIONS`: only
    /// for a preflight's `OPTIONS`).
    #[inline]
    pub fn before_for(&self, method: &str) -> bool {
        self.wants(Wants::BEFORE) || self.wants(Wants::BEFORE_OPTIONS) && method == "OPTIONS"
    }

    /// The request headers it sets for the handler; `None` when it sets none or takes no
    /// part in `request_headers` (then nothing is built or dropped).
    #[inline]
    pub fn request_headers(&self, req: &Request<'_>, key: RStr<'_>) -> Option<RVec<HeaderPair>> {
        if !self.wants(Wants::REQUEST_HEADERS) {
            return None;
        }
        let mut set = RVec::new();
        self.filter.request_headers(req, key, &mut set);
        (!set.is_empty()).then_some(set)
    }

    /// Its `after`, if it takes part in that step.
    #[inline]
    pub fn after(&self, req: &Request<'_>, key: RStr<'_>, resp: &mut Response) {
        if self.wants(Wants::AFTER) {
            self.filter.after(req, key, resp);
        }
    }
}

pub struct Route {
    prefix: Option<String>,
    vhost: Option<VHost>,
    secure: Option<bool>,
    methods: Option<Vec<String>>,
    pub handler: HandlerBox,
    pub mode: Mode,
    /// The handler takes request bodies as they arrive (`Handler::streams_request_body`).
    pub streams_body: bool,
    /// The filters that want some step, in route order.
    pub filters: Vec<RouteFilter>,
    /// Filters that want no step: kept (their module may count on them living as long as
    /// the route) but out of the request path.
    _idle: Vec<FilterBox>,
    /// Some filter reads the cache key: it is built for every request.
    pub keyed: bool,
    /// Filters with inline `before`/`request_headers`/`after` steps only, none reading the
    /// key, around an inline handler: run without a `RouteRun` (`dispatch::route::run_plain`).
    pub plain: bool,
    pub max_body: Option<u64>,
    /// Where requests this route answers are counted (`stats::module_slot`).
    pub stat: usize,
}

impl Route {
    /// The prefix and path-info split of `path` when this route's prefix, host and scheme
    /// match, ignoring the method.
    pub fn matches<'p>(&self, path: &'p str, host: &str, secure: bool) -> Option<(&str, &'p str)> {
        if self.secure.is_some_and(|s| s != secure) {
            return None;
        }
        if self.vhost.as_ref().is_some_and(|v| !v.matches(host)) {
            return None;
        }
        match &self.prefix {
            None => Some(("", path)),
            Some(prefix) => match_prefix(prefix, path).map(|info| (prefix.as_str(), info)),
        }
    }

    /// The configured prefix (empty for a catch-all route).
    pub fn prefix(&self) -> &str {
        self.prefix.as_deref().unwrap_or("")
    }

    pub fn allows(&self, method: &str) -> bool {
        self.methods
            .as_ref()
            .is_none_or(|m| m.iter().any(|x| x == method))
    }

    /// Methods this route accepts, for `Allow` in a 405.
    pub fn methods(&self) -> &[String] {
        self.methods.as_deref().unwrap_or(&[])
    }
}

/// NXWEB prefix rule: `/hello` matches `/hello` and `/hello/...` but not `/helloworld`;
/// `/` matches only `/`; a prefix ending in `/` matches everything below it. Returns the
/// path info: what follows the prefix, starting with `/` or empty.
fn match_prefix<'p>(prefix: &str, path: &'p str) -> Option<&'p str> {
    if prefix == "/" {
        return (path == "/").then_some("/");
    }
    let bare = prefix.strip_suffix('/').unwrap_or(prefix);
    let rest = path.strip_prefix(bare)?;
    if rest.is_empty() && !prefix.ends_with('/') || rest.starts_with('/') {
        Some(rest)
    } else {
        None
    }
}

/// How a request's body is taken (see [`Router::body_intake`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyIntake {
    /// The most body bytes accepted.
    pub limit: u64,
    /// Handed to the handler as it arrives instead of read whole first.
    pub streamed: bool,
}

/// A configuration's routes, ready to serve.
pub struct Router {
    routes: Vec<Route>,
    /// `limits.max_body_bytes`: the body limit where no route sets its own.
    max_body: u64,
}

impl Router {
    pub fn build(config: &Config, registry: &Registry) -> Result<Router, ConfigError> {
        let mut routes = Vec::with_capacity(config.routes.len());
        for spec in &config.routes {
            let core = &spec.core;
            let handler = registry.new_handler(&config.file, &core.handler, &spec.section)?;
            let (mut filters, mut idle) = (Vec::with_capacity(spec.filters.len()), Vec::new());
            for f in &spec.filters {
                let filter = registry.new_filter(&config.file, &f.core.kind, &f.section)?;
                let wants = filter.wants().effective();
                match wants.is_empty() {
                    true => idle.push(filter),
                    false => filters.push(RouteFilter { filter, wants }),
                }
            }
            let plain = handler.mode() == Mode::Inline && filters.iter().all(RouteFilter::plain);
            let secure = match (core.secure_only, core.insecure_only) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            };
            routes.push(Route {
                prefix: core.prefix.clone(),
                vhost: core.vhost.as_deref().map(VHost::parse),
                secure,
                methods: core.methods.clone(),
                mode: handler.mode(),
                streams_body: handler.streams_request_body(),
                handler,
                keyed: filters.iter().any(|f| f.wants(Wants::KEY)),
                plain,
                filters,
                _idle: idle,
                max_body: core.max_body_size,
                stat: registry
                    .handler_module(&core.handler)
                    .map_or(usize::MAX, crate::stats::module_slot),
            });
        }
        Ok(Router {
            routes,
            max_body: config.limits.max_body_bytes,
        })
    }

    pub fn route(&self, index: usize) -> &Route {
        &self.routes[index]
    }

    /// The first route at or after `index`, in order.
    pub fn after(&self, index: usize) -> Option<(usize, &Route)> {
        self.routes.get(index).map(|r| (index, r))
    }

    /// How a request's body is taken, asked before it is read: the first route that would
    /// take the request decides. Its limit is that route's `max_body_size`, else the global
    /// one, so a body over it is refused without reading it.
    pub fn body_intake(&self, path: &str, host: &str, secure: bool) -> BodyIntake {
        let first = self.candidates(path, host, secure).next();
        let route = first.map(|(i, _, _)| &self.routes[i]);
        BodyIntake {
            limit: route.and_then(|r| r.max_body).unwrap_or(self.max_body),
            streamed: route.is_some_and(|r| r.streams_body),
        }
    }

    /// Routes whose prefix, host and scheme match, in order, with their index, prefix and
    /// path info.
    pub fn candidates<'r, 'p>(
        &'r self,
        path: &'p str,
        host: &'r str,
        secure: bool,
    ) -> impl Iterator<Item = (usize, &'r str, &'p str)> + use<'r, 'p> {
        self.routes
            .iter()
            .enumerate()
            .filter_map(move |(i, r)| r.matches(path, host, secure).map(|(p, info)| (i, p, info)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_matches_at_segment_boundary() {
        assert_eq!(match_prefix("/hello", "/hello"), Some(""));
        assert_eq!(match_prefix("/hello", "/hello/x"), Some("/x"));
        assert_eq!(match_prefix("/hello", "/helloworld"), None);
        assert_eq!(match_prefix("/hello", "/hell"), None);
        assert_eq!(match_prefix("/", "/"), Some("/"));
        assert_eq!(match_prefix("/", "/x"), None);
        assert_eq!(match_prefix("/static/", "/static/a.css"), Some("/a.css"));
        assert_eq!(match_prefix("/static/", "/static"), None);
        assert_eq!(match_prefix("/static/", "/staticx"), None);
    }

    #[test]
    fn vhost_exact_and_domain() {
        let exact = VHost::parse("Example.com");
        assert!(exact.matches("example.com"));
        assert!(!exact.matches("www.example.com"));
        let domain = VHost::parse(".example.com");
        assert!(domain.matches("example.com"));
        assert!(domain.matches("a.b.example.com"));
        assert!(!domain.matches("badexample.com"));
        assert!(!domain.matches("example.org"));
    }
}
