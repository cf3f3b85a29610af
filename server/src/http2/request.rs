//! A request's decoded fields turned into the request head `dispatch` takes, with the rules of
//! RFC 9113 §8.2 and §8.3: pseudo-header fields first, once each, the ones a request needs;
//! lowercase names; no connection-specific fields; `te` only `trailers`; a Host field beside
//! `:authority` must agree with it. The head is written in HTTP/1.1 form (the request view and
//! the access log read those bytes) and its `Head` filled in as the bytes are written, not
//! parsed back. What the HTTP/1.1 parser refuses with a status is refused with the same status
//! by the same checks (`header_check`, `parse`): control bytes, methods, targets, Host, limits.

use super::fields;
use crate::config::Limits;
use crate::conn::pool;
use crate::http::diagnose::{target_error, BAD_METHOD, CONTROL_IN_VALUE};
use crate::http::header_check::{bad_target, bad_token, breaks_line, has_control};
use crate::http::parse::{
    expects_continue, line_within, parse_length, read_host, set_host, too_large, BodyFraming, Head,
    Span, CONNECT, EXPECTATION_FAILED, MAX_HEADERS,
};
use crate::http::{bad, find_byte, HttpError};

/// A request refused as malformed (§8.1.1): a stream error PROTOCOL_ERROR.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// What the decoded fields made.
pub struct Request {
    /// The head in HTTP/1.1 form: the bytes `head`'s spans point into.
    pub buf: Vec<u8>,
    /// The head (the thread's pooled one), or the status it is refused with (a field
    /// HTTP/1.1 refuses, a header list over the limit).
    pub head: Result<Box<Head>, HttpError>,
    pub is_head: bool,
    pub content_length: Option<u64>,
}

/// The pseudo-header fields (§8.3.1).
const METHOD: usize = 0;
const SCHEME: usize = 1;
const PATH: usize = 2;
const AUTHORITY: usize = 3;

pub struct Builder<'a> {
    buf: Vec<u8>,
    head: Box<Head>,
    limits: &'a Limits,
    /// Pseudo-header values, until the request line is written.
    pseudo: &'a mut Vec<u8>,
    ranges: [Option<(usize, usize)>; 4],
    /// The request line is written: only regular fields may follow.
    started: bool,
    malformed: Option<&'static str>,
    /// The first status the request is refused with.
    error: Option<HttpError>,
    list_size: usize,
    max_list_size: usize,
    content_length: Option<u64>,
    /// The `cookie` fields joined with "; " (§8.2.3: a client may split the header into one
    /// field per cookie; HTTP/1.1 and the handlers expect one), in `pseudo` after the
    /// pseudo-header values.
    cookie: Option<(usize, usize)>,
    /// The Host field of a request without `:authority`.
    host: Option<Span>,
}

impl<'a> Builder<'a> {
    pub fn new(pseudo: &'a mut Vec<u8>, max_list_size: usize, limits: &'a Limits) -> Builder<'a> {
        pseudo.clear();
        let mut head = pool::take_head();
        head.reset();
        Builder {
            buf: Vec::with_capacity(512),
            head,
            limits,
            pseudo,
            ranges: [None; 4],
            started: false,
            malformed: None,
            error: None,
            list_size: 0,
            max_list_size,
            content_length: None,
            cookie: None,
            host: None,
        }
    }

    fn refuse(&mut self, why: &'static str) {
        self.malformed.get_or_insert(why);
    }

    fn fail(&mut self, e: HttpError) {
        self.error.get_or_insert(e);
    }

    /// One decoded field.
    #[cfg(test)]
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        self.field_checked(name, value, false);
    }

    /// One decoded field; `checked`: its bytes passed [`bytes_pass`](Builder::bytes_pass)
    /// before (`hpack::Decoder::decode_checked`). Whether they pass.
    pub fn field_checked(&mut self, name: &[u8], value: &[u8], checked: bool) -> bool {
        self.list_size += name.len() + value.len() + 32;
        if self.malformed.is_some() || self.list_size > self.max_list_size {
            return false;
        }
        let passed = checked || self.bytes_pass(name, value);
        if self.malformed.is_none() {
            self.take(name, value);
        }
        passed
    }

    /// The checks of a field's own bytes, whatever the request around it: control bytes in
    /// the value, the name a lowercase token, no whitespace around the value. What they find
    /// refuses or fails the request here; whether they found nothing.
    fn bytes_pass(&mut self, name: &[u8], value: &[u8]) -> bool {
        let mut passed = true;
        if has_control(value) {
            if breaks_line(value) {
                self.refuse("a field value with NUL, CR or LF");
                return false;
            }
            self.fail(CONTROL_IN_VALUE);
            passed = false;
        }
        if name.first() == Some(&b':') {
            return passed;
        }
        if bad_token(name) || name.iter().any(u8::is_ascii_uppercase) {
            self.refuse("an invalid field name");
            return false;
        }
        if fields::check_value(value).is_err() {
            self.refuse("a field value with leading or trailing whitespace");
            return false;
        }
        passed
    }

    /// A field whose bytes passed (or only failed the request): the rules on its name.
    fn take(&mut self, name: &[u8], value: &[u8]) {
        if let Some(pseudo) = name.strip_prefix(b":") {
            return self.pseudo_field(pseudo, value);
        }
        match name {
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding"
            | b"upgrade" => return self.refuse("a connection-specific field"),
            b"te" if value != b"trailers" => return self.refuse("te other than trailers"),
            b"content-length" => match parse_length(value).ok() {
                Some(n) if self.content_length.is_none_or(|c| c == n) => {
                    self.content_length = Some(n)
                }
                _ => return self.refuse("an invalid content-length"),
            },
            b"expect" if !expects_continue(value) => self.fail(EXPECTATION_FAILED),
            b"expect" => self.head.expect_continue = true,
            _ => {}
        }
        if !self.started && self.start().is_err() {
            return;
        }
        if name == b"host" {
            if let Some((a, b)) = self.ranges[AUTHORITY] {
                let scheme = self.ranges[SCHEME].map(|(s, e)| &self.pseudo[s..e]);
                let scheme = scheme.map(|s| if s == b"https" { "https" } else { "http" });
                let authority = std::str::from_utf8(&self.pseudo[a..b]).unwrap_or("");
                if fields::check_host(value, authority, scheme).is_err() {
                    self.refuse("Host differs from :authority");
                }
                return;
            }
            if self.host.is_some() {
                self.fail(bad("more than one Host header"));
            }
            self.host = self.header(name, value);
            return;
        }
        if name == b"cookie" {
            return self.cookie_crumb(value);
        }
        self.header(name, value);
    }

    /// Write a header line and note its spans; `None` past the header count limit (431).
    fn header(&mut self, name: &[u8], value: &[u8]) -> Option<Span> {
        if self.head.headers.len() >= self.limits.max_headers.min(MAX_HEADERS) {
            self.fail(HttpError::new(431, "too many headers"));
            return None;
        }
        let name = put(&mut self.buf, name);
        self.buf.extend_from_slice(b": ");
        let value = put(&mut self.buf, value);
        self.buf.extend_from_slice(b"\r\n");
        self.head.headers.push((name, value));
        Some(value)
    }

    fn pseudo_field(&mut self, name: &[u8], value: &[u8]) {
        if self.started {
            return self.refuse("a pseudo-header field after a regular one");
        }
        let which = match name {
            b"method" => METHOD,
            b"scheme" => SCHEME,
            b"path" => PATH,
            b"authority" => AUTHORITY,
            _ => return self.refuse("an unknown pseudo-header field"),
        };
        if self.ranges[which].is_some() {
            return self.refuse("a pseudo-header field twice");
        }
        let start = self.pseudo.len();
        self.pseudo.extend_from_slice(value);
        self.ranges[which] = Some((start, self.pseudo.len()));
    }

    /// Nothing is appended to `pseudo` once the request line is written but the crumbs, so
    /// they stay one span.
    fn cookie_crumb(&mut self, value: &[u8]) {
        let start = match self.cookie {
            Some((start, _)) => {
                self.pseudo.extend_from_slice(b"; ");
                start
            }
            None => self.pseudo.len(),
        };
        self.pseudo.extend_from_slice(value);
        self.cookie = Some((start, self.pseudo.len()));
    }

    /// Write the request line (and Host from `:authority`) once the pseudo-headers are all in.
    fn start(&mut self) -> Result<(), ()> {
        self.started = true;
        let (ranges, pseudo) = (self.ranges, std::mem::take(self.pseudo));
        let get = |which: usize| ranges[which].map(|(a, b)| &pseudo[a..b]);
        let written = self.request_line(get(METHOD), get(SCHEME), get(PATH), get(AUTHORITY));
        *self.pseudo = pseudo;
        written
    }

    fn request_line(
        &mut self,
        method: Option<&[u8]>,
        scheme: Option<&[u8]>,
        path: Option<&[u8]>,
        authority: Option<&[u8]>,
    ) -> Result<(), ()> {
        let Some(method) = method else {
            self.refuse("a request without :method");
            return Err(());
        };
        let why = if method == b"CONNECT" {
            match (scheme, path, authority) {
                (None, None, Some(_)) => None,
                _ => Some("CONNECT with :scheme or :path, or without :authority"),
            }
        } else {
            match (scheme, path) {
                (Some(s), Some(p)) if !s.is_empty() => match p {
                    [b'/', ..] => None,
                    b"*" if method == b"OPTIONS" => None,
                    _ => Some("a :path neither absolute nor * (for OPTIONS)"),
                },
                _ => Some("a request without :method, :scheme or :path"),
            }
        };
        if let Some(why) = why {
            self.refuse(why);
            return Err(());
        }
        // The checks and statuses of an HTTP/1.1 request line.
        let target = path.or(authority).unwrap_or(b"");
        if bad_token(method) {
            self.fail(BAD_METHOD);
        } else if method == b"CONNECT" {
            self.fail(CONNECT);
        }
        if bad_target(target) {
            self.fail(target_error(target));
        }
        self.head.method = put(&mut self.buf, method);
        self.buf.push(b' ');
        let target = put(&mut self.buf, target);
        self.buf.extend_from_slice(b" HTTP/1.1\r\n");
        // The line up to its LF, as the HTTP/1.1 parser measures it.
        if let Err(e) = line_within(self.buf.len() - 1, self.limits) {
            self.fail(e);
        }
        self.head.set_uri(target, &self.buf);
        if let Some(a) = authority {
            // As HTTP/1.1's Host: the same bytes as the last that passed are not read again.
            let read = match self.header(b"host", a) {
                Some(span) => set_host(&mut self.head, &self.buf, span),
                None => read_host(a).map(drop),
            };
            match read {
                Ok(()) => {}
                // Userinfo breaks the Host rules too: looked for only then.
                Err(_) if find_byte(b'@', a).is_some() => {
                    self.refuse("an :authority with userinfo");
                    return Err(());
                }
                Err(e) => self.fail(e),
            }
        }
        Ok(())
    }

    pub fn finish(mut self) -> Result<Request, Malformed> {
        if !self.started && self.malformed.is_none() {
            let _ = self.start();
        }
        if let Some(why) = self.malformed {
            pool::give_head(self.head);
            return Err(Malformed(why));
        }
        if self.list_size > self.max_list_size {
            self.error = Some(HttpError::new(431, "request header fields too large"));
        }
        if let Some((a, b)) = self.cookie {
            let crumbs = std::mem::take(self.pseudo);
            self.header(b"cookie", &crumbs[a..b]);
            *self.pseudo = crumbs;
        }
        self.buf.extend_from_slice(b"\r\n");
        self.head.len = self.buf.len();
        if self.head.len > self.limits.max_header_bytes {
            self.fail(too_large(&self.buf, self.limits));
        }
        if let Some(span) = self.host {
            if let Err(e) = set_host(&mut self.head, &self.buf, span) {
                self.fail(e);
            }
        } else if self.ranges[AUTHORITY].is_none() {
            self.fail(bad("missing Host header"));
        }
        self.head.body = match self.content_length {
            Some(0) | None => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
        };
        let head = match self.error {
            Some(e) => {
                pool::give_head(self.head);
                Err(e)
            }
            None => Ok(self.head),
        };
        Ok(Request {
            is_head: self.ranges[METHOD].is_some_and(|(a, b)| &self.pseudo[a..b] == b"HEAD"),
            buf: self.buf,
            head,
            content_length: self.content_length,
        })
    }
}

/// Append `bytes` to `buf`: where they are.
fn put(buf: &mut Vec<u8>, bytes: &[u8]) -> Span {
    let start = buf.len() as u32;
    buf.extend_from_slice(bytes);
    Span {
        start,
        end: buf.len() as u32,
    }
}

/// A trailer block's field: pseudo-header fields are not allowed (§8.1).
pub fn check_trailer(name: &[u8]) -> Result<(), Malformed> {
    if name.first() == Some(&b':') {
        return Err(Malformed("a pseudo-header field in trailers"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
