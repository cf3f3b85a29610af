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
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
}

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
}
