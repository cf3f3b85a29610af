//! What a configuration must pass to be served. `-t`, `-s reload`, start-up and SIGHUP all go
//! through `build`, so that a configuration `-t` accepts is never refused by a reload.

use crate::config::Config;
use crate::modules::Registry;
use crate::server::Shared;

/// Load the modules the configuration names, build its routes (every handler and filter is
/// created from its route's keys) and check that its access log can be opened.
pub fn build(config: Config, extra_modules: &[String]) -> Result<Shared, String> {
    if let Some(path) = &config.logging.access_log {
        crate::access_log::check(path)?;
    }
    // Libraries are never unloaded: the registry lives as long as the process.
    let registry: &'static Registry = Box::leak(Box::new(Registry::load(&config, extra_modules)?));
    Shared::new(config, registry)
}
