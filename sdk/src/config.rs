//! Reading a route's, filter's or module's JSON configuration.

use abi_stable::{std_types::RString, StableAbi};
use serde::de::DeserializeOwned;

/// Keys of a route or filter object that the core reads itself; a module's own keys sit
/// beside them in the same object.
pub const CORE_KEYS: &[&str] = &[
    "prefix",
    "vhost",
    "handler",
    "filters",
    "secure_only",
    "insecure_only",
    "methods",
    "max_body_size",
    "type",
    "name",
    "priority",
    // Given to each filter by the core: its route's `dir`, when the route has one.
    "route_dir",
];

/// A configuration error. `line` is 1-based within the JSON text the module was given (0 when
/// unknown); the core turns it into a line of the configuration file.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The line in the JSON text the error is about (1-based; 0 when unknown).
    pub line: u32,
    /// What is wrong, for a person.
    pub message: RString,
}

impl ConfigError {
    /// An error without a location.
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError {
            line: 0,
            message: message.into().into(),
        }
    }

    /// An error about one key, located where the key appears in `json`.
    pub fn at_key(json: &str, key: &str, message: impl Into<String>) -> Self {
        ConfigError {
            line: line_of_key(json, key),
            message: message.into().into(),
        }
    }
}

/// Create the directory a module's key names (and its parents) at configuration time, or an
/// error located at that key.
pub fn create_dir(json: &str, key: &str, dir: &std::path::Path) -> Result<(), ConfigError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        ConfigError::at_key(
            json,
            key,
            format!("cannot create `{key}` {}: {e}", dir.display()),
        )
    })
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Deserialize `json` into `T`, rejecting keys that neither `T` nor the core knows.
/// `null` (an absent section) is read as an empty object.
pub fn parse_config<T: DeserializeOwned>(json: &str) -> Result<T, ConfigError> {
    let json = if json.trim() == "null" || json.trim().is_empty() {
        "{}"
    } else {
        json
    };
    let mut unknown = Vec::new();
    let mut de = serde_json::Deserializer::from_str(json);
    let value: T = serde_ignored::deserialize(&mut de, |path| {
        unknown.push(path.to_string());
    })
    .map_err(|e| ConfigError {
        line: e.line() as u32,
        message: strip_location(&e.to_string()).into(),
    })?;
    for path in unknown {
        let top = path.split(['.', '[']).next().unwrap_or(&path);
        if !CORE_KEYS.contains(&top) {
            let key = path.rsplit('.').next().unwrap_or(&path);
            return Err(ConfigError::at_key(
                json,
                key,
                format!("unknown key `{path}`"),
            ));
        }
    }
    Ok(value)
}

/// serde_json appends " at line L column C"; the line is reported separately.
fn strip_location(message: &str) -> &str {
    message.rsplit_once(" at line ").map_or(message, |(m, _)| m)
}

/// The 1-based line where `"key"` first appears in `json`, 0 when absent.
pub fn line_of_key(json: &str, key: &str) -> u32 {
    let quoted = format!("\"{key}\"");
    json.find(&quoted)
        .map(|at| json[..at].matches('\n').count() as u32 + 1)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Conf {
        dir: String,
        #[serde(default)]
        memcache: bool,
    }

    #[test]
    fn accepts_known_and_core_keys() {
        let c: Conf = parse_config(r#"{"prefix": "/", "handler": "x", "dir": "/srv"}"#).unwrap();
        assert_eq!(c.dir, "/srv");
        assert!(!c.memcache);
    }

    #[test]
    fn rejects_unknown_key_with_line() {
        let e = parse_config::<Conf>("{\n \"dir\": \"/srv\",\n \"memcahce\": true\n}").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("memcahce"), "{}", e.message);
    }

    #[test]
    fn reports_type_errors_with_line() {
        let e = parse_config::<Conf>("{\n\"dir\": 5\n}").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("invalid type"), "{}", e.message);
        assert!(!e.message.contains("at line"), "{}", e.message);
    }

    #[test]
    fn null_is_empty_object() {
        #[derive(serde::Deserialize)]
        struct Opt {
            #[serde(default)]
            x: u32,
        }
        assert_eq!(parse_config::<Opt>("null").unwrap().x, 0);
    }
}
