use std::collections::HashMap;

use abi_stable::std_types::RStr;
use osprey_sdk::{FilterBox, HandlerBox, Lifecycle, ModuleRef};

use super::stock::{self, Stock};
use super::{host::host, load_library, resolve_library};
use crate::config::{Config, ConfigError, Section};

struct Loaded {
    name: String,
    path: String,
    root: ModuleRef,
}

/// Every loaded module and the handler and filter types each provides.
pub struct Registry {
    modules: Vec<Loaded>,
    handlers: HashMap<String, usize>,
    filters: HashMap<String, usize>,
}

impl Registry {
    /// Load and initialise the libraries named by the configuration's `load` and by `extra`
    /// (`-M`). Errors are one line naming the library.
    pub fn load(config: &Config, extra: &[String]) -> Result<Registry, String> {
        let mut reg = Registry {
            modules: Vec::new(),
            handlers: HashMap::new(),
            filters: HashMap::new(),
        };
        for name in config.load.iter().chain(extra) {
            let path = resolve_library(name);
            let root = load_library(&path)?;
            reg.add(root, path.display().to_string())?;
        }
        reg.load_stock_on_demand(config)?;
        for (name, section) in &config.modules {
            if !reg.modules.iter().any(|m| &m.name == name) {
                return Err(ConfigError {
                    file: config.file.clone(),
                    line: section.line,
                    key: section.key.clone(),
                    message: format!("no loaded module is named `{name}`"),
                }
                .to_string());
            }
        }
        for m in &reg.modules {
            let section = config.modules.get(&m.name);
            let json = section.map_or("null", |s| s.json.as_str());
            if let Err(e) = (m.root.init())(host(), RStr::from_str(json)).into_result() {
                return Err(match section {
                    Some(s) => s.error(&config.file, &e).to_string(),
                    None => format!("module {} ({}): {}", m.name, m.path, e.message),
                });
            }
        }
        Ok(reg)
    }

    /// Load the stock library of every handler, filter and `modules.<name>` the configuration
    /// names that no loaded module provides.
    fn load_stock_on_demand(&mut self, config: &Config) -> Result<(), String> {
        let mut wanted: Vec<(&Stock, &Section, String)> = Vec::new();
        for route in &config.routes {
            let handler = &route.core.handler;
            if !self.handlers.contains_key(handler) {
                if let Some(s) = stock::providing(handler, false) {
                    wanted.push((s, &route.section, format!("handler `{handler}`")));
                }
            }
            for f in &route.filters {
                let kind = &f.core.kind;
                if !self.filters.contains_key(kind) {
                    if let Some(s) = stock::providing(kind, true) {
                        wanted.push((s, &f.section, format!("filter `{kind}`")));
                    }
                }
            }
        }
        for (name, section) in &config.modules {
            if !self.modules.iter().any(|m| &m.name == name) {
                if let Some(s) = stock::named(name) {
                    wanted.push((s, section, format!("`modules.{name}`")));
                }
            }
        }
        for (stock, section, why) in wanted {
            if self.modules.iter().any(|m| m.name == stock.module) {
                continue;
            }
            let path = resolve_library(stock.library);
            let root = load_library(&path).map_err(|e| {
                ConfigError {
                    file: config.file.clone(),
                    line: section.line,
                    key: section.key.clone(),
                    message: format!(
                        "{why} is provided by the stock module `{}`, which cannot be loaded \
                         ({e}); add its library to `load`: {{\"so\": \"/path/to/libosprey_{}.so\"}}",
                        stock.module, stock.library
                    ),
                }
                .to_string()
            })?;
            tracing::debug!("{why} loads the stock module {}", stock.module);
            self.add(root, path.display().to_string())?;
        }
        Ok(())
    }

    fn add(&mut self, root: ModuleRef, path: String) -> Result<(), String> {
        let name = (root.name())().to_string();
        let index = self.modules.len();
        if let Some(other) = self.modules.iter().find(|m| m.name == name) {
            // The same library listed twice (e.g. in `load` and `-M`) is loaded once.
            if other.path == path {
                return Ok(());
            }
            return Err(format!(
                "module `{name}` is loaded twice: {} and {path}",
                other.path
            ));
        }
        for (kinds, table) in [
            ((root.handler_types())(), &mut self.handlers),
            ((root.filter_types())(), &mut self.filters),
        ] {
            for kind in kinds.iter() {
                if let Some(&i) = table.get(kind.as_str()) {
                    return Err(format!(
                        "type `{kind}` is provided by both {} and {path}",
                        self.modules[i].path
                    ));
                }
                table.insert(kind.to_string(), index);
            }
        }
        self.modules.push(Loaded { name, path, root });
        Ok(())
    }

    /// Build the handler a route names.
    pub fn new_handler(
        &self,
        file: &str,
        kind: &str,
        route: &Section,
    ) -> Result<HandlerBox, ConfigError> {
        let m = self.find(&self.handlers, file, kind, route, "handler")?;
        (m.root.new_handler())(RStr::from_str(kind), RStr::from_str(&route.json))
            .into_result()
            .map_err(|e| route.error(file, &e))
    }

    /// Build a filter of a route's `filters` list.
    pub fn new_filter(
        &self,
        file: &str,
        kind: &str,
        section: &Section,
    ) -> Result<FilterBox, ConfigError> {
        let m = self.find(&self.filters, file, kind, section, "filter")?;
        (m.root.new_filter())(RStr::from_str(kind), RStr::from_str(&section.json))
            .into_result()
            .map_err(|e| section.error(file, &e))
    }

    fn find(
        &self,
        table: &HashMap<String, usize>,
        file: &str,
        kind: &str,
        section: &Section,
        what: &str,
    ) -> Result<&Loaded, ConfigError> {
        table.get(kind).map(|&i| &self.modules[i]).ok_or_else(|| {
            let mut known: Vec<_> = table.keys().map(String::as_str).collect();
            known.sort_unstable();
            ConfigError {
                file: file.to_owned(),
                line: section.line,
                key: section.key.clone(),
                message: format!(
                    "no loaded module provides {what} `{kind}` (known: {}); add the library \
                     that provides it to `load`",
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ),
            }
        })
    }

    /// Tell every module about a point in the server's life.
    pub fn lifecycle(&self, event: Lifecycle) {
        for m in &self.modules {
            (m.root.lifecycle())(event);
        }
    }

    /// Tell the modules that `old` did not have about a point in the server's life.
    pub fn lifecycle_new(&self, old: &Registry, event: Lifecycle) {
        for m in &self.modules {
            if !old.modules.iter().any(|o| o.path == m.path) {
                (m.root.lifecycle())(event);
            }
        }
    }

    /// The name of the module that provides handler type `kind`.
    pub fn handler_module(&self, kind: &str) -> Option<&str> {
        self.handlers
            .get(kind)
            .map(|&i| self.modules[i].name.as_str())
    }

    /// Loaded modules as (name, library path).
    pub fn modules(&self) -> impl Iterator<Item = (&str, &str)> {
        self.modules
            .iter()
            .map(|m| (m.name.as_str(), m.path.as_str()))
    }
}
