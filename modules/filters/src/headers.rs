//! `headers`: add, set and remove response headers (nginx's `add_header`, h2o's `headers`),
//! and `Cache-Control`/`Expires` by status and content type (nginx's and h2o's `expires`).
//! Like nginx, only successful and redirect answers are changed unless `always` is set.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use osprey_sdk::fields::{check_header, is_core_managed, is_token};
use osprey_sdk::{parse_config, ConfigError, Filter, Request, Response};

/// nginx's statuses for `add_header` and `expires` without `always`.
const DEFAULT_STATUSES: &[u16] = &[200, 201, 204, 206, 301, 302, 303, 304, 307, 308];

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
    types: Vec<String>,
    status: Option<Vec<u16>>,
}

pub struct Headers {
    add: Vec<(String, String)>,
    set: Vec<(String, String)>,
    remove: Vec<String>,
    always: bool,
    expires: Vec<Expires>,
}

impl Headers {
    pub fn new(json: &str) -> Result<Headers, ConfigError> {
        let conf: Conf = parse_config(json)?;
        for (key, map) in [("add", &conf.add), ("set", &conf.set)] {
            for (name, value) in map {
                check_header(name, value)
                    .map_err(|m| ConfigError::at_key(json, name, format!("{key}: {m}")))?;
            }
        }
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
            add: conf.add.into_iter().collect(),
            set: conf.set.into_iter().collect(),
            remove: conf.remove,
            always: conf.always,
            expires: conf
                .expires
                .into_iter()
                .map(|e| Expires {
                    max_age: e.max_age,
                    types: e.types.iter().map(|t| t.to_ascii_lowercase()).collect(),
                    status: e.status,
                })
                .collect(),
        })
    }

    fn applies(&self, status: u16) -> bool {
        self.always || DEFAULT_STATUSES.contains(&status)
    }
}

impl Filter for Headers {
    fn after(&self, _req: &Request<'_>, _key: &str, resp: &mut Response) {
        if self.applies(resp.status) {
            for name in &self.remove {
                resp.remove_header(name);
            }
            for (name, value) in &self.set {
                resp.set_header(name.clone(), value.clone());
            }
            for (name, value) in &self.add {
                resp.header(name.clone(), value.clone());
            }
        }
        if self.expires.is_empty() {
            return;
        }
        let content_type = resp.get_header("content-type").unwrap_or("");
        let media = content_type.split(';').next().unwrap_or("").trim();
        let rule = self.expires.iter().find(|r| {
            let status_ok = match &r.status {
                Some(list) => list.contains(&resp.status),
                None => self.applies(resp.status),
            };
            status_ok && (r.types.is_empty() || r.types.iter().any(|t| type_matches(t, media)))
        });
        if let Some(rule) = rule {
            set_expires(resp, rule.max_age);
        }
    }
}

/// `Cache-Control` and `Expires` for `max_age` seconds from now, as nginx's `expires`.
fn set_expires(resp: &mut Response, max_age: i64) {
    let now = SystemTime::now();
    let (control, at) = if max_age < 0 {
        (
            "no-cache".to_owned(),
            now - Duration::from_secs(max_age.unsigned_abs()),
        )
    } else {
        let secs = max_age.unsigned_abs();
        (format!("max-age={secs}"), now + Duration::from_secs(secs))
    };
    resp.set_header("Cache-Control", control);
    resp.set_header("Expires", httpdate::fmt_http_date(at));
}

/// `image/` matches by prefix, `+json` by suffix, anything else exactly (case-insensitive).
fn type_matches(pattern: &str, media: &str) -> bool {
    let media = media.to_ascii_lowercase();
    if pattern.ends_with('/') {
        media.starts_with(pattern)
    } else if pattern.starts_with('+') {
        media.ends_with(pattern)
    } else {
        media == pattern
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_type_patterns() {
        assert!(type_matches("image/", "image/png"));
        assert!(type_matches("+json", "application/ld+json"));
        assert!(type_matches("text/css", "TEXT/CSS"));
        assert!(!type_matches("text/css", "text/cssx"));
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

    #[test]
    fn expires_sets_both_headers() {
        let mut r = Response::new();
        set_expires(&mut r, 60);
        assert_eq!(r.get_header("cache-control"), Some("max-age=60"));
        let at = httpdate::parse_http_date(r.get_header("expires").unwrap()).unwrap();
        let ahead = at.duration_since(SystemTime::now()).unwrap().as_secs();
        assert!((58..=60).contains(&ahead), "{ahead}");
        set_expires(&mut r, -1);
        assert_eq!(r.get_header("cache-control"), Some("no-cache"));
        assert!(
            httpdate::parse_http_date(r.get_header("expires").unwrap()).unwrap()
                < SystemTime::now()
        );
    }
}
