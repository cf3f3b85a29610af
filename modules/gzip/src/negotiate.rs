//! Deciding whether a response may be compressed and whether the client wants it.

use osprey_sdk::{Body, Request, Response};

/// Content types compressed when the route does not list its own `types`.
pub const DEFAULT_TYPES: &[&str] = &[
    "text/",
    "application/javascript",
    "application/json",
    "application/xml",
    "application/xhtml+xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/wasm",
    "image/svg+xml",
    "+json",
    "+xml",
];

/// Does the client accept gzip? `Accept-Encoding` items with q-values (RFC 9110 §12.5.3):
/// an explicit `gzip` (or `x-gzip`) decides; otherwise `*` does; `q=0` means "not this".
pub fn accepts_gzip(req: &Request<'_>) -> bool {
    let mut gzip = None;
    let mut star = None;
    for item in req.header_all("accept-encoding").flat_map(|h| h.split(',')) {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| {
                let (name, value) = p.split_once('=')?;
                name.trim().eq_ignore_ascii_case("q").then(|| value.trim())
            })
            .next()
            .map_or(1.0, |v| v.parse::<f32>().unwrap_or(0.0));
        if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            gzip = Some(q > 0.0);
        } else if coding == "*" {
            star = Some(q > 0.0);
        }
    }
    gzip.or(star).unwrap_or(false)
}

/// Is `content_type` in `types`? An entry ending in `/` is a prefix (`text/`), one starting
/// with `+` a structured-syntax suffix (`+json`), anything else an exact media type.
pub fn compressible(content_type: &str, types: &[String]) -> bool {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    !mime.is_empty()
        && types.iter().any(|t| {
            if t.ends_with('/') {
                mime.starts_with(t.as_str())
            } else if t.starts_with('+') {
                mime.ends_with(t.as_str())
            } else {
                mime == *t
            }
        })
}

/// Could this response be served compressed (to some client)? Then it varies by
/// `Accept-Encoding`.
pub fn eligible(resp: &Response, types: &[String], min_length: u64) -> bool {
    if resp.status != 200 || resp.get_header("content-range").is_some() {
        return false;
    }
    if resp
        .get_header("content-encoding")
        .is_some_and(|e| !e.trim().eq_ignore_ascii_case("identity"))
    {
        return false;
    }
    if resp.get_header("cache-control").is_some_and(|cc| {
        cc.split(',')
            .any(|d| d.trim().eq_ignore_ascii_case("no-transform"))
    }) {
        return false;
    }
    if !resp
        .get_header("content-type")
        .is_some_and(|ct| compressible(ct, types))
    {
        return false;
    }
    match &resp.body {
        Body::Stream(_) => true,
        body => body.len().is_some_and(|n| n >= min_length.max(1)),
    }
}

/// Add `Accept-Encoding` to `Vary` (unless it is there already, or `Vary: *`).
pub fn add_vary(resp: &mut Response) {
    match resp.get_header("vary").map(str::to_owned) {
        None => {
            resp.header("Vary", "Accept-Encoding");
        }
        Some(v) => {
            let has = v
                .split(',')
                .any(|t| t.trim() == "*" || t.trim().eq_ignore_ascii_case("accept-encoding"));
            if !has {
                resp.set_header("Vary", format!("{v}, Accept-Encoding"));
            }
        }
    }
}

/// The compressed body is a different representation: a strong ETag becomes weak.
pub fn weaken_etag(resp: &mut Response) {
    if let Some(tag) = resp.get_header("etag") {
        if !tag.starts_with("W/") {
            let weak = format!("W/{tag}");
            resp.set_header("ETag", weak);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types() -> Vec<String> {
        DEFAULT_TYPES.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn matches_types() {
        let t = types();
        assert!(compressible("text/html; charset=utf-8", &t));
        assert!(compressible("application/ld+json", &t));
        assert!(compressible("image/svg+xml", &t));
        assert!(!compressible("image/png", &t));
        assert!(!compressible("application/octet-stream", &t));
        assert!(!compressible("", &t));
    }
}
