//! `headers`: add, set and remove response headers (nginx's `add_header`, h2o's `headers`),
//! and `Cache-Control`/`Expires` by status and content type (nginx's and h2o's `expires`).
//! Like nginx, only successful and redirect answers are changed unless `always` is set.

use std::cell::{Cell, OnceCell};
use std::collections::BTreeMap;
use std::time::UNIX_EPOCH;

use osprey_sdk::clock;
use osprey_sdk::fields::{is_core_managed, is_token};
use osprey_sdk::{parse_config, ConfigError, Filter, FixedHeader, Request, Response, Wants};

/// nginx's statuses for `add_header` and `expires` without `always` (a `match`: a few
/// compares, where a slice's `contains` is a call).
fn default_status(status: u16) -> bool {
    matches!(status, 200 | 201 | 204 | 206 | 301..=304 | 307 | 308)
}

#[derive(serde::Deserialize)]
struct Conf {
    /// Headers added (kept beside any of the same name).
    #[serde(default)]
    add: BTreeMap<String, String>,
    /// Headers set (replacing any of the same name).
    #[serde(default)]
    set: BTreeMap<String, String>,
    #[serde(default)]
    remove: Vec<String>,
    /// Apply to every status, error answers included.
    #[serde(default)]
    always: bool,
    #[serde(default)]
    expires: Vec<ExpiresConf>,
}

#[derive(serde::Deserialize)]
struct ExpiresConf {
    /// Seconds; negative: `no-cache` and an `Expires` in the past.
    max_age: i64,
    /// `"image/"` (prefix), `"+json"` (suffix) or an exact media type; default: any.
    #[serde(default)]
    types: Vec<String>,
    /// Default: as `always` says.
    status: Option<Vec<u16>>,
}

/// One `expires` rule.
struct Expires {
    max_age: i64,
    /// `Cache-Control: max-age=<max_age>` or `no-cache`.
    cache_control: &'static FixedHeader,
    types: Vec<String>,
    status: Option<Vec<u16>>,
}

/// Headers are checked and encoded once, here: answers carry them without a copy or a check.
pub struct Headers {
    /// `Expires`, whose value is formatted per second.
    expires_name: &'static FixedHeader,
    add: Vec<&'static FixedHeader>,
    set: Vec<&'static FixedHeader>,
    remove: Vec<String>,
    always: bool,
    expires: Vec<Expires>,
}

impl Headers {
    pub fn new(json: &str) -> Result<Headers, ConfigError> {
        let conf: Conf = parse_config(json)?;
        let fixed = |key: &str, map: &BTreeMap<String, String>| {
            map.iter()
                .map(|(name, value)| {
                    FixedHeader::new(name, value)
                        .map_err(|m| ConfigError::at_key(json, name, format!("{key}: {m}")))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let (add, set) = (fixed("add", &conf.add)?, fixed("set", &conf.set)?);
        for name in &conf.remove {
            if !is_token(name) || is_core_managed(name) {
                let m = format!("remove: `{name}` is not a header this filter may remove");
                return Err(ConfigError::at_key(json, "remove", m));
            }
        }
        for rule in &conf.expires {
            if let Some(bad) = rule.types.iter().find(|t| t.is_empty() || t.contains(';')) {
                let m = format!("expires: `{bad}` is not a media type, prefix or suffix");
                return Err(ConfigError::at_key(json, "types", m));
            }
        }
        Ok(Headers {
            expires_name: FixedHeader::new("Expires", "").expect("a header name"),
            add,
            set,
            remove: conf.remove,
            always: conf.always,
            expires: conf
                .expires
                .into_iter()
                .map(|e| Expires {
                    max_age: e.max_age,
                    cache_control: match e.max_age {
                        ..0 => FixedHeader::new("Cache-Control", "no-cache"),
                        secs => FixedHeader::new("Cache-Control", &format!("max-age={secs}")),
                    }
                    .expect("a valid Cache-Control"),
                    types: e.types.iter().map(|t| t.to_ascii_lowercase()).collect(),
                    status: e.status,
                })
                .collect(),
        })
    }

    fn applies(&self, status: u16) -> bool {
        self.always || default_status(status)
    }
}

impl Filter for Headers {
    /// Configured to change nothing, it stays out of the request path.
    fn wants(&self) -> Wants {
        let idle = self.add.is_empty()
            && self.set.is_empty()
            && self.remove.is_empty()
            && self.expires.is_empty();
        if idle {
            Wants::NONE
        } else {
            Wants::AFTER
        }
    }

    fn after(&self, _req: &Request<'_>, _key: &str, resp: &mut Response) {
        let applies = self.applies(resp.status);
        if applies {
            for name in &self.remove {
                resp.remove_header(name);
            }
            for &header in &self.set {
                resp.set_fixed_header(header);
            }
            for &header in &self.add {
                resp.fixed_header(header);
            }
        }
        if self.expires.is_empty() {
            return;
        }
        // The media type is looked up only for a rule that names types.
        let media = OnceCell::new();
        let media = || {
            *media.get_or_init(|| {
                let content_type = resp.get_header("content-type").unwrap_or("");
                content_type.split(';').next().unwrap_or("").trim()
            })
        };
        let rule = self.expires.iter().find(|r| {
            let status_ok = match &r.status {
                Some(list) => list.contains(&resp.status),
                None => applies,
            };
            status_ok && (r.types.is_empty() || r.types.iter().any(|t| type_matches(t, media())))
        });
        if let Some(rule) = rule {
            let expires = self.expires_name;
            // Both replaced in one pass over the headers.
            resp.remove_headers(&[rule.cache_control.name(), expires.name()]);
            resp.fixed_header(rule.cache_control)
                .header_named(expires, expires_at(rule.max_age));
        }
    }
}

/// The last year an HTTP date can show.
const LAST_HTTP_DATE: u64 = 253_402_300_799; // 9999-12-31 23:59:59

/// The length of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), as every date up to
/// [`LAST_HTTP_DATE`] is written.
const DATE_LEN: usize = 29;

/// No date: the memo's second before its first date.
const NEVER: u64 = u64::MAX;

/// The HTTP date `max_age` seconds from now (in the past when negative), as nginx's
/// `expires`. Formatted once per second and thread (for the last `max_age` asked); each
/// answer gets a copy of a known length, which compiles to a few moves, not a `memcpy` call.
fn expires_at(max_age: i64) -> String {
    // A `Cell`, not a `RefCell`: read and written whole, no borrow flag to keep.
    thread_local!(static LAST: Cell<(u64, [u8; DATE_LEN])> = const { Cell::new((NEVER, [0; DATE_LEN])) });
    let at = clock::unix_secs()
        .saturating_add_signed(max_age)
        .min(LAST_HTTP_DATE);
    let (secs, mut text) = LAST.get();
    if secs != at {
        let date = httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(at));
        text.copy_from_slice(date.as_bytes());
        LAST.set((at, text));
    }
    // SAFETY: `text` is a copy of `fmt_http_date`'s ASCII.
    unsafe { String::from_utf8_unchecked(text.to_vec()) }
}

/// `image/` matches by prefix, `+json` by suffix, anything else exactly (case-insensitive;
/// patterns are lower-case).
fn type_matches(pattern: &str, media: &str) -> bool {
    let (p, m) = (pattern.as_bytes(), media.as_bytes());
    if pattern.ends_with('/') {
        m.len() >= p.len() && m[..p.len()].eq_ignore_ascii_case(p)
    } else if pattern.starts_with('+') {
        m.len() >= p.len() && m[m.len() - p.len()..].eq_ignore_ascii_case(p)
    } else {
        m.eq_ignore_ascii_case(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    #[test]
    fn media_type_patterns() {
        assert!(type_matches("image/", "image/png"));
        assert!(type_matches("+json", "application/ld+json"));
        assert!(type_matches("text/css", "TEXT/CSS"));
        assert!(type_matches("image/", "IMAGE/webp"));
        assert!(!type_matches("image/", "imag"));
        assert!(!type_matches("+json", "json"));
        assert!(!type_matches("text/css", "text/cssx"));
    }

    #[test]
    fn default_statuses_are_nginxs() {
        let on: Vec<u16> = (100..600).filter(|&s| default_status(s)).collect();
        assert_eq!(on, [200, 201, 204, 206, 301, 302, 303, 304, 307, 308]);
    }

    #[test]
    fn bad_values_are_refused_with_line_and_key() {
        let e = Headers::new("{\n\"add\": {\n\"X-A\": \"a\\r\\nB: c\"}}")
            .err()
            .unwrap();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("X-A"), "{e}");
        let e = Headers::new("{\"set\": {\"Bad Name\": \"x\"}}")
            .err()
            .unwrap();
        assert!(e.message.contains("Bad Name"), "{e}");
        let e = Headers::new("{\n\"remove\": [\"Content-Length\"]}")
            .err()
            .unwrap();
        assert_eq!(e.line, 2, "{e}");
        let e = Headers::new("{\"expires\": [{\"max_age\": 5,\n\"typs\": []}]}")
            .err()
            .unwrap();
        assert_eq!(e.line, 2, "{e}");
    }

    fn expires(config: &str) -> Response {
        let filter = Headers::new(config).unwrap();
        let mut r = Response::new();
        osprey_sdk::testing::TestRequest::get("/").with_view(|req| filter.after(req, "", &mut r));
        r
    }

    #[test]
    fn expires_sets_both_headers() {
        let r = expires(r#"{"expires": [{"max_age": 60}]}"#);
        assert_eq!(r.get_header("cache-control"), Some("max-age=60"));
        let at = httpdate::parse_http_date(r.get_header("expires").unwrap()).unwrap();
        let ahead = at.duration_since(SystemTime::now()).unwrap().as_secs();
        assert!((58..=60).contains(&ahead), "{ahead}");
        let r = expires(r#"{"expires": [{"max_age": -1}]}"#);
        assert_eq!(r.get_header("cache-control"), Some("no-cache"));
        assert!(
            httpdate::parse_http_date(r.get_header("expires").unwrap()).unwrap()
                < SystemTime::now()
        );
    }

    #[test]
    fn expires_dates_stay_in_range_and_follow_max_age() {
        // Formatted per second and `max_age`: a second rule does not reuse the first's date.
        let (a, b) = (expires_at(60), expires_at(3600));
        let at = |t: &str| httpdate::parse_http_date(t).unwrap();
        assert!(
            at(&b).duration_since(at(&a)).unwrap().as_secs() >= 3539,
            "{a} {b}"
        );
        assert_eq!(expires_at(i64::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(expires_at(i64::MIN), "Thu, 01 Jan 1970 00:00:00 GMT");
    }
}
