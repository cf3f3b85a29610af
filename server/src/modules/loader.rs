use std::path::{Path, PathBuf};

use abi_stable::library::{lib_header_from_path, LibraryError, RootModule};
use abi_stable::sabi_types::{VersionNumber, VersionStrings};
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
    // Checked before the layouts: abi_stable accepts a newer 0.x minor here and then reports
    // its types' version strings as a layout difference.
    if let Some(why) = version_mismatch(ModuleRef::VERSION_STRINGS, header.version_strings()) {
        return Err(format!("module library {what}: {why}"));
    }
    let root = header
        .init_root_module::<ModuleRef>()
        .map_err(|e| format!("module library {what}: {}", describe(&e)))?;
    if first_load_changed(path) {
        tracing::warn!(
            "module library {what} changed on disk since it was loaded; this server keeps running \
             the code it loaded (libraries are never unloaded): restart it to load the new build"
        );
    }
    Ok(root)
}

/// What identifies one build of a library file.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    inode: u64,
    size: u64,
    mtime: (i64, i64),
}

impl FileId {
    fn of(path: &Path) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        let m = path.metadata().ok()?;
        Some(FileId {
            dev: m.dev(),
            inode: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
        })
    }
}

/// Whether `path` differs from the file that was there when it was first loaded (recorded
/// now if this is the first load). The dynamic loader hands back the library it already has
/// for a path, so a rebuilt file is not what runs.
fn first_load_changed(path: &Path) -> bool {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, Option<FileId>>>> = OnceLock::new();
    let now = FileId::of(path);
    let mut loaded = LOADED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    *loaded.entry(path.to_path_buf()).or_insert(now) != now
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
        LibraryError::AbiInstability(e) => format!(
            "was built against an incompatible osprey-sdk (type layouts differ: {}); rebuild it against this server's SDK",
            first_layout_error(&e.to_string())
        ),
        other => {
            let text = other.to_string();
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
            format!("cannot be loaded: {first}")
        }
    }
}

/// Why a module built against SDK `actual` cannot run with this server's `expected`: another
/// major version, or while 0.x another minor one (every 0.x minor is an ABI break).
fn version_mismatch(expected: VersionStrings, actual: VersionStrings) -> Option<String> {
    let (Ok(want), Ok(have)) = (VersionNumber::new(expected), VersionNumber::new(actual)) else {
        return Some(format!(
            "has an unreadable SDK version `{}`",
            actual.version
        ));
    };
    let breaks = want.major != have.major || (want.major == 0 && want.minor != have.minor);
    breaks.then(|| {
        format!(
            "was built against osprey-sdk {have}, this server has osprey-sdk {want}; rebuild it against this server's SDK"
        )
    })
}

/// The first difference in abi_stable's layout report (pages of text), as
/// `Type: what (expected X, found Y)`.
fn first_layout_error(report: &str) -> String {
    let lines: Vec<&str> = report.lines().map(str::trim).collect();
    let Some(at) = lines.iter().position(|l| l.starts_with("Error:")) else {
        return "no detail".into();
    };
    let what = lines[at].trim_start_matches("Error:");
    // The type it was found in: the first `type:` after the last "error(s)inside:" before it.
    let inside = lines[..at]
        .iter()
        .rposition(|l| l.ends_with("error(s)inside:"));
    let ty = inside.and_then(|i| lines[i..at].iter().find_map(|l| l.strip_prefix("type:")));
    // `Expected:` and `Found:` are each followed by one value line.
    let value_after = |label: &str| {
        lines[at..]
            .iter()
            .position(|l| *l == label)
            .and_then(|i| lines.get(at + i + 1))
            .copied()
            .unwrap_or("?")
    };
    let more = lines[at + 1..]
        .iter()
        .filter(|l| l.starts_with("Error:"))
        .count();
    format!(
        "{}{what} (expected {}, found {}){}",
        ty.map(|t| format!("{t}: ")).unwrap_or_default(),
        value_after("Expected:"),
        value_after("Found:"),
        if more > 0 {
            format!("; {more} more")
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(version: &'static str) -> VersionStrings {
        VersionStrings::new(version)
    }

    #[test]
    fn another_minor_or_major_sdk_is_named() {
        let why = version_mismatch(strings("0.1.0"), strings("0.2.0")).unwrap();
        assert!(
            why.contains("osprey-sdk 0.2.0, this server has osprey-sdk 0.1.0"),
            "{why}"
        );
        assert!(version_mismatch(strings("0.1.0"), strings("0.0.9")).is_some());
        assert!(version_mismatch(strings("1.2.0"), strings("2.0.0")).is_some());
        assert_eq!(version_mismatch(strings("0.1.0"), strings("0.1.7")), None);
        assert_eq!(version_mismatch(strings("1.0.0"), strings("1.3.0")), None);
    }

    #[test]
    fn layout_report_is_cut_to_its_first_difference() {
        let report = "Compared <this>:\n    --- Type Layout ---\n    type:PrefixRef<'a, ModuleRoot>\n\n\
            1 error(s)inside:\n    <other>\n\n    field_name:0\n    type:ModuleRoot\n    size:16 align:8\n\n\
            Layout of expected type:\n    type:ModuleRoot\n\n\
            Error:mismatched package\nExpected:\n    osprey-sdk\nFound:\n    other-sdk\n\n\
            Error:mismatched size\nExpected:\n    56\nFound:\n    16\n";
        assert_eq!(
            first_layout_error(report),
            "ModuleRoot: mismatched package (expected osprey-sdk, found other-sdk); 1 more"
        );
        assert_eq!(first_layout_error("garbage"), "no detail");
    }
}
