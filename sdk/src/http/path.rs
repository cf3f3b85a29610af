//! Cleaning a request path before it names a file: one percent-decode, dot segments resolved,
//! and the bytes that make paths ambiguous refused. Nothing here touches the file system.
//!
//! The rules, shared by every module that maps paths to files (static, image):
//! - `%XX` is decoded once (`%252e` stays the literal name `%2e`); a malformed escape is refused;
//! - a decoded NUL is refused (it would cut the name short in a system call);
//! - a backslash, raw or `%5C`, is refused (a separator on other systems, never a name here);
//! - an encoded slash `%2F` is a separator like `/` (as nginx decodes it), so `..%2F` is a
//!   dot segment too;
//! - `.` and empty segments are dropped, `..` removes the segment before it, and a `..` above
//!   the root is refused rather than clamped.

use crate::params::percent_decode_path;

/// Why a request path was refused (answer 400 with [`BadPath::reason`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadPath {
    /// A `..` above the root.
    Escape,
    /// A NUL byte, raw or `%00`.
    Nul,
    /// A backslash, raw or `%5C` (a separator on some systems).
    Backslash,
    /// A `%` not followed by two hex digits.
    Malformed,
}

impl BadPath {
    /// The reason to give in the 400 answer.
    pub fn reason(&self) -> &'static str {
        match self {
            BadPath::Escape => "path climbs above the document root",
            BadPath::Nul => "path contains a NUL byte",
            BadPath::Backslash => "path contains a backslash",
            BadPath::Malformed => "malformed percent-encoding in path",
        }
    }
}

/// A request path made safe: relative to the root (no leading `/`, never `..`), and whether
/// the request named a directory (`/` at the end).
#[derive(Debug, PartialEq, Eq)]
pub struct CleanPath {
    /// Segments joined by `/`; empty for the root itself. Not necessarily UTF-8.
    pub rel: Vec<u8>,
    /// The path ended with `/` (a directory was asked for).
    pub trailing_slash: bool,
}

impl CleanPath {
    /// The path as text, when it is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.rel).ok()
    }
}

/// Clean `raw`, a request path (usually `path_info`) still percent-encoded.
pub fn clean_path(raw: &str) -> Result<CleanPath, BadPath> {
    let decoded = percent_decode_path(raw).ok_or(BadPath::Malformed)?;
    if decoded.contains(&0) {
        return Err(BadPath::Nul);
    }
    if decoded.contains(&b'\\') {
        return Err(BadPath::Backslash);
    }
    let mut segments: Vec<&[u8]> = Vec::new();
    // An empty path (a route prefix named without `/`) is a directory without its slash.
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
    Ok(CleanPath {
        rel: segments.join(&b'/'),
        trailing_slash: last_was_dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(p: &str) -> String {
        String::from_utf8(clean_path(p).unwrap().rel).unwrap()
    }

    #[test]
    fn resolves_dot_segments() {
        assert_eq!(rel("/a/b/../c"), "a/c");
        assert_eq!(rel("/a/./b//c"), "a/b/c");
        assert_eq!(rel("/"), "");
        assert_eq!(rel(""), "");
        assert_eq!(rel("/a/%2e%2e/b"), "b");
        assert_eq!(rel("/a%20b/c%2Ejpg"), "a b/c.jpg");
        assert_eq!(rel("/a%2Fb/x%2f..%2Fc"), "a/b/c");
        assert!(clean_path("/a/b/").unwrap().trailing_slash);
        assert!(clean_path("/a/b/..").unwrap().trailing_slash);
        assert!(!clean_path("/a/b").unwrap().trailing_slash);
    }

    #[test]
    fn refuses_escapes_nul_backslash_and_bad_escapes() {
        assert_eq!(clean_path("/.."), Err(BadPath::Escape));
        assert_eq!(clean_path("/a/../../etc/passwd"), Err(BadPath::Escape));
        assert_eq!(clean_path("/%2e%2e/etc"), Err(BadPath::Escape));
        assert_eq!(clean_path("/..%2fetc"), Err(BadPath::Escape));
        assert_eq!(clean_path("/a%00.txt"), Err(BadPath::Nul));
        assert_eq!(clean_path("/..\\etc"), Err(BadPath::Backslash));
        assert_eq!(clean_path("/a%5c..%5cb"), Err(BadPath::Backslash));
        assert_eq!(clean_path("/a%2"), Err(BadPath::Malformed));
        assert_eq!(clean_path("/a%zz"), Err(BadPath::Malformed));
        // Decoded once only: `%252e` stays a literal `%2e` name.
        assert_eq!(rel("/%252e%252e/x"), "%2e%2e/x");
        // Not UTF-8 is a valid name, but has no text form.
        assert_eq!(clean_path("/a%ff").unwrap().as_str(), None);
    }
}
