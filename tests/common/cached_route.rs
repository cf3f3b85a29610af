//! The route the `file_cache` tests build their cases from.

use std::path::Path;

/// A route at `prefix`: testkit's `counter` handler (counting under `prefix`, failing while
/// the file `flag` exists) with `handler_keys`, behind a `file_cache` filter with
/// `filter_keys` (each a JSON fragment: keys and their trailing or leading comma).
pub fn counter_route(flag: &Path, prefix: &str, handler_keys: &str, filter_keys: &str) -> String {
    format!(
        r#"{{"prefix": "{prefix}", "handler": "counter", "counter": "{prefix}", "fail_flag": {flag:?}, {handler_keys}
      "filters": [{{"type": "file_cache"{filter_keys}}}]}},"#,
        flag = flag.display().to_string()
    )
}
