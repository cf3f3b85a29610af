use std::path::{Path, PathBuf};

use abi_stable::library::{lib_header_from_path, LibraryError};
use osprey_sdk::ModuleRef;

/// A bare name (`hello`) means the stock module built next to the server binary
/// (`libosprey_hello.so`); anything else is a path.
pub fn resolve_library(name: &str) -> PathBuf {
    let as_path = Path::new(name);
    if name.contains('/') || as_path.extension().is_some() {
        return as_path.to_path_buf();
    }
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let file_names = [format!("libosprey_{name}.so"), format!("lib{name}.so")];
    // Cargo leaves a copy in the binary's directory and another in deps/; a build of only some
    // packages refreshes just one of them, so the newest wins.
    let newest = [exe_dir.clone(), exe_dir.join("deps")]
        .iter()
        .flat_map(|dir| file_names.iter().map(move |f| dir.join(f)))
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max_by_key(|(modified, _)| *modified);
    match newest {
        Some((_, path)) => path,
        None => exe_dir.join(&file_names[0]),
    }
}

/// Load a module library with abi_stable's checked loading: the SDK version and the layout
/// of every type crossing the boundary are compared before any module code runs.
pub fn load_library(path: &Path) -> Result<ModuleRef, String> {
    let what = path.display();
    if !path.exists() {
        return Err(format!("module library {what}: no such file"));
    }
    let header = lib_header_from_path(path)
        .map_err(|e| format!("module library {what}: {}", describe(&e)))?;
    header
        .init_root_module::<ModuleRef>()
        .map_err(|e| format!("module library {what}: {}", describe(&e)))
}

/// One line for abi_stable's (often very long) errors.
fn describe(e: &LibraryError) -> String {
    match e {
        LibraryError::OpenError { err, .. } => format!("cannot be opened: {err}"),
        LibraryError::GetSymbolError { .. } => {
            "is not an Osprey module (no root module exported; use osprey_sdk::export_module!)".into()
        }
        LibraryError::ParseVersionError(v) => format!("has an unreadable SDK version: {v}"),
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => format!(
            "was built against osprey-sdk {actual_version}, incompatible with this server's {expected_version}; rebuild it"
        ),
        LibraryError::AbiInstability(_) => {
            "was built against an incompatible osprey-sdk (type layouts differ); rebuild it against this server's SDK".into()
        }
        other => {
            let text = other.to_string();
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
            format!("cannot be loaded: {first}")
        }
    }
}
