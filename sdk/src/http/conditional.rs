//! Conditional requests (RFC 9110 §13): `If-Match`, `If-Unmodified-Since`, `If-None-Match`,
//! `If-Modified-Since` evaluated in the order of §13.2.2, and `If-Range`.

use std::time::{Duration, SystemTime};

use crate::Request;

/// What identifies the version of the representation being answered.
#[derive(Clone, Copy, Debug, Default)]
pub struct Validators<'v> {
    /// The `ETag` as it is sent: quoted, with `W/` when weak.
    pub etag: Option<&'v str>,
    /// The `Last-Modified` time (sub-second parts are ignored, as HTTP dates have none).
    pub last_modified: Option<SystemTime>,
}

impl<'v> Validators<'v> {
    /// The validators of a response's `ETag` and `Last-Modified` header values (a date that
    /// does not parse is no validator).
    pub fn from_headers(etag: Option<&'v str>, last_modified: Option<&str>) -> Validators<'v> {
        Validators {
            etag,
            last_modified: last_modified.and_then(|d| httpdate::parse_http_date(d.trim()).ok()),
        }
    }
}

/// What the preconditions of a request say about answering it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// No precondition stops the request: answer as usual.
    Proceed,
    /// The client's copy is current: `304 Not Modified` (GET and HEAD only).
    NotModified,
    /// `412 Precondition Failed`.
    Failed,
}

/// Evaluate the request's preconditions against the representation's validators, in the
/// order of RFC 9110 §13.2.2: `If-Match` (strong comparison), else `If-Unmodified-Since`, then
/// `If-None-Match` (weak comparison), else `If-Modified-Since` (GET and HEAD only). A date that
/// does not parse, or is sent twice, is ignored.
pub fn evaluate(req: &Request<'_>, v: &Validators<'_>) -> Precondition {
    // Most requests carry no precondition: one pass over the names instead of four lookups.
    let conditional = req.headers.iter().any(|h| {
        let name = h.name.as_str().as_bytes();
        name.len() > 3 && name[..3].eq_ignore_ascii_case(b"if-")
    });
    if !conditional {
        return Precondition::Proceed;
    }
    let get_or_head = matches!(req.method.as_str(), "GET" | "HEAD");
    if let Some(list) = joined(req, "if-match") {
        if !list_matches(&list, v.etag, strong_eq) {
            return Precondition::Failed;
        }
    } else if let (Some(since), Some(modified)) =
        (date(req, "if-unmodified-since"), v.last_modified)
    {
        if whole_seconds(modified) > since {
            return Precondition::Failed;
        }
    }
    if let Some(list) = joined(req, "if-none-match") {
        if list_matches(&list, v.etag, weak_eq) {
            return match get_or_head {
                true => Precondition::NotModified,
                false => Precondition::Failed,
            };
        }
    } else if let (true, Some(since), Some(modified)) =
        (get_or_head, date(req, "if-modified-since"), v.last_modified)
    {
        if whole_seconds(modified) <= since {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

/// Whether `If-Range` (when present) lets a `Range` be answered: an entity tag that matches
/// strongly, or a date equal to `Last-Modified` (§13.1.5). Otherwise the whole representation
/// is sent.
pub fn if_range_allows(req: &Request<'_>, v: &Validators<'_>) -> bool {
    let Some(value) = req.header("if-range").map(str::trim) else {
        return true;
    };
    if value.starts_with('"') || value.starts_with("W/") {
        let mut tags = EntityTags(value);
        return match (tags.next(), tags.next(), v.etag) {
            (Some(Ok(tag)), None, Some(etag)) => strong_eq(tag, etag),
            _ => false,
        };
    }
    match (httpdate::parse_http_date(value), v.last_modified) {
        (Ok(date), Some(modified)) => date == whole_seconds(modified),
        _ => false,
    }
}

/// Every line of a list header, joined; `None` when the header is absent.
fn joined(req: &Request<'_>, name: &str) -> Option<String> {
    let mut lines = req.header_all(name);
    let first = lines.next()?;
    Some(lines.fold(first.to_owned(), |acc, line| acc + "," + line))
}

/// A date header sent once with a valid HTTP-date (§13.1.3, §13.1.4: otherwise ignored).
fn date(req: &Request<'_>, name: &str) -> Option<SystemTime> {
    let mut lines = req.header_all(name);
    let value = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    httpdate::parse_http_date(value.trim()).ok()
}

/// Does `*` or any entity tag of `list` match `etag` by `eq`? `*` matches any current
/// representation; a malformed list matches nothing.
fn list_matches(list: &str, etag: Option<&str>, eq: fn(&str, &str) -> bool) -> bool {
    if list.trim() == "*" {
        return true;
    }
    let Some(etag) = etag else {
        return false;
    };
    let mut any = false;
    for tag in EntityTags(list) {
        match tag {
            Ok(tag) => any |= eq(tag, etag),
            Err(()) => return false,
        }
    }
    any
}

/// Strong comparison (§8.8.3.2): neither tag weak, and the same opaque tag.
pub fn strong_eq(a: &str, b: &str) -> bool {
    !a.starts_with("W/") && !b.starts_with("W/") && a == b
}

/// Weak comparison (§8.8.3.2): the same opaque tag, weak or not.
pub fn weak_eq(a: &str, b: &str) -> bool {
    a.strip_prefix("W/").unwrap_or(a) == b.strip_prefix("W/").unwrap_or(b)
}

/// The entity tags of a comma-separated list, each `W/"..."` or `"..."` (commas may occur
/// inside the quotes); `Err` at the first thing that is not one.
struct EntityTags<'a>(&'a str);

impl<'a> Iterator for EntityTags<'a> {
    type Item = Result<&'a str, ()>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.0.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            self.0 = rest;
            return None;
        }
        let open = if rest.starts_with("W/\"") { 3 } else { 1 };
        let close = match rest.starts_with('"') || open == 3 {
            true => rest[open..].find('"').map(|i| open + i + 1),
            false => None,
        };
        let Some(end) = close else {
            self.0 = "";
            return Some(Err(()));
        };
        let (tag, after) = rest.split_at(end);
        if !after.trim_start_matches([' ', '\t']).is_empty()
            && !after.trim_start_matches([' ', '\t']).starts_with(',')
        {
            self.0 = "";
            return Some(Err(()));
        }
        self.0 = after;
        Some(Ok(tag))
    }
}

/// HTTP dates have whole seconds.
pub fn whole_seconds(t: SystemTime) -> SystemTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::test_request::with_request;

    const LM: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const EARLIER: &str = "Sat, 05 Nov 1994 08:49:37 GMT";

    fn eval(method: &str, headers: &[(&str, &str)], etag: Option<&str>) -> Precondition {
        let v = Validators {
            etag,
            last_modified: Some(
                httpdate::parse_http_date(LM).unwrap() + Duration::from_millis(300),
            ),
        };
        with_request(method, headers, |req| evaluate(req, &v))
    }

    use Precondition::*;

    #[test]
    fn if_match_compares_strongly() {
        let e = Some("\"a\"");
        assert_eq!(eval("PUT", &[("If-Match", "\"a\"")], e), Proceed);
        assert_eq!(eval("PUT", &[("If-Match", "\"x\", \"a\"")], e), Proceed);
        assert_eq!(eval("PUT", &[("If-Match", "W/\"a\"")], e), Failed);
        assert_eq!(
            eval("GET", &[("If-Match", "\"a\"")], Some("W/\"a\"")),
            Failed
        );
        assert_eq!(eval("GET", &[("If-Match", "\"b\"")], e), Failed);
        assert_eq!(eval("GET", &[("If-Match", "*")], None), Proceed);
        assert_eq!(eval("GET", &[("If-Match", "\"a\"")], None), Failed);
        // Split over two lines, and a tag holding a comma.
        let two = [("If-Match", "\"x\""), ("If-Match", "\"a\"")];
        assert_eq!(eval("GET", &two, e), Proceed);
        assert_eq!(
            eval("GET", &[("If-Match", "\"a,b\"")], Some("\"a,b\"")),
            Proceed
        );
        assert_eq!(eval("GET", &[("If-Match", "a")], Some("a")), Failed);
    }

    #[test]
    fn if_unmodified_since_only_without_if_match() {
        assert_eq!(eval("GET", &[("If-Unmodified-Since", LM)], None), Proceed);
        assert_eq!(
            eval("GET", &[("If-Unmodified-Since", EARLIER)], None),
            Failed
        );
        let with_match = [("If-Match", "*"), ("If-Unmodified-Since", EARLIER)];
        assert_eq!(eval("GET", &with_match, None), Proceed);
        assert_eq!(
            eval("GET", &[("If-Unmodified-Since", "yesterday")], None),
            Proceed
        );
    }

    #[test]
    fn if_none_match_compares_weakly() {
        let e = Some("\"a\"");
        assert_eq!(eval("GET", &[("If-None-Match", "W/\"a\"")], e), NotModified);
        assert_eq!(
            eval("HEAD", &[("If-None-Match", "\"b\", \"a\"")], e),
            NotModified
        );
        assert_eq!(
            eval("GET", &[("If-None-Match", "\"a\"")], Some("W/\"a\"")),
            NotModified
        );
        assert_eq!(eval("GET", &[("If-None-Match", "\"b\"")], e), Proceed);
        assert_eq!(eval("GET", &[("IF-NONE-MATCH", "\"a\"")], e), NotModified);
        assert_eq!(eval("GET", &[("Accept", "*/*")], e), Proceed);
        assert_eq!(eval("GET", &[("If-None-Match", "*")], None), NotModified);
        assert_eq!(eval("POST", &[("If-None-Match", "\"a\"")], e), Failed);
        assert_eq!(eval("DELETE", &[("If-None-Match", "*")], e), Failed);
        // If-None-Match decides alone: If-Modified-Since is then ignored.
        let both = [("If-None-Match", "\"b\""), ("If-Modified-Since", LM)];
        assert_eq!(eval("GET", &both, e), Proceed);
    }

    #[test]
    fn if_modified_since_for_get_and_head_only() {
        assert_eq!(eval("GET", &[("If-Modified-Since", LM)], None), NotModified);
        assert_eq!(
            eval("HEAD", &[("If-Modified-Since", LM)], None),
            NotModified
        );
        assert_eq!(
            eval("GET", &[("If-Modified-Since", EARLIER)], None),
            Proceed
        );
        assert_eq!(eval("POST", &[("If-Modified-Since", LM)], None), Proceed);
        assert_eq!(
            eval("GET", &[("If-Modified-Since", "garbage")], None),
            Proceed
        );
        let twice = [("If-Modified-Since", LM), ("If-Modified-Since", LM)];
        assert_eq!(eval("GET", &twice, None), Proceed);
    }

    #[test]
    fn failed_precondition_comes_before_not_modified() {
        let h = [("If-Match", "\"b\""), ("If-None-Match", "\"a\"")];
        assert_eq!(eval("GET", &h, Some("\"a\"")), Failed);
        let h = [("If-Unmodified-Since", EARLIER), ("If-Modified-Since", LM)];
        assert_eq!(eval("GET", &h, None), Failed);
    }

    #[test]
    fn validators_from_header_values() {
        let v = Validators::from_headers(Some("\"a\""), Some(LM));
        assert_eq!(v.last_modified, httpdate::parse_http_date(LM).ok());
        assert_eq!(
            Validators::from_headers(None, Some("soon")).last_modified,
            None
        );
    }

    #[test]
    fn if_range_needs_a_strong_match_or_the_exact_date() {
        let v = Validators {
            etag: Some("\"a\""),
            last_modified: httpdate::parse_http_date(LM).ok(),
        };
        let allows =
            |value: &str| with_request("GET", &[("If-Range", value)], |r| if_range_allows(r, &v));
        assert!(allows("\"a\""));
        assert!(allows(LM));
        assert!(!allows("W/\"a\""));
        assert!(!allows("\"b\""));
        assert!(!allows("\"a\", \"b\""));
        assert!(!allows(EARLIER));
        assert!(!allows("garbage"));
        assert!(with_request("GET", &[], |r| if_range_allows(r, &v)));
        let weak = Validators {
            etag: Some("W/\"a\""),
            ..v
        };
        assert!(!with_request("GET", &[("If-Range", "W/\"a\"")], |r| {
            if_range_allows(r, &weak)
        }));
    }
}
