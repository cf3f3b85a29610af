//! Turning a request path into a path relative to the document root, and checking hosts used
//! in `{host}` roots. Nothing here touches the file system.

use osprey_sdk::params::percent_decode_path;

/// Why a request path was refused (answered with 400).
#[derive(Debug, PartialEq, Eq)]
pub enum BadPath {
    Escape,
    Nul,
    Backslash,
    Malformed,
}

impl BadPath {
    pub fn reason(&self) -> &'static str {
        match self {
            BadPath::Escape => "path climbs above the document root",
            BadPath::Nul => "path contains a NUL byte",
            BadPath::Backslash => "path contains a backslash",
            BadPath::Malformed => "malformed percent-encoding in path",
        }
    }
}

/// A request path made safe: percent-decoded once, dot segments resolved, relative to the
/// root (no leading `/`, never `..`), and whether the request named a directory (`/` at the end).
#[derive(Debug, PartialEq, Eq)]
pub struct Clean {
    /// Segments joined by `/`; empty for the root itself.
    pub rel: Vec<u8>,
    pub trailing_slash: bool,
}

/// Clean `raw` (the path info of the request, still percent-encoded).
pub fn clean(raw: &str) -> Result<Clean, BadPath> {
    let decoded = percent_decode_path(raw).ok_or(BadPath::Malformed)?;
    if decoded.contains(&0) {
        return Err(BadPath::Nul);
    }
    if decoded.contains(&b'\\') {
        return Err(BadPath::Backslash);
    }
    let mut segments: Vec<&[u8]> = Vec::new();
    // An empty path info (a route prefix named without `/`) is a directory without its slash.
    let mut last_was_dir = !raw.is_empty();
    for seg in decoded.split(|&b| b == b'/') {
        match seg {
            b"" | b"." => last_was_dir = true,
            b".." => {
                segments.pop().ok_or(BadPath::Escape)?;
                last_was_dir = true;
            }
            s => {
                segments.push(s);
                last_was_dir = false;
            }
        }
    }
    Ok(Clean {
        rel: segments.join(&b'/'),
        trailing_slash: last_was_dir,
    })
}

/// A host name usable as a directory name in a `{host}` root: not empty, no leading dot, and
/// only the characters of DNS names and IP literals.
pub fn host_ok(host: &str) -> bool {
    !host.is_empty()
        && !host.starts_with('.')
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:[]".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(p: &str) -> String {
        String::from_utf8(clean(p).unwrap().rel).unwrap()
    }

    #[test]
    fn resolves_dot_segments() {
        assert_eq!(rel("/a/b/../c"), "a/c");
        assert_eq!(rel("/a/./b//c"), "a/b/c");
        assert_eq!(rel("/"), "");
        assert_eq!(rel(""), "");
        assert_eq!(rel("/a/%2e%2e/b"), "b");
        assert!(clean("/a/b/").unwrap().trailing_slash);
        assert!(clean("/a/b/..").unwrap().trailing_slash);
        assert!(!clean("/a/b").unwrap().trailing_slash);
    }

    #[test]
    fn refuses_escapes() {
        assert_eq!(clean("/.."), Err(BadPath::Escape));
        assert_eq!(clean("/a/../../etc/passwd"), Err(BadPath::Escape));
        assert_eq!(clean("/%2e%2e/etc"), Err(BadPath::Escape));
        assert_eq!(clean("/..%2fetc"), Err(BadPath::Escape));
        assert_eq!(clean("/a%00.txt"), Err(BadPath::Nul));
        assert_eq!(clean("/..\\etc"), Err(BadPath::Backslash));
        assert_eq!(clean("/a%5c..%5cb"), Err(BadPath::Backslash));
        assert_eq!(clean("/a%2"), Err(BadPath::Malformed));
        // Decoded once only: `%252e` stays a literal `%2e` name.
        assert_eq!(rel("/%252e%252e/x"), "%2e%2e/x");
    }

    #[test]
    fn checks_hosts() {
        assert!(host_ok("example.com"));
        assert!(host_ok("[::1]"));
        assert!(!host_ok(""));
        assert!(!host_ok(".."));
        assert!(!host_ok(".hidden"));
        assert!(!host_ok("a/b"));
        assert!(!host_ok("a\\b"));
    }
}
