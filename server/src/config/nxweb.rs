//! NXWEB's configuration forms that Osprey reads beside its own: module sections under NXWEB's
//! names, and filters that take their route's `dir` (NXWEB's image filter works on the file
//! the route's `sendfile` serves, so it has no `dir` of its own).

use serde::Deserialize;

/// NXWEB's name of a module section, and Osprey's.
const MODULE_ALIASES: &[(&str, &str)] = &[("image_filter", "image")];

/// The module a `modules.<name>` section configures.
pub fn module_name(name: &str) -> &str {
    MODULE_ALIASES
        .iter()
        .find(|(nxweb, _)| *nxweb == name)
        .map_or(name, |(_, osprey)| osprey)
}

/// The route's `dir`, if it is a string.
pub fn route_dir(route_json: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Dir {
        dir: Option<serde_json::Value>,
    }
    match serde_json::from_str::<Dir>(route_json).ok()?.dir? {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    }
}

/// Add the core key `route_dir` to a filter's object (at its end, so that lines stay where
/// they are in the file).
pub fn with_route_dir(filter_json: &str, dir: &str) -> String {
    let body = filter_json.trim_end();
    let Some(open) = body.strip_suffix('}') else {
        return filter_json.to_owned();
    };
    let comma = if open.trim_end().ends_with('{') {
        ""
    } else {
        ","
    };
    let value = serde_json::Value::String(dir.to_owned());
    format!("{open}{comma} \"route_dir\": {value}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_dir_is_appended_on_the_last_line() {
        assert_eq!(
            route_dir(r#"{"handler": "sendfile", "dir": "www"}"#).as_deref(),
            Some("www")
        );
        assert_eq!(route_dir(r#"{"handler": "x", "dir": 5}"#), None);
        assert_eq!(route_dir(r#"{"handler": "x"}"#), None);
        let f = with_route_dir("{\"type\": \"image\",\n \"cache_dir\": \"c\"}", "w\"x");
        assert_eq!(
            f,
            "{\"type\": \"image\",\n \"cache_dir\": \"c\", \"route_dir\": \"w\\\"x\"}"
        );
        assert_eq!(with_route_dir("{}", "w"), "{ \"route_dir\": \"w\"}");
        let v: serde_json::Value = serde_json::from_str(&with_route_dir("{ }", "w")).unwrap();
        assert_eq!(v["route_dir"], "w");
    }

    #[test]
    fn image_filter_is_image() {
        assert_eq!(module_name("image_filter"), "image");
        assert_eq!(module_name("gzip"), "gzip");
    }
}
