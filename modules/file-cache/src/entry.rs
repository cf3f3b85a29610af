//! A cached response and the HTTP caching rules (RFC 9111) that decide what is stored, how
//! long it is fresh, and how it is served.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::http::{self, Precondition, Validators};
use osprey_sdk::{Request, Response};

/// Milliseconds since the Unix epoch (entries outlive the process on disk).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

#[derive(Debug)]
pub struct Entry {
    pub headers: Vec<(String, String)>,
    pub body: RArc<RVec<u8>>,
    /// When the origin produced (or last confirmed) it, less any `Age` it came with.
    pub stored_ms: u64,
    pub fresh_until_ms: u64,
}

/// Headers that describe one hop or that the core writes itself: never stored.
const NOT_STORED: &[&str] = &[
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "date",
    "age",
    "warning",
    "proxy-connection",
    "upgrade",
];

fn directives(value: Option<&str>) -> impl Iterator<Item = (String, Option<&str>)> {
    value.into_iter().flat_map(|v| v.split(',')).map(|d| {
        let (name, arg) = match d.split_once('=') {
            Some((n, a)) => (n, Some(a.trim().trim_matches('"'))),
            None => (d, None),
        };
        (name.trim().to_ascii_lowercase(), arg)
    })
}

fn has_directive(value: Option<&str>, name: &str) -> bool {
    directives(value).any(|(n, _)| n == name)
}

/// How long the response stays fresh, in seconds: `s-maxage`, `max-age`, `Expires`, else
/// `ttl`. `no-cache` means it must be revalidated every time (0).
pub fn lifetime(resp: &Response, ttl: u64, now_ms: u64) -> u64 {
    let cc = resp.get_header("cache-control");
    if has_directive(cc, "no-cache") {
        return 0;
    }
    let mut max_age = None;
    for (name, arg) in directives(cc) {
        let secs = arg.and_then(|a| a.parse::<u64>().ok());
        match name.as_str() {
            "s-maxage" => return secs.unwrap_or(0),
            "max-age" => max_age = Some(secs.unwrap_or(0)),
            _ => {}
        }
    }
    if let Some(secs) = max_age {
        return secs;
    }
    if let Some(expires) = resp.get_header("expires") {
        // An invalid date (such as "0") means "already expired".
        let Ok(at) = httpdate::parse_http_date(expires) else {
            return 0;
        };
        let base = resp
            .get_header("date")
            .and_then(|d| httpdate::parse_http_date(d).ok())
            .unwrap_or(UNIX_EPOCH + Duration::from_millis(now_ms));
        return at.duration_since(base).map_or(0, |d| d.as_secs());
    }
    ttl
}

/// May a shared cache store this answer to this request?
pub fn storable(req: &Request<'_>, resp: &Response) -> bool {
    let cc = resp.get_header("cache-control");
    if req.method.as_str() != "GET"
        || resp.status != 200
        || resp.get_header("set-cookie").is_some()
        || has_directive(cc, "no-store")
        || has_directive(cc, "private")
        || has_directive(req.header("cache-control"), "no-store")
    {
        return false;
    }
    // `Vary: *`: no request is known to match (other Vary values are stored per variant).
    if resp
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("vary"))
        .any(|h| h.value.split(',').any(|t| t.trim() == "*"))
    {
        return false;
    }
    // Answers to authenticated requests are for that user unless marked shareable.
    if req.header("authorization").is_some()
        && !has_directive(cc, "public")
        && !has_directive(cc, "s-maxage")
    {
        return false;
    }
    true
}

/// Does the client ask for a validated answer (RFC 9111 §5.2.1): `no-cache`, a `max-age`
/// the entry is older than, or HTTP/1.0's `Pragma: no-cache` without `Cache-Control`?
pub fn client_wants_validation(req: &Request<'_>, age: u64) -> bool {
    let cc = req.header("cache-control");
    if cc.is_none() {
        return req
            .header("pragma")
            .is_some_and(|p| has_directive(Some(p), "no-cache"));
    }
    directives(cc).any(|(name, arg)| match name.as_str() {
        "no-cache" => true,
        // `max-age=0` (a browser's reload) always revalidates, even an entry stored this second.
        "max-age" => arg
            .and_then(|a| a.parse::<u64>().ok())
            .is_none_or(|max| max == 0 || age > max),
        _ => false,
    })
}

impl Entry {
    /// Build an entry from an origin response with `body`.
    pub fn from_response(resp: &Response, body: Vec<u8>, ttl: u64, now: u64) -> Entry {
        let headers = resp
            .headers
            .iter()
            .filter(|h| !NOT_STORED.iter().any(|n| h.name.eq_ignore_ascii_case(n)))
            .map(|h| (h.name.to_string(), h.value.to_string()))
            .collect();
        let mut e = Entry {
            headers,
            body: RArc::new(RVec::from(body)),
            stored_ms: 0,
            fresh_until_ms: 0,
        };
        e.confirm(resp, ttl, now);
        e
    }

    /// The origin confirmed the entry (a fresh answer or a 304): restart its freshness.
    fn confirm(&mut self, resp: &Response, ttl: u64, now: u64) {
        let age = resp
            .get_header("age")
            .and_then(|a| a.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let mut probe = Response::new();
        for (n, v) in &self.headers {
            probe.header(n.clone(), v.clone());
        }
        let life = lifetime(&probe, ttl, now);
        self.stored_ms = now.saturating_sub(age * 1000);
        self.fresh_until_ms = self.stored_ms + life * 1000;
    }

    /// A 304 from the origin: take its headers (RFC 9111 §4.3.4), then restart freshness.
    pub fn refreshed(&self, not_modified: &Response, ttl: u64, now: u64) -> Entry {
        let mut headers = self.headers.clone();
        for h in not_modified.headers.iter() {
            if NOT_STORED.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
                continue;
            }
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&h.name));
        }
        for h in not_modified.headers.iter() {
            if !NOT_STORED.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
                headers.push((h.name.to_string(), h.value.to_string()));
            }
        }
        let mut e = Entry {
            headers,
            body: self.body.clone(),
            stored_ms: 0,
            fresh_until_ms: 0,
        };
        e.confirm(not_modified, ttl, now);
        e
    }

    /// Worth keeping: fresh for a while, or revalidatable.
    pub fn worth_storing(&self) -> bool {
        self.fresh_until_ms > self.stored_ms
            || self.header("etag").is_some()
            || self.header("last-modified").is_some()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn is_fresh(&self, now: u64) -> bool {
        now < self.fresh_until_ms
    }

    /// Seconds since the origin produced or confirmed it (the `Age` it is served with).
    pub fn age(&self, now: u64) -> u64 {
        now.saturating_sub(self.stored_ms) / 1000
    }

    /// The seconds of a `Cache-Control` directive of the entry, such as `stale-if-error`.
    fn seconds(&self, directive: &str) -> Option<u64> {
        directives(self.header("cache-control"))
            .find(|(n, _)| n == directive)
            .map(|(_, arg)| arg.and_then(|a| a.parse().ok()).unwrap_or(0))
    }

    /// May it ever be served stale? Not when the origin demands revalidation (RFC 9111
    /// §4.2.4; `s-maxage` implies `proxy-revalidate` for a shared cache).
    fn may_be_stale(&self) -> bool {
        let cc = self.header("cache-control");
        ![
            "must-revalidate",
            "proxy-revalidate",
            "no-cache",
            "s-maxage",
        ]
        .iter()
        .any(|d| has_directive(cc, d))
    }

    /// Within its `stale-while-revalidate` window (RFC 5861 §3): it may be served while
    /// another request revalidates it.
    pub fn may_serve_while_revalidating(&self, now: u64) -> bool {
        self.may_be_stale()
            && self
                .seconds("stale-while-revalidate")
                .is_some_and(|window| self.staleness_ms(now) <= window * 1000)
    }

    /// May it stand in for an origin error? Within its `stale-if-error` window (RFC 5861
    /// §4) if it has one, else always (NXWEB's serve-stale); never past `max_stale`.
    pub fn may_serve_on_error(&self, now: u64, max_stale: Option<u64>) -> bool {
        let stale_ms = self.staleness_ms(now);
        self.may_be_stale()
            && self
                .seconds("stale-if-error")
                .is_none_or(|window| stale_ms <= window * 1000)
            && max_stale.is_none_or(|max| stale_ms / 1000 <= max)
    }

    fn staleness_ms(&self, now: u64) -> u64 {
        now.saturating_sub(self.fresh_until_ms)
    }

    /// Fill `resp` from the entry. A client's own conditional request is answered from the
    /// entry's validators (304, or 412 when a precondition fails). `stale` adds `Warning: 110`.
    pub fn serve(&self, req: &Request<'_>, resp: &mut Response, now: u64, stale: bool) {
        resp.clear();
        let validators =
            Validators::from_headers(self.header("etag"), self.header("last-modified"));
        let verdict = http::evaluate(req, &validators);
        if verdict == Precondition::Failed {
            // Not the entry's headers: its Cache-Control must not make the 412 cacheable.
            http::respond_error(
                resp,
                412,
                "the cached response does not match the request's preconditions",
            );
            return;
        }
        for (n, v) in &self.headers {
            resp.header(n.clone(), v.clone());
        }
        resp.header("Age", self.age(now).to_string());
        if stale {
            resp.header("Warning", "110 - \"Response is Stale\"");
        }
        if verdict == Precondition::NotModified {
            resp.status(304);
        } else {
            resp.body_shared(self.body.clone());
        }
    }
}
