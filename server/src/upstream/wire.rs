//! The upstream side of HTTP/1.1: encoding the request (the response head is read by `head`).

use osprey_sdk::{header_role, HeaderRole, UpstreamRequest};

use crate::http::header_check::{self, is_named};

use super::send_body::StreamedBody;

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
        mut req: UpstreamRequest<'_>,
        keep_alive: bool,
        host: &str,
    ) -> Result<(Encoded, Option<StreamedBody>), &'static str> {
        let method: &str = &req.method;
        // The request line's rules, a word at a time (a `str` is UTF-8 already).
        if header_check::bad_token(method.as_bytes()) {
            return Err("bad request method");
        }
        let target: &str = &req.target;
        if !(target.starts_with('/') || target == "*")
            || header_check::bad_target(target.as_bytes())
        {
            return Err("bad request target");
        }
        let body = std::mem::take(&mut req.body).into_vec();
        let small = if body.len() <= SMALL_BODY {
            body.len()
        } else {
            0
        };
        // One pass for the size of the write and whether the module set its own `Host`; the
        // client's headers counted whole (a bound: a few are left out), so that a browser's
        // dozen do not grow the buffer.
        let mut size = method.len() + target.len() + host.len() + small + 128;
        for h in req.forward.iter() {
            size += h.name.len() + h.value.len() + 4;
        }
        let mut has_host = false;
        for h in req.headers.iter() {
            size += h.name.len() + h.value.len() + 4;
            has_host |= is_named(h.name.as_bytes(), b"host");
        }
        let mut wire = Vec::with_capacity(size);
        wire.extend_from_slice(method.as_bytes());
        wire.push(b' ');
        wire.extend_from_slice(target.as_bytes());
        wire.extend_from_slice(b" HTTP/1.1\r\n");
        let host_at = wire.len();
        if !has_host {
            push_header(&mut wire, "Host", host);
        }
        let host_len = wire.len() - host_at;
        let rest = &mut wire;
        // The client's headers, as the SDK's rule keeps them. Checked as the module's own
        // are: the slice is the module's word, not necessarily the head `parse.rs` accepted.
        for h in req.forwarded() {
            let (name, value) = (h.name.as_bytes(), h.value.as_slice());
            if header_check::invalid(name, value) {
                return Err("bad request header");
            }
            push_line(rest, name, value);
        }
        let mut host_seen = false;
        let mut upgrade = false;
        for h in req.headers.iter() {
            let name = h.name.as_str();
            let role = header_role(name);
            // The same rule as for a handler's response headers: a token name, no CR, LF, NUL
            // (a name that matched a known one is a token: only its value is checked).
            let bad = if role == HeaderRole::EndToEnd {
                crate::http::encode::invalid_header(h)
            } else {
                header_check::breaks_line(h.value.as_bytes())
            };
            if bad {
                return Err("bad request header");
            }
            // The first `Upgrade` and the first `Host` only.
            let seen = match role {
                HeaderRole::EndToEnd => false,
                HeaderRole::Hop => true,
                HeaderRole::Upgrade => std::mem::replace(&mut upgrade, true),
                HeaderRole::Host => std::mem::replace(&mut host_seen, true),
            };
            if !seen {
                push_header(rest, name, h.value.as_str());
            }
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

#[inline]
fn push_header(out: &mut Vec<u8>, name: &str, value: &str) {
    push_line(out, name.as_bytes(), value.as_bytes());
}

#[inline]
fn push_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::abi_stable::std_types::{RSlice, RStr, RVec};
    use osprey_sdk::{Header, HeaderPair};

    #[test]
    fn encodes_requests_with_own_framing() {
        let req = UpstreamRequest {
            method: "POST".into(),
            target: "/a?b".into(),
            forward: RSlice::EMPTY,
            except: RSlice::EMPTY,
            headers: RVec::from(vec![
                HeaderPair::new("Content-Length", "99"),
                HeaderPair::new("X-A", "1"),
                HeaderPair::new("Connection", "upgrade"),
            ]),
            body: RVec::from(b"hi".to_vec()),
            client_ip: "1.2.3.4".into(),
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
        let mut bad = req.clone();
        bad.headers.push(HeaderPair::new("X-B", "a\r\nb"));
        assert!(Encoded::new(bad, true, "up:80").is_err());
        // A known name (its token check skipped) still has its value checked.
        let mut bad = req.clone();
        bad.headers.push(HeaderPair::new("Upgrade", "ws\r\nX: y"));
        assert!(Encoded::new(bad, true, "up:80").is_err());
        let mut bad = req.clone();
        bad.headers.push(HeaderPair::new("X(B)", "1"));
        assert!(Encoded::new(bad, true, "up:80").is_err());
        // The request line's rules: a token method, a target with no space or control.
        for (method, target) in [("GE T", "/"), ("", "/"), ("GET", "/a b"), ("GET", "/a\x7f")] {
            let mut bad = req.clone();
            bad.method = method.into();
            bad.target = target.into();
            assert!(
                Encoded::new(bad, true, "up:80").is_err(),
                "{method} {target}"
            );
        }
    }

    fn header<'a>(name: &'a str, value: &'a [u8]) -> Header<'a> {
        Header {
            name: RStr::from_str(name),
            value: RSlice::from_slice(value),
        }
    }

    /// The client's headers go as parsed, after `Host` and before the module's, repeated
    /// ones each in its place; hop-by-hop, `Connection`-listed and excepted ones do not.
    #[test]
    fn forwards_the_client_headers_as_they_are() {
        let client = [
            header("Host", b"front"),
            header("Accept", b"a"),
            header("Connection", b"X-Hop"),
            header("X-Hop", b"1"),
            header("Via", b"1.0 a"),
            header("Content-Length", b"3"),
            header("accept", b"b\xff"),
        ];
        let except = [RStr::from_str("via")];
        let req = UpstreamRequest {
            method: "GET".into(),
            target: "/".into(),
            forward: RSlice::from_slice(&client),
            except: RSlice::from_slice(&except),
            headers: RVec::from(vec![HeaderPair::new("Via", "1.0 a, 1.1 osprey")]),
            body: RVec::new(),
            client_ip: "1.2.3.4".into(),
            body_stream: osprey_sdk::abi_stable::std_types::ROption::RNone,
        };
        let (e, _) = Encoded::new(req.clone(), true, "up:80").unwrap();
        assert_eq!(
            e.for_server("up:80").into_owned(),
            b"GET / HTTP/1.1\r\nHost: up:80\r\nAccept: a\r\naccept: b\xff\r\nVia: 1.0 a, 1.1 osprey\r\n\r\n"
        );
        // A slice the module made up is checked as its own headers are.
        let bad = [header("X-B", b"a\r\nb")];
        let mut forged = req;
        forged.forward = RSlice::from_slice(&bad);
        assert!(Encoded::new(forged, true, "up:80").is_err());
    }

    /// A browser's dozen headers fit the buffer sized before the encoding: it is not grown
    /// (growing doubles it, and copies what was written).
    #[test]
    fn the_write_is_sized_for_the_client_headers() {
        let values: Vec<Vec<u8>> = (0..16).map(|i| vec![b'a' + i; 60]).collect();
        let client: Vec<_> = values.iter().map(|v| header("X-Browser", v)).collect();
        let req = UpstreamRequest {
            method: "GET".into(),
            target: "/".into(),
            forward: RSlice::from_slice(&client),
            except: RSlice::EMPTY,
            headers: RVec::new(),
            body: RVec::new(),
            client_ip: "1.2.3.4".into(),
            body_stream: osprey_sdk::abi_stable::std_types::ROption::RNone,
        };
        let (e, _) = Encoded::new(req, true, "up:80").unwrap();
        assert!(e.wire.len() > 16 * 60, "{}", e.wire.len());
        assert!(
            e.wire.capacity() - e.wire.len() <= 128,
            "{}",
            e.wire.capacity()
        );
    }
}
