//! Request head parsing (httparse) with the strict checks of RFC 9112 that close request
//! smuggling: one framing per request, exact `chunked`, one Host, clean bytes.
//!
//! The result holds offsets into the read buffer, not borrows, so the buffer can move (to a
//! worker thread, or back to the pool) and the view be rebuilt from it.

use arrayvec::ArrayVec;

use super::{bad, find_byte, HttpError};
use crate::config::Limits;

/// Most headers a request may carry, whatever the configuration says.
pub const MAX_HEADERS: usize = 128;

/// A byte range `start..end` of the read buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    fn of(buf: &[u8], part: &[u8]) -> Span {
        let start = part.as_ptr() as usize - buf.as_ptr() as usize;
        Span {
            start: start as u32,
            end: (start + part.len()) as u32,
        }
    }

    #[inline]
    pub fn get<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        &buf[self.start as usize..self.end as usize]
    }

    /// The text of this span. Only for the spans the parser made from text (method, target,
    /// path, query, host, header names), read from the buffer they were parsed from.
    #[inline]
    pub fn str<'b>(&self, buf: &'b [u8]) -> &'b str {
        let bytes = self.get(buf);
        if bytes.is_ascii() {
            // SAFETY: ASCII is UTF-8. (A cheaper test than full validation, for the spans read
            // on every request; the parser's text spans are ASCII but for a UTF-8 target.)
            unsafe { std::str::from_utf8_unchecked(bytes) }
        } else {
            std::str::from_utf8(bytes).unwrap_or("")
        }
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    fn sub(&self, from: usize, to: usize) -> Span {
        Span {
            start: self.start + from as u32,
            end: self.start + to as u32,
        }
    }
}

/// How the request body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// A parsed request head.
#[derive(Debug, Clone)]
pub struct Head {
    /// Bytes of the head, including the blank line.
    pub len: usize,
    pub method: Span,
    /// Path and query in origin form (for absolute-form targets, what follows the authority).
    pub uri: Span,
    pub path: Span,
    pub query: Span,
    pub minor: u8,
    pub headers: ArrayVec<(Span, Span), MAX_HEADERS>,
    /// Host from the absolute URI or the Host header, port removed.
    pub host: Span,
    /// The host lower-cased, when it was not already.
    pub host_lower: Option<String>,
    pub body: BodyFraming,
    pub keep_alive: bool,
    pub expect_continue: bool,
}

impl Head {
    #[inline]
    pub fn method<'b>(&self, buf: &'b [u8]) -> &'b str {
        self.method.str(buf)
    }

    #[inline]
    pub fn host<'b>(&'b self, buf: &'b [u8]) -> &'b str {
        self.host_lower
            .as_deref()
            .unwrap_or_else(|| self.host.str(buf))
    }

    /// The path, `/` for an absolute-form target with an empty path.
    #[inline]
    pub fn path<'b>(&self, buf: &'b [u8]) -> &'b str {
        if self.path.is_empty() {
            "/"
        } else {
            self.path.str(buf)
        }
    }
}

impl Head {
    /// The target in origin form (or `*`) at `uri` of `buf`: path and query. Inlined: the
    /// HTTP/1.1 parser's hot path, shared with HTTP/2.
    #[inline]
    pub fn set_uri(&mut self, uri: Span, buf: &[u8]) {
        self.uri = uri;
        let uri_bytes = uri.get(buf);
        match find_byte(b'?', uri_bytes) {
            Some(q) => {
                self.path = uri.sub(0, q);
                self.query = uri.sub(q + 1, uri_bytes.len());
            }
            None => self.path = uri,
        }
    }

    /// Forget a previous request's fields (a pooled head is reused; its header array is not
    /// rewritten, only emptied).
    pub fn reset(&mut self) {
        self.len = 0;
        self.method = Span::default();
        self.uri = Span::default();
        self.path = Span::default();
        self.query = Span::default();
        self.minor = 1;
        self.headers.clear();
        self.host = Span::default();
        self.host_lower = None;
        self.body = BodyFraming::None;
        self.keep_alive = true;
        self.expect_continue = false;
    }
}

impl Default for Head {
    fn default() -> Self {
        Head {
            len: 0,
            method: Span::default(),
            uri: Span::default(),
            path: Span::default(),
            query: Span::default(),
            minor: 1,
            headers: ArrayVec::new(),
            host: Span::default(),
            host_lower: None,
            body: BodyFraming::None,
            keep_alive: true,
            expect_continue: false,
        }
    }
}

/// Parse a request head from the start of `buf`. `Ok(None)`: not complete yet.
pub fn parse(buf: &[u8], limits: &Limits) -> Result<Option<Head>, HttpError> {
    let mut head = Head::default();
    Ok(parse_into(buf, limits, &mut head)?.then_some(head))
}

/// Parse a request head from the start of `buf` into `head` (reused: a head is large, and is
/// neither moved nor zeroed per request). `Ok(false)`: not complete yet.
pub fn parse_into(buf: &[u8], limits: &Limits, head: &mut Head) -> Result<bool, HttpError> {
    parse_from(buf, 0, limits, head)
}

/// [`parse_into`] for the head that starts at byte `from` of `buf` (the bytes before it are
/// pipelined requests already answered): its spans and `len` count from the start of `buf`.
pub fn parse_from(
    buf: &[u8],
    from: usize,
    limits: &Limits,
    head: &mut Head,
) -> Result<bool, HttpError> {
    let rest = &buf[from..];
    // RFC 9112 2.2: ignore empty lines before the request line.
    let skip = rest
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(rest.len());
    let max_headers = limits.max_headers.min(MAX_HEADERS);
    let mut raw = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let data = &rest[skip..];
    let len = match req.parse_with_uninit_headers(data, &mut raw[..max_headers]) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            check_partial_size(rest, data, limits)?;
            return Ok(false);
        }
        Err(e) => return Err(super::diagnose::explain(data, e, limits.max_request_line)),
    };
    // A head shorter than the limit has a request line within it.
    if len > limits.max_request_line {
        check_request_line(data, limits)?;
    }
    if skip + len > limits.max_header_bytes {
        return Err(too_large(data, limits));
    }
    let method = req.method.unwrap_or("");
    let target = req.path.unwrap_or("");
    let minor = req.version.unwrap_or(1);
    head.reset();
    head.len = from + skip + len;
    head.method = Span::of(buf, method.as_bytes());
    head.minor = minor;
    head.keep_alive = minor == 1;
    let target_span = Span::of(buf, target.as_bytes());
    let (uri, uri_host) = split_target(method, target, target_span)?;
    head.set_uri(uri, buf);

    let mut host_header: Option<Span> = None;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut close = false;
    for h in req.headers.iter() {
        let name = Span::of(buf, h.name.as_bytes());
        // httparse leaves out the whitespace around a value (OWS, RFC 9112 5).
        let value = Span::of(buf, h.value);
        head.headers.push((name, value));
        let v = value.get(buf);
        match h.name.len() {
            4 if h.name.eq_ignore_ascii_case("host") => {
                if host_header.is_some() {
                    return Err(bad("more than one Host header"));
                }
                host_header = Some(value);
            }
            14 if h.name.eq_ignore_ascii_case("content-length") => {
                let n = parse_length(v)?;
                if content_length.is_some_and(|old| old != n) {
                    return Err(bad("conflicting Content-Length headers"));
                }
                content_length = Some(n);
            }
            17 if h.name.eq_ignore_ascii_case("transfer-encoding") => {
                transfer_codings(v, &mut chunked)?;
            }
            10 if h.name.eq_ignore_ascii_case("connection") => {
                for token in v.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") && minor == 0 {
                        head.keep_alive = true;
                    }
                }
            }
            6 if h.name.eq_ignore_ascii_case("expect") => {
                if !expects_continue(v) {
                    return Err(EXPECTATION_FAILED);
                }
                head.expect_continue = minor == 1;
            }
            _ => {}
        }
    }
    // `close` wins over `keep-alive`, in any order.
    if close {
        head.keep_alive = false;
    }

    head.body = match (chunked, content_length) {
        (true, Some(_)) => return Err(bad("both Content-Length and Transfer-Encoding")),
        (true, None) if minor == 0 => return Err(bad("Transfer-Encoding in an HTTP/1.0 request")),
        (true, None) => BodyFraming::Chunked,
        (false, Some(0)) | (false, None) => BodyFraming::None,
        (false, Some(n)) => BodyFraming::Length(n),
    };

    let host = match (uri_host, host_header) {
        (Some(h), _) => h,
        (None, Some(h)) => h,
        (None, None) if minor == 1 => return Err(bad("missing Host header")),
        (None, None) => Span::default(),
    };
    set_host(head, buf, host)?;
    Ok(true)
}

/// CONNECT (tunnels) is not served, over either protocol.
pub const CONNECT: HttpError = HttpError::new(405, "CONNECT is not supported");

/// An Expect field (RFC 9110 §10.1.1): only `100-continue` is understood, any other
/// expectation is refused with [`EXPECTATION_FAILED`].
#[inline]
pub fn expects_continue(v: &[u8]) -> bool {
    v.eq_ignore_ascii_case(b"100-continue")
}

pub const EXPECTATION_FAILED: HttpError = HttpError::new(417, "unsupported expectation");

/// Origin form, absolute form (`http://host/path`), or `*` for OPTIONS. Returns the origin-form
/// part and, for absolute form, the authority.
fn split_target(method: &str, target: &str, span: Span) -> Result<(Span, Option<Span>), HttpError> {
    if target.starts_with('/') {
        return Ok((span, None));
    }
    if target == "*" && method == "OPTIONS" {
        return Ok((span, None));
    }
    if method == "CONNECT" {
        return Err(CONNECT);
    }
    let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
    let scheme_len = if lower.starts_with("http://") {
        7
    } else if lower.starts_with("https://") {
        8
    } else {
        return Err(bad("request target must be a path or an absolute http URI"));
    };
    let rest = &target[scheme_len..];
    let authority_len = rest.find(['/', '?']).unwrap_or(rest.len());
    if authority_len == 0 || rest[..authority_len].contains('@') {
        return Err(bad("bad authority in absolute URI"));
    }
    let authority = span.sub(scheme_len, scheme_len + authority_len);
    let uri = span.sub(scheme_len + authority_len, target.len());
    Ok((uri, Some(authority)))
}

/// Remove the port, check the characters, lower-case when needed. A client sends the same
/// Host on every request: the last lower-case one that passed on this thread is remembered,
/// and the same bytes are not checked again (a byte comparison instead of a pass through the
/// table: some 120 instructions a request). HTTP/2 requests' `:authority` and Host too.
// Inlined at each caller, as it was in the parser alone (+30 a request on HTTP/1.1 without).
#[inline(always)]
pub fn set_host(head: &mut Head, buf: &[u8], span: Span) -> Result<(), HttpError> {
    let text = span.get(buf);
    let known = LAST_HOST.with(|last| {
        let last = last.borrow();
        (last.text.as_slice() == text).then_some(last.host_len)
    });
    let read = match known {
        Some(len) => HostRead { len, lower: None },
        None => {
            let read = read_host(text)?;
            if read.lower.is_none() && !text.is_empty() {
                LAST_HOST.with(|last| {
                    let mut last = last.borrow_mut();
                    last.text.clear();
                    last.host_len = 0;
                    if last.text.try_extend_from_slice(text).is_ok() {
                        last.host_len = read.len;
                    }
                });
            }
            read
        }
    };
    read.set(head, span);
    Ok(())
}

/// The last Host value that passed [`read_host`] on this thread with no upper-case letter
/// (empty: none), and the length of its host.
struct LastHost {
    text: ArrayVec<u8, 64>,
    host_len: usize,
}

thread_local! {
    static LAST_HOST: std::cell::RefCell<LastHost> = const {
        std::cell::RefCell::new(LastHost { text: ArrayVec::new_const(), host_len: 0 })
    };
}

/// A Host value checked: the length of its host (the port cut off) and the host lower-cased
/// when it had upper-case letters. A request keeps its own for its subrequests, which carry
/// the same Host: it is read once per page, not once per include.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRead {
    len: usize,
    lower: Option<String>,
}

impl HostRead {
    /// Make `head`'s host the one at `span`, which holds the bytes this was read from.
    pub fn set(self, head: &mut Head, span: Span) {
        head.host = span.sub(0, self.len);
        head.host_lower = self.lower;
    }
}

/// Check a Host value (RFC 3986 host, optional port).
pub fn read_host(text: &[u8]) -> Result<HostRead, HttpError> {
    // One pass over a name (the usual host): each byte's class says allowed, upper-case, or
    // the colon before the port. An IPv6 literal ends at its bracket instead.
    let (without_port, upper) = if text.starts_with(b"[") {
        let end = find_byte(b']', text).ok_or(bad("bad IPv6 host"))? + 1;
        (end, classify(&text[..end], false)?.1)
    } else {
        classify(text, true)?
    };
    check_port(&text[without_port..])?;
    let lower = upper.then(|| String::from_utf8_lossy(&text[..without_port]).to_ascii_lowercase());
    Ok(HostRead {
        len: without_port,
        lower,
    })
}

/// Classes of the bytes of a Host (RFC 3986 reg-name, IP literal, port).
const BAD: u8 = 0;
const HOST: u8 = 1;
const UPPER: u8 = 2;
const COLON: u8 = 3;

/// Check `host` (up to its first colon when `to_colon`): how far it went, and whether a byte
/// is upper-case.
#[inline]
fn classify(host: &[u8], to_colon: bool) -> Result<(usize, bool), HttpError> {
    let mut upper = false;
    for (i, &b) in host.iter().enumerate() {
        match HOST_CLASS[b as usize] {
            HOST => {}
            UPPER => upper = true,
            COLON if to_colon => return Ok((i, upper)),
            COLON => {}
            _ => return Err(bad("invalid characters in Host")),
        }
    }
    Ok((host.len(), upper))
}

/// The class of each byte in a Host: letters, digits and RFC 3986 unreserved, sub-delims,
/// `%`, and the brackets and colons of an IPv6 literal are allowed.
static HOST_CLASS: [u8; 256] = {
    let mut table = [BAD; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = if c.is_ascii_uppercase() {
            UPPER
        } else if c.is_ascii_alphanumeric() {
            HOST
        } else {
            BAD
        };
        b += 1;
    }
    let extra = b"-._~!$&'()*+,;=%[]";
    let mut i = 0;
    while i < extra.len() {
        table[extra[i] as usize] = HOST;
        i += 1;
    }
    table[b':' as usize] = COLON;
    table
};

fn check_port(rest: &[u8]) -> Result<(), HttpError> {
    match rest {
        [] => Ok(()),
        [b':', digits @ ..] if digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit) => Ok(()),
        _ => Err(bad("bad port in Host")),
    }
}

/// One Transfer-Encoding value (a list of codings). Only `chunked`, once, is understood:
/// another coding is 501 (RFC 9112 §6.1, as nginx); `chunked` twice, or a malformed list, 400.
fn transfer_codings(v: &[u8], chunked: &mut bool) -> Result<(), HttpError> {
    let mut codings = 0;
    for coding in v.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
        if coding.is_empty() {
            continue;
        }
        codings += 1;
        let name = coding
            .split(|&b| b == b';')
            .next()
            .unwrap_or(coding)
            .trim_ascii();
        if name.is_empty() || !name.iter().all(|&b| osprey_sdk::fields::is_token_byte(b)) {
            return Err(bad("malformed Transfer-Encoding"));
        }
        if !coding.eq_ignore_ascii_case(b"chunked") {
            return Err(HttpError::new(
                501,
                "unsupported transfer coding (only `chunked`)",
            ));
        }
        if *chunked {
            return Err(bad("`chunked` applied more than once"));
        }
        *chunked = true;
    }
    if codings == 0 {
        return Err(bad("empty Transfer-Encoding"));
    }
    Ok(())
}

/// A Content-Length value (RFC 9110 §8.6): digits only, at most 18 (so it cannot overflow).
/// The one rule for HTTP/1.1 and HTTP/2 requests and upstream responses.
#[inline]
pub fn parse_length(v: &[u8]) -> Result<u64, HttpError> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return Err(bad("malformed Content-Length"));
    }
    Ok(v.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// An incomplete head that already passed a limit. `data` is `buf` after the empty lines that
/// may precede a request line; those count towards the header bytes too.
fn check_partial_size(buf: &[u8], data: &[u8], limits: &Limits) -> Result<(), HttpError> {
    if data.is_empty() && buf.len() > limits.max_header_bytes {
        return Err(bad("too many empty lines before the request line"));
    }
    check_request_line(data, limits)?;
    if buf.len() > limits.max_header_bytes {
        return Err(too_large(data, limits));
    }
    Ok(())
}

/// The request line (up to its line feed, or all of `data` while it has none) within its limit.
fn check_request_line(data: &[u8], limits: &Limits) -> Result<(), HttpError> {
    line_within(memchr::memchr(b'\n', data).unwrap_or(data.len()), limits)
}

/// A request line of `len` bytes (its CR counted) within its limit.
pub fn line_within(len: usize, limits: &Limits) -> Result<(), HttpError> {
    if len > limits.max_request_line {
        return Err(HttpError::new(414, "request line too long"));
    }
    Ok(())
}

/// A head over `max_header_bytes`: 431, or 414 when its request line alone is over its limit.
pub fn too_large(data: &[u8], limits: &Limits) -> HttpError {
    match memchr::memchr(b'\n', data) {
        Some(n) if n <= limits.max_request_line => HttpError::new(431, "request headers too large"),
        _ => HttpError::new(414, "request line too long"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::default()
    }

    fn ok(raw: &str) -> Head {
        parse(raw.as_bytes(), &limits()).unwrap().expect("complete")
    }

    fn err(raw: &str) -> HttpError {
        parse(raw.as_bytes(), &limits()).unwrap_err()
    }

    #[test]
    fn parses_a_simple_request() {
        let raw = "GET /a/b?x=1 HTTP/1.1\r\nHost: Example.COM:8080\r\n\r\nextra";
        let h = ok(raw);
        let buf = raw.as_bytes();
        assert_eq!(h.method(buf), "GET");
        assert_eq!(h.path(buf), "/a/b");
        assert_eq!(h.query.str(buf), "x=1");
        assert_eq!(h.host(buf), "example.com");
        assert_eq!(h.len, raw.len() - 5);
        assert!(h.keep_alive);
        assert_eq!(h.body, BodyFraming::None);
    }

    #[test]
    fn values_come_without_surrounding_whitespace() {
        let raw = "GET / HTTP/1.1\r\nHost: \t a.org \t\r\nX-A:   v w  \r\nX-B:\r\n\r\n";
        let h = ok(raw);
        let buf = raw.as_bytes();
        assert_eq!(h.host(buf), "a.org");
        let values: Vec<&[u8]> = h.headers.iter().map(|(_, v)| v.get(buf)).collect();
        assert_eq!(values, [&b"a.org"[..], b"v w", b""]);
    }

    #[test]
    fn a_long_request_line_is_checked_in_a_complete_head() {
        let limits = Limits {
            max_request_line: 20,
            ..Limits::default()
        };
        let long = "GET /0123456789abcdef HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(parse(long.as_bytes(), &limits).unwrap_err().status, 414);
        let short = "GET /a HTTP/1.1\r\nHost: a.example.org\r\n\r\n";
        assert!(parse(short.as_bytes(), &limits).unwrap().is_some());
    }

    #[test]
    fn a_pipelined_head_is_parsed_in_place() {
        let raw = "GET /a HTTP/1.1\r\nHost: a\r\n\r\n\r\nGET /b?q HTTP/1.1\r\nHost: B\r\n\r\n";
        let buf = raw.as_bytes();
        let first = ok(raw);
        let mut head = Head::default();
        assert!(parse_from(buf, first.len, &limits(), &mut head).unwrap());
        assert_eq!(head.path(buf), "/b");
        assert_eq!(head.query.str(buf), "q");
        assert_eq!(head.host(buf), "b");
        assert_eq!(head.len, raw.len());
        let partial = &buf[..raw.len() - 2];
        assert!(!parse_from(partial, first.len, &limits(), &mut head).unwrap());
    }

    #[test]
    fn partial_until_blank_line() {
        assert!(parse(b"GET / HTTP/1.1\r\nHost: a\r\n", &limits())
            .unwrap()
            .is_none());
    }

    #[test]
    fn absolute_form_takes_host_from_uri() {
        let raw = "GET http://Other.org/p?q HTTP/1.1\r\nHost: a\r\n\r\n";
        let h = ok(raw);
        assert_eq!(h.host(raw.as_bytes()), "other.org");
        assert_eq!(h.path(raw.as_bytes()), "/p");
        assert_eq!(h.uri.str(raw.as_bytes()), "/p?q");
        let raw = "GET http://x.org HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(ok(raw).path(raw.as_bytes()), "/");
    }

    #[test]
    fn keep_alive_rules() {
        assert!(!ok("GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(ok("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
        assert!(!ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(
            !ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n").keep_alive
        );
        assert!(
            !ok("GET / HTTP/1.0\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n").keep_alive
        );
    }

    #[test]
    fn host_port_case_and_characters() {
        let host = |h: &str| {
            let raw = format!("GET / HTTP/1.1\r\nHost: {h}\r\n\r\n");
            parse(raw.as_bytes(), &limits()).map(|head| {
                let head = head.expect("complete");
                head.host(raw.as_bytes()).to_owned()
            })
        };
        assert_eq!(host("a.org"), Ok("a.org".into()));
        assert_eq!(host("A.Org:8080"), Ok("a.org".into()));
        assert_eq!(host("127.0.0.1:80"), Ok("127.0.0.1".into()));
        assert_eq!(host("[::1]:443"), Ok("[::1]".into()));
        assert_eq!(host("[FE80::A]"), Ok("[fe80::a]".into()));
        assert_eq!(host("a%2Eb~c"), Ok("a%2eb~c".into()));
        let reason = |h: &str| host(h).unwrap_err().reason;
        assert_eq!(reason("a/b"), "invalid characters in Host");
        assert_eq!(reason("a\"b"), "invalid characters in Host");
        assert_eq!(reason("[::1"), "bad IPv6 host");
        assert_eq!(reason("[::1/]"), "invalid characters in Host");
        assert_eq!(reason("a:8x"), "bad port in Host");
        assert_eq!(reason("a:1:2"), "bad port in Host");
        assert_eq!(reason("a:123456"), "bad port in Host");
        assert_eq!(reason("[::1]x"), "bad port in Host");
    }

    /// The Host remembered from the last request gives the same answer as checking it, and
    /// never lets another value through.
    #[test]
    fn a_remembered_host_is_read_as_checking_it_would() {
        let host = |h: &str| {
            let raw = format!("GET / HTTP/1.1\r\nHost: {h}\r\n\r\n");
            parse(raw.as_bytes(), &limits())
                .map(|head| head.expect("complete").host(raw.as_bytes()).to_owned())
                .map_err(|e| e.reason)
        };
        let long = format!("{}.org:80", "a".repeat(70));
        for _ in 0..2 {
            assert_eq!(host("127.0.0.1:8080"), Ok("127.0.0.1".into()));
            assert_eq!(host("127.0.0.1:8080"), Ok("127.0.0.1".into()));
            assert_eq!(host("127.0.0.1:8080/"), Err("bad port in Host"));
            assert_eq!(host("127.0.0.1"), Ok("127.0.0.1".into()));
            assert_eq!(host("Example.ORG:1"), Ok("example.org".into()));
            assert_eq!(host("Example.ORG:1"), Ok("example.org".into()));
            // Too long to remember: nothing of it is kept for the next request.
            assert_eq!(host(&long), Ok(long[..long.len() - 3].into()));
            assert_eq!(host(""), Ok("".into()));
            assert_eq!(host("a b"), Err("invalid characters in Host"));
        }
    }

    #[test]
    fn body_framing() {
        let h = ok("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n");
        assert_eq!(h.body, BodyFraming::Length(12));
        let h = ok("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n");
        assert_eq!(h.body, BodyFraming::Chunked);
        let h = ok("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n");
        assert_eq!(h.body, BodyFraming::Length(5));
    }

    #[test]
    fn smuggling_attempts_are_rejected() {
        let cases = [
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \"chunked\"\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a:80x\r\n\r\n",
            "GET relative HTTP/1.1\r\nHost: a\r\n\r\n",
        ];
        for raw in cases {
            assert_eq!(err(raw).status, 400, "{raw:?}");
        }
    }

    #[test]
    fn other_statuses() {
        assert_eq!(err("GET / HTTP/2.0\r\n\r\n").status, 505);
        for te in ["xchunked", "chunked, identity", "gzip, chunked", "identity"] {
            let raw = format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {te}\r\n\r\n");
            assert_eq!(err(&raw).status, 501, "{te}");
        }
        assert_eq!(
            err("GET / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n").status,
            417
        );
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(9000));
        assert_eq!(parse(long.as_bytes(), &limits()).unwrap_err().status, 414);
        let big = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n", "a".repeat(17000));
        assert_eq!(parse(big.as_bytes(), &limits()).unwrap_err().status, 431);
        let many: String = (0..200).map(|i| format!("X{i}: 1\r\n")).collect();
        let raw = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
        assert_eq!(err(&raw).status, 431);
    }

    #[test]
    fn leading_blank_lines_are_skipped() {
        let raw = "\r\n\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n";
        let h = ok(raw);
        assert_eq!(h.path(raw.as_bytes()), "/x");
        assert_eq!(h.len, raw.len());
    }

    #[test]
    fn endless_empty_lines_are_bounded() {
        let blank = "\r\n".repeat(9000);
        assert_eq!(parse(blank.as_bytes(), &limits()).unwrap_err().status, 400);
        let raw = format!("{}GET / HTTP/1.1\r\nHost: a\r\n", "\r\n".repeat(8200));
        assert_eq!(parse(raw.as_bytes(), &limits()).unwrap_err().status, 431);
    }

    #[test]
    fn http10_without_host_is_fine() {
        let raw = "GET / HTTP/1.0\r\n\r\n";
        assert_eq!(ok(raw).host(raw.as_bytes()), "");
    }

    #[test]
    fn expect_continue_only_on_11() {
        assert!(
            ok("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n")
                .expect_continue
        );
    }
}
