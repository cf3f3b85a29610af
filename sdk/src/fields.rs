//! Checks for header fields a module writes from its configuration (RFC 9110 5.1, 5.5).

/// A header name: a non-empty RFC 9110 token.
pub fn is_token(name: &str) -> bool {
    // Folded without an early exit over a table, not a branch per byte: subrequests check
    // each header they carry.
    !name.is_empty() && name.bytes().fold(true, |ok, b| ok & TOKEN[b as usize])
}

/// Whether two header names are the same (names are case-insensitive). Byte by byte, a byte
/// as it is first: a name is usually written as it is asked for (`Last-Modified`, `origin`),
/// and then each byte is one compare, not two lowercasings (std's `eq_ignore_ascii_case`) or
/// a `memcmp` call.
#[inline]
pub fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    // Bytes differing in bit 0x20 alone are one letter in two cases when one is a letter.
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(&x, &y)| x == y || x ^ y == 0x20 && (x | 0x20).is_ascii_lowercase())
}

/// Whether `name` (bytes from 0x20 up: a token, say) is `lower` (lowercase letters and `-`,
/// of the same length) in any case, eight bytes at a time: setting bit 0x20 of such a byte
/// gives a lowercase letter only for that letter in either case, and `-` only for `-`.
pub fn is_named(name: &[u8], lower: &[u8]) -> bool {
    const CASE: u64 = 0x2020_2020_2020_2020;
    let word = |bytes: &[u8]| u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let n = name.len();
    if n != lower.len() {
        return false;
    }
    if n < 8 {
        return name.iter().zip(lower).all(|(&a, &b)| a | 0x20 == b);
    }
    let mut at = 0;
    while at + 8 < n {
        if word(&name[at..]) | CASE != word(&lower[at..]) {
            return false;
        }
        at += 8;
    }
    word(&name[n - 8..]) | CASE == word(&lower[n - 8..])
}

/// A byte of an RFC 9110 token (`tchar`).
#[inline]
pub fn is_token_byte(b: u8) -> bool {
    TOKEN[b as usize]
}

/// `tchar`: ASCII letters and digits and ``!#$%&'*+-.^_`|~``.
static TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 128 {
        t[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let punct = b"!#$%&'*+-.^_`|~";
    let mut i = 0;
    while i < punct.len() {
        t[punct[i] as usize] = true;
        i += 1;
    }
    t
};

/// A header value: visible characters, spaces and tabs, no leading or trailing whitespace
/// (so no CR, LF or NUL can split a response).
pub fn is_field_value(value: &str) -> bool {
    visible(value.as_bytes()) && !value.starts_with([' ', '\t']) && !value.ends_with([' ', '\t'])
}

/// Whether `bytes` has no control byte but tabs: sixteen bytes at a time (compiled to vector
/// compares), without an early exit. Subrequests check a value of a few dozen to a few hundred
/// bytes with each include (callgrind, 58 bytes: 107 instructions, folded byte by byte 141).
fn visible(bytes: &[u8]) -> bool {
    let bad = |b: u8| ((b < b' ') & (b != b'\t')) | (b == 0x7f);
    let (blocks, rest) = bytes.as_chunks::<16>();
    let mut any = false;
    for block in blocks {
        any |= block.iter().fold(false, |a, &b| a | bad(b));
    }
    // The rest, padded with spaces.
    let mut last = [b' '; 16];
    last[..rest.len()].copy_from_slice(rest);
    any |= last.iter().fold(false, |a, &b| a | bad(b));
    !any
}

/// Headers the core writes itself or that HTTP/2 forbids (RFC 9113 8.2.2): a module's
/// configuration may not set or remove them.
pub fn is_core_managed(name: &str) -> bool {
    [
        "connection",
        "content-length",
        "date",
        "keep-alive",
        "proxy-connection",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(name))
}

/// Check a header a configuration asks to send: `Err` says what is wrong.
pub fn check_header(name: &str, value: &str) -> Result<(), String> {
    if !is_token(name) {
        return Err(format!("`{name}` is not a valid header name"));
    }
    if is_core_managed(name) {
        return Err(format!("`{name}` is written by the server itself"));
    }
    if !is_field_value(value) {
        return Err(format!(
            "the value of `{name}` has a control character (CR, LF, NUL) or surrounding spaces"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values() {
        assert!(check_header("X-Frame-Options", "DENY").is_ok());
        assert!(check_header("X Bad", "v").is_err());
        assert!(check_header("", "v").is_err());
        assert!(check_header("X-A", "a\r\nInjected: 1").is_err());
        assert!(check_header("X-A", "a\0").is_err());
        assert!(check_header("X-A", " a").is_err());
        assert!(check_header("Content-Length", "5").is_err());
        assert!(check_header("x-a", "").is_ok());
        assert!(is_field_value("a\tb ü"));
    }

    #[test]
    fn field_value_bytes_are_checked_in_every_place_of_a_block() {
        let allowed = |b: u8| b == b'\t' || (b >= b' ' && b != 0x7f);
        for b in 0..=255u8 {
            for len in 1..=33 {
                for at in 0..len {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = b;
                    assert_eq!(visible(&bytes), allowed(b), "byte {b} at {at} of {len}");
                }
            }
        }
        assert!(visible(b"") && is_field_value(""));
        assert!(!is_field_value("a\t") && !is_field_value(" a") && is_field_value("a b"));
    }

    #[test]
    fn the_token_table_is_tchar() {
        for b in 0..=255u8 {
            let tchar = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            assert_eq!(is_token_byte(b), tchar, "byte {b}");
            let s = [b];
            if let Ok(s) = std::str::from_utf8(&s) {
                assert_eq!(is_token(s), tchar, "byte {b}");
                assert_eq!(is_token(&format!("X-{s}-y")), tchar, "byte {b}");
            }
        }
        assert!(is_token("X-Osprey-SSI-Vars"));
        assert!(same_name("ETag", "ETag") && same_name("etag", "ETag"));
        assert!(!same_name("ETag", "ETa") && !same_name("Etag", "Vary"));
        // Bit 0x20 makes a case only of letters: `[`/`{`, `@`/`` ` ``, `-`/`\r` stay apart.
        assert!(same_name("X-AZ", "x-az") && !same_name("X[", "x{") && !same_name("a@", "a`"));
        assert!(!same_name("a-", "a\r") && !same_name("\u{e9}", "\u{c9}"));
        assert!(!is_token("caf\u{e9}"));
    }
}

/// `text` for the life of the process, for header names and values fixed by a module's
/// configuration: a response carries a `&'static str` without copying it (a `String` value
/// costs an allocation and a copy per response). Each distinct text is kept once, so
/// reloading a configuration does not grow memory.
pub fn static_text(text: &str) -> &'static str {
    use std::collections::BTreeSet;
    use std::sync::{Mutex, PoisonError};
    static TEXTS: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut texts = TEXTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(kept) = texts.get(text) {
        return kept;
    }
    let kept: &'static str = Box::leak(text.into());
    texts.insert(kept);
    kept
}

/// Add `name` to the response's `Vary` (unless it is listed already, or `Vary: *`).
pub fn add_vary(resp: &mut crate::Response, name: &'static str) {
    if !extend_vary(resp, name) {
        resp.header("Vary", name);
    }
}

/// [`add_vary`] with `Vary: name` fixed by the configuration, added as it is when the
/// response has no `Vary` yet (the usual case: no copy, no check per request).
pub fn add_fixed_vary(resp: &mut crate::Response, vary: &'static crate::FixedHeader) {
    debug_assert!(vary.name().eq_ignore_ascii_case("vary"));
    if !extend_vary(resp, vary.value()) {
        resp.fixed_header(vary);
    }
}

/// Add `name` to the `Vary` the response has: `false` when it has none.
fn extend_vary(resp: &mut crate::Response, name: &str) -> bool {
    let Some(v) = resp.get_header("vary") else {
        return false;
    };
    let has = v
        .split(',')
        .any(|t| t.trim() == "*" || t.trim().eq_ignore_ascii_case(name));
    if !has {
        let extended = format!("{v}, {name}");
        resp.set_header("Vary", extended);
    }
    true
}

#[cfg(test)]
mod static_text_tests {
    #[test]
    fn each_text_is_kept_once() {
        let a = super::static_text("max-age=60");
        let b = super::static_text(&String::from("max-age=60"));
        assert_eq!(a, "max-age=60");
        assert!(std::ptr::eq(a, b));
        assert_eq!(super::static_text("max-age=61"), "max-age=61");
    }
}

#[cfg(test)]
mod vary_tests {
    #[test]
    fn vary_is_extended_once() {
        let mut r = crate::Response::new();
        super::add_vary(&mut r, "Origin");
        super::add_vary(&mut r, "Origin");
        assert_eq!(r.get_header("vary"), Some("Origin"));
        super::add_vary(&mut r, "Accept-Encoding");
        assert_eq!(r.get_header("vary"), Some("Origin, Accept-Encoding"));
        r.set_header("Vary", "*");
        super::add_vary(&mut r, "Origin");
        assert_eq!(r.get_header("vary"), Some("*"));
    }

    #[test]
    fn a_fixed_vary_is_added_whole_or_extends_the_one_there() {
        let vary = crate::FixedHeader::new("Vary", "Origin").unwrap();
        let mut r = crate::Response::new();
        super::add_fixed_vary(&mut r, vary);
        super::add_fixed_vary(&mut r, vary);
        assert_eq!(r.headers.len(), 1);
        assert!(r.headers[0].fixed_line().is_some());
        let mut r = crate::Response::new();
        r.header("Vary", "Accept-Encoding");
        super::add_fixed_vary(&mut r, vary);
        assert_eq!(r.get_header("vary"), Some("Accept-Encoding, Origin"));
    }
}
