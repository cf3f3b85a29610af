//! Loading and checking the configuration file.

pub mod jsonc;
mod nxweb;
mod tls;
mod types;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::value::RawValue;

pub use tls::{CertConfig, Http2Config, TlsConfig};
pub use types::*;

/// The embedded default: the sample site and the example modules.
pub const DEFAULT_CONFIG: &str = include_str!("../../../conf/default.json");

/// A configuration problem, located in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if !self.key.is_empty() {
            write!(f, ": key `{}`", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// A JSON section handed on to a module, with the line it starts at.
#[derive(Debug, Clone)]
pub struct Section {
    pub line: usize,
    /// Where the section sits in the file, e.g. `routing[2]`.
    pub key: String,
    pub json: String,
}

impl Section {
    /// Place a module's error (line relative to this section) in the file.
    pub fn error(&self, file: &str, err: &osprey_sdk::ConfigError) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            line: if err.line > 0 {
                self.line + err.line as usize - 1
            } else {
                self.line
            },
            key: self.key.clone(),
            message: err.message.to_string(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct FilterSpec {
    pub core: FilterCore,
    pub section: Section,
}

#[derive(Debug, Clone)]
pub struct RouteSpec {
    pub core: RouteCore,
    pub section: Section,
    pub filters: Vec<FilterSpec>,
}

/// A checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file name used in messages (`<default>` for the embedded one).
    pub file: String,
    pub load: Vec<String>,
    /// Upstream backends for proxying, checked and resolved.
    pub backends: Vec<crate::upstream::config::BackendSpec>,
    pub listen: Vec<ListenConfig>,
    pub logging: LoggingConfig,
    pub modules: BTreeMap<String, Section>,
    pub routes: Vec<RouteSpec>,
    /// Network threads.
    pub network_threads: usize,
    pub cpu_affinity: bool,
    pub worker_pool: PoolConfig,
    pub limits: Limits,
    pub timeouts: TimeoutsConfig,
    pub tls: TlsConfig,
    pub http2: Http2Config,
    pub request_id: crate::request_id::RequestIds,
}

impl Config {
    /// Read and check a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            line: 0,
            key: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(&file, &text)
    }

    /// The embedded default configuration.
    pub fn embedded() -> Config {
        Self::parse("<default>", DEFAULT_CONFIG).expect("the embedded configuration is valid")
    }

    /// Check configuration text; `file` names it in messages.
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
        let json = jsonc::to_json(text);
        let parser = Parser { file, json: &json };
        let raw: FileConfig = parser.parse(&json, 1, "")?;
        let mut routes = Vec::with_capacity(raw.routing.len());
        for (i, route) in raw.routing.iter().enumerate() {
            routes.push(parser.route(route, i)?);
        }
        // A stable sort keeps file order among routes of equal priority.
        routes.sort_by_key(|r| r.core.priority);
        let mut modules = BTreeMap::new();
        for (name, v) in &raw.modules {
            let section = parser.section(v, format!("modules.{name}"));
            let module = nxweb::module_name(name);
            if modules.insert(module.to_owned(), section).is_some() {
                return Err(parser.error_at_key(
                    name,
                    &format!("modules.{name} configures `{module}` a second time"),
                ));
            }
        }
        let network_threads = match raw.network_threads {
            Some(0) => {
                // The key as written: the old name is an alias.
                let key = ["network_threads", "workers"]
                    .into_iter()
                    .find(|k| parser.json.contains(&format!("\"{k}\"")))
                    .unwrap_or("network_threads");
                return Err(parser.error_at_key(key, "must be at least 1"));
            }
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        if raw.worker_pool.threads == 0 {
            return Err(parser.error_at_key("threads", "worker_pool.threads must be at least 1"));
        }
        let mut backends = Vec::with_capacity(raw.backends.len());
        for (name, b) in &raw.backends {
            let spec =
                crate::upstream::config::check(name, b).map_err(|(key, message)| ConfigError {
                    file: file.to_owned(),
                    line: osprey_sdk::config::line_of_key(&json, name) as usize,
                    key: format!("backends.{name}.{key}"),
                    message,
                })?;
            backends.push(spec);
        }
        // Keys whose feature is not in this build yet: refuse rather than silently ignore.
        raw.tls
            .check()
            .map_err(|(key, m)| parser.error_at_key(key, &format!("tls: {m}")))?;
        raw.http2
            .check()
            .map_err(|(key, m)| parser.error_at_key(key, &format!("http2: {m}")))?;
        let request_id = raw
            .request_id
            .check()
            .map_err(|(key, m)| parser.error_at_key(key, &format!("request_id: {m}")))?;
        for field in &raw.logging.access_log_fields {
            crate::access_log::Field::parse(field)
                .map_err(|m| parser.error_at_key("access_log_fields", &m))?;
        }
        for (i, l) in raw.listen.iter().enumerate() {
            crate::net::parse_interface(&l.interface)
                .map_err(|m| parser.error_at_key("interface", &format!("listen[{i}]: {m}")))?;
            tls::check_listener(&raw.tls, l)
                .map_err(|(key, m)| parser.error_at_key(key, &format!("listen[{i}]: {m}")))?;
        }
        Ok(Config {
            file: file.to_owned(),
            load: raw.load.iter().map(|l| l.so.clone()).collect(),
            backends,
            listen: raw.listen,
            logging: raw.logging,
            modules,
            routes,
            network_threads,
            cpu_affinity: raw.cpu_affinity,
            worker_pool: raw.worker_pool,
            limits: raw.limits,
            timeouts: raw.timeouts,
            tls: raw.tls,
            http2: raw.http2,
            request_id,
        })
    }
}

/// Parses parts of one file, turning serde's errors into located ones.
struct Parser<'a> {
    file: &'a str,
    json: &'a str,
}

impl<'a> Parser<'a> {
    /// Parse `text` (which starts at `line` of the file), naming keys below `prefix`.
    fn parse<T: serde::Deserialize<'a>>(
        &self,
        text: &'a str,
        line: usize,
        prefix: &str,
    ) -> Result<T, ConfigError> {
        let mut de = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let message = inner.to_string();
            let message = message
                .rsplit_once(" at line ")
                .map_or(message.as_str(), |(m, _)| m)
                .to_owned();
            let key = match (prefix, path.as_str()) {
                (p, ".") => p.to_owned(),
                ("", path) => path.to_owned(),
                (p, path) => format!("{p}.{path}"),
            };
            ConfigError {
                file: self.file.to_owned(),
                line: line + inner.line().max(1) - 1,
                key,
                message,
            }
        })
    }

    fn section(&self, raw: &RawValue, key: String) -> Section {
        Section {
            line: self.line_of(raw),
            key,
            json: raw.get().to_owned(),
        }
    }

    fn line_of(&self, raw: &RawValue) -> usize {
        let offset = raw.get().as_ptr() as usize - self.json.as_ptr() as usize;
        jsonc::line_at(self.json, offset)
    }

    fn route(&self, raw: &'a RawValue, index: usize) -> Result<RouteSpec, ConfigError> {
        let section = self.section(raw, format!("routing[{index}]"));
        let core: RouteCore = self.parse(raw.get(), section.line, &section.key)?;
        if core.secure_only && core.insecure_only {
            return Err(self.located(&section, "secure_only and insecure_only exclude each other"));
        }
        if let Some(p) = &core.prefix {
            if !p.starts_with('/') {
                return Err(self.located(&section, "prefix must start with `/`"));
            }
        }
        let list: RouteFilters = self.parse(raw.get(), section.line, &section.key)?;
        let mut filters = Vec::with_capacity(list.filters.len());
        let dir = nxweb::route_dir(raw.get());
        for (j, f) in list.filters.iter().enumerate() {
            let mut fsec = self.section(f, format!("{}.filters[{j}]", section.key));
            if let Some(dir) = &dir {
                fsec.json = nxweb::with_route_dir(&fsec.json, dir);
            }
            let core: FilterCore = self.parse(f.get(), fsec.line, &fsec.key)?;
            filters.push(FilterSpec {
                core,
                section: fsec,
            });
        }
        Ok(RouteSpec {
            core,
            section,
            filters,
        })
    }

    fn located(&self, section: &Section, message: &str) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            line: section.line,
            key: section.key.clone(),
            message: message.to_owned(),
        }
    }

    fn error_at_key(&self, key: &str, message: &str) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            line: osprey_sdk::config::line_of_key(self.json, key) as usize,
            key: key.to_owned(),
            message: message.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_parses() {
        let c = Config::embedded();
        assert!(!c.routes.is_empty());
        assert!(!c.listen.is_empty());
    }

    #[test]
    fn unknown_top_level_key_is_located() {
        let e = Config::parse("x.json", "{\n  \"listen\": [],\n  \"routign\": []\n}").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("unknown field `routign`"), "{e}");
        assert!(e.to_string().starts_with("x.json:3"), "{e}");
    }

    #[test]
    fn nested_type_error_names_key_and_line() {
        let text = "{\n\"limits\": {\n  \"max_body_bytes\": \"big\"\n}\n}";
        let e = Config::parse("x.json", text).unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert_eq!(e.key, "limits.max_body_bytes");
    }

    #[test]
    fn route_errors_point_into_the_route() {
        let text = "{\"routing\": [\n {\"prefix\": \"/a\", \"handler\": \"x\"},\n {\"prefix\": \"/b\",\n  \"handler\": 7}\n]}";
        let e = Config::parse("r.json", text).unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert_eq!(e.key, "routing[1].handler");
    }

    #[test]
    fn routes_sort_by_priority_stably() {
        let text = r#"{"routing": [
            {"prefix": "/a", "handler": "h"},
            {"prefix": "/b", "handler": "h", "priority": -1},
            {"prefix": "/c", "handler": "h"},
        ]}"#;
        let c = Config::parse("p.json", text).unwrap();
        let order: Vec<_> = c
            .routes
            .iter()
            .map(|r| r.core.prefix.clone().unwrap())
            .collect();
        assert_eq!(order, ["/b", "/a", "/c"]);
        assert_eq!(c.routes[0].section.line, 3);
    }

    #[test]
    fn bad_prefix_and_interface_rejected() {
        assert!(Config::parse("p", r#"{"routing": [{"prefix": "a", "handler": "h"}]}"#).is_err());
        let e = Config::parse("p", r#"{"listen": [{"interface": "nope"}]}"#).unwrap_err();
        assert!(e.message.contains("listen[0]"), "{e}");
    }

    #[test]
    fn listeners_defer_accepting_unless_told_not_to() {
        let text = r#"{"listen": [{"interface": ":1"}, {"interface": ":2", "deferred": false}]}"#;
        let c = Config::parse("p", text).unwrap();
        assert!(c.listen[0].deferred);
        assert!(!c.listen[1].deferred);
    }
}
