//! `cors`: Cross-Origin Resource Sharing (NXWEB's `cors` filter, with nginx-style extras).
//! An allowed `Origin` is echoed on every answer, error answers included; a preflight
//! `OPTIONS` is answered here (204) without running the handler. A disallowed origin gets
//! no CORS headers, never an error.

use osprey_sdk::fields::{add_vary, is_token, static_text};
use osprey_sdk::{parse_config, ConfigError, Filter, Request, Response, Step};

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

/// Header values are fixed at configuration time: answers carry them without a copy.
pub struct Cors {
    hosts: Vec<String>,
    credentials: bool,
    max_age: Option<&'static str>,
    methods: &'static str,
    headers: Option<&'static str>,
    expose: Option<&'static str>,
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
        Ok(Cors {
            hosts: conf
                .allow_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            credentials: conf.allow_credentials,
            max_age: conf.max_age.map(|s| static_text(&s.to_string())),
            methods: static_text(&methods),
            headers: headers.as_deref().map(static_text),
            expose: (!expose.is_empty()).then(|| static_text(&expose)),
        })
    }

    /// The request's `Origin` if it is allowed.
    fn allowed_origin<'r>(&self, req: &Request<'r>) -> Option<&'r str> {
        let origin = req.header("origin")?;
        let host = origin_host(origin)?;
        self.hosts
            .iter()
            .any(|p| host_matches(p, host))
            .then_some(origin)
    }

    /// The headers every answer to an allowed origin carries.
    fn allow(&self, origin: &str, resp: &mut Response) {
        resp.set_header("Access-Control-Allow-Origin", origin.to_owned());
        if self.credentials {
            resp.set_header("Access-Control-Allow-Credentials", "true");
        }
    }
}

impl Filter for Cors {
    /// Answers differ by allowed origin: a cache further in keeps them apart.
    fn cache_key(&self, req: &Request<'_>, key: &mut String) {
        if let Some(origin) = self.allowed_origin(req) {
            key.push_str("|origin=");
            key.push_str(origin);
        }
    }

    /// A preflight from an allowed origin is answered here.
    fn before(&self, req: &Request<'_>, _key: &str, resp: &mut Response) -> Step {
        let preflight = req.method.as_str() == "OPTIONS"
            && req.header("access-control-request-method").is_some();
        let Some(origin) = preflight.then(|| self.allowed_origin(req)).flatten() else {
            return Step::Continue;
        };
        resp.status(204);
        add_vary(resp, "Origin");
        self.allow(origin, resp);
        resp.set_header("Access-Control-Allow-Methods", self.methods);
        if let Some(headers) = self.headers {
            resp.set_header("Access-Control-Allow-Headers", headers);
        } else if let Some(asked) = req.header("access-control-request-headers") {
            resp.set_header("Access-Control-Allow-Headers", asked.to_owned());
        }
        if let Some(age) = self.max_age {
            resp.set_header("Access-Control-Max-Age", age);
        }
        Step::Respond
    }

    /// Every answer, error pages included, so callers see real statuses.
    fn after(&self, req: &Request<'_>, _key: &str, resp: &mut Response) {
        add_vary(resp, "Origin");
        let Some(origin) = self.allowed_origin(req) else {
            return;
        };
        self.allow(origin, resp);
        if let Some(expose) = self.expose {
            resp.set_header("Access-Control-Expose-Headers", expose);
        }
    }
}

/// The host of an `Origin` (`scheme://host[:port]`), port removed. `null` and anything
/// else malformed has none. (Byte scans: this runs on every request.)
fn origin_host(origin: &str) -> Option<&str> {
    let colon = origin.bytes().position(|b| b == b':')?;
    let rest = origin[colon..].strip_prefix("://")?;
    if colon == 0 || rest.is_empty() || rest.bytes().any(|b| b"/?#@".contains(&b)) {
        return None;
    }
    let end = match rest.as_bytes()[0] {
        b'[' => rest.bytes().position(|b| b == b']')? + 1,
        _ => rest.bytes().position(|b| b == b':').unwrap_or(rest.len()),
    };
    (end > 0).then(|| &rest[..end])
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
