//! `cors`: Cross-Origin Resource Sharing (NXWEB's `cors` filter, with nginx-style extras).
//! An allowed `Origin` is echoed on every answer, error answers included; a preflight
//! `OPTIONS` is answered here (204) without running the handler. A disallowed origin gets
//! no CORS headers, never an error.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use osprey_sdk::fields::{add_fixed_vary, is_token};
use osprey_sdk::{parse_config, ConfigError, Filter, FixedHeader, Request, Response, Step, Wants};

#[derive(serde::Deserialize)]
struct Conf {
    /// `example.com` exactly, `.example.com` for it and its subdomains, `*` for any origin.
    allow_hosts: Vec<String>,
    #[serde(default)]
    allow_credentials: bool,
    /// Seconds a browser may cache a preflight answer.
    max_age: Option<u32>,
    allow_methods: Option<Vec<String>>,
    /// Default: the headers the preflight asks for.
    allow_headers: Option<Vec<String>>,
    #[serde(default)]
    expose_headers: Vec<String>,
}

/// Headers but the echoed origin are fixed at configuration time: checked and encoded
/// once, answers carry them without a copy.
pub struct Cors {
    /// Names this filter in the per-thread memo of [`Cors::allowed_origin`].
    id: u64,
    hosts: Vec<String>,
    vary: &'static FixedHeader,
    /// The name only: the value is the request's origin.
    allow_origin: &'static FixedHeader,
    credentials: Option<&'static FixedHeader>,
    max_age: Option<&'static FixedHeader>,
    methods: &'static FixedHeader,
    headers: Option<&'static FixedHeader>,
    expose: Option<&'static FixedHeader>,
}

impl Cors {
    pub fn new(json: &str) -> Result<Cors, ConfigError> {
        let conf: Conf = parse_config(json)?;
        for h in &conf.allow_hosts {
            if !valid_host_pattern(h) {
                let m = format!("allow_hosts: `{h}` is not a host, `.domain` or `*`");
                return Err(ConfigError::at_key(json, "allow_hosts", m));
            }
        }
        let list = |key: &str, items: &[String]| -> Result<String, ConfigError> {
            match items.iter().find(|t| !is_token(t)) {
                Some(bad) => Err(ConfigError::at_key(
                    json,
                    key,
                    format!("{key}: `{bad}` is not a method or header name"),
                )),
                None => Ok(items.join(", ")),
            }
        };
        let methods = conf.allow_methods.as_deref().unwrap_or(&[]);
        let methods = match methods.is_empty() {
            true => "GET, HEAD, POST".to_owned(),
            false => list("allow_methods", methods)?,
        };
        let headers = match &conf.allow_headers {
            Some(h) => Some(list("allow_headers", h)?),
            None => None,
        };
        let expose = list("expose_headers", &conf.expose_headers)?;
        // Names and values are tokens and digits by now: nothing left to refuse.
        let fixed = |name: &str, value: &str| FixedHeader::new(name, value).expect("checked");
        static IDS: AtomicU64 = AtomicU64::new(0);
        Ok(Cors {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            hosts: conf
                .allow_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            vary: fixed("Vary", "Origin"),
            allow_origin: fixed("Access-Control-Allow-Origin", ""),
            credentials: conf
                .allow_credentials
                .then(|| fixed("Access-Control-Allow-Credentials", "true")),
            max_age: conf
                .max_age
                .map(|s| fixed("Access-Control-Max-Age", &s.to_string())),
            methods: fixed("Access-Control-Allow-Methods", &methods),
            headers: headers.map(|h| fixed("Access-Control-Allow-Headers", &h)),
            expose: (!expose.is_empty()).then(|| fixed("Access-Control-Expose-Headers", &expose)),
        })
    }

    /// The request's `Origin` if it is allowed, with its `Access-Control-Allow-Origin` when
    /// one is kept (see [`kept_allow_origin`]). The answer for the last origin is kept per
    /// thread: `cache_key` and `after` of a request ask about the same one, and so do a
    /// client's requests in a row.
    fn allowed_origin<'r>(&self, req: &Request<'r>) -> Option<Allowed<'r>> {
        thread_local!(static LAST: RefCell<(u64, String, Option<Kept>)> = const { RefCell::new((u64::MAX, String::new(), None)) });
        let origin = req.header("origin")?;
        let allowed = LAST.with_borrow_mut(|(id, last, allowed)| {
            if *id != self.id || last != origin {
                *allowed = self.allows(origin).then(|| kept_allow_origin(origin));
                *id = self.id;
                last.clear();
                last.push_str(origin);
            }
            *allowed
        });
        allowed.map(|kept| (origin, kept))
    }

    fn allows(&self, origin: &str) -> bool {
        origin_host(origin).is_some_and(|host| self.hosts.iter().any(|p| host_matches(p, host)))
    }

    /// The headers every answer to an allowed origin carries; `replace`: the answer may have
    /// some of them already (else they are only added).
    fn allow(&self, (origin, kept): Allowed<'_>, resp: &mut Response, replace: bool) {
        match (kept, replace) {
            (Some(header), true) => resp.set_fixed_header(header),
            (Some(header), false) => resp.fixed_header(header),
            (None, true) => resp.set_header_named(self.allow_origin, origin.to_owned()),
            (None, false) => resp.header_named(self.allow_origin, origin.to_owned()),
        };
        if let Some(credentials) = self.credentials {
            put(resp, credentials, replace);
        }
    }
}

/// Add `header`, or with `replace` put it in place of any of its name.
fn put(resp: &mut Response, header: &'static FixedHeader, replace: bool) {
    match replace {
        true => resp.set_fixed_header(header),
        false => resp.fixed_header(header),
    };
}

/// What one look over an answer's headers finds: a `Vary` to extend, and a CORS response
/// header (`Access-Control-…`) this filter must replace rather than add. Most answers have
/// neither, and then each header this filter sends is only added (no other walk of the list).
fn scan(resp: &Response) -> (bool, bool) {
    let (mut vary, mut cors) = (false, false);
    for h in resp.headers.iter() {
        let name = h.name.as_str().as_bytes();
        match name.len() {
            4 => vary |= name.eq_ignore_ascii_case(b"vary"),
            len => cors |= len > 15 && name[..15].eq_ignore_ascii_case(b"access-control-"),
        }
    }
    (vary, cors)
}

impl Filter for Cors {
    /// `before` only for `OPTIONS`: no call for any other request.
    fn wants(&self) -> Wants {
        Wants::CACHE_KEY | Wants::BEFORE_OPTIONS | Wants::AFTER
    }

    /// Answers differ by allowed origin: a cache further in keeps them apart.
    fn cache_key(&self, req: &Request<'_>, key: &mut String) {
        if let Some((origin, _)) = self.allowed_origin(req) {
            key.push_str("|origin=");
            key.push_str(origin);
        }
    }

    /// A preflight from an allowed origin is answered here.
    fn before(&self, req: &Request<'_>, _key: &str, resp: &mut Response) -> Step {
        let preflight = req.method.as_str() == "OPTIONS"
            && req.header("access-control-request-method").is_some();
        let Some(allowed) = preflight.then(|| self.allowed_origin(req)).flatten() else {
            return Step::Continue;
        };
        resp.status(204);
        add_fixed_vary(resp, self.vary);
        self.allow(allowed, resp, true);
        resp.set_fixed_header(self.methods);
        if let Some(headers) = self.headers {
            resp.set_fixed_header(headers);
        } else if let Some(asked) = req.header("access-control-request-headers") {
            resp.set_header("Access-Control-Allow-Headers", asked.to_owned());
        }
        if let Some(age) = self.max_age {
            resp.set_fixed_header(age);
        }
        Step::Respond
    }

    /// Every answer, error pages included, so callers see real statuses.
    fn after(&self, req: &Request<'_>, _key: &str, resp: &mut Response) {
        let (vary, replace) = scan(resp);
        match vary {
            true => add_fixed_vary(resp, self.vary),
            false => put(resp, self.vary, false),
        }
        let Some(allowed) = self.allowed_origin(req) else {
            return;
        };
        self.allow(allowed, resp, replace);
        if let Some(expose) = self.expose {
            put(resp, expose, replace);
        }
    }
}

/// An allowed origin and, when kept, its `Access-Control-Allow-Origin`.
type Allowed<'r> = (&'r str, Kept);
type Kept = Option<&'static FixedHeader>;

/// How many allowed origins are kept as fixed headers, for the life of the process (a few
/// tens of KiB at most: a client sending ever new subdomains or ports only fills it, and
/// origins past it are copied per answer, as any value).
const KEPT_ORIGINS: usize = 256;

/// `Access-Control-Allow-Origin: <origin>` checked and encoded once, shared by every answer
/// to that origin (no copy, no check per answer), while fewer than [`KEPT_ORIGINS`] are.
/// Asked only when a thread's last origin changes.
fn kept_allow_origin(origin: &str) -> Kept {
    static KEPT: Mutex<BTreeMap<String, &'static FixedHeader>> = Mutex::new(BTreeMap::new());
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&header) = kept.get(origin) {
        return Some(header);
    }
    if kept.len() >= KEPT_ORIGINS {
        return None;
    }
    let header = FixedHeader::new("Access-Control-Allow-Origin", origin).ok()?;
    kept.insert(origin.to_owned(), header);
    Some(header)
}

/// The host of an `Origin` (`scheme://host[:port]`), port removed. `null` and anything
/// else malformed has none. (One pass over the bytes: this runs on every request.)
fn origin_host(origin: &str) -> Option<&str> {
    let colon = origin.bytes().position(|b| b == b':')?;
    let rest = origin[colon..].strip_prefix("://")?;
    let bracketed = rest.starts_with('[');
    let mut end = None;
    for (i, b) in rest.bytes().enumerate() {
        match b {
            b'/' | b'?' | b'#' | b'@' => return None,
            b']' if bracketed && end.is_none() => end = Some(i + 1),
            b':' if !bracketed && end.is_none() => end = Some(i),
            _ => {}
        }
    }
    let end = match end {
        Some(end) => end,
        None if !bracketed => rest.len(),
        None => return None,
    };
    (colon > 0 && end > 0).then(|| &rest[..end])
}

/// `*`, `example.com` (exactly), `.example.com` (it and its subdomains); case-insensitive.
fn host_matches(pattern: &str, host: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_prefix('.') {
        Some(domain) => {
            host.eq_ignore_ascii_case(domain)
                || host.len() > pattern.len()
                    && host[host.len() - pattern.len()..].eq_ignore_ascii_case(pattern)
        }
        None => host.eq_ignore_ascii_case(pattern),
    }
}

fn valid_host_pattern(p: &str) -> bool {
    let host = p.strip_prefix('.').unwrap_or(p);
    p == "*"
        || !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_as_routing_vhosts_do() {
        assert_eq!(
            origin_host("https://a.example.com:8443"),
            Some("a.example.com")
        );
        assert_eq!(origin_host("http://[::1]:80"), Some("[::1]"));
        assert_eq!(origin_host("null"), None);
        assert_eq!(origin_host("https://a.com/path"), None);
        assert_eq!(origin_host("https://a.com"), Some("a.com"));
        assert_eq!(origin_host("://a.com"), None);
        assert_eq!(origin_host("https://"), None);
        assert_eq!(origin_host("https://:443"), None);
        assert_eq!(origin_host("https://u@a.com"), None);
        assert_eq!(origin_host("http://[::1"), None);
        assert!(host_matches(".example.com", "example.com"));
        assert!(host_matches(".example.com", "a.B.example.com"));
        assert!(!host_matches(".example.com", "badexample.com"));
        assert!(!host_matches("example.com", "a.example.com"));
        assert!(host_matches("*", "anything"));
    }

    #[test]
    fn the_kept_answer_is_per_filter_and_origin() {
        let a = Cors::new(r#"{"allow_hosts": ["a.com"]}"#).unwrap();
        let b = Cors::new(r#"{"allow_hosts": ["b.com"]}"#).unwrap();
        let ask = |f: &Cors, origin: &str| {
            osprey_sdk::testing::TestRequest::get("/")
                .header("Origin", origin)
                .with_view(|r| f.allowed_origin(r).map(|(o, _)| o.to_owned()))
        };
        assert_eq!(ask(&a, "https://a.com").as_deref(), Some("https://a.com"));
        assert_eq!(ask(&b, "https://a.com"), None);
        assert_eq!(ask(&b, "https://a.com"), None);
        assert_eq!(ask(&a, "https://b.com"), None);
        assert_eq!(ask(&b, "https://b.com").as_deref(), Some("https://b.com"));
        assert_eq!(
            ask(&a, "https://a.com:8443").as_deref(),
            Some("https://a.com:8443")
        );
    }

    #[test]
    fn allowed_origins_are_kept_as_fixed_headers_up_to_a_bound() {
        let kept = kept_allow_origin("https://kept.example.com").unwrap();
        assert_eq!(
            kept.line(),
            b"\r\nAccess-Control-Allow-Origin: https://kept.example.com"
        );
        let again = kept_allow_origin("https://kept.example.com").unwrap();
        assert!(std::ptr::eq(kept, again));
        // Past the bound: none kept (the origin is copied per answer); the kept stay.
        let many: Vec<_> = (0..KEPT_ORIGINS + 1)
            .map(|i| kept_allow_origin(&format!("https://h{i}.example.com")))
            .collect();
        assert!(many.last().unwrap().is_none());
        assert!(kept_allow_origin("https://kept.example.com").is_some());
    }

    #[test]
    fn after_replaces_cors_headers_and_extends_vary() {
        let cors = Cors::new(r#"{"allow_hosts": ["a.com"], "allow_credentials": true}"#).unwrap();
        let after = |resp: &mut Response| {
            osprey_sdk::testing::TestRequest::get("/")
                .header("Origin", "https://a.com")
                .with_view(|r| cors.after(r, "", resp))
        };
        // Neither: each added once.
        let mut r = Response::new();
        r.header("Content-Type", "text/plain");
        after(&mut r);
        assert_eq!(r.get_header("vary"), Some("Origin"));
        assert_eq!(
            r.get_header("access-control-allow-origin"),
            Some("https://a.com")
        );
        assert_eq!(r.headers.len(), 4);
        // The handler's own: replaced, and its Vary extended.
        let mut r = Response::new();
        r.header("Vary", "Accept")
            .header("Access-Control-Allow-Origin", "*")
            .header("access-control-allow-credentials", "false");
        after(&mut r);
        assert_eq!(r.get_header("vary"), Some("Accept, Origin"));
        assert_eq!(
            r.get_header("access-control-allow-origin"),
            Some("https://a.com")
        );
        assert_eq!(
            r.get_header("access-control-allow-credentials"),
            Some("true")
        );
        assert_eq!(r.headers.len(), 3);
    }

    #[test]
    fn bad_configuration_is_refused_with_its_line() {
        let e = Cors::new(
            "{\"allow_hosts\": [\"a.com\"],\n\"allow_methods\": [\"GET\", \"BAD METHOD\"]}",
        )
        .err()
        .unwrap();
        assert_eq!(e.line, 2, "{e}");
        let e = Cors::new("{\"allow_hosts\": [\"a b\"]}").err().unwrap();
        assert!(e.message.contains("a b"), "{e}");
        let e = Cors::new("{\"allow_hosts\": [],\n\"max_agee\": 5}")
            .err()
            .unwrap();
        assert_eq!(e.line, 2, "{e}");
    }
}
