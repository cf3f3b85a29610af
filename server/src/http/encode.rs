//! Serialising a response head: status line, the core's headers, the handler's headers.

use osprey_sdk::HeaderPair;

use super::{date, header_check, status};

/// How the body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// `Content-Length: n` (also sent for HEAD, with no body following).
    Length(u64),
    /// `Transfer-Encoding: chunked` (HTTP/1.1 only).
    Chunked,
    /// The body ends when the connection closes (HTTP/1.0 streams).
    Close,
    /// No body and no length header (1xx, 204, 304).
    None,
}

/// Headers the core writes itself; a handler's copies are dropped (on HTTP/2 too).
pub(crate) fn core_managed(name: &str) -> bool {
    let core = match name.len() {
        4 => "date",
        10 => match name.as_bytes()[0] | 0x20 {
            b'c' => "connection",
            _ => "keep-alive",
        },
        14 => "content-length",
        17 => "transfer-encoding",
        _ => return false,
    };
    name.eq_ignore_ascii_case(core)
}

/// A header the handler set that would break the response framing. What of it is fixed
/// (`osprey_sdk::FixedHeader`: the whole header or its name) was checked when configured.
pub fn invalid_header(h: &HeaderPair) -> bool {
    let value = h.value.as_bytes();
    if h.name_is_fixed() {
        return h.fixed_line().is_none() && header_check::breaks_line(value);
    }
    header_check::invalid(h.name.as_bytes(), value)
}

/// Append the head for `status` with `headers` to `out`.
pub fn write_head(
    out: &mut Vec<u8>,
    minor: u8,
    status: u16,
    headers: &[HeaderPair],
    framing: ResponseFraming,
    keep_alive: bool,
) {
    let mut num = itoa::Buffer::new();
    if minor == 1 && status == 200 {
        // The usual status line, whole: no number to format, no reason to look up.
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\nDate: ");
    } else {
        out.extend_from_slice(if minor == 0 {
            b"HTTP/1.0 "
        } else {
            b"HTTP/1.1 "
        });
        out.extend_from_slice(num.format(status).as_bytes());
        out.push(b' ');
        out.extend_from_slice(status::reason(status).as_bytes());
        out.extend_from_slice(b"\r\nDate: ");
    }
    date::with_date(|d| out.extend_from_slice(d));
    let mut has_server = false;
    for h in headers {
        // Configured once, never one the core writes: its line goes as it is.
        if let Some(line) = h.fixed_line() {
            out.extend_from_slice(line);
            continue;
        }
        let (name, value) = (h.name.as_str(), h.value.as_bytes());
        // One length test tells most names from all five the core cares about.
        if name.len() == 6 {
            has_server |= name.eq_ignore_ascii_case("server");
        } else if core_managed(name) {
            continue;
        }
        out.reserve(name.len() + value.len() + 4);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
    }
    if !has_server {
        out.extend_from_slice(b"\r\nServer: osprey");
    }
    match framing {
        ResponseFraming::Length(n) => {
            out.extend_from_slice(b"\r\nContent-Length: ");
            out.extend_from_slice(num.format(n).as_bytes());
        }
        ResponseFraming::Chunked => out.extend_from_slice(b"\r\nTransfer-Encoding: chunked"),
        ResponseFraming::Close | ResponseFraming::None => {}
    }
    match (keep_alive, minor) {
        _ if status == 101 => out.extend_from_slice(b"\r\nConnection: upgrade"),
        (false, _) => out.extend_from_slice(b"\r\nConnection: close"),
        (true, 0) => out.extend_from_slice(b"\r\nConnection: keep-alive"),
        (true, _) => {}
    }
    out.extend_from_slice(b"\r\n\r\n");
}

/// Append one chunk of a chunked body.
pub fn write_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The last chunk.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(n: &'static str, v: &'static str) -> HeaderPair {
        HeaderPair::new(n, v)
    }

    #[test]
    fn writes_status_headers_and_length() {
        let mut out = Vec::new();
        let headers = [
            pair("Content-Type", "text/plain"),
            pair("Content-Length", "999"),
        ];
        write_head(&mut out, 1, 200, &headers, ResponseFraming::Length(5), true);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\nDate: "), "{text}");
        assert!(text.contains("\r\nContent-Type: text/plain\r\n"));
        assert!(text.contains("\r\nServer: osprey\r\n"));
        assert!(text.contains("\r\nContent-Length: 5\r\n"));
        assert!(!text.contains("999"));
        assert!(text.ends_with("\r\n\r\n"));
        assert!(!text.contains("Connection"));
    }

    #[test]
    fn http10_keep_alive_and_close() {
        let mut out = Vec::new();
        write_head(&mut out, 0, 404, &[], ResponseFraming::Close, false);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.0 404 Not Found\r\n"));
        assert!(text.contains("Connection: close"));
        let mut out = Vec::new();
        write_head(&mut out, 0, 200, &[], ResponseFraming::Length(0), true);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.0 200 OK\r\nDate: "), "{text}");
        assert!(text.contains("Connection: keep-alive"));
    }

    #[test]
    fn fixed_headers_are_written_from_their_line_and_trusted_only_while_untouched() {
        let fixed = osprey_sdk::FixedHeader::new("X-Frame-Options", "DENY").unwrap();
        let mut out = Vec::new();
        let headers = [fixed.pair(), pair("X-B", "b")];
        write_head(&mut out, 1, 200, &headers, ResponseFraming::Length(0), true);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("\r\nX-Frame-Options: DENY\r\nX-B: b\r\n"),
            "{text}"
        );
        assert!(!invalid_header(&fixed.pair()));
        let mut changed = fixed.pair();
        changed.value = "a\r\nSet-Cookie: x".into();
        assert!(invalid_header(&changed));
        let named = osprey_sdk::FixedHeader::new("X-Named", "").unwrap();
        let mut resp = osprey_sdk::Response::new();
        resp.header_named(named, "fine").header_named(named, "a\nb");
        assert!(!invalid_header(&resp.headers[0]));
        assert!(invalid_header(&resp.headers[1]));
    }

    #[test]
    fn rejects_injected_headers() {
        assert!(invalid_header(&pair("X", "a\r\nSet-Cookie: x")));
        assert!(invalid_header(&pair("Bad Name", "v")));
        assert!(!invalid_header(&pair("X-Ok", "fine value")));
    }

    #[test]
    fn core_managed_headers_in_any_case() {
        for name in [
            "Date",
            "CONNECTION",
            "keep-alive",
            "Content-Length",
            "transfer-encoding",
        ] {
            assert!(core_managed(name), "{name}");
        }
        for name in [
            "Content-Type",
            "Dates",
            "Keep-Alivx",
            "Connectioz",
            "Server",
            "",
        ] {
            assert!(!core_managed(name), "{name}");
        }
    }

    #[test]
    fn chunks() {
        let mut out = Vec::new();
        write_chunk(&mut out, b"hello world, this is 27 byt");
        assert_eq!(&out[..4], b"1b\r\n");
    }
}
