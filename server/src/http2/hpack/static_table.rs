//! The static table of RFC 7541 Appendix A (index 1 is the first entry).

/// Indexes of the names the core sets on every response.
pub const CONTENT_LENGTH: usize = 28;
pub const DATE: usize = 33;
pub const SERVER: usize = 54;

pub const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The static index of a response field name as handlers write it (`Content-Type`, `ETag`)
/// or in lowercase, for the names answers carry most: found by length and last byte, then
/// one compare, with no lowercasing. `None` for any other name or casing (then lowercase it
/// and ask [`name_index`]); none of these names is one the core sets or HTTP/2 forbids.
pub fn written_index(name: &[u8]) -> Option<usize> {
    let (index, written): (usize, &[u8]) = match (name.len(), *name.last()?) {
        (4, b'g') => (34, b"ETag"),
        (4, b'k') => (45, b"Link"),
        (4, b'y') => (59, b"Vary"),
        (6, b'r') => (54, b"Server"),
        (7, b's') => (36, b"Expires"),
        (8, b'n') => (46, b"Location"),
        (10, b'e') => (55, b"Set-Cookie"),
        (12, b'e') => (31, b"Content-Type"),
        (13, b'd') => (44, b"Last-Modified"),
        (13, b'e') => (30, b"Content-Range"),
        (13, b'l') => (24, b"Cache-Control"),
        (13, b's') => (18, b"Accept-Ranges"),
        (16, b'e') => (27, b"Content-Language"),
        (16, b'g') => (26, b"Content-Encoding"),
        (16, b'n') => (29, b"Content-Location"),
        _ => return None,
    };
    (same(name, written) || same(name, STATIC[index - 1].0)).then_some(index)
}

/// `a == b` for two names of the same length, 4 to 16 bytes: two overlapping loads of each
/// (not a `memcmp` call per compare).
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    debug_assert!(n == b.len() && (4..=16).contains(&n));
    if n >= 8 {
        let w = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap());
        w(a, 0) == w(b, 0) && w(a, n - 8) == w(b, n - 8)
    } else {
        let w = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap());
        w(a, 0) == w(b, 0) && w(a, n - 4) == w(b, n - 4)
    }
}

/// The static index of a (lowercase) field name, for the encoder: by length first, so a name
/// is compared with the two or three of its length, not with all of them.
pub fn name_index(name: &[u8]) -> Option<usize> {
    // Entries 15 on hold one name each; the pseudo-headers are encoded apart.
    match name.len() {
        3 => match name {
            b"age" => Some(21),
            b"via" => Some(60),
            _ => None,
        },
        4 => match name {
            b"date" => Some(33),
            b"etag" => Some(34),
            b"from" => Some(37),
            b"host" => Some(38),
            b"link" => Some(45),
            b"vary" => Some(59),
            _ => None,
        },
        5 => match name {
            b"allow" => Some(22),
            b"range" => Some(50),
            _ => None,
        },
        6 => match name {
            b"accept" => Some(19),
            b"cookie" => Some(32),
            b"expect" => Some(35),
            b"server" => Some(54),
            _ => None,
        },
        7 => match name {
            b"expires" => Some(36),
            b"referer" => Some(51),
            b"refresh" => Some(52),
            _ => None,
        },
        8 => match name {
            b"if-match" => Some(39),
            b"if-range" => Some(42),
            b"location" => Some(46),
            _ => None,
        },
        10 => match name {
            b"set-cookie" => Some(55),
            b"user-agent" => Some(58),
            _ => None,
        },
        11 => match name {
            b"retry-after" => Some(53),
            _ => None,
        },
        12 => match name {
            b"content-type" => Some(31),
            b"max-forwards" => Some(47),
            _ => None,
        },
        13 => match name {
            b"accept-ranges" => Some(18),
            b"authorization" => Some(23),
            b"cache-control" => Some(24),
            b"content-range" => Some(30),
            b"if-none-match" => Some(41),
            b"last-modified" => Some(44),
            _ => None,
        },
        14 => match name {
            b"accept-charset" => Some(15),
            b"content-length" => Some(28),
            _ => None,
        },
        15 => match name {
            b"accept-encoding" => Some(16),
            b"accept-language" => Some(17),
            _ => None,
        },
        16 => match name {
            b"content-encoding" => Some(26),
            b"content-language" => Some(27),
            b"content-location" => Some(29),
            b"www-authenticate" => Some(61),
            _ => None,
        },
        17 => match name {
            b"if-modified-since" => Some(40),
            b"transfer-encoding" => Some(57),
            _ => None,
        },
        18 => match name {
            b"proxy-authenticate" => Some(48),
            _ => None,
        },
        19 => match name {
            b"content-disposition" => Some(25),
            b"if-unmodified-since" => Some(43),
            b"proxy-authorization" => Some(49),
            _ => None,
        },
        25 => match name {
            b"strict-transport-security" => Some(56),
            _ => None,
        },
        27 => match name {
            b"access-control-allow-origin" => Some(20),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_found_at_its_index() {
        for (i, (name, _)) in STATIC.iter().enumerate().skip(14) {
            assert_eq!(name_index(name), Some(i + 1));
        }
        assert_eq!(name_index(b"x-custom"), None);
        assert_eq!(name_index(b":path"), None);
    }

    /// A name as written or in lowercase: the index of its lowercase form; any other name
    /// or casing (the same length and last byte too): none, so the caller lowercases it.
    #[test]
    fn written_names_are_found_at_the_index_of_their_lowercase() {
        for name in [
            "Content-Type",
            "ETag",
            "Last-Modified",
            "Vary",
            "content-encoding",
        ] {
            let lower = name.to_ascii_lowercase();
            assert_eq!(
                written_index(name.as_bytes()),
                name_index(lower.as_bytes()),
                "{name}"
            );
            assert!(written_index(name.as_bytes()).is_some(), "{name}");
        }
        for name in [
            "CONTENT-TYPE",
            "Etag",
            "Content-Typo",
            "X-Type-Content",
            "",
            "Date",
        ] {
            assert_eq!(written_index(name.as_bytes()), None, "{name}");
        }
        for (i, (name, _)) in STATIC.iter().enumerate().skip(14) {
            assert!(written_index(name).is_none_or(|at| at == i + 1));
            // One byte changed anywhere, in either form, is another name.
            let Some(index) = written_index(name) else {
                continue;
            };
            let title = name.split(|&b| b == b'-').map(|w| {
                let mut w = w.to_vec();
                w[0] = w[0].to_ascii_uppercase();
                w
            });
            for form in [name.to_vec(), title.collect::<Vec<_>>().join(&b'-')] {
                for at in 0..form.len() {
                    let mut other = form.clone();
                    other[at] ^= 0x01;
                    assert_ne!(written_index(&other), Some(index), "{other:?}");
                }
            }
        }
    }
}
