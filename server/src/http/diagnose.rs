//! Why a request head was refused, when httparse says only which of its checks failed: each
//! request-line and header error is named, with the status RFC 9112 (and nginx) give it —
//! 400 for a malformed line, 414 for a long one, 505 for an HTTP version other than 1.x.

use super::header_check::{bad_target, bad_token, has_control};
use super::{bad, HttpError};

/// A method that is not a token.
pub const BAD_METHOD: HttpError = bad("invalid character in the method");
/// A value with a control byte that does not end the line (HTTP/2 refuses those that do).
pub const CONTROL_IN_VALUE: HttpError = bad("control character in a header value");

/// Why a target [`bad_target`] refused is refused.
pub fn target_error(target: &[u8]) -> HttpError {
    if target.contains(&b' ') {
        bad("space in the request target (must be percent-encoded)")
    } else if target.iter().any(|&b| b < 0x21 || b == 0x7f) {
        bad("control character in the request target")
    } else {
        bad("request target not in UTF-8")
    }
}

/// The error for `data` (a head from its request line on) that httparse refused with `e`.
pub fn explain(data: &[u8], e: httparse::Error, max_request_line: usize) -> HttpError {
    use httparse::Error::*;
    let line_end = memchr::memchr(b'\n', data);
    if line_end.unwrap_or(data.len()) > max_request_line {
        return HttpError::new(414, "request line too long");
    }
    if let Some(end) = line_end {
        if let Some(e) = request_line(&data[..end]) {
            return e;
        }
        if let Some(e) = header_lines(&data[end + 1..]) {
            return e;
        }
    }
    match e {
        TooManyHeaders => HttpError::new(431, "too many headers"),
        Version => HttpError::new(505, "only HTTP/1.0 and HTTP/1.1 are supported"),
        HeaderName => bad("invalid character in a header name"),
        HeaderValue => bad("invalid byte in a header value"),
        NewLine | Status => bad("malformed line ending"),
        Token => bad("malformed request line"),
    }
}

/// What is wrong with a request line (without its LF), if anything.
fn request_line(line: &[u8]) -> Option<HttpError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.contains(&b'\r') {
        return Some(bad("CR without LF in the request line"));
    }
    if line.contains(&b'\t') {
        return Some(bad("tab in the request line (the separator is one space)"));
    }
    if line.contains(&0) {
        return Some(bad("NUL byte in the request line"));
    }
    let Some(sp) = memchr::memchr(b' ', line) else {
        return Some(bad(
            "malformed request line (expected `METHOD target HTTP/1.1`)",
        ));
    };
    let (method, rest) = (&line[..sp], &line[sp + 1..]);
    if method.is_empty() {
        return Some(bad("request line starts with a space"));
    }
    if bad_token(method) {
        return Some(BAD_METHOD);
    }
    if rest.first() == Some(&b' ') {
        return Some(bad("more than one space after the method"));
    }
    let Some(last_sp) = memchr::memrchr(b' ', rest) else {
        return Some(bad("no HTTP version in the request line"));
    };
    let (target, version) = (&rest[..last_sp], &rest[last_sp + 1..]);
    if let Some(e) = check_version(version) {
        return Some(e);
    }
    if target.is_empty() {
        return Some(bad("missing request target"));
    }
    if target.ends_with(b" ") {
        return Some(bad("more than one space before the HTTP version"));
    }
    if bad_target(target) {
        return Some(target_error(target));
    }
    None
}

/// `HTTP/` DIGIT `.` DIGIT (RFC 9112 §2.3); a major version other than 1 is well-formed but
/// not supported (505).
fn check_version(v: &[u8]) -> Option<HttpError> {
    match v {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            (major != &b'1' || *minor > b'1').then_some(HttpError::new(
                505,
                "HTTP version not supported (only HTTP/1.0 and HTTP/1.1)",
            ))
        }
        _ => Some(bad("malformed HTTP version (expected HTTP/1.1)")),
    }
}

/// What is wrong with the first bad header line, if anything.
fn header_lines(mut data: &[u8]) -> Option<HttpError> {
    while let Some(end) = memchr::memchr(b'\n', data) {
        let line = &data[..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return None;
        }
        if let Some(e) = header_line(line) {
            return Some(e);
        }
        data = &data[end + 1..];
    }
    None
}

fn header_line(line: &[u8]) -> Option<HttpError> {
    if matches!(line[0], b' ' | b'\t') {
        return Some(bad("folded header line (obsolete line folding)"));
    }
    let Some(colon) = memchr::memchr(b':', line) else {
        return Some(bad("header line without a colon"));
    };
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() {
        return Some(bad("empty header name"));
    }
    if matches!(name[name.len() - 1], b' ' | b'\t') {
        return Some(bad("whitespace between a header name and its colon"));
    }
    if bad_token(name) {
        return Some(bad("invalid character in a header name"));
    }
    if value.contains(&b'\r') {
        return Some(bad("CR without LF in a header value"));
    }
    if value.contains(&0) {
        return Some(bad("NUL byte in a header value"));
    }
    if has_control(value) {
        return Some(CONTROL_IN_VALUE);
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::config::Limits;
    use crate::http::parse::parse;

    #[test]
    fn each_request_line_error_is_named() {
        let cases: &[(&str, u16, &str)] = &[
            (
                "GET /a?b\x01c HTTP/1.1",
                400,
                "control character in the request target",
            ),
            ("GET /a b HTTP/1.1", 400, "space in the request target"),
            ("G(T / HTTP/1.1", 400, "invalid character in the method"),
            (" GET / HTTP/1.1", 400, "starts with a space"),
            (
                "GET  / HTTP/1.1",
                400,
                "more than one space after the method",
            ),
            ("GET /  HTTP/1.1", 400, "more than one space before"),
            ("GET /", 400, "no HTTP version"),
            ("GET / http/1.1", 400, "malformed HTTP version"),
            ("GET / HTTP/1.1x", 400, "malformed HTTP version"),
            ("GET / HTTP/2.0", 505, "not supported"),
            ("GET / HTTP/3.0", 505, "not supported"),
            ("GET\t/ HTTP/1.1", 400, "tab in the request line"),
            ("GET /\r HTTP/1.1", 400, "CR without LF"),
            ("GET", 400, "malformed request line"),
        ];
        for (line, status, reason) in cases {
            let raw = format!("{line}\r\nHost: a\r\n\r\n");
            let e = parse(raw.as_bytes(), &Limits::default()).unwrap_err();
            assert_eq!(e.status, *status, "{line:?}: {}", e.reason);
            assert!(e.reason.contains(reason), "{line:?}: {}", e.reason);
        }
    }

    #[test]
    fn each_header_error_is_named() {
        let cases: &[(&str, &str)] = &[
            ("Host : a", "whitespace between a header name and its colon"),
            ("X: 1\r\n folded", "folded header line"),
            ("Bad Name: x", "invalid character in a header name"),
            ("NoColon", "header line without a colon"),
            (": x", "empty header name"),
            ("X: a\rb", "CR without LF in a header value"),
            ("X: a\0b", "NUL byte in a header value"),
            ("X: a\x01b", "control character in a header value"),
        ];
        for (header, reason) in cases {
            let raw = format!("GET / HTTP/1.1\r\nHost: a\r\n{header}\r\n\r\n");
            let e = parse(raw.as_bytes(), &Limits::default()).unwrap_err();
            assert_eq!(e.status, 400, "{header:?}: {}", e.reason);
            assert!(e.reason.contains(reason), "{header:?}: {}", e.reason);
        }
    }
}
