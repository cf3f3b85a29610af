//! `Content-Type` by file extension, with the route's charset for text types. Values are
//! interned, so a response carries a `&'static str` and costs no allocation.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

/// The type of the file at `rel` (its last segment decides), e.g. `text/css; charset=utf-8`.
pub fn content_type(rel: &[u8], charset: Option<&str>) -> &'static str {
    let path = Path::new(OsStr::from_bytes(rel));
    let mime = mime_guess::from_path(path)
        .first_raw()
        .unwrap_or("application/octet-stream");
    match charset {
        Some(cs) if is_text(mime) => intern(format!("{mime}; charset={cs}")),
        _ => mime,
    }
}

/// Types whose bytes are text in some charset.
fn is_text(mime: &str) -> bool {
    mime.starts_with("text/")
        || mime.ends_with("+xml")
        || mime.ends_with("+json")
        || matches!(
            mime,
            "application/javascript"
                | "application/json"
                | "application/xml"
                | "application/ecmascript"
        )
}

/// A `'static` copy of `text`, made once. The set is bounded: one per known type and charset.
fn intern(text: String) -> &'static str {
    static TABLE: Mutex<Option<HashMap<String, &'static str>>> = Mutex::new(None);
    let mut table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let table = table.get_or_insert_with(HashMap::new);
    if let Some(s) = table.get(&text) {
        return s;
    }
    let leaked: &'static str = Box::leak(text.clone().into_boxed_str());
    table.insert(text, leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_by_extension() {
        assert_eq!(
            content_type(b"a/style.css", Some("utf-8")),
            "text/css; charset=utf-8"
        );
        assert_eq!(content_type(b"a/style.css", None), "text/css");
        assert_eq!(content_type(b"x.png", Some("utf-8")), "image/png");
        assert_eq!(
            content_type(b"x.unknownext", None),
            "application/octet-stream"
        );
        assert_eq!(content_type(b"README", None), "application/octet-stream");
        assert_eq!(
            content_type(b"x.svg", Some("utf-8")),
            "image/svg+xml; charset=utf-8"
        );
        assert!(std::ptr::eq(
            content_type(b"a.css", Some("utf-8")),
            content_type(b"b.css", Some("utf-8"))
        ));
    }
}
