//! The upstream side of HTTP/1.1: encoding the request, parsing the response head strictly
//! (RFC 9112: no CL+TE, one `chunked` coding at most, agreeing Content-Lengths, bounded size).

use osprey_sdk::abi_stable::std_types::RCowStr;
use osprey_sdk::fields::is_token_byte;
use osprey_sdk::{HeaderPair, UpstreamRequest};

use super::send_body::StreamedBody;
use crate::http::parse::parse_length;

/// Response heads larger than this are refused (502).
pub const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 128;

/// Request headers the service writes itself, or that describe the client connection only.
const REQUEST_FRAMING: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "expect",
];

/// Hop-by-hop response headers (RFC 9110 7.6.1) and the framing the core redoes.
const RESPONSE_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    // Not hop-by-hop, but not passed on, as nginx's `proxy_hide_header` defaults: the core
    // writes its own `Date` (and `Server`, unless the module sets one).
    "date",
    "server",
];

/// Response header names as they are commonly spelled: one of these is borrowed, not copied.
const COMMON_NAMES: &[&str] = &[
    "Content-Type",
    "Cache-Control",
    "Last-Modified",
    "ETag",
    "Expires",
    "Set-Cookie",
    "Location",
    "Vary",
    "Content-Encoding",
    "Accept-Ranges",
    "Content-Range",
    "Age",
    "Via",
    "content-type",
    "cache-control",
    "last-modified",
    "etag",
    "set-cookie",
    "location",
    "vary",
    "content-encoding",
];

fn header_name(name: &str) -> RCowStr<'static> {
    match COMMON_NAMES.iter().find(|n| **n == name) {
        Some(n) => RCowStr::from(*n),
        None => RCowStr::from(name.to_owned()),
    }
}

/// A request, encoded once (for the first server chosen) into the bytes of one write: request
/// line, `Host` (the server's address, when the module did not set one), headers and a small
/// body. A retry on a server of another address rebuilds only the `Host` line.
pub struct Encoded {
    wire: Vec<u8>,
    /// Where the `Host` line is (just after the request line), and its length (0: the module
    /// set its own `Host`, which goes for every server).
    host_at: usize,
    host_len: usize,
    /// A body too large to copy into `wire` (sent after it).
    large_body: Vec<u8>,
    pub head_request: bool,
    /// The module forwards the client's `Upgrade` (a WebSocket handshake, say).
    pub upgrade: bool,
}

/// Bodies up to this size go in the same write as the head.
const SMALL_BODY: usize = 16 * 1024;

impl Encoded {
    /// The request encoded for the server known as `host`, and its body when that streams
    /// from the client.
    pub fn new(
        req: UpstreamRequest,
        keep_alive: bool,
        host: &str,
    ) -> Result<(Encoded, Option<StreamedBody>), &'static str> {
        let method = req.method.as_str();
        if method.is_empty() || !method.bytes().all(is_token_byte) {
            return Err("bad request method");
        }
        let target = req.target.as_str();
        if !(target.starts_with('/') || target == "*")
            || target.bytes().any(|b| b <= b' ' || b == 0x7f)
        {
            return Err("bad request target");
        }
        let body = req.body.into_vec();
        let small = if body.len() <= SMALL_BODY {
            body.len()
        } else {
            0
        };
        let size = target.len() + host.len() + small + 64;
        let size = req
            .headers
            .iter()
            .fold(size, |n, h| n + h.name.len() + h.value.len() + 4);
        let mut wire = Vec::with_capacity(size + 64);
        wire.extend_from_slice(method.as_bytes());
        wire.push(b' ');
        wire.extend_from_slice(target.as_bytes());
        wire.extend_from_slice(b" HTTP/1.1\r\n");
        let host_at = wire.len();
        let has_host = req
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("host"));
        if !has_host {
            push_header(&mut wire, "Host", host);
        }
        let host_len = wire.len() - host_at;
        let rest = &mut wire;
        let mut host_seen = false;
        let mut upgrade = false;
        for h in req.headers.iter() {
            let name = h.name.as_str();
            // The same rule as for a handler's response headers: a token name, no CR, LF, NUL.
            if crate::http::encode::invalid_header(h) {
                return Err("bad request header");
            }
            if REQUEST_FRAMING.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                continue;
            }
            if name.eq_ignore_ascii_case("upgrade") {
                if upgrade {
                    continue;
                }
                upgrade = true;
            }
            if name.eq_ignore_ascii_case("host") {
                if host_seen {
                    continue;
                }
                host_seen = true;
            }
            push_header(rest, name, h.value.as_str());
        }
        let streamed = req
            .body_stream
            .into_option()
            .and_then(|slot| slot.take())
            .and_then(StreamedBody::new);
        if let Some(streamed) = &streamed {
            let (name, value) = streamed.framing();
            push_header(rest, name, &value);
        } else if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
            push_header(
                rest,
                "Content-Length",
                itoa::Buffer::new().format(body.len()),
            );
        }
        if upgrade {
            push_header(rest, "Connection", "upgrade");
        } else if !keep_alive {
            push_header(rest, "Connection", "close");
        }
        rest.extend_from_slice(b"\r\n");
        let large_body = if small > 0 {
            wire.extend_from_slice(&body);
            Vec::new()
        } else {
            body
        };
        let encoded = Encoded {
            head_request: method == "HEAD",
            upgrade,
            wire,
            host_at,
            host_len,
            large_body,
        };
        Ok((encoded, streamed))
    }

    /// The bytes to send to the server known as `host`: those encoded, unless its `Host`
    /// line differs.
    pub fn for_server(&self, host: &str) -> std::borrow::Cow<'_, [u8]> {
        let line = &self.wire[self.host_at..self.host_at + self.host_len];
        if self.host_len == 0
            || (line.len() == host.len() + 8 && &line[6..6 + host.len()] == host.as_bytes())
        {
            return std::borrow::Cow::Borrowed(&self.wire);
        }
        let mut out = Vec::with_capacity(self.wire.len() + host.len());
        out.extend_from_slice(&self.wire[..self.host_at]);
        push_header(&mut out, "Host", host);
        out.extend_from_slice(&self.wire[self.host_at + self.host_len..]);
        std::borrow::Cow::Owned(out)
    }

    /// The body when it was too large to go with the head.
    pub fn large_body(&self) -> &[u8] {
        &self.large_body
    }
}

fn push_header(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFraming {
    /// No body (HEAD, 1xx, 204, 304).
    None,
    Length(u64),
    Chunked,
    /// Until the upstream closes.
    Close,
}

#[derive(Debug)]
pub struct RespHead {
    pub status: u16,
    /// End-to-end headers only.
    pub headers: Vec<HeaderPair>,
    pub framing: UpstreamFraming,
    /// The Content-Length the upstream declared (also for HEAD).
    pub declared_len: Option<u64>,
    /// The connection may serve another request after this response.
    pub keep_alive: bool,
    /// Bytes of the head.
    pub len: usize,
}

#[derive(Debug)]
pub enum Parsed {
    Partial,
    /// An interim (1xx) response of this many bytes, to skip.
    Interim(usize),
    Head(RespHead),
}

/// Parse a response head at the start of `buf`. A 101 is accepted only when the request asked
/// for an upgrade.
pub fn parse_response(
    buf: &[u8],
    head_request: bool,
    upgrade: bool,
) -> Result<Parsed, &'static str> {
    // Left uninitialised: zeroing 128 headers cost more than parsing a small head.
    let mut raw = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut raw);
    let len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err("response head too large")
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err("too many response headers"),
        Err(_) => return Err("malformed response head"),
    };
    if len > MAX_HEAD {
        return Err("response head too large");
    }
    let status = resp.code.unwrap_or(0);
    let minor = resp.version.unwrap_or(1);
    if !(100..=999).contains(&status) {
        return Err("bad response status");
    }
    let switching = status == 101;
    if switching && !upgrade {
        return Err("a protocol switch that was not asked for");
    }
    if status < 200 && !switching {
        return Ok(Parsed::Interim(len));
    }
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut keep_alive = minor == 1;
    let mut connection_tokens: Vec<String> = Vec::new();
    for h in resp.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            let n = parse_length(h.value.trim_ascii())
                .map_err(|_| "bad Content-Length in the response")?;
            if content_length.is_some_and(|old| old != n) {
                return Err("conflicting Content-Length headers in the response");
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if chunked || !h.value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err("unsupported Transfer-Encoding in the response");
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive |= minor == 0;
                } else if !token.is_empty() {
                    connection_tokens.push(String::from_utf8_lossy(token).to_ascii_lowercase());
                }
            }
        }
    }
    if chunked && content_length.is_some() {
        return Err("both Content-Length and Transfer-Encoding in the response");
    }
    if chunked && minor == 0 {
        return Err("Transfer-Encoding in an HTTP/1.0 response");
    }
    let framing = if switching {
        keep_alive = false;
        UpstreamFraming::None
    } else if head_request || status == 204 || status == 304 {
        UpstreamFraming::None
    } else if chunked {
        UpstreamFraming::Chunked
    } else if let Some(n) = content_length {
        UpstreamFraming::Length(n)
    } else {
        keep_alive = false;
        UpstreamFraming::Close
    };
    let headers = resp
        .headers
        .iter()
        .filter(|h| {
            // A 101 keeps its `Upgrade`: it names the protocol switched to.
            (switching && h.name.eq_ignore_ascii_case("upgrade"))
                || !RESPONSE_HOP.iter().any(|n| n.eq_ignore_ascii_case(h.name))
                    && !connection_tokens
                        .iter()
                        .any(|t| t.eq_ignore_ascii_case(h.name))
        })
        .map(|h| {
            HeaderPair::new(
                header_name(h.name),
                RCowStr::from(String::from_utf8_lossy(h.value).trim().to_owned()),
            )
        })
        .collect();
    Ok(Parsed::Head(RespHead {
        status,
        headers,
        framing,
        declared_len: content_length,
        keep_alive,
        len,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::abi_stable::std_types::{RString, RVec};

    fn head(raw: &[u8]) -> RespHead {
        match parse_response(raw, false, false).unwrap() {
            Parsed::Head(h) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn frames_responses() {
        let h = head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: x-foo\r\nX-Foo: 1\r\nKeep-Alive: t=5\r\nX-Bar: 2\r\n\r\nhello");
        assert_eq!(h.framing, UpstreamFraming::Length(5));
        assert!(h.keep_alive);
        let names: Vec<_> = h.headers.iter().map(|h| h.name.to_string()).collect();
        assert_eq!(names, ["X-Bar"]);
        assert_eq!(
            head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").framing,
            UpstreamFraming::Chunked
        );
        let close = head(b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(
            (close.framing, close.keep_alive),
            (UpstreamFraming::Close, false)
        );
        assert!(!head(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n").keep_alive);
        assert!(
            head(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n")
                .keep_alive
        );
        assert_eq!(
            head(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n").framing,
            UpstreamFraming::None
        );
        assert!(matches!(
            parse_response(b"HTTP/1.1 100 Continue\r\n\r\n", false, false),
            Ok(Parsed::Interim(25))
        ));
        assert!(matches!(
            parse_response(b"HTTP/1.1 200 OK\r\n", false, false),
            Ok(Parsed::Partial)
        ));
    }

    #[test]
    fn drops_every_hop_by_hop_response_header_in_any_case() {
        let h = head(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nTE: x\r\nDATE: x\r\nserver: x\r\nTrailer: x\r\nUpgrade: x\r\nConnection: keep-alive\r\nKeep-Alive: x\r\nProxy-Connection: x\r\nPROXY-AUTHENTICATE: x\r\nX-Kept: 1\r\nServer-Timing: x\r\nContent-Type: text/plain\r\n\r\n");
        let names: Vec<_> = h.headers.iter().map(|h| h.name.to_string()).collect();
        assert_eq!(names, ["X-Kept", "Server-Timing", "Content-Type"]);
    }

    #[test]
    fn rejects_ambiguous_responses() {
        for raw in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTX/1.1 200 OK\r\n\r\n",
        ] {
            assert!(
                parse_response(raw, false, false).is_err(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn encodes_requests_with_own_framing() {
        let req = UpstreamRequest {
            method: "POST".into(),
            target: "/a?b".into(),
            headers: RVec::from(vec![
                HeaderPair::new("Content-Length", "99"),
                HeaderPair::new("X-A", "1"),
                HeaderPair::new("Connection", "upgrade"),
            ]),
            body: RVec::from(b"hi".to_vec()),
            client_ip: RString::from("1.2.3.4"),
            body_stream: osprey_sdk::abi_stable::std_types::ROption::RNone,
        };
        let (e, _) = Encoded::new(req.clone(), true, "up:80").unwrap();
        let sent = |host| String::from_utf8(e.for_server(host).into_owned()).unwrap();
        assert_eq!(
            sent("up:80"),
            "POST /a?b HTTP/1.1\r\nHost: up:80\r\nX-A: 1\r\nContent-Length: 2\r\n\r\nhi"
        );
        assert!(matches!(
            e.for_server("up:80"),
            std::borrow::Cow::Borrowed(_)
        ));
        // A retry on another server: only the `Host` line differs.
        assert_eq!(
            sent("other:8080"),
            "POST /a?b HTTP/1.1\r\nHost: other:8080\r\nX-A: 1\r\nContent-Length: 2\r\n\r\nhi"
        );
        // The module's own `Host` goes to every server.
        let mut own = req.clone();
        own.headers.push(HeaderPair::new("host", "front"));
        let (e, _) = Encoded::new(own, true, "up:80").unwrap();
        assert_eq!(
            String::from_utf8(e.for_server("other:1").into_owned()).unwrap(),
            "POST /a?b HTTP/1.1\r\nX-A: 1\r\nhost: front\r\nContent-Length: 2\r\n\r\nhi"
        );
        let mut bad = req;
        bad.headers.push(HeaderPair::new("X-B", "a\r\nb"));
        assert!(Encoded::new(bad, true, "up:80").is_err());
    }
}
