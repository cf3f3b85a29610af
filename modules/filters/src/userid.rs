//! `userid` (nginx's): a visitor-id cookie, set when the request has none or a malformed one.
//! The id is 128 bits shown as 32 hex digits, derived from the request's id (itself 128 bits
//! from the kernel's random source) through SHA-256 keyed with a per-process secret: unique
//! across threads and restarts, not guessable, and the same in `request_headers` and `after`
//! without keeping state between them. Later filters and the handler see the new id as the
//! cookie (`Request::cookie`); the access log records it with `"cookie:<name>"`.

use osprey_sdk::abi_stable::std_types::RVec;
use osprey_sdk::cookie::{SameSite, SetCookie};
use osprey_sdk::{parse_config, ConfigError, Filter, HeaderPair, Request, Response};
use sha2::{Digest, Sha256};

#[derive(serde::Deserialize)]
struct Conf {
    #[serde(default = "default_name")]
    name: String,
    domain: Option<String>,
    #[serde(default = "default_path")]
    path: String,
    /// Seconds the cookie lives; 0: a session cookie.
    #[serde(default = "default_expires")]
    expires: i64,
    /// `strict`, `lax` or `none`; default: no attribute.
    samesite: Option<String>,
    #[serde(default)]
    secure: bool,
    #[serde(default = "default_httponly")]
    httponly: bool,
}

fn default_name() -> String {
    "uid".into()
}
fn default_path() -> String {
    "/".into()
}
fn default_expires() -> i64 {
    365 * 24 * 3600
}
fn default_httponly() -> bool {
    true
}

pub struct UserId {
    conf: Conf,
    same_site: Option<SameSite>,
    secret: [u8; 32],
}

impl UserId {
    pub fn new(json: &str) -> Result<UserId, ConfigError> {
        let conf: Conf = parse_config(json)?;
        let same_site = match conf.samesite.as_deref().map(str::to_ascii_lowercase) {
            None => None,
            Some(s) if s == "strict" => Some(SameSite::Strict),
            Some(s) if s == "lax" => Some(SameSite::Lax),
            Some(s) if s == "none" => Some(SameSite::None),
            Some(s) => {
                let m = format!("samesite: `{s}` is not `strict`, `lax` or `none`");
                return Err(ConfigError::at_key(json, "samesite", m));
            }
        };
        if conf.expires < 0 {
            return Err(ConfigError::at_key(
                json,
                "expires",
                "expires: must be 0 (session) or more seconds",
            ));
        }
        let mut filter = UserId {
            conf,
            same_site,
            secret: [0; 32],
        };
        // Every attribute is checked once here, so building the header later cannot fail.
        if let Err(e) = filter.set_cookie("0123456789abcdef0123456789abcdef") {
            let key = match e {
                osprey_sdk::cookie::CookieError::Path => "path",
                osprey_sdk::cookie::CookieError::Domain => "domain",
                osprey_sdk::cookie::CookieError::SameSiteNoneNeedsSecure => "samesite",
                _ => "name",
            };
            return Err(ConfigError::at_key(json, key, format!("{key}: {e}")));
        }
        osprey_sdk::random::os_bytes(&mut filter.secret);
        Ok(filter)
    }

    /// The client's id, if it sent a well-formed one.
    fn sent<'r>(&self, req: &Request<'r>) -> Option<&'r str> {
        req.cookie(&self.conf.name).filter(|v| well_formed(v))
    }

    /// The new id for this request: the same in every step of one request.
    fn new_id(&self, req: &Request<'_>) -> String {
        let digest = Sha256::new()
            .chain_update(self.secret)
            .chain_update(req.request_id.as_bytes())
            .finalize();
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut id = String::with_capacity(32);
        for b in &digest[..16] {
            id.push(HEX[(b >> 4) as usize] as char);
            id.push(HEX[(b & 15) as usize] as char);
        }
        id
    }

    fn set_cookie(&self, id: &str) -> Result<String, osprey_sdk::cookie::CookieError> {
        let c = &self.conf;
        let mut cookie = SetCookie::new(&c.name, id).path(&c.path);
        if c.expires > 0 {
            cookie = cookie.max_age(c.expires);
        }
        if let Some(domain) = &c.domain {
            cookie = cookie.domain(domain);
        }
        if let Some(s) = self.same_site {
            cookie = cookie.same_site(s);
        }
        if c.secure {
            cookie = cookie.secure();
        }
        if c.httponly {
            cookie = cookie.http_only();
        }
        cookie.build()
    }
}

impl Filter for UserId {
    /// A new visitor's id goes into the `Cookie` header later steps see.
    fn request_headers(&self, req: &Request<'_>, _key: &str, set: &mut RVec<HeaderPair>) {
        if self.sent(req).is_some() {
            return;
        }
        let mut cookie = String::new();
        for (name, value) in req.cookies() {
            if name != self.conf.name {
                cookie.extend([name, "=", value, "; "]);
            }
        }
        cookie.extend([self.conf.name.as_str(), "=", &self.new_id(req)]);
        set.push(HeaderPair {
            name: "Cookie".into(),
            value: cookie.into(),
        });
    }

    /// Every answer to a new visitor sets the cookie, error pages included.
    fn after(&self, req: &Request<'_>, _key: &str, resp: &mut Response) {
        if self.sent(req).is_some() {
            return;
        }
        if let Ok(header) = self.set_cookie(&self.new_id(req)) {
            resp.header("Set-Cookie", header);
        }
    }
}

/// 32 lower-case hex digits, as this filter writes them.
fn well_formed(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(well_formed("0123456789abcdef0123456789abcdef"));
        assert!(!well_formed("0123456789ABCDEF0123456789abcdef"));
        assert!(!well_formed("abc"));
    }

    #[test]
    fn bad_attributes_are_refused_with_their_line() {
        let e = UserId::new("{\n\"samesite\": \"none\"}").err().unwrap();
        assert_eq!(e.line, 2, "{e}");
        let e = UserId::new("{\"name\": \"u\",\n\"domain\": \"a b\"}")
            .err()
            .unwrap();
        assert_eq!(e.line, 2, "{e}");
        let e = UserId::new("{\n\"samesite\": \"sometimes\"}")
            .err()
            .unwrap();
        assert_eq!(e.line, 2, "{e}");
        let e = UserId::new("{\"name\": \"u\",\n\"expirse\": 5}")
            .err()
            .unwrap();
        assert_eq!(e.line, 2, "{e}");
        assert!(UserId::new("{\"samesite\": \"none\", \"secure\": true}").is_ok());
    }
}
