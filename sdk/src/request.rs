//! The request as a module sees it: a view that borrows the connection's buffer.

use abi_stable::{
    std_types::{ROption, RSlice, RStr},
    StableAbi,
};

use crate::fields::same_name;
use crate::params::{self, Params};
use crate::request_body::BodySlot;
use crate::response::StreamBox;

/// One request header, exactly as received (name and value borrowed, not copied).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct Header<'a> {
    /// The name as sent (compare case-insensitively).
    pub name: RStr<'a>,
    /// The value, surrounding whitespace removed.
    pub value: RSlice<'a, u8>,
}

impl<'a> Header<'a> {
    /// The value as text, if it is valid UTF-8 (the core has already rejected control bytes).
    pub fn value_str(&self) -> Option<&'a str> {
        text(self.value.as_slice())
    }
}

/// A header value as text, if it is UTF-8. The core lets non-ASCII bytes through (RFC 9110
/// `obs-text`), so this checks; nearly every value is ASCII, which one word-at-a-time test
/// proves valid UTF-8 at a third of `from_utf8`'s cost.
fn text(value: &[u8]) -> Option<&str> {
    if value.is_ascii() {
        // SAFETY: ASCII is valid UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(value) })
    } else {
        std::str::from_utf8(value).ok()
    }
}

/// A parsed HTTP request. Every field borrows from the connection, so building it costs no
/// allocation; copy what you need to keep past `handle`.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct Request<'a> {
    /// `GET`, `POST`, ... as sent (methods are case-sensitive).
    pub method: RStr<'a>,
    /// The raw path, still percent-encoded, without the query.
    pub path: RStr<'a>,
    /// The raw query string without the `?` (empty when there is none).
    pub query: RStr<'a>,
    /// The path and query as sent in origin form.
    pub uri: RStr<'a>,
    /// The part of `path` that the matching route's prefix did not consume (starts with `/`
    /// or is empty).
    pub path_info: RStr<'a>,
    /// The route prefix that matched (empty for a catch-all route).
    pub route_prefix: RStr<'a>,
    /// HTTP minor version: 0 for HTTP/1.0, 1 for HTTP/1.1 (HTTP/2 requests report 1).
    pub http_minor: u8,
    /// The request came over HTTP/2.
    pub http2: bool,
    /// The host the request is for (Host header or absolute URI), lower-cased, port removed.
    pub host: RStr<'a>,
    /// The client's address as `ip:port` (`[v6]:port` for IPv6).
    pub remote_addr: RStr<'a>,
    /// The connection is TLS.
    pub secure: bool,
    /// A subrequest whose parent reads only its body ([`Subrequest::body_only`](crate::Subrequest::body_only),
    /// an SSI include), or a request whose filter replaces the body (an SSI page, see
    /// [`BODY_ONLY`](crate::BODY_ONLY)): headers only a client reads (`Last-Modified`, `ETag`)
    /// may be left out.
    pub body_only: bool,
    /// A subrequest (an include, a template's part): it shares its client request's id and
    /// `Cookie`, and its answer goes to the module that started it, never to the client (its
    /// `Set-Cookie` reaches no one).
    pub subrequest: bool,
    /// This request's id: 32 hex digits of 128 random bits, unique across threads and
    /// restarts, or the `X-Request-Id` a trusted proxy in front sent (see `request_id` in the
    /// configuration).
    pub request_id: RStr<'a>,
    /// Every header, in the order received.
    pub headers: RSlice<'a, Header<'a>>,
    /// The whole request body (chunked bodies are already decoded); empty when the handler
    /// streams the body instead (see [`Request::take_body_stream`]).
    pub body: RSlice<'a, u8>,
    /// The body as it arrives, for a handler that streams request bodies.
    pub body_stream: ROption<&'a BodySlot>,
}

impl<'a> Request<'a> {
    /// The first header with this name (case-insensitive), as bytes.
    pub fn header_bytes(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|h| same_name(h.name.as_str(), name))
            .map(|h| h.value.as_slice())
    }

    /// The first header with this name (case-insensitive), as text.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.header_bytes(name).and_then(text)
    }

    /// Every value of a header, in order (for headers that may repeat).
    pub fn header_all<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'a str> + 's {
        self.headers
            .iter()
            .filter(move |h| h.name.as_str().eq_ignore_ascii_case(name))
            .filter_map(|h| h.value_str())
    }

    /// The request body as a stream, for a handler whose
    /// [`streams_request_body`](crate::Handler::streams_request_body) is true and whose request
    /// has a body; `None` otherwise, or when it was taken already. Read it with
    /// [`next_chunk`](crate::request_body::next_chunk) inside the handler's `Later` future.
    pub fn take_body_stream(&self) -> Option<StreamBox> {
        self.body_stream.into_option()?.take()
    }

    /// Is this a HEAD request (answer with headers only; the core drops any body).
    pub fn is_head(&self) -> bool {
        self.method.as_str() == "HEAD"
    }

    /// The `ip` part of `remote_addr`.
    pub fn remote_ip(&self) -> &'a str {
        let addr = self.remote_addr.as_str();
        match addr.rfind(':') {
            Some(i) => addr[..i].trim_start_matches('[').trim_end_matches(']'),
            None => addr,
        }
    }

    /// Query-string parameters, decoded (leniently, see [`Params::parse`]) in one pass: call
    /// it once and `get` from the result when a handler reads several.
    pub fn query_params(&self) -> Params {
        Params::parse(self.query.as_str())
    }

    /// Query-string parameters, or why the query is malformed (answer 400 with it).
    ///
    /// ```
    /// # use osprey_sdk::testing::TestRequest;
    /// TestRequest::get("/?a=%zz").with_view(|req| {
    ///     let err = req.query_params_strict().unwrap_err();
    ///     assert_eq!(err.to_string(), "bad percent-escape at byte 2");
    /// });
    /// ```
    pub fn query_params_strict(&self) -> Result<Params, params::DecodeError> {
        Params::parse_strict(self.query.as_str())
    }

    /// One query parameter, decoded leniently. It scans the query up to the first match and
    /// decodes only that value; for several parameters, [`query_params`](Self::query_params)
    /// parses once.
    pub fn query_param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// `application/x-www-form-urlencoded` body parameters (empty for other content types),
    /// decoded leniently.
    pub fn form_params(&self) -> Params {
        match (self.is_form(), std::str::from_utf8(self.body.as_slice())) {
            (true, Ok(body)) => Params::parse(body),
            _ => Params::default(),
        }
    }

    /// Form body parameters (empty for other content types), or why the body is malformed.
    ///
    /// ```
    /// # use osprey_sdk::testing::TestRequest;
    /// let req = TestRequest::post("/")
    ///     .header("Content-Type", "application/x-www-form-urlencoded")
    ///     .body(&b"a=%C3%A9&b=%E9"[..]);
    /// req.with_view(|r| assert!(r.form_params_strict().is_err()));
    /// ```
    pub fn form_params_strict(&self) -> Result<Params, params::DecodeError> {
        if !self.is_form() {
            return Ok(Params::default());
        }
        // Escapes decode to bytes; raw bytes must already be UTF-8.
        let body = std::str::from_utf8(self.body.as_slice())
            .map_err(|e| params::DecodeError::InvalidUtf8(e.valid_up_to()))?;
        Params::parse_strict(body)
    }

    fn is_form(&self) -> bool {
        self.header("content-type").is_some_and(|ct| {
            ct.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
    }

    /// Cookies from every `Cookie` header, as (name, value) pairs.
    pub fn cookies(&self) -> Vec<(&'a str, &'a str)> {
        self.header_all("cookie")
            .flat_map(params::cookies)
            .collect()
    }

    /// One cookie's value, the first of its name. (Searched header by header with
    /// [`params::cookie`], which skips the other pairs whole: `userid` asks twice a request.)
    pub fn cookie(&self, name: &str) -> Option<&'a str> {
        self.headers
            .iter()
            .filter(|h| is_cookie(&h.name))
            .filter_map(|h| h.value_str())
            .find_map(|header| params::cookie(header, name))
    }
}

/// `Cookie` in any case, a word at a time (a letter's case is its 0x20 bit): a byte-by-byte
/// `eq_ignore_ascii_case` cost a sixth of a cookie lookup.
fn is_cookie(name: &str) -> bool {
    match name.as_bytes() {
        &[a, b, c, d, e, f] => {
            u32::from_le_bytes([a, b, c, d]) | 0x2020_2020 == u32::from_le_bytes(*b"cook")
                && u16::from_le_bytes([e, f]) | 0x2020 == u16::from_le_bytes(*b"ie")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::TestRequest;

    #[test]
    fn a_cookie_is_found_in_any_cookie_header() {
        let req = TestRequest::get("/")
            .header("Cookie", "a=1; b=\"two\"")
            .header("X-Other", "uid=no")
            .header("cookie", "flag; uid = 3 ;uid=4");
        req.with_view(|r| {
            assert_eq!(r.cookie("a"), Some("1"));
            assert_eq!(r.cookie("b"), Some("two"));
            assert_eq!(r.cookie("uid"), Some("3"), "the first of the name");
            assert_eq!(r.cookie("flag"), None, "no value: no cookie");
            assert_eq!(r.cookie("c"), None);
            assert_eq!(r.cookies().len(), 4);
        });
    }

    #[test]
    fn only_cookie_headers_are_cookie_headers() {
        for name in ["Cookie", "cookie", "COOKIE", "cOoKiE"] {
            assert!(super::is_cookie(name), "{name}");
        }
        for name in ["Cookies", "Cooki", "cook1e", "CoOkIm", "", "Set-Cookie"] {
            assert!(!super::is_cookie(name), "{name}");
        }
    }

    #[test]
    fn header_text_is_checked_only_past_ascii() {
        let req = TestRequest::get("/")
            .header("X-Ascii", "plain")
            .header("X-Utf8", "caf\u{e9}")
            .header("X-Latin1", b"caf\xe9");
        req.with_view(|r| {
            assert_eq!(r.header("x-ascii"), Some("plain"));
            assert_eq!(r.header("x-utf8"), Some("caf\u{e9}"));
            assert_eq!(r.header("x-latin1"), None);
            assert_eq!(r.header_bytes("x-latin1"), Some(&b"caf\xe9"[..]));
            let all: Vec<_> = r.headers.iter().map(|h| h.value_str()).collect();
            assert_eq!(all, [Some("plain"), Some("caf\u{e9}"), None]);
        });
    }
}
