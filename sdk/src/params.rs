//! Query, form and cookie parsing, done only when a handler asks.

/// Decoded `name=value` pairs in their original order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Params(pub Vec<(String, String)>);

/// Why strict decoding refused a query or form: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// A `%` not followed by two hex digits, at this byte offset.
    BadEscape(usize),
    /// The name or value starting at this byte offset decodes to invalid UTF-8.
    InvalidUtf8(usize),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::BadEscape(at) => write!(f, "bad percent-escape at byte {at}"),
            DecodeError::InvalidUtf8(at) => {
                write!(f, "invalid UTF-8 in the parameter at byte {at}")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

impl Params {
    /// Parse `application/x-www-form-urlencoded` text (`+` is a space, `%XX` decoded)
    /// leniently, as browsers do: a malformed escape stays as it is and invalid UTF-8 becomes
    /// U+FFFD. Use [`Params::parse_strict`] to refuse such input (with a 400).
    pub fn parse(text: &str) -> Self {
        Params(
            form_urlencoded::parse(text.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// Parse like [`Params::parse`], but refuse a malformed `%` escape or text that is not
    /// UTF-8 once decoded.
    ///
    /// ```
    /// use osprey_sdk::params::{DecodeError, Params};
    ///
    /// let p = Params::parse_strict("q=a+b%26c&empty=&flag").unwrap();
    /// assert_eq!(p.get("q"), Some("a b&c"));
    /// assert_eq!(p.get("flag"), Some(""));
    /// assert_eq!(Params::parse_strict("a=1&b=%zz"), Err(DecodeError::BadEscape(6)));
    /// assert_eq!(Params::parse_strict("a=%FF"), Err(DecodeError::InvalidUtf8(2)));
    /// ```
    pub fn parse_strict(text: &str) -> Result<Self, DecodeError> {
        let mut out = Vec::new();
        let mut start = 0;
        for pair in text.split('&') {
            if !pair.is_empty() {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                let value_at = start + name.len() + 1;
                out.push((form_decode(name, start)?, form_decode(value, value_at)?));
            }
            start += pair.len() + 1;
        }
        Ok(Params(out))
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`.
    pub fn get_all<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s str> + 's {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every (name, value) pair, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Decode one form component (`+` is a space); `at` is its offset, for errors.
fn form_decode(text: &str, at: usize) -> Result<String, DecodeError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
                match (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
                    (Some(hi), Some(lo)) => out.push((hi * 16 + lo) as u8),
                    _ => return Err(DecodeError::BadEscape(at + i)),
                }
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| DecodeError::InvalidUtf8(at))
}

/// Split one `Cookie` header into (name, value) pairs (RFC 6265 5.4): pairs end at `;`, names
/// and values lose the ASCII whitespace around them, quotes around a value are removed, and a
/// pair without `=` is skipped. One pass over the bytes, no allocation: `userid` reads this on
/// every request.
pub fn cookies(header: &str) -> impl Iterator<Item = (&str, &str)> {
    CookiePairs { rest: header }
}

struct CookiePairs<'h> {
    rest: &'h str,
}

impl<'h> Iterator for CookiePairs<'h> {
    type Item = (&'h str, &'h str);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.rest.is_empty() {
            // `;` and `=` are ASCII: every split below falls on a character boundary.
            let end = find_byte(self.rest.as_bytes(), b';');
            let pair = &self.rest[..end];
            self.rest = self.rest.get(end + 1..).unwrap_or("");
            let Some(eq) = pair.bytes().position(|b| b == b'=') else {
                continue;
            };
            let value = pair[eq + 1..].trim_ascii();
            let value = match value.as_bytes() {
                [b'"', .., b'"'] => &value[1..value.len() - 1],
                _ => value,
            };
            return Some((pair[..eq].trim_ascii(), value));
        }
        None
    }
}

/// The value of the first cookie named `name` in one `Cookie` header: what
/// `cookies(header).find(..)` gives, but the pairs passed over are only skipped to their `;`
/// (not split, trimmed or unquoted).
pub fn cookie<'h>(header: &'h str, name: &str) -> Option<&'h str> {
    // A pair's name never holds `=` or `;` nor ends in whitespace: such a `name` never matches.
    let last = name.as_bytes().last().copied().unwrap_or(b'a');
    if last.is_ascii_whitespace() || name.bytes().any(|b| b == b'=' || b == b';') {
        return None;
    }
    let mut rest = header;
    loop {
        rest = rest.trim_ascii_start();
        // `;` and `=` are ASCII: every split below falls on a character boundary.
        if starts_with(rest.as_bytes(), name.as_bytes()) {
            let after = &rest[name.len()..];
            if let Some(value) = after.trim_ascii_start().strip_prefix('=') {
                let value = value[..find_byte(value.as_bytes(), b';')].trim_ascii();
                return Some(match value.as_bytes() {
                    [b'"', .., b'"'] => &value[1..value.len() - 1],
                    _ => value,
                });
            }
        }
        rest = rest.get(find_byte(rest.as_bytes(), b';') + 1..)?;
    }
}

/// `prefix` starts `bytes`, compared inline: a cookie name is a few bytes, less than a
/// `bcmp` call costs.
fn starts_with(bytes: &[u8], prefix: &[u8]) -> bool {
    bytes.len() >= prefix.len() && {
        let mut i = 0;
        while i < prefix.len() && bytes[i] == prefix[i] {
            i += 1;
        }
        i == prefix.len()
    }
}

/// Where `byte` first is in `bytes` (else its length), eight bytes at a time: a `memchr` call
/// costs more than it saves on a cookie's few dozen bytes.
fn find_byte(bytes: &[u8], byte: u8) -> usize {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    let pattern = ONES * byte as u64;
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let word = u64::from_le_bytes(word.try_into().expect("8 bytes")) ^ pattern;
        // A high bit for each zero byte (the lowest is exact: borrows only carry upwards).
        let zeros = word.wrapping_sub(ONES) & !word & (ONES << 7);
        if zeros != 0 {
            return at + (zeros.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    let tail = words.remainder();
    at + tail.iter().position(|&b| b == byte).unwrap_or(tail.len())
}

/// Decode `%XX` escapes in a path (no `+` rule); `None` when an escape is malformed.
pub fn percent_decode_path(path: &str) -> Option<Vec<u8>> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Escape text for HTML element content and attribute values (see
/// [`escape::html_into`](crate::escape::html_into) to write into your own buffer).
pub fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    crate::escape::html_into(text, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_query_with_plus_and_escapes() {
        let p = Params::parse("a=1&b=hello+world&c=%C3%A9&a=2&flag");
        assert_eq!(p.get("a"), Some("1"));
        assert_eq!(p.get_all("a").collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(p.get("b"), Some("hello world"));
        assert_eq!(p.get("c"), Some("é"));
        assert_eq!(p.get("flag"), Some(""));
        assert_eq!(p.get("zzz"), None);
    }

    #[test]
    fn splits_cookies() {
        let c: Vec<_> = cookies("a=1; b=\"two\";c=3").collect();
        assert_eq!(c, [("a", "1"), ("b", "two"), ("c", "3")]);
    }

    #[test]
    fn splits_cookies_as_the_split_rule_does() {
        // The rule this parser implements, written with `split`: both must agree everywhere.
        fn reference(header: &str) -> Vec<(&str, &str)> {
            header
                .split(';')
                .filter_map(|pair| {
                    let (name, value) = pair.split_once('=')?;
                    let value = value.trim_ascii();
                    let value = value
                        .strip_prefix('"')
                        .and_then(|v| v.strip_suffix('"'))
                        .unwrap_or(value);
                    Some((name.trim_ascii(), value))
                })
                .collect()
        }
        for header in every_header("a|=|;| |\"|\t|uid|é|0123456789abcdef|x=y") {
            let got: Vec<_> = cookies(&header).collect();
            assert_eq!(got, reference(&header), "{header:?}");
        }
    }

    /// Every header of five of these `|`-separated parts (repeats allowed): lengths on both
    /// sides of 8 and 16 bytes.
    fn every_header(parts: &str) -> impl Iterator<Item = String> + '_ {
        let parts: Vec<&str> = parts.split('|').collect();
        (0..parts.len().pow(5)).map(move |mut k| {
            let mut header = String::new();
            for _ in 0..5 {
                header.push_str(parts[k % parts.len()]);
                k /= parts.len();
            }
            header
        })
    }

    #[test]
    fn finds_a_cookie_as_the_pairs_give_it() {
        let names = ["uid", "a", "", "uid ", "a=", "a;b", "é", "0123456789abcdef"];
        for header in every_header("a|=|;| |\"|uid|é|0123456789abcdef|uid=x|a;b=1") {
            for name in names {
                let want = cookies(&header).find(|(n, _)| *n == name).map(|(_, v)| v);
                assert_eq!(cookie(&header, name), want, "{name:?} in {header:?}");
            }
        }
    }

    #[test]
    fn finds_a_byte_in_any_word() {
        let text = b"0123456789abcdef0123456789;bcdef;";
        for start in 0..text.len() {
            let want = text[start..].iter().position(|&b| b == b';').unwrap();
            assert_eq!(find_byte(&text[start..], b';'), want);
        }
        assert_eq!(find_byte(b"\x01\x01\x00;\x01", b';'), 3);
        assert_eq!(find_byte(b"abcdefghij", b';'), 10);
    }

    #[test]
    fn decodes_paths_strictly() {
        assert_eq!(percent_decode_path("/a%20b").unwrap(), b"/a b");
        assert_eq!(percent_decode_path("/a+b").unwrap(), b"/a+b");
        assert!(percent_decode_path("/a%2").is_none());
        assert!(percent_decode_path("/a%zz").is_none());
    }

    #[test]
    fn escapes_html() {
        assert_eq!(
            html_escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
