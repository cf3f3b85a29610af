//! The upstream's response head, parsed strictly (RFC 9112 §4, §5, §6): a status line,
//! header lines with a token name and a value of visible characters, spaces and tabs (no
//! other control byte: the core's rule for the headers it writes, `header_check`, refuses
//! CR, LF and NUL), no obs-fold, no CL+TE, one `chunked` coding at most, agreeing
//! Content-Lengths (`parse_length`, the request side's rule), a bounded size.
//!
//! Written here rather than with httparse: one pass over the bytes, eight at a time through a
//! value, that classifies each header as it goes and copies only the end-to-end ones, costs
//! less than filling httparse's table and reading that again.

use osprey_sdk::abi_stable::std_types::RCowStr;
use osprey_sdk::HeaderPair;

use crate::http::header_check::{bad_token, is_named, less, word, ONES};
use crate::http::parse::{parse_length, MAX_HEADERS};

/// Response heads larger than this are refused (502).
pub const MAX_HEAD: usize = 64 * 1024;

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

/// What a response header is to the proxy.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// End-to-end: passed on.
    Pass,
    ContentLength,
    TransferEncoding,
    Connection,
    Upgrade,
    /// Hop-by-hop (RFC 9110 7.6.1), or written by the core itself (`Date`, `Server`, as
    /// nginx's `proxy_hide_header` defaults).
    Drop,
}

/// A header's class, by its length first: every header of every response goes through here.
fn class(name: &[u8]) -> Class {
    let is = |lower: &[u8]| is_named(name, lower);
    match name.len() {
        2 if is(b"te") => Class::Drop,
        4 if is(b"date") => Class::Drop,
        6 if is(b"server") => Class::Drop,
        7 if is(b"upgrade") => Class::Upgrade,
        7 if is(b"trailer") => Class::Drop,
        10 if is(b"connection") => Class::Connection,
        10 if is(b"keep-alive") => Class::Drop,
        14 if is(b"content-length") => Class::ContentLength,
        16 if is(b"proxy-connection") => Class::Drop,
        17 if is(b"transfer-encoding") => Class::TransferEncoding,
        18 if is(b"proxy-authenticate") => Class::Drop,
        _ => Class::Pass,
    }
}

/// Header names as they are commonly spelled: one of these is borrowed, not copied.
fn header_name(name: &[u8]) -> RCowStr<'static> {
    let common: &'static str = match name {
        b"Content-Type" => "Content-Type",
        b"content-type" => "content-type",
        b"Cache-Control" => "Cache-Control",
        b"Last-Modified" => "Last-Modified",
        b"ETag" => "ETag",
        b"Expires" => "Expires",
        b"Set-Cookie" => "Set-Cookie",
        b"Location" => "Location",
        b"Vary" => "Vary",
        b"Content-Encoding" => "Content-Encoding",
        b"Accept-Ranges" => "Accept-Ranges",
        b"Age" => "Age",
        b"Via" => "Via",
        // A token is ASCII.
        _ => return RCowStr::from(String::from_utf8_lossy(name).into_owned()),
    };
    RCowStr::from(common)
}

/// A header value: one commonly sent (a `Content-Type`, `Accept-Ranges`, `Vary`) is borrowed,
/// the others copied.
fn header_value(value: &[u8]) -> RCowStr<'static> {
    let common: &'static str = match value {
        b"text/html" => "text/html",
        b"text/html; charset=utf-8" => "text/html; charset=utf-8",
        b"text/html; charset=UTF-8" => "text/html; charset=UTF-8",
        b"text/plain" => "text/plain",
        b"text/plain; charset=utf-8" => "text/plain; charset=utf-8",
        b"text/css" => "text/css",
        b"application/json" => "application/json",
        b"application/javascript" => "application/javascript",
        b"application/octet-stream" => "application/octet-stream",
        b"image/png" => "image/png",
        b"image/jpeg" => "image/jpeg",
        b"bytes" => "bytes",
        b"Accept-Encoding" => "Accept-Encoding",
        b"no-cache" => "no-cache",
        b"gzip" => "gzip",
        _ => return owned_value(value),
    };
    RCowStr::from(common)
}

fn owned_value(value: &[u8]) -> RCowStr<'static> {
    if value.is_ascii() {
        // SAFETY: ASCII is UTF-8 (the common case, checked a word at a time: `from_utf8`
        // cost ~120 instructions even for a short value).
        let text = unsafe { std::str::from_utf8_unchecked(value) };
        return RCowStr::from(text.to_owned());
    }
    // obs-text, read as UTF-8 where it is (RFC 9110 §5.5 calls it opaque).
    RCowStr::from(String::from_utf8_lossy(value).into_owned())
}

/// Where the line that goes on at `at` ends: the end of its text and the start of the next
/// line (after CRLF, or a bare LF: RFC 9112 §2.2); `None` when `buf` ends first. Its bytes
/// are read eight at a time while none is a control byte.
#[inline]
fn line_end(buf: &[u8], mut at: usize) -> Result<Option<(usize, usize)>, &'static str> {
    loop {
        while at + 8 <= buf.len() {
            let controls = less(word(&buf[at..]), 0x20);
            if controls != 0 {
                at += controls.trailing_zeros() as usize / 8;
                break;
            }
            at += 8;
        }
        while at < buf.len() && buf[at] >= 0x20 {
            at += 1;
        }
        match buf.get(at..).unwrap_or_default() {
            [] | [b'\r'] => return Ok(None),
            [b'\n', ..] => return Ok(Some((at, at + 1))),
            [b'\r', b'\n', ..] => return Ok(Some((at, at + 2))),
            [b'\t', ..] => at += 1,
            _ => return Err("a control character in the response head"),
        }
    }
}

/// `HTTP/1.x SSS reason`: the minor version and the status.
fn status_line(line: &[u8]) -> Result<(u8, u16), &'static str> {
    let digit = |b: u8| b.is_ascii_digit().then(|| u16::from(b - b'0'));
    let well_formed = line.len() >= 12
        && line.starts_with(b"HTTP/1.")
        && matches!(line[7], b'0' | b'1')
        && line[8] == b' '
        && (line.len() == 12 || line[12] == b' ');
    let code = line
        .get(9..12)
        .and_then(|c| Some(digit(c[0])? * 100 + digit(c[1])? * 10 + digit(c[2])?));
    match code {
        Some(code) if well_formed => {
            if code < 100 {
                return Err("bad response status");
            }
            Ok((line[7] - b'0', code))
        }
        _ => Err("malformed response status line"),
    }
}

/// Where the first `:` or control byte at or after `at` is (`buf.len()`: none).
fn name_end(buf: &[u8], mut at: usize) -> usize {
    while at + 8 <= buf.len() {
        let v = word(&buf[at..]);
        // The lowest flagged byte is the first `:` (a zero of `v ^ ':'s`) or byte below 0x20.
        let hits = less(v ^ (ONES * u64::from(b':')), 1) | less(v, 0x20);
        if hits != 0 {
            return at + hits.trailing_zeros() as usize / 8;
        }
        at += 8;
    }
    while at < buf.len() && buf[at] != b':' && buf[at] >= 0x20 {
        at += 1;
    }
    at
}

/// A header line's name and value, and where the next line starts.
type HeaderLine<'a> = (&'a [u8], &'a [u8], usize);

/// The header line at `at`: its name (checked to be a token by the caller), its value, and
/// where the next line starts; `None` when `buf` ends first.
fn header_line(buf: &[u8], at: usize) -> Result<Option<HeaderLine<'_>>, &'static str> {
    if matches!(buf[at], b' ' | b'\t') {
        // RFC 9112 §5.2: a proxy may refuse a folded line instead of unfolding it.
        return Err("obs-fold (a folded header line) in the response");
    }
    let colon = name_end(buf, at);
    match buf.get(colon) {
        None => return Ok(None),
        Some(b':') if colon > at => {}
        Some(_) => return Err("malformed response header"),
    }
    // The value without the spaces and tabs around it (OWS).
    let mut start = colon + 1;
    while matches!(buf.get(start), Some(b' ' | b'\t')) {
        start += 1;
    }
    let Some((mut end, next)) = line_end(buf, start)? else {
        return Ok(None);
    };
    while end > start && matches!(buf[end - 1], b' ' | b'\t') {
        end -= 1;
    }
    Ok(Some((&buf[at..colon], &buf[start..end], next)))
}

/// Parse a response head at the start of `buf`. A 101 is accepted only when the request asked
/// for an upgrade.
pub fn parse_response(
    buf: &[u8],
    head_request: bool,
    upgrade: bool,
) -> Result<Parsed, &'static str> {
    let partial = || {
        if buf.len() > MAX_HEAD {
            return Err("response head too large");
        }
        Ok(Parsed::Partial)
    };
    let Some((end, mut at)) = line_end(buf, 0)? else {
        return partial();
    };
    let (minor, status) = status_line(&buf[..end])?;
    let switching = status == 101;
    if switching && !upgrade {
        return Err("a protocol switch that was not asked for");
    }
    let interim = status < 200 && !switching;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut keep_alive = minor == 1;
    // Header names listed in `Connection`: hop-by-hop too (rare: looked at after the pass).
    let mut listed: Vec<&[u8]> = Vec::new();
    // Room for a usual head's end-to-end headers: one allocation, no growing.
    let mut headers = Vec::with_capacity(8);
    let mut count = 0;
    let len = loop {
        if at > MAX_HEAD {
            return Err("response head too large");
        }
        match buf.get(at..).unwrap_or_default() {
            [b'\n', ..] => break at + 1,
            [b'\r', b'\n', ..] => break at + 2,
            [] | [b'\r'] => return partial(),
            _ => {}
        }
        let Some((name, value, next)) = header_line(buf, at)? else {
            return partial();
        };
        at = next;
        count += 1;
        if count > MAX_HEADERS {
            return Err("too many response headers");
        }
        // A name that matched one the proxy knows is a token; the others are checked.
        let class = class(name);
        if class == Class::Pass && bad_token(name) {
            return Err("malformed response header");
        }
        match class {
            _ if interim => {}
            Class::Pass => headers.push(HeaderPair::new(header_name(name), header_value(value))),
            Class::ContentLength => {
                let n = parse_length(value).map_err(|_| "bad Content-Length in the response")?;
                if content_length.is_some_and(|old| old != n) {
                    return Err("conflicting Content-Length headers in the response");
                }
                content_length = Some(n);
            }
            Class::TransferEncoding => {
                if chunked || !value.eq_ignore_ascii_case(b"chunked") {
                    return Err("unsupported Transfer-Encoding in the response");
                }
                chunked = true;
            }
            Class::Connection => {
                for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                    if token.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive |= minor == 0;
                    } else if !token.is_empty() {
                        listed.push(token);
                    }
                }
            }
            // A 101 keeps its `Upgrade`: it names the protocol switched to.
            Class::Upgrade if switching => {
                headers.push(HeaderPair::new(header_name(name), header_value(value)))
            }
            Class::Upgrade | Class::Drop => {}
        }
    };
    if interim {
        return Ok(Parsed::Interim(len));
    }
    if !listed.is_empty() {
        headers.retain(|h: &HeaderPair| {
            let name = h.name.as_bytes();
            (switching && class(name) == Class::Upgrade)
                || !listed.iter().any(|t| t.eq_ignore_ascii_case(name))
        });
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

    /// Each of `raws` is refused.
    fn refused(raws: &[&[u8]]) {
        for raw in raws {
            assert!(
                parse_response(raw, false, false).is_err(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

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
        refused(&[
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTX/1.1 200 OK\r\n\r\n",
        ]);
    }

    #[test]
    fn refuses_folded_and_malformed_lines() {
        refused(&[
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-A: 1\r\n  folded\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-A: 1\r\n\tfolded\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-A: 1\r\n folded: 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A : 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n: 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A: a\0b\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A: a\r\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A: a\x01b\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A: 1\r\nX(A): 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n",
            b"HTTP/1.1 200 O\0K\r\n\r\n",
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"HTTP/1.1 099 OK\r\n\r\n",
            b"HTTP/1.2 200 OK\r\n\r\n",
            b"HTTP/1.1  200 OK\r\n\r\n",
            b"\r\nHTTP/1.1 200 OK\r\n\r\n",
        ]);
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(
            parse_response(&many, false, false).unwrap_err(),
            "too many response headers"
        );
        assert_eq!(
            parse_response(
                b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n",
                false,
                false
            )
            .unwrap_err(),
            "obs-fold (a folded header line) in the response"
        );
        let huge = vec![b'a'; MAX_HEAD + 1];
        assert!(parse_response(&huge, false, false).is_err());
    }

    #[test]
    fn accepts_what_rfc_9112_allows() {
        // Bare LF line ends, no reason phrase, OWS around values, a duplicate agreeing
        // Content-Length, a value that is not UTF-8.
        let h = head(b"HTTP/1.1 200\nContent-Length: 2\ncontent-length:2\nX-A: \t a b \t\nX-B: caf\xe9\n\nhi");
        assert_eq!(h.framing, UpstreamFraming::Length(2));
        assert_eq!(
            h.len,
            b"HTTP/1.1 200\nContent-Length: 2\ncontent-length:2\nX-A: \t a b \t\nX-B: caf\xe9\n\n"
                .len()
        );
        let values: Vec<_> = h.headers.iter().map(|h| h.value.to_string()).collect();
        assert_eq!(values, ["a b", "caf\u{fffd}"]);
        // A header named in `Connection` before it is dropped too.
        let h = head(b"HTTP/1.1 200 OK\r\nX-Hop: 1\r\nContent-Length: 0\r\nConnection: X-HOP\r\nContent-Type: a/b\r\n\r\n");
        let names: Vec<_> = h.headers.iter().map(|h| h.name.to_string()).collect();
        assert_eq!(names, ["Content-Type"]);
        // Names are matched whole: these are end-to-end headers, not framing.
        let h =
            head(b"HTTP/1.1 200 OK\r\nContent_Length: 5\r\nX-Content-Length: 5\r\nDATE: x\r\n\r\n");
        assert_eq!(h.framing, UpstreamFraming::Close);
        assert_eq!(h.headers.len(), 2);
        // A 101 asked for keeps its `Upgrade`.
        match parse_response(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n", false, true).unwrap() {
            Parsed::Head(h) => {
                assert_eq!((h.status, h.framing, h.keep_alive), (101, UpstreamFraming::None, false));
                assert_eq!(h.headers[0].value.as_str(), "websocket");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_head_is_partial_until_its_empty_line_whatever_the_split() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc";
        let end = raw.len() - 3;
        for cut in 0..end {
            assert!(
                matches!(
                    parse_response(&raw[..cut], false, false),
                    Ok(Parsed::Partial)
                ),
                "cut at {cut}"
            );
        }
        for cut in end..=raw.len() {
            assert_eq!(head(&raw[..cut]).len, end);
        }
        // An interim response, then the final one.
        let raw =
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
        match parse_response(raw, false, false).unwrap() {
            Parsed::Interim(n) => assert_eq!(head(&raw[n..]).status, 204),
            other => panic!("{other:?}"),
        }
    }

    /// Common values are borrowed, the others copied; both pass on exactly as sent, and a
    /// value that only resembles a common one (another case, more text) is not taken for it.
    #[test]
    fn common_values_are_borrowed_and_unchanged() {
        use osprey_sdk::abi_stable::std_types::RCow;
        let h = head(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nAccept-Ranges: bytes\r\nX-A: Text/HTML\r\nX-B: text/html2\r\nX-C: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n");
        let got: Vec<_> = h
            .headers
            .iter()
            .map(|h| (h.value.to_string(), matches!(h.value, RCow::Borrowed(_))))
            .collect();
        let want = [
            ("text/html", true),
            ("bytes", true),
            ("Text/HTML", false),
            ("text/html2", false),
            ("caf\u{e9}", false),
        ];
        let want: Vec<_> = want.iter().map(|(v, b)| (v.to_string(), *b)).collect();
        assert_eq!(got, want);
    }
}
