//! The optional directory listing (`autoindex`): an HTML page of a directory's entries, names
//! escaped for HTML and percent-encoded in links.

use std::fmt::Write;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;

use osprey_sdk::params::html_escape;
use percent_encoding::{percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Characters left as they are in a link: RFC 3986 unreserved.
const LINK: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The listing page of the open directory `dir`, shown as `shown_path` (decoded request path).
pub fn listing(dir: &File, shown_path: &str) -> std::io::Result<String> {
    let proc_path = crate::open::fd_path(dir.as_raw_fd())?;
    let mut entries: Vec<(bool, Vec<u8>, u64, Option<std::time::SystemTime>)> = Vec::new();
    for entry in std::fs::read_dir(proc_path)? {
        let entry = entry?;
        let meta = entry.metadata().ok();
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        entries.push((
            is_dir,
            entry.file_name().as_bytes().to_vec(),
            meta.as_ref().map_or(0, |m| m.len()),
            meta.and_then(|m| m.modified().ok()),
        ));
    }
    entries.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let title = html_escape(shown_path);
    let mut html = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n<body><h1>Index of {title}</h1>\n<table>\n"
    );
    if shown_path != "/" {
        html.push_str("<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
    }
    for (is_dir, name, size, mtime) in entries {
        let slash = if is_dir { "/" } else { "" };
        let link = percent_encode(&name, LINK).to_string();
        let shown = html_escape(&String::from_utf8_lossy(&name));
        let size = if is_dir {
            "-".to_owned()
        } else {
            size.to_string()
        };
        let date = mtime.map(httpdate::fmt_http_date).unwrap_or_default();
        let _ = writeln!(
            html,
            "<tr><td><a href=\"{link}{slash}\">{shown}{slash}</a></td><td>{size}</td><td>{date}</td></tr>"
        );
    }
    html.push_str("</table></body></html>\n");
    Ok(html)
}
