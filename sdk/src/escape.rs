//! Escaping text for where it is written: HTML content and attributes, and URL components.
//! Each writes into the caller's buffer, so a template fills one `String` without allocating
//! per value.

/// Append `text` escaped for HTML element content and quoted attribute values
/// (`<`, `>`, `&`, `"`, `'`).
///
/// ```
/// let mut out = String::from("<p>");
/// osprey_sdk::escape::html_into("a<b & \"c\"", &mut out);
/// assert_eq!(out, "<p>a&lt;b &amp; &quot;c&quot;");
/// ```
pub fn html_into(text: &str, out: &mut String) {
    let mut rest = text;
    while let Some(i) = rest.find(['<', '>', '&', '"', '\'']) {
        out.push_str(&rest[..i]);
        out.push_str(match rest.as_bytes()[i] {
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'&' => "&amp;",
            b'"' => "&quot;",
            _ => "&#39;",
        });
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
}

/// Append `text` percent-encoded as one URL component (a query value, a path segment):
/// everything but RFC 3986 unreserved characters (`A-Z a-z 0-9 - . _ ~`) is escaped, so `&`,
/// `=`, `?`, `/`, `#` and `+` cannot change the URL's structure. The result is also safe
/// inside a quoted HTML attribute.
///
/// ```
/// let mut href = String::from("/click?dest=");
/// osprey_sdk::escape::url_component_into("a&b=c d/é", &mut href);
/// assert_eq!(href, "/click?dest=a%26b%3Dc%20d%2F%C3%A9");
/// ```
pub fn url_component_into(text: &str, out: &mut String) {
    // SAFETY: only ASCII is pushed (runs of unreserved bytes and `%XX`), so `out` stays UTF-8.
    let out = unsafe { out.as_mut_vec() };
    out.reserve(text.len());
    let mut rest = text.as_bytes();
    loop {
        // The run of bytes that stay as they are, copied at once; then one byte escaped.
        let run = rest
            .iter()
            .position(|&b| !UNRESERVED[b as usize])
            .unwrap_or(rest.len());
        out.extend_from_slice(&rest[..run]);
        let Some(&b) = rest.get(run) else { break };
        out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        rest = &rest[run + 1..];
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// RFC 3986 unreserved characters: `A-Z a-z 0-9 - . _ ~`.
static UNRESERVED: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 128 {
        t[b] = (b as u8).is_ascii_alphanumeric() || matches!(b as u8, b'-' | b'.' | b'_' | b'~');
        b += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escapes_every_special_character_once() {
        let mut out = String::new();
        html_into("<a href='x'>&amp;</a>é", &mut out);
        assert_eq!(out, "&lt;a href=&#39;x&#39;&gt;&amp;amp;&lt;/a&gt;é");
    }

    #[test]
    fn url_component_round_trips_through_the_strict_decoder() {
        let text = "k=v&x+y?#/%é\u{1F600}";
        let mut out = String::new();
        url_component_into(text, &mut out);
        assert!(out
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"%-._~".contains(&b)));
        let decoded = crate::params::Params::parse_strict(&format!("q={out}")).unwrap();
        assert_eq!(decoded.get("q"), Some(text));
    }

    #[test]
    fn url_component_escapes_exactly_the_reserved_bytes() {
        let all: Vec<u8> = (0..128u8).collect();
        let text = std::str::from_utf8(&all).unwrap();
        let mut out = String::from("kept>");
        url_component_into(text, &mut out);
        let mut expected = String::from("kept>");
        for b in 0..128u8 {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                expected.push(b as char);
            } else {
                expected.push_str(&format!("%{b:02X}"));
            }
        }
        assert_eq!(out, expected);
        out.clear();
        url_component_into("é", &mut out);
        assert_eq!(out, "%C3%A9");
    }
}
