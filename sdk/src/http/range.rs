//! Byte ranges (RFC 9110 §14): which part of a representation a `GET` asks for, and the
//! `multipart/byteranges` body of a multi-range answer.

use crate::http::conditional::{if_range_allows, Validators};
use crate::Request;

/// Specs past this many make the header unusable (a range flood): the whole body is sent.
const MAX_SPECS: usize = 100;

/// What a `Range` header asks of a representation.
#[derive(Debug, PartialEq, Eq)]
pub enum Ranges {
    /// No usable `Range` (absent, not a GET, an `If-Range` that does not match, another unit,
    /// or bad syntax): send everything with 200.
    Full,
    /// No range overlaps the representation: 416 with `Content-Range: bytes */size`.
    Unsatisfiable,
    /// Inclusive byte ranges, at least one, in the order asked: 206.
    Some(Vec<(u64, u64)>),
}

/// The ranges a request asks of a representation of `size` bytes with validators `v`. Range
/// is defined for GET only (§14.2): any other method gets the whole representation, as does
/// a request whose `If-Range` no longer matches.
pub fn requested_ranges(req: &Request<'_>, v: &Validators<'_>, size: u64) -> Ranges {
    // Most requests have no Range: one look for it, not one for If-Range first.
    let Some(range) = req.header("range").filter(|_| req.method.as_str() == "GET") else {
        return Ranges::Full;
    };
    if !if_range_allows(req, v) {
        return Ranges::Full;
    }
    parse_ranges(Some(range), size)
}

/// Parse `bytes=a-b, c-, -n` against `size`.
pub fn parse_ranges(header: Option<&str>, size: u64) -> Ranges {
    let Some(header) = header else {
        return Ranges::Full;
    };
    let header = header.trim();
    let Some(specs) = header
        .get(..6)
        .filter(|unit| unit.eq_ignore_ascii_case("bytes="))
        .map(|_| &header[6..])
    else {
        return Ranges::Full;
    };
    let mut out = Vec::new();
    for (i, spec) in specs.split(',').map(str::trim).enumerate() {
        if i >= MAX_SPECS {
            return Ranges::Full;
        }
        if spec.is_empty() {
            continue;
        }
        let Some((first, last)) = spec.split_once('-') else {
            return Ranges::Full;
        };
        let num = |s: &str| -> Option<u64> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
        };
        let range = match (first.trim(), last.trim()) {
            ("", suffix) => match num(suffix) {
                Some(0) => None,
                Some(n) if size > 0 => Some((size - n.min(size), size - 1)),
                Some(_) => None,
                None => return Ranges::Full,
            },
            (a, "") => match num(a) {
                Some(a) => (a < size).then(|| (a, size - 1)),
                None => return Ranges::Full,
            },
            (a, b) => match (num(a), num(b)) {
                (Some(a), Some(b)) if a <= b => (a < size).then(|| (a, b.min(size - 1))),
                _ => return Ranges::Full,
            },
        };
        out.extend(range);
    }
    if out.is_empty() {
        Ranges::Unsatisfiable
    } else {
        Ranges::Some(out)
    }
}

/// The `Content-Range` value of one range of a representation of `size` bytes.
pub fn content_range((first, last): (u64, u64), size: u64) -> String {
    format!("bytes {first}-{last}/{size}")
}

/// The `Content-Range` value of a 416 answer.
pub fn unsatisfied_range(size: u64) -> String {
    format!("bytes */{size}")
}

/// A `multipart/byteranges` body (§14.6): each range with its own `Content-Type` and
/// `Content-Range`, between `boundary` delimiters.
pub fn multipart(
    boundary: &str,
    content_type: &str,
    size: u64,
    parts: &[((u64, u64), &[u8])],
) -> Vec<u8> {
    let total: usize = parts.iter().map(|(_, d)| d.len() + 128).sum();
    let mut out = Vec::with_capacity(total);
    for (range, data) in parts {
        out.extend_from_slice(
            format!(
                "\r\n--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: {}\r\n\r\n",
                content_range(*range, size)
            )
            .as_bytes(),
        );
        out.extend_from_slice(data);
    }
    out.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::test_request::with_request;

    #[test]
    fn parses_single_suffix_open_and_multiple() {
        let r = |h: &str| parse_ranges(Some(h), 100);
        assert_eq!(r("bytes=0-9"), Ranges::Some(vec![(0, 9)]));
        assert_eq!(r("Bytes=90-"), Ranges::Some(vec![(90, 99)]));
        assert_eq!(r("bytes=-10"), Ranges::Some(vec![(90, 99)]));
        assert_eq!(r("bytes=-1000"), Ranges::Some(vec![(0, 99)]));
        assert_eq!(r("bytes=50-1000"), Ranges::Some(vec![(50, 99)]));
        assert_eq!(r("bytes=0-0, 5-6"), Ranges::Some(vec![(0, 0), (5, 6)]));
        assert_eq!(r("bytes=0-0, 200-300"), Ranges::Some(vec![(0, 0)]));
    }

    #[test]
    fn unsatisfiable_and_unusable_headers() {
        let r = |h: &str| parse_ranges(Some(h), 100);
        assert_eq!(r("bytes=100-"), Ranges::Unsatisfiable);
        assert_eq!(r("bytes=-0"), Ranges::Unsatisfiable);
        assert_eq!(r("bytes=200-300, 100-"), Ranges::Unsatisfiable);
        assert_eq!(parse_ranges(Some("bytes=-5"), 0), Ranges::Unsatisfiable);
        assert_eq!(r("bytes=9-1"), Ranges::Full);
        assert_eq!(r("bytes=a-b"), Ranges::Full);
        assert_eq!(r("bytes=+1-2"), Ranges::Full);
        assert_eq!(r("items=0-1"), Ranges::Full);
        assert_eq!(r("bytes=99999999999999999999999-"), Ranges::Full);
        assert_eq!(
            r(&format!("bytes={}", vec!["0-0"; 101].join(","))),
            Ranges::Full
        );
        assert_eq!(parse_ranges(None, 10), Ranges::Full);
    }

    #[test]
    fn only_get_and_a_matching_if_range_get_ranges() {
        let v = Validators {
            etag: Some("\"a\""),
            last_modified: None,
        };
        let ask = |method: &str, h: &[(&str, &str)]| {
            with_request(method, h, |r| requested_ranges(r, &v, 100))
        };
        let range = ("Range", "bytes=0-9");
        assert_eq!(ask("GET", &[range]), Ranges::Some(vec![(0, 9)]));
        assert_eq!(ask("HEAD", &[range]), Ranges::Full);
        assert_eq!(ask("POST", &[range]), Ranges::Full);
        assert_eq!(
            ask("GET", &[range, ("If-Range", "\"a\"")]),
            Ranges::Some(vec![(0, 9)])
        );
        assert_eq!(ask("GET", &[range, ("If-Range", "W/\"a\"")]), Ranges::Full);
        assert_eq!(
            ask("GET", &[("Range", "bytes=500-")]),
            Ranges::Unsatisfiable
        );
    }

    #[test]
    fn multipart_parts_carry_their_ranges() {
        let body = multipart("B", "text/plain", 10, &[((0, 1), b"ab"), ((8, 9), b"ij")]);
        let text = String::from_utf8(body).unwrap();
        assert_eq!(
            text,
            "\r\n--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/10\r\n\r\nab\
             \r\n--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 8-9/10\r\n\r\nij\
             \r\n--B--\r\n"
        );
        assert_eq!(unsatisfied_range(7), "bytes */7");
    }
}
