//! `cache_purge`: a handler that removes entries from the `file_cache` caches of a zone
//! (nuster's and nginx-cache-purge's PURGE). Only allowed addresses, or requests carrying the
//! shared secret, may purge; others get 403.
//!
//! - `PURGE /uri` removes the entry of that URI on the request's host, over both schemes and
//!   with all its variants (keys that extend it with `|...`: gzip's `|gzip`, Vary variants).
//! - `X-Purge-Prefix: /ads/` removes the host's entries whose URI starts with it,
//!   `X-Purge-Pattern: /ads/*.html` those whose URI matches the glob, and `X-Purge-Host: h`
//!   alone every entry of host `h` (it also names the host for the other two).
//!
//! The answer says how many entries went (`purged N`, or `{"purged": N}` when the client
//! accepts JSON); 404 when none did.

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;
use osprey_sdk::{
    host, http, parse_config, ConfigError, Handler, Outcome, Reply, Request, Response,
};
use subtle::ConstantTimeEq;

use crate::zones;

#[derive(serde::Deserialize)]
struct Conf {
    /// The zone whose caches are purged (every cache when absent).
    zone: Option<String>,
    /// Addresses or networks (CIDR) that may purge.
    #[serde(default)]
    allow: Vec<String>,
    /// A shared secret that, sent in `secret_header`, lets any address purge.
    secret: Option<String>,
    #[serde(default = "default_secret_header")]
    secret_header: String,
}

fn default_secret_header() -> String {
    "X-Purge-Secret".into()
}

pub struct Purge {
    zone: Option<String>,
    allow: Vec<IpNet>,
    secret: Option<String>,
    secret_header: String,
}

impl Purge {
    pub fn new(json: &str) -> Result<Purge, ConfigError> {
        let conf: Conf = parse_config(json)?;
        if conf.allow.is_empty() && conf.secret.is_none() {
            return Err(ConfigError::at_key(
                json,
                "handler",
                "`cache_purge` needs `allow` (addresses or CIDR networks) or `secret`",
            ));
        }
        if conf.secret.as_deref() == Some("") {
            return Err(ConfigError::at_key(json, "secret", "`secret` is empty"));
        }
        let allow = conf
            .allow
            .iter()
            .map(|a| parse_net(a))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ConfigError::at_key(
                    json,
                    "allow",
                    "`allow` entries must be IP addresses or CIDR networks (10.0.0.0/8, ::1)",
                )
            })?;
        Ok(Purge {
            zone: conf.zone,
            allow,
            secret: conf.secret,
            secret_header: conf.secret_header,
        })
    }

    fn permitted(&self, req: &Request<'_>) -> bool {
        let addr_ok = req
            .remote_ip()
            .parse::<IpAddr>()
            .is_ok_and(|ip| self.allow.iter().any(|n| n.contains(&ip.to_canonical())));
        let secret_ok = self.secret.as_ref().is_some_and(|s| {
            req.header(&self.secret_header)
                .is_some_and(|h| bool::from(h.as_bytes().ct_eq(s.as_bytes())))
        });
        addr_ok || secret_ok
    }
}

fn parse_net(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}

impl Handler for Purge {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        if req.method.as_str() != "PURGE" {
            http::respond_error(resp, 405, "this route only purges the cache");
            resp.header("Allow", "PURGE");
            return Outcome::Done;
        }
        if !self.permitted(req) {
            let why = "this address may not purge the cache, and the request has no valid secret";
            http::respond_error(resp, 403, why);
            return Outcome::Done;
        }
        let selector = match Selector::from_request(req) {
            Ok(s) => s,
            Err(why) => {
                http::respond_error(resp, 400, &why);
                return Outcome::Done;
            }
        };
        let json = req
            .header("accept")
            .is_some_and(|a| a.contains("application/json"));
        let stores = zones::find(self.zone.as_deref());
        let mut removed: HashSet<String> = HashSet::new();
        for store in &stores {
            removed.extend(store.purge(&|key| selector.matches(key)));
        }
        let shared: Vec<_> = stores
            .into_iter()
            .filter_map(|s| s.remote().cloned().map(|r| (s.clone(), r)))
            .collect();
        if shared.is_empty() {
            answer(resp, removed.len() as u64, json, None);
            return Outcome::Done;
        }
        // Redis is purged too, and tells the other servers.
        let mut resp = std::mem::take(resp);
        Outcome::later(async move {
            let mut failure = None;
            for (store, remote) in shared {
                match remote.purge(&selector).await {
                    Ok(keys) => {
                        let new = keys
                            .into_iter()
                            .filter(|k| removed.insert(k.clone()))
                            .count();
                        store.stats.purges.add(new as u64);
                    }
                    Err(err) => {
                        store.stats.store_errors.incr();
                        host::warn(&format!(
                            "file_cache: cannot purge Redis at {}: {err}",
                            remote.addr()
                        ));
                        failure = Some(err);
                    }
                }
            }
            answer(&mut resp, removed.len() as u64, json, failure);
            Reply::Done(resp)
        })
    }
}

/// `purged N` (or `{"purged": N}`): 200, 404 when none went, 503 when Redis could not be
/// purged (the entries of this server went nonetheless).
fn answer(resp: &mut Response, purged: u64, json: bool, failure: Option<String>) {
    let status = match (&failure, purged) {
        (Some(_), _) => 503,
        (None, 0) => 404,
        (None, _) => 200,
    };
    resp.status(status);
    resp.header("Cache-Control", "no-store");
    if json {
        let body = match failure {
            Some(err) => {
                serde_json::json!({"purged": purged, "shared_store_error": err}).to_string()
            }
            None => format!("{{\"purged\": {purged}}}"),
        };
        resp.content_type("application/json").body(body + "\n");
    } else {
        let body = match failure {
            Some(err) => format!("purged {purged}; the shared store was not purged: {err}\n"),
            None => format!("purged {purged}\n"),
        };
        resp.text(body);
    }
}

/// Which entries a purge removes, by the parts of their keys (`host|scheme|uri[|variant]`).
/// Sent to the other servers of a shared store as JSON.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum Selector {
    Uri {
        host: String,
        uri: String,
    },
    Host(String),
    Prefix {
        host: String,
        prefix: String,
    },
    Pattern {
        host: String,
        #[serde(with = "glob_text")]
        glob: glob::Pattern,
    },
}

/// A glob travels as its text.
mod glob_text {
    pub fn serialize<S: serde::Serializer>(g: &glob::Pattern, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(g.as_str())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<glob::Pattern, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        glob::Pattern::new(&text).map_err(serde::de::Error::custom)
    }
}

impl Selector {
    /// The host whose entries it selects.
    pub fn host(&self) -> &str {
        match self {
            Selector::Uri { host, .. }
            | Selector::Host(host)
            | Selector::Prefix { host, .. }
            | Selector::Pattern { host, .. } => host,
        }
    }

    pub fn from_request(req: &Request<'_>) -> Result<Selector, String> {
        let named_host = req.header("x-purge-host").map(str::to_ascii_lowercase);
        let host = named_host
            .clone()
            .unwrap_or_else(|| req.host.as_str().to_owned());
        if let Some(prefix) = req.header("x-purge-prefix") {
            return Ok(Selector::Prefix {
                host,
                prefix: prefix.to_owned(),
            });
        }
        if let Some(pattern) = req.header("x-purge-pattern") {
            let glob = glob::Pattern::new(pattern)
                .map_err(|e| format!("bad X-Purge-Pattern `{pattern}`: {e}"))?;
            return Ok(Selector::Pattern { host, glob });
        }
        if let Some(host) = named_host {
            return Ok(Selector::Host(host));
        }
        Ok(Selector::Uri {
            host,
            uri: req.uri.as_str().to_owned(),
        })
    }

    pub fn matches(&self, key: &str) -> bool {
        let mut parts = key.splitn(3, '|');
        let (Some(key_host), Some(_scheme), Some(rest)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        // The URI ends where a filter's variant suffix begins.
        let uri = rest.split('|').next().unwrap_or(rest);
        match self {
            Selector::Uri { host, uri: u } => key_host == host && uri == u,
            Selector::Host(host) => key_host == host,
            Selector::Prefix { host, prefix } => {
                key_host == host && uri.starts_with(prefix.as_str())
            }
            Selector::Pattern { host, glob } => key_host == host && glob.matches(uri),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(host: &str, uri: &str) -> Selector {
        Selector::Uri {
            host: host.into(),
            uri: uri.into(),
        }
    }

    #[test]
    fn a_uri_takes_its_variants_on_both_schemes_and_nothing_else() {
        let s = uri("a.com", "/x?q=1");
        assert!(s.matches("a.com|http|/x?q=1"));
        assert!(s.matches("a.com|https|/x?q=1|gzip"));
        assert!(s.matches("a.com|http|/x?q=1|w=100|gzip"));
        assert!(!s.matches("a.com|http|/x?q=12"));
        assert!(!s.matches("a.com|http|/x"));
        assert!(!s.matches("b.com|http|/x?q=1"));
        assert!(!s.matches("garbage"));
    }

    #[test]
    fn prefixes_patterns_and_hosts() {
        let p = Selector::Prefix {
            host: "a.com".into(),
            prefix: "/ads/".into(),
        };
        assert!(p.matches("a.com|http|/ads/1.html|gzip"));
        assert!(!p.matches("a.com|http|/adsx"));
        assert!(!p.matches("b.com|http|/ads/1.html"));
        let g = Selector::Pattern {
            host: "a.com".into(),
            glob: glob::Pattern::new("/ads/*.js").unwrap(),
        };
        assert!(g.matches("a.com|http|/ads/x/y.js"));
        assert!(!g.matches("a.com|http|/ads/y.css"));
        let h = Selector::Host("a.com".into());
        assert!(h.matches("a.com|https|/anything|gzip"));
        assert!(!h.matches("a.comx|https|/anything"));
    }

    #[test]
    fn networks_and_single_addresses() {
        assert!(parse_net("10.0.0.0/8")
            .unwrap()
            .contains(&"10.1.2.3".parse::<IpAddr>().unwrap()));
        assert!(parse_net("::1")
            .unwrap()
            .contains(&"::1".parse::<IpAddr>().unwrap()));
        assert!(parse_net("10.0.0.0/33").is_none());
        assert!(parse_net("localhost").is_none());
    }
}
