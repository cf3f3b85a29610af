//! Whether a header may be written as it is: its name an RFC 9110 token, its value free of
//! CR, LF and NUL (which would end the line or the head early). Run on every header of every
//! response, so without a branch per byte: the name is one table lookup a byte folded
//! together, the value is read eight bytes at a time.
//!
//! The byte rules of a request head are here too, for the heads not parsed from text
//! (HTTP/2's fields): they are the ones httparse applies to an HTTP/1.1 head, and
//! `diagnose` names an HTTP/1.1 head's error with the same functions.

use osprey_sdk::fields::is_token_byte;

/// A header whose name is not a token or whose value would break the line.
pub fn invalid(name: &[u8], value: &[u8]) -> bool {
    bad_token(name) | breaks_line(value)
}

/// Whether `name` (a field name, a method) is empty or holds a byte that is not a token byte.
pub fn bad_token(name: &[u8]) -> bool {
    name.iter()
        .fold(name.is_empty(), |bad, &b| bad | !is_token_byte(b))
}

/// Whether a request field value holds a control byte other than HTAB, or DEL (RFC 9110
/// §5.5; CR, LF and NUL among them). Bytes above 0x7f (obs-text) are allowed. Words with no
/// byte below 0x20 and no DEL (nearly every value) are passed eight bytes at a time.
pub fn has_control(value: &[u8]) -> bool {
    let control = |b: u8| (b < 0x20 && b != b'\t') | (b == 0x7f);
    suspect(value, b' ', |v| less(v, 0x20) | less(v ^ (ONES * 0x7f), 1))
        && value.iter().any(|&b| control(b))
}

/// Whether a request target holds a byte the request line refuses: a control, SP or DEL
/// (RFC 9112 §3.2); bytes above 0x7f pass only as UTF-8, as httparse lets them.
pub fn bad_target(target: &[u8]) -> bool {
    let suspect = suspect(target, b'/', |v| {
        less(v, 0x21) | less(v ^ (ONES * 0x7f), 1) | (v & HIGHS)
    });
    suspect
        && (target.iter().any(|&b| b < 0x21 || b == 0x7f) || std::str::from_utf8(target).is_err())
}

/// Whether `test` finds something in a word of `bytes` (read eight at a time, a short value
/// padded with `pad`): the exact check runs only then.
fn suspect(bytes: &[u8], pad: u8, test: impl Fn(u64) -> u64) -> bool {
    let n = bytes.len();
    let found = if n >= 8 {
        let mut found = test(word(&bytes[n - 8..]));
        for chunk in bytes.chunks_exact(8) {
            found |= test(word(chunk));
        }
        found
    } else {
        test(short_word(bytes, pad))
    };
    found != 0
}

/// Whether a value holds CR, LF or NUL. Long values (a cookie, a CSP) go to `memchr3`'s
/// vector loop; shorter ones are tested for any byte below 14 in one branch for the whole
/// value (text has none), and only then are the three told from a tab.
pub fn breaks_line(value: &[u8]) -> bool {
    if value.len() >= 64 {
        return memchr::memchr3(b'\r', b'\n', 0, value).is_some();
    }
    suspect(value, b' ', |v| less(v, 14)) && value.iter().any(|&b| matches!(b, 0 | b'\r' | b'\n'))
}

/// Shared with the SDK's rule of which request headers go upstream.
pub use osprey_sdk::fields::is_named;

pub(crate) fn word(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

/// Up to seven bytes as a word, in two overlapping reads (no copy, no loop), the rest
/// `pad` bytes.
fn short_word(t: &[u8], pad: u8) -> u64 {
    let pads: u64 = ONES * u64::from(pad);
    let n = t.len();
    if n >= 4 {
        let lo = u32::from_le_bytes(t[..4].try_into().unwrap());
        let hi = u32::from_le_bytes(t[n - 4..].try_into().unwrap());
        u64::from(lo) | u64::from(hi) << 32
    } else if n >= 2 {
        let lo = u16::from_le_bytes(t[..2].try_into().unwrap());
        let hi = u16::from_le_bytes(t[n - 2..].try_into().unwrap());
        pads << 32 | u64::from(lo) | u64::from(hi) << 16
    } else if n == 1 {
        pads << 8 | u64::from(t[0])
    } else {
        pads
    }
}

pub(crate) const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Non-zero when a byte of `x` is less than `n` (exact as to whether one is, for n <= 128).
pub(crate) fn less(x: u64, n: u8) -> u64 {
    x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_tokens() {
        assert!(!invalid(b"X-Ok", b"fine value"));
        assert!(invalid(b"", b"v"));
        assert!(invalid(b"Bad Name", b"v"));
        assert!(invalid(b"X:", b"v"));
        assert!(invalid(b"X\xff", b"v"));
        assert!(!invalid(b"!#$%&'*+-.^_`|~09azAZ", b""));
    }

    /// The byte rules are httparse's: every byte, in a method, a target and a value, is
    /// refused by one exactly when it is by the other.
    #[test]
    fn byte_rules_are_the_ones_of_the_http1_parser() {
        let parses = |raw: Vec<u8>| {
            let mut headers = [httparse::EMPTY_HEADER; 4];
            httparse::Request::new(&mut headers).parse(&raw).is_ok()
        };
        let line = |m: &[u8], t: &[u8], v: &[u8]| {
            [m, b" ", t, b" HTTP/1.1\r\nX: ", v, b"\r\n\r\n"].concat()
        };
        for b in 0..=255u8 {
            let with = [b'a', b, b'z'];
            // A request line with a SP or CR in the target is another line, not this one.
            if b != b' ' && b != b'\r' && b != b'\n' {
                assert_eq!(
                    parses(line(&with, b"/", b"v")),
                    !bad_token(&with),
                    "method {b}"
                );
                let target = [b'/', b, b'z'];
                assert_eq!(
                    parses(line(b"GET", &target, b"v")),
                    !bad_target(&target),
                    "target {b}"
                );
            }
            if b != b'\n' {
                assert_eq!(
                    parses(line(b"GET", b"/", &with)),
                    !has_control(&with),
                    "value {b}"
                );
            }
        }
        assert!(has_control(b"a\nb") && bad_target(b"/a b"));
        let utf8 = "GET /\u{e9} HTTP/1.1\r\n\r\n".as_bytes().to_vec();
        assert!(parses(utf8) && !bad_target("/\u{e9}".as_bytes()));
    }

    #[test]
    fn control_bytes_and_bad_target_bytes_are_found_wherever_they_are() {
        for len in 1..40 {
            let clean: Vec<u8> = (0..len).map(|i| [b'a', b'\t', b'~', b'/'][i % 4]).collect();
            assert!(!has_control(&clean), "{len}");
            let target: Vec<u8> = clean
                .iter()
                .map(|&b| if b == b'\t' { b'%' } else { b })
                .collect();
            assert!(!bad_target(&target), "{len}");
            for at in 0..len {
                for bad in [0, 1, b'\n', 0x1f, 0x7f] {
                    let mut v = clean.clone();
                    v[at] = bad;
                    assert!(has_control(&v), "{len} {at} {bad}");
                }
                for bad in [b' ', b'\t', 0x7f, 0xff] {
                    let mut t = target.clone();
                    t[at] = bad;
                    assert!(bad_target(&t), "{len} {at} {bad}");
                }
            }
        }
    }

    #[test]
    fn every_line_breaker_is_found_wherever_it_is() {
        for len in (0..70).chain([200]) {
            let clean = vec![b'a'; len];
            assert!(!breaks_line(&clean), "{len}");
            // Bytes next to the three, and high bytes (obs-text), are allowed.
            let near: Vec<u8> = (0..len)
                .map(|i| [1, 9, 11, 12, 14, 0x80, 0xff][i % 7])
                .collect();
            assert!(!breaks_line(&near), "{len} {near:?}");
            for at in 0..len {
                for bad in [b'\r', b'\n', 0] {
                    let mut v = clean.clone();
                    v[at] = bad;
                    assert!(breaks_line(&v), "{len} {at} {bad}");
                }
            }
        }
    }

    #[test]
    fn names_match_in_any_case_and_nothing_else() {
        for lower in [
            "te",
            "host",
            "upgrade",
            "connection",
            "keep-alive",
            "content-length",
            "proxy-connection",
            "transfer-encoding",
            "proxy-authenticate",
        ] {
            assert!(is_named(lower.as_bytes(), lower.as_bytes()));
            assert!(is_named(
                lower.to_ascii_uppercase().as_bytes(),
                lower.as_bytes()
            ));
            // Any one byte changed to another token byte (or a space) no longer matches.
            for at in 0..lower.len() {
                for b in (0x20..0x7f).chain([0x80, 0xc1, 0xff]) {
                    let mut name = lower.as_bytes().to_vec();
                    if name[at].eq_ignore_ascii_case(&b) {
                        continue;
                    }
                    name[at] = b;
                    assert!(!is_named(&name, lower.as_bytes()), "{lower} {at} {b}");
                }
            }
            assert!(!is_named(&lower.as_bytes()[1..], lower.as_bytes()));
        }
    }
}
