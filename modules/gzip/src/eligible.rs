//! Deciding whether a response may be compressed, and the headers a compressed variant
//! changes. Whether the client wants it is the SDK's `http::accepts`.

use osprey_sdk::{Body, Response};

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
