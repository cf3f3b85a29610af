//! `userid` (nginx's): a visitor-id cookie, set when the request has none or a malformed one.
//! The id is 128 bits shown as 32 hex digits: SipHash-2-4 with a 128-bit output, keyed with a
//! per-filter secret from the kernel's random source, of a per-thread random nonce (also from
//! the kernel) and a per-thread counter (a pseudo-random function: a few hundred instructions
//! where SHA-256 took thousands). Unique across threads and restarts, not guessable without
//! the key, and independent of the request's id, which a trusted proxy may repeat. The id
//! `request_headers` makes is kept for `after` (`pending_ids`), which looks at the cookie
//! again only when an id waits on its thread. Later filters and the handler
//! see the new id as the cookie (`Request::cookie`); the access log records it with
//! `"cookie:<name>"`. A subrequest (an include) carries its page's `Cookie`, the new id
//! included (the core's rule), and never makes an id nor sets a cookie (as nginx's): so it
//! never takes its page's id from `pending_ids` either (it shares the page's request id).

use std::cell::Cell;

use osprey_sdk::abi_stable::std_types::RVec;
use osprey_sdk::cookie::{SameSite, SetCookie};
use osprey_sdk::params::cookies;
use osprey_sdk::{
    parse_config, ConfigError, Filter, FixedHeader, HeaderPair, Request, Response, Wants,
};
use siphasher::sip128::{Hasher128, SipHasher24};

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
    name: String,
    /// The `Set-Cookie` attributes after `<name>=<id>`, checked and built once.
    attributes: String,
    /// SipHash keyed with this filter's secret.
    keyed: SipHasher24,
    /// `Set-Cookie`, a name checked once (the value is each new visitor's).
    set_cookie: &'static FixedHeader,
}

use crate::pending_ids::{self, Id};

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
        // Every attribute is checked once here, so the header built later is always valid.
        let id = "0123456789abcdef0123456789abcdef";
        let header = set_cookie(&conf, same_site, id).map_err(|e| {
            let key = match e {
                osprey_sdk::cookie::CookieError::Path => "path",
                osprey_sdk::cookie::CookieError::Domain => "domain",
                osprey_sdk::cookie::CookieError::SameSiteNoneNeedsSecure => "samesite",
                _ => "name",
            };
            ConfigError::at_key(json, key, format!("{key}: {e}"))
        })?;
        let mut secret = [0; 16];
        osprey_sdk::random::os_bytes(&mut secret);
        Ok(UserId {
            attributes: header[conf.name.len() + 1 + id.len()..].to_owned(),
            name: conf.name,
            keyed: SipHasher24::new_with_key(&secret),
            set_cookie: FixedHeader::new("Set-Cookie", "").expect("a header name"),
        })
    }

    /// The client's id, if it sent a well-formed one.
    fn sent<'r>(&self, req: &Request<'r>) -> Option<&'r str> {
        req.cookie(&self.name).filter(|v| well_formed(v))
    }

    /// This filter, told apart from others in `pending_ids`.
    fn me(&self) -> usize {
        self as *const UserId as usize
    }

    /// A new id: the keyed SipHash-2-4-128 of this thread's nonce and its next count.
    fn new_id(&self) -> Id {
        thread_local!(static NEXT: Cell<(u128, u64)> = Cell::new((os_nonce(), 0)));
        let (nonce, count) = NEXT.get();
        NEXT.set((nonce, count.wrapping_add(1)));
        let mut hasher = self.keyed;
        std::hash::Hasher::write(&mut hasher, &nonce.to_le_bytes());
        std::hash::Hasher::write(&mut hasher, &count.to_le_bytes());
        let digest = hasher.finish128().as_bytes();
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut id = [0; 32];
        for (pair, b) in id.chunks_exact_mut(2).zip(&digest) {
            pair[0] = HEX[(b >> 4) as usize];
            pair[1] = HEX[(b & 15) as usize];
        }
        id
    }
}

fn os_nonce() -> u128 {
    let mut nonce = [0; 16];
    osprey_sdk::random::os_bytes(&mut nonce);
    u128::from_le_bytes(nonce)
}

/// The `Set-Cookie` value for `id`.
fn set_cookie(
    c: &Conf,
    same_site: Option<SameSite>,
    id: &str,
) -> Result<String, osprey_sdk::cookie::CookieError> {
    let mut cookie = SetCookie::new(&c.name, id).path(&c.path);
    if c.expires > 0 {
        cookie = cookie.max_age(c.expires);
    }
    if let Some(domain) = &c.domain {
        cookie = cookie.domain(domain);
    }
    if let Some(s) = same_site {
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

impl Filter for UserId {
    fn wants(&self) -> Wants {
        Wants::REQUEST_HEADERS | Wants::AFTER
    }

    /// A new visitor's id goes into the `Cookie` header later steps see.
    fn request_headers(&self, req: &Request<'_>, _key: &str, set: &mut RVec<HeaderPair>) {
        if req.subrequest || self.sent(req).is_some() {
            return;
        }
        let id = self.new_id();
        pending_ids::keep(self.me(), &req.request_id, id);
        // Sized for the usual case, the id alone or after the client's other cookies.
        let others: usize = req.header_all("cookie").map(|h| h.len() + 2).sum();
        let mut cookie = String::with_capacity(others + self.name.len() + 1 + id.len());
        for (name, value) in req.header_all("cookie").flat_map(cookies) {
            if name != self.name {
                cookie.extend([name, "=", value, "; "]);
            }
        }
        cookie.extend([self.name.as_str(), "=", as_text(&id)]);
        set.push(HeaderPair::new("Cookie", cookie));
    }

    /// Every answer to a new visitor sets the cookie, error pages included.
    fn after(&self, req: &Request<'_>, _key: &str, resp: &mut Response) {
        // No id waiting on this thread: `request_headers` (always called before `after`, on
        // this thread) found the client's, and the cookie need not be looked up again.
        if pending_ids::none_waiting() || req.subrequest || self.sent(req).is_some() {
            return;
        }
        // The id the handler saw; a new one if `request_headers` did not run here.
        let id = pending_ids::take(self.me(), &req.request_id).unwrap_or_else(|| self.new_id());
        let mut header =
            String::with_capacity(self.name.len() + 1 + id.len() + self.attributes.len());
        header.extend([self.name.as_str(), "=", as_text(&id), &self.attributes]);
        resp.header_named(self.set_cookie, header);
    }
}

fn as_text(id: &Id) -> &str {
    debug_assert!(id.is_ascii());
    // SAFETY: every `Id` is `new_id`'s hex digits (ASCII), so a UTF-8 check is not needed.
    unsafe { std::str::from_utf8_unchecked(id) }
}

/// 32 lower-case hex digits, as this filter writes them. (Checked without early exit, so
/// the compiler checks many bytes at once: this runs twice on every request.)
fn well_formed(id: &str) -> bool {
    id.len() == 32
        && id.bytes().fold(true, |ok, b| {
            ok & ((b.wrapping_sub(b'0') < 10) | (b.wrapping_sub(b'a') < 6))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_visitor_gets_one_id_in_both_steps() {
        let filter = UserId::new(r#"{"name": "vid", "samesite": "lax"}"#).unwrap();
        let req = osprey_sdk::testing::TestRequest::get("/").header("Cookie", "a=1; vid=bad");
        let (mut set, mut resp) = (RVec::new(), Response::new());
        req.with_view(|r| {
            filter.request_headers(r, "", &mut set);
            filter.after(r, "", &mut resp);
        });
        let cookie = set[0].value.as_str();
        let id = cookie.strip_prefix("a=1; vid=").unwrap();
        assert!(well_formed(id), "{cookie}");
        assert_eq!(
            resp.get_header("set-cookie").unwrap(),
            format!("vid={id}; Max-Age=31536000; Path=/; HttpOnly; SameSite=Lax")
        );
    }

    #[test]
    fn a_returning_visitor_gets_no_cookie_alone_or_while_a_new_ones_id_waits() {
        let filter = UserId::new("{}").unwrap();
        let known = "uid=0123456789abcdef0123456789abcdef";
        let old = osprey_sdk::testing::TestRequest::get("/").header("Cookie", known);
        let returning = || {
            let (mut set, mut resp) = (RVec::new(), Response::new());
            old.with_view(|r| {
                filter.request_headers(r, "", &mut set);
                filter.after(r, "", &mut resp);
            });
            assert!(set.is_empty() && resp.get_header("set-cookie").is_none());
        };
        returning();
        let new = osprey_sdk::testing::TestRequest::get("/");
        let (mut set, mut resp) = (RVec::new(), Response::new());
        new.with_view(|r| {
            filter.request_headers(r, "", &mut set);
            returning();
            filter.after(r, "", &mut resp);
        });
        let id = set[0].value.as_str().strip_prefix("uid=").unwrap();
        let cookie = resp.get_header("set-cookie").unwrap();
        assert!(cookie.starts_with(&format!("uid={id};")), "{cookie}");
        returning();
    }

    #[test]
    fn a_subrequest_makes_no_id_and_takes_none_from_its_page() {
        let filter = UserId::new(r#"{"name": "vid"}"#).unwrap();
        let page = osprey_sdk::testing::TestRequest::get("/page");
        // Same request id as its page; no `Cookie` (one a module sent replaced the page's).
        let include = osprey_sdk::testing::TestRequest::get("/frag").subrequest(true);
        let (mut set, mut resp) = (RVec::new(), Response::new());
        page.with_view(|p| {
            filter.request_headers(p, "", &mut set);
            include.with_view(|i| {
                let (mut none, mut its) = (RVec::new(), Response::new());
                filter.request_headers(i, "", &mut none);
                filter.after(i, "", &mut its);
                assert!(none.is_empty() && its.get_header("set-cookie").is_none());
            });
            filter.after(p, "", &mut resp);
        });
        let id = set[0].value.as_str().strip_prefix("vid=").unwrap();
        let cookie = resp.get_header("set-cookie").unwrap();
        assert!(cookie.starts_with(&format!("vid={id};")), "{cookie}");
    }

    #[test]
    fn ids_differ_for_one_request_id() {
        let filter = UserId::new("{}").unwrap();
        let req = osprey_sdk::testing::TestRequest::get("/");
        let mut ids = Vec::new();
        for _ in 0..2 {
            let (mut set, mut resp) = (RVec::new(), Response::new());
            req.with_view(|r| {
                filter.request_headers(r, "", &mut set);
                filter.after(r, "", &mut resp);
            });
            ids.push(resp.get_header("set-cookie").unwrap().to_owned());
        }
        assert_ne!(ids[0], ids[1]);
    }

    #[test]
    fn consecutive_ids_are_well_formed_and_unrelated() {
        let a = UserId::new("{}").unwrap();
        let (x, y) = (a.new_id(), a.new_id());
        assert!(well_formed(as_text(&x)));
        let differing = x.iter().zip(&y).filter(|(p, q)| p != q).count();
        assert!(differing > 16, "{} {}", as_text(&x), as_text(&y));
    }

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
