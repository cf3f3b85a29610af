//! `host_redirect` (NXWEB's): requests for any host but the canonical one (or one of the
//! `pass` hosts) are redirected to `http[s]://<host><original uri>`, query kept; the
//! canonical host's requests are declined, so routing goes on to the next route.

use osprey_sdk::{parse_config, ConfigError, Handler, Outcome, Request, Response};

#[derive(serde::Deserialize)]
struct Conf {
    /// The canonical `host[:port]`.
    host: String,
    /// Hosts served as they are: `example.org`, or `.example.org` for it and its subdomains.
    #[serde(default)]
    pass: Vec<String>,
}

pub struct HostRedirect {
    /// `host[:port]`, lower-cased, as written into `Location`.
    authority: String,
    /// The host part of `authority` (what `Request::host` is compared with).
    host: String,
    pass: Vec<String>,
}

impl HostRedirect {
    pub fn new(json: &str) -> Result<HostRedirect, ConfigError> {
        let conf: Conf = parse_config(json)?;
        let authority = conf.host.to_ascii_lowercase();
        let Some(host) = authority_host(&authority) else {
            let m = format!("`{}` is not a valid host[:port]", conf.host);
            return Err(ConfigError::at_key(json, "host", m));
        };
        if let Some(bad) = conf.pass.iter().find(|p| {
            let h = p.strip_prefix('.').unwrap_or(p);
            authority_host(h) != Some(h)
        }) {
            let m = format!("pass: `{bad}` is not a host or `.domain`");
            return Err(ConfigError::at_key(json, "pass", m));
        }
        Ok(HostRedirect {
            host: host.to_owned(),
            authority,
            pass: conf.pass.iter().map(|p| p.to_ascii_lowercase()).collect(),
        })
    }

    fn passes(&self, host: &str) -> bool {
        host == self.host
            || self.pass.iter().any(|p| match p.strip_prefix('.') {
                Some(domain) => host == domain || host.ends_with(p.as_str()),
                None => host == p,
            })
    }
}

impl Handler for HostRedirect {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        let host = req.host.as_str();
        // A subrequest (an include) is never redirected: its page was served for this host,
        // and a 301 would only be spliced into it.
        if req.subrequest || !host.is_empty() && self.passes(host) {
            return Outcome::Next;
        }
        let scheme = if req.secure { "https" } else { "http" };
        let uri = match req.uri.as_str() {
            u if u.starts_with('/') => u,
            _ => "/",
        };
        // 308 keeps the method and body of a POST (RFC 9110 15.4.9); 301 may turn it into GET.
        let status = if matches!(req.method.as_str(), "GET" | "HEAD") {
            301
        } else {
            308
        };
        resp.redirect(status, &format!("{scheme}://{}{uri}", self.authority));
        Outcome::Done
    }
}

/// The host of an authority `host[:port]` (RFC 3986 3.2: a reg-name, IPv4 or `[IPv6]`), if
/// it is one.
fn authority_host(authority: &str) -> Option<&str> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let end = rest.find(']')?;
            rest[..end].parse::<std::net::Ipv6Addr>().ok()?;
            (&authority[..end + 2], &rest[end + 1..])
        }
        None => match authority.split_once(':') {
            Some((h, p)) => (h, &authority[h.len()..][..p.len() + 1]),
            None => (authority, ""),
        },
    };
    if let Some(p) = port.strip_prefix(':') {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().ok()? == 0 {
            return None;
        }
    } else if !port.is_empty() {
        return None;
    }
    let reg_name = host.starts_with('[')
        || !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
    reg_name.then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities() {
        assert_eq!(authority_host("www.example.com"), Some("www.example.com"));
        assert_eq!(authority_host("example.com:8080"), Some("example.com"));
        assert_eq!(authority_host("10.0.0.1:80"), Some("10.0.0.1"));
        assert_eq!(authority_host("[::1]:8443"), Some("[::1]"));
        for bad in [
            "", "a b", "a:", "a:0", "a:99999", "a:x", "http://a", "a/b", "[zz]", "-a.com", "a..b",
            "[::1]x",
        ] {
            assert_eq!(authority_host(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_subrequest_is_never_redirected() {
        let h = HostRedirect::new(r#"{"host": "www.example.com"}"#).unwrap();
        let outcome = |req: osprey_sdk::testing::TestRequest| {
            req.with_view(|r| h.handle(r, &mut Response::new()))
        };
        let other = || osprey_sdk::testing::TestRequest::get("/a").header("Host", "other.test");
        assert!(matches!(outcome(other()), Outcome::Done));
        assert!(matches!(outcome(other().subrequest(true)), Outcome::Next));
    }

    #[test]
    fn bad_host_is_refused_with_its_line() {
        let e = HostRedirect::new("{\n\"host\": \"http://www.example.com\"}")
            .err()
            .unwrap();
        assert_eq!(e.line, 2, "{e}");
        assert!(HostRedirect::new("{\"host\": \"a.com\", \"pass\": [\"b c\"]}").is_err());
        assert!(
            HostRedirect::new("{\"host\": \"a.com\", \"pass\": [\".b.com\", \"c.com\"]}").is_ok()
        );
    }
}
