//! HTTP caching semantics (RFC 9110 §13, §14): validators, conditional requests, ranges,
//! content negotiation for precompressed files.

use std::time::{Duration, SystemTime};

use osprey_sdk::Request;

/// Ranges beyond this many are not worth a multipart answer; the whole file is sent.
pub const MAX_RANGES: usize = 16;

/// Whether the client's cached copy is current, so `304 Not Modified` answers.
/// `If-None-Match` (weak comparison) takes precedence over `If-Modified-Since`.
pub fn not_modified(req: &Request<'_>, etag: &str, mtime: SystemTime) -> bool {
    let mut has_inm = false;
    for value in req.header_all("if-none-match") {
        has_inm = true;
        if value.trim() == "*" || tags(value).any(|t| weak_eq(t, etag)) {
            return true;
        }
    }
    if has_inm {
        return false;
    }
    match req
        .header("if-modified-since")
        .and_then(|d| httpdate::parse_http_date(d.trim()).ok())
    {
        Some(since) => whole_seconds(mtime) <= since,
        None => false,
    }
}

/// Whether `If-Range` (if present) allows answering the `Range`: a strong match of the ETag,
/// or a date equal to `Last-Modified`.
pub fn if_range_ok(req: &Request<'_>, etag: &str, mtime: SystemTime) -> bool {
    let Some(value) = req.header("if-range").map(str::trim) else {
        return true;
    };
    if value.starts_with('"') || value.starts_with("W/") {
        return value == etag;
    }
    match httpdate::parse_http_date(value) {
        Ok(date) => date == whole_seconds(mtime),
        Err(_) => false,
    }
}

/// HTTP dates have whole seconds.
fn whole_seconds(t: SystemTime) -> SystemTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn tags(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|t| !t.is_empty())
}

fn weak_eq(a: &str, b: &str) -> bool {
    a.strip_prefix("W/").unwrap_or(a) == b.strip_prefix("W/").unwrap_or(b)
}

/// What a `Range` header asks of a representation of `size` bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Ranges {
    /// No usable `Range` (absent, another unit, or bad syntax): send everything.
    Full,
    /// No range overlaps the representation: 416.
    Unsatisfiable,
    /// Inclusive byte ranges, at least one, in the order asked.
    Some(Vec<(u64, u64)>),
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
        if i >= 100 {
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

/// Whether the client takes `Content-Encoding: gzip` (`gzip`, `x-gzip` or `*`, with q > 0).
pub fn accepts_gzip(req: &Request<'_>) -> bool {
    let mut gzip = None;
    let mut star = None;
    for value in req.header_all("accept-encoding") {
        for item in value.split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let q = parts
                .filter_map(|p| {
                    p.trim()
                        .strip_prefix("q=")
                        .or_else(|| p.trim().strip_prefix("Q="))
                })
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                gzip = Some(q > 0.0);
            } else if coding == "*" {
                star = Some(q > 0.0);
            }
        }
    }
    gzip.or(star).unwrap_or(false)
}

/// A `multipart/byteranges` body: each range with its own `Content-Type` and `Content-Range`.
pub fn multipart(
    boundary: &str,
    content_type: &str,
    size: u64,
    parts: &[((u64, u64), &[u8])],
) -> Vec<u8> {
    let total: usize = parts.iter().map(|(_, d)| d.len() + 128).sum();
    let mut out = Vec::with_capacity(total);
    for ((first, last), data) in parts {
        out.extend_from_slice(
            format!(
                "\r\n--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: bytes {first}-{last}/{size}\r\n\r\n"
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

    #[test]
    fn ranges() {
        let r = |h: &str| parse_ranges(Some(h), 100);
        assert_eq!(r("bytes=0-9"), Ranges::Some(vec![(0, 9)]));
        assert_eq!(r("bytes=90-"), Ranges::Some(vec![(90, 99)]));
        assert_eq!(r("bytes=-10"), Ranges::Some(vec![(90, 99)]));
        assert_eq!(r("bytes=-1000"), Ranges::Some(vec![(0, 99)]));
        assert_eq!(r("bytes=50-1000"), Ranges::Some(vec![(50, 99)]));
        assert_eq!(r("bytes=0-0, 5-6"), Ranges::Some(vec![(0, 0), (5, 6)]));
        assert_eq!(r("bytes=100-"), Ranges::Unsatisfiable);
        assert_eq!(r("bytes=-0"), Ranges::Unsatisfiable);
        assert_eq!(r("bytes=200-300, 100-"), Ranges::Unsatisfiable);
        assert_eq!(r("bytes=9-1"), Ranges::Full);
        assert_eq!(r("bytes=a-b"), Ranges::Full);
        assert_eq!(r("bytes=+1-2"), Ranges::Full);
        assert_eq!(r("items=0-1"), Ranges::Full);
        assert_eq!(r("bytes=99999999999999999999999-"), Ranges::Full);
        assert_eq!(parse_ranges(Some("bytes=-5"), 0), Ranges::Unsatisfiable);
        assert_eq!(parse_ranges(None, 10), Ranges::Full);
    }
}
