//! Resolving a URI written in a template against the template's own URI (RFC 3986 §5.2 for
//! the path: the base's directory, then dot segments removed). Queries are kept as written.

/// `target` resolved against `base` (the template's request URI, starting with `/`); `None`
/// when its `..` segments climb above the root, or it is empty.
pub fn resolve(base: &str, target: &str) -> Option<String> {
    let (path, query) = match target.find('?') {
        Some(q) => target.split_at(q),
        None => (target, ""),
    };
    if target.is_empty() {
        return None;
    }
    let joined = if path.starts_with('/') {
        path.to_string()
    } else {
        let base_path = base.split(['?', '#']).next().unwrap_or("/");
        let dir = &base_path[..base_path.rfind('/').map_or(0, |i| i + 1)];
        format!("{}{path}", if dir.is_empty() { "/" } else { dir })
    };
    Some(remove_dot_segments(&joined)? + query)
}

/// `.` segments dropped and `..` removing the one before (a directory path keeps its final
/// `/`); `None` for a `..` above the root, which RFC 3986 would clamp but which here means the
/// template names something it cannot reach.
fn remove_dot_segments(path: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *seg {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                out.pop()?;
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    Some(format!("/{}", out.join("/")))
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn relative_names_resolve_in_the_templates_directory() {
        assert_eq!(
            resolve("/a/b/page.tmpl", "base.tmpl").unwrap(),
            "/a/b/base.tmpl"
        );
        assert_eq!(
            resolve("/a/b/page.tmpl?x=1", "f.html").unwrap(),
            "/a/b/f.html"
        );
        assert_eq!(resolve("/a/b/", "f.html").unwrap(), "/a/b/f.html");
        assert_eq!(resolve("/page.tmpl", "f.html").unwrap(), "/f.html");
        assert_eq!(resolve("/a/b/page", "./c/f").unwrap(), "/a/b/c/f");
    }

    #[test]
    fn dot_dot_climbs_to_the_root_and_no_further() {
        assert_eq!(resolve("/a/b/page", "../f").unwrap(), "/a/f");
        assert_eq!(resolve("/a/b/page", "../../f").unwrap(), "/f");
        assert_eq!(resolve("/a/b/page", "../").unwrap(), "/a/");
        assert_eq!(resolve("/a/b/page", "x/..").unwrap(), "/a/b/");
        assert_eq!(resolve("/a/b/page", "../../../f"), None);
        assert_eq!(resolve("/a/page", "/../f"), None);
    }

    #[test]
    fn absolute_names_and_queries_stay() {
        assert_eq!(resolve("/a/b/page", "/x/y").unwrap(), "/x/y");
        assert_eq!(
            resolve("/a/page", "/curtime?max_age=5").unwrap(),
            "/curtime?max_age=5"
        );
        assert_eq!(resolve("/a/page", "t?a=../b").unwrap(), "/a/t?a=../b");
        assert_eq!(resolve("/a/page", ""), None);
    }
}
