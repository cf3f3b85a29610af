//! Turning a request path into a file under the served directory, safely: percent-decode
//! once, resolve `.` and `..`, never leave the directory, follow no symlink out of it.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use osprey_sdk::params::percent_decode_path;

/// Why a path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Malformed escape, NUL byte, or `..` above the root: 400.
    Bad,
    /// No such file, or it lies outside the directory: pass on to the handler.
    NotFound,
}

/// The path's segments after decoding and dot-segment removal, joined by `/` without a
/// leading one (`a/b/pic.jpg`). A `..` above the root is an error, not clamped.
pub fn normalize(raw: &str) -> Result<String, PathError> {
    let bytes = percent_decode_path(raw).ok_or(PathError::Bad)?;
    let text = String::from_utf8(bytes).map_err(|_| PathError::Bad)?;
    if text.contains('\0') {
        return Err(PathError::Bad);
    }
    let mut out: Vec<&str> = Vec::new();
    for seg in text.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop().ok_or(PathError::Bad)?;
            }
            s => out.push(s),
        }
    }
    Ok(out.join("/"))
}

/// The real path of `rel` (a [`normalize`]d path) under `root` (itself canonical), when it
/// is a regular file that, with every symlink resolved, is still inside `root`.
pub fn resolve(root: &Path, rel: &str) -> Result<PathBuf, PathError> {
    let joined = root.join(OsStr::from_bytes(rel.as_bytes()));
    let real = std::fs::canonicalize(&joined).map_err(|_| PathError::NotFound)?;
    if !real.starts_with(root) {
        return Err(PathError::NotFound);
    }
    match std::fs::metadata(&real) {
        Ok(m) if m.is_file() => Ok(real),
        _ => Err(PathError::NotFound),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_dots_and_escapes() {
        assert_eq!(normalize("/a/./b//c.jpg").unwrap(), "a/b/c.jpg");
        assert_eq!(normalize("/a/x/../c.jpg").unwrap(), "a/c.jpg");
        assert_eq!(normalize("/a%20b/c%2Ejpg").unwrap(), "a b/c.jpg");
        // Decoded once only: `%252e` stays the literal text `%2e`.
        assert_eq!(normalize("/%252e%252e/x").unwrap(), "%2e%2e/x");
        assert_eq!(normalize("/%2e%2e/x"), Err(PathError::Bad));
        assert_eq!(normalize("/../x"), Err(PathError::Bad));
        assert_eq!(normalize("/a/../../x"), Err(PathError::Bad));
        assert_eq!(normalize("/a%00b"), Err(PathError::Bad));
        assert_eq!(normalize("/a%zz"), Err(PathError::Bad));
        assert_eq!(normalize("/a%ff"), Err(PathError::Bad));
    }

    #[test]
    fn resolves_only_inside_the_root() {
        let base = std::env::temp_dir().join(format!("osprey-image-path-{}", std::process::id()));
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/in.jpg"), b"x").unwrap();
        std::fs::write(base.join("secret.jpg"), b"x").unwrap();
        let _ = std::os::unix::fs::symlink(base.join("secret.jpg"), root.join("out.jpg"));
        let _ = std::os::unix::fs::symlink(root.join("sub/in.jpg"), root.join("alias.jpg"));
        let root = std::fs::canonicalize(&root).unwrap();
        assert!(resolve(&root, "sub/in.jpg").is_ok());
        assert!(resolve(&root, "alias.jpg").is_ok());
        assert_eq!(resolve(&root, "out.jpg"), Err(PathError::NotFound));
        assert_eq!(resolve(&root, "sub"), Err(PathError::NotFound));
        assert_eq!(resolve(&root, "missing.jpg"), Err(PathError::NotFound));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
