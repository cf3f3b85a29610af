//! `osprey new-module NAME [DIR]`: write a new out-of-tree module crate that builds, passes
//! its `cargo test`, and runs with the configuration written beside it.

use std::path::{Path, PathBuf};

/// The SDK this server was built with, when its source is still where it was built from.
fn built_sdk() -> Option<PathBuf> {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk");
    sdk.join("Cargo.toml")
        .is_file()
        .then(|| sdk.canonicalize().ok())
        .flatten()
}

/// The `osprey-sdk` dependency line: by path (`--sdk`, or the tree this server was built
/// from), else by version.
fn sdk_dependency(sdk: Option<&Path>, features: &str) -> Result<String, String> {
    let path = match sdk {
        Some(p) => Some(
            p.canonicalize()
                .map_err(|e| format!("--sdk {}: {e}", p.display()))?,
        ),
        None => built_sdk(),
    };
    Ok(match path {
        Some(p) => format!("{{ path = {:?}{features} }}", p.display().to_string()),
        None => format!("{{ version = {:?}{features} }}", env!("CARGO_PKG_VERSION")),
    })
}

/// A crate name cargo accepts that also reads well as a handler type.
fn check_name(name: &str) -> Result<(), String> {
    let ok = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.len() <= 64;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "module name `{name}`: use lower-case letters, digits, `-` and `_`, starting with a letter"
        ))
    }
}

/// Write the crate for module `name` into `dir` (default `./NAME`), which must not exist or
/// be empty. Returns what to tell the user.
pub fn new_module(name: &str, dir: Option<&Path>, sdk: Option<&Path>) -> Result<String, String> {
    check_name(name)?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    if dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        return Err(format!("{} exists and is not empty", dir.display()));
    }
    let lib = name.replace('-', "_");
    let files = [
        (
            "Cargo.toml",
            template::CARGO_TOML
                .replace("{name}", name)
                .replace("{sdk}", &sdk_dependency(sdk, "")?)
                .replace(
                    "{sdk_testing}",
                    &sdk_dependency(sdk, ", features = [\"testing\"]")?,
                ),
        ),
        ("src/lib.rs", template::LIB_RS.replace("{name}", name)),
        (
            &format!("{name}.json") as &str,
            template::CONFIG
                .replace("{name}", name)
                .replace("{lib}", &lib),
        ),
        (".gitignore", "/target\n/Cargo.lock\n".to_owned()),
    ];
    for (file, text) in &files {
        let path = dir.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(format!(
        "created module `{name}` in {dir}\n  cd {dir} && cargo test && cargo build\n  osprey -c {name}.json   # then: curl 'localhost:8080/{name}?name=you'",
        dir = dir.display()
    ))
}

mod template;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_suit_cargo_and_routes() {
        assert!(check_name("ad-frag_2").is_ok());
        for bad in ["", "Ad", "2ad", "a b", "a/b", "a.b"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refuses_a_non_empty_directory() {
        let dir = std::env::temp_dir().join(format!("osprey-scaffold-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep"), "x").unwrap();
        let err = new_module("m", Some(&dir), None).unwrap_err();
        assert!(err.contains("is not empty"), "{err}");
        assert_eq!(std::fs::read(dir.join("keep")).unwrap(), b"x");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
