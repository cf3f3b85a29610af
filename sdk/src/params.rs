//! Query, form and cookie parsing, done only when a handler asks.

/// Decoded `name=value` pairs in their original order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Params(pub Vec<(String, String)>);

impl Params {
    /// Parse `application/x-www-form-urlencoded` text (`+` is a space, `%XX` decoded).
    pub fn parse(text: &str) -> Self {
        Params(
            form_urlencoded::parse(text.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
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

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Split one `Cookie` header into (name, value) pairs; quotes around a value are removed.
pub fn cookies(header: &str) -> impl Iterator<Item = (&str, &str)> {
    header.split(';').filter_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        Some((name.trim(), value))
    })
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

/// Escape text for HTML element content and attribute values.
pub fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
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
