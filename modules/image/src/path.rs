//! Finding a file under the served directory from a cleaned request path (the SDK's
//! `clean_path`): never leave the directory, follow no symlink out of it.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The real path of `rel` (a cleaned path) under `root` (itself canonical), when it is a
/// regular file that, with every symlink resolved, is still inside `root`. `None` sends the
/// request on to the handler.
pub fn resolve(root: &Path, rel: &str) -> Option<PathBuf> {
    let joined = root.join(OsStr::from_bytes(rel.as_bytes()));
    let real = std::fs::canonicalize(joined).ok()?;
    if !real.starts_with(root) {
        return None;
    }
    match std::fs::metadata(&real) {
        Ok(m) if m.is_file() => Some(real),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(resolve(&root, "sub/in.jpg").is_some());
        assert!(resolve(&root, "alias.jpg").is_some());
        assert_eq!(resolve(&root, "out.jpg"), None);
        assert_eq!(resolve(&root, "sub"), None);
        assert_eq!(resolve(&root, "missing.jpg"), None);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
