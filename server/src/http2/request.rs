//! A request's decoded fields turned into the request head `dispatch` takes, with the rules of
//! RFC 9113 §8.2 and §8.3: pseudo-header fields first, once each, the ones a request needs;
//! lowercase names; no connection-specific fields; `te` only `trailers`; a Host field beside
//! `:authority` must agree with it. The head is written in HTTP/1.1 form and parsed by the same
//! parser as HTTP/1.1 (so the same limits and Host rules apply); building the `Head` from the
//! fields directly is the next step.

use osprey_sdk::fields::is_token_byte;

use super::fields;
use crate::http::header_check::breaks_line;
use crate::http::parse::parse_length;
use crate::http::HttpError;

/// A request refused as malformed (§8.1.1): a stream error PROTOCOL_ERROR.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// What the decoded fields made.
pub struct Request {
    /// The head in HTTP/1.1 form.
    pub buf: Vec<u8>,
    pub is_head: bool,
    pub content_length: Option<u64>,
    /// Refused with an HTTP status rather than a reset (a header list over the limit).
    pub error: Option<HttpError>,
}

/// The pseudo-header fields (§8.3.1).
const METHOD: usize = 0;
const SCHEME: usize = 1;
const PATH: usize = 2;
const AUTHORITY: usize = 3;

pub struct Builder<'a> {
    buf: Vec<u8>,
    /// Pseudo-header values, until the request line is written.
    pseudo: &'a mut Vec<u8>,
    ranges: [Option<(usize, usize)>; 4],
    /// The request line is written: only regular fields may follow.
    started: bool,
    malformed: Option<&'static str>,
    list_size: usize,
    max_list_size: usize,
    content_length: Option<u64>,
    /// The `cookie` fields joined with "; " (§8.2.3: a client may split the header into one
    /// field per cookie; HTTP/1.1 and the handlers expect one), in `pseudo` after the
    /// pseudo-header values.
    cookie: Option<(usize, usize)>,
}

impl<'a> Builder<'a> {
    pub fn new(pseudo: &'a mut Vec<u8>, max_list_size: usize) -> Builder<'a> {
        pseudo.clear();
        Builder {
            buf: Vec::with_capacity(512),
            pseudo,
            ranges: [None; 4],
            started: false,
            malformed: None,
            list_size: 0,
            max_list_size,
            content_length: None,
            cookie: None,
        }
    }

    fn refuse(&mut self, why: &'static str) {
        self.malformed.get_or_insert(why);
    }

    /// One decoded field.
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        self.list_size += name.len() + value.len() + 32;
        if self.malformed.is_some() || self.list_size > self.max_list_size {
            return;
        }
        if breaks_line(value) {
            return self.refuse("a field value with NUL, CR or LF");
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            return self.pseudo_field(pseudo, value);
        }
        if name.is_empty()
            || !name
                .iter()
                .all(|&b| is_token_byte(b) && !b.is_ascii_uppercase())
        {
            return self.refuse("an invalid field name");
        }
        if fields::check_value(value).is_err() {
            return self.refuse("a field value with leading or trailing whitespace");
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
        }
        if name == b"cookie" {
            return self.cookie_crumb(value);
        }
        self.buf.extend_from_slice(name);
        self.buf.extend_from_slice(b": ");
        self.buf.extend_from_slice(value);
        self.buf.extend_from_slice(b"\r\n");
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

    fn get(&self, which: usize) -> Option<&[u8]> {
        self.ranges[which].map(|(a, b)| &self.pseudo[a..b])
    }

    /// Write the request line (and Host from `:authority`) once the pseudo-headers are all in.
    fn start(&mut self) -> Result<(), ()> {
        self.started = true;
        let (ranges, pseudo) = (self.ranges, &*self.pseudo);
        let get = |which: usize| ranges[which].map(|(a, b)| &pseudo[a..b]);
        let Some(method) = get(METHOD) else {
            self.malformed.get_or_insert("a request without :method");
            return Err(());
        };
        let authority = get(AUTHORITY);
        let why = if method == b"CONNECT" {
            match (get(SCHEME), get(PATH), authority) {
                (None, None, Some(_)) => None,
                _ => Some("CONNECT with :scheme or :path, or without :authority"),
            }
        } else {
            match (get(SCHEME), get(PATH)) {
                (Some(s), Some(p)) if !s.is_empty() => match p {
                    [b'/', ..] => None,
                    b"*" if method == b"OPTIONS" => None,
                    _ => Some("a :path neither absolute nor * (for OPTIONS)"),
                },
                _ => Some("a request without :method, :scheme or :path"),
            }
        };
        let why = why.or(match authority {
            Some(a) if a.contains(&b'@') => Some("an :authority with userinfo"),
            _ => None,
        });
        if let Some(why) = why {
            self.malformed.get_or_insert(why);
            return Err(());
        }
        let target = match get(PATH) {
            Some(p) => p,
            None => authority.unwrap_or(b""),
        };
        let buf = &mut self.buf;
        buf.extend_from_slice(method);
        buf.push(b' ');
        buf.extend_from_slice(target);
        buf.extend_from_slice(b" HTTP/1.1\r\n");
        if let Some(a) = authority {
            buf.extend_from_slice(b"host: ");
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
        Ok(())
    }

    pub fn finish(mut self) -> Result<Request, Malformed> {
        if !self.started && self.malformed.is_none() {
            let _ = self.start();
        }
        if let Some(why) = self.malformed {
            return Err(Malformed(why));
        }
        let error = (self.list_size > self.max_list_size)
            .then(|| HttpError::new(431, "request header fields too large"));
        if let Some((a, b)) = self.cookie {
            self.buf.extend_from_slice(b"cookie: ");
            self.buf.extend_from_slice(&self.pseudo[a..b]);
            self.buf.extend_from_slice(b"\r\n");
        }
        self.buf.extend_from_slice(b"\r\n");
        Ok(Request {
            is_head: self.get(METHOD) == Some(b"HEAD"),
            buf: self.buf,
            content_length: self.content_length,
            error,
        })
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
mod tests {
    use super::*;

    fn build(fields: &[(&str, &str)]) -> Result<Request, Malformed> {
        let mut scratch = Vec::new();
        let mut b = Builder::new(&mut scratch, 1000);
        for (n, v) in fields {
            b.field(n.as_bytes(), v.as_bytes());
        }
        b.finish()
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/a?b"),
        (":authority", "example.com"),
    ];

    #[test]
    fn a_request_becomes_http1_text() {
        let mut fields = GET.to_vec();
        fields.push(("accept", "*/*"));
        fields.push(("host", "EXAMPLE.com"));
        fields.push(("content-length", "3"));
        let r = build(&fields).unwrap();
        assert_eq!(
            String::from_utf8(r.buf).unwrap(),
            "GET /a?b HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\ncontent-length: 3\r\n\r\n"
        );
        assert_eq!(r.content_length, Some(3));
        assert!(!r.is_head && r.error.is_none());
    }

    #[test]
    fn cookie_crumbs_are_joined_into_one_field() {
        let mut fields = GET.to_vec();
        fields.push(("cookie", "a=1"));
        fields.push(("accept", "*/*"));
        fields.push(("cookie", "uid=abc"));
        fields.push(("cookie", "b=2"));
        let r = build(&fields).unwrap();
        assert_eq!(
            String::from_utf8(r.buf).unwrap(),
            "GET /a?b HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\ncookie: a=1; uid=abc; b=2\r\n\r\n"
        );
    }

    #[test]
    fn malformed_requests_are_refused() {
        let with = |extra: (&'static str, &'static str)| {
            let mut f = GET.to_vec();
            f.push(extra);
            build(&f).is_err()
        };
        assert!(with(("Accept", "x")));
        assert!(with(("connection", "close")));
        assert!(with(("te", "gzip")));
        assert!(!with(("te", "trailers")));
        assert!(with((":path", "/again")));
        assert!(with(("x", " lead")));
        assert!(with(("x", "a\0b")));
        assert!(with(("host", "other.example")));
        assert!(with(("content-length", "x")));
        assert!(build(&GET[1..]).is_err());
        assert!(build(&[(":method", "CONNECT"), (":authority", "a:1")]).is_ok());
        assert!(build(&[(":status", "200")]).is_err());
        let mut late = vec![("accept", "x")];
        late.extend(GET);
        assert!(build(&late).is_err());
    }

    #[test]
    fn a_list_over_the_limit_is_a_431() {
        let mut f = GET.to_vec();
        let big = "x".repeat(1000);
        f.push(("big", &big));
        assert_eq!(build(&f).unwrap().error.map(|e| e.status), Some(431));
    }
}
