//! Stock filters NXWEB and nginx users expect, each in its own file and written only against
//! the SDK: `cors`, `headers` (with `expires`), `userid`, and the `host_redirect` handler.
//! A stock module: loaded when a route names one of these types; see docs/stock-filters.md.

use osprey_sdk::{filter_box, handler_box, ConfigError, FilterBox, HandlerBox, Module};

/// The server's allocator (mimalloc) for this module's per-request strings and lists: the C
/// library's costs several times more.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;

pub mod cors;
pub mod headers;
pub mod host_redirect;
mod pending_ids;
pub mod userid;

struct Filters;

impl Module for Filters {
    const NAME: &'static str = "filters";
    const HANDLERS: &'static [&'static str] = &["host_redirect"];
    const FILTERS: &'static [&'static str] = &["cors", "headers", "userid"];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(Filters)
    }

    fn new_handler(&self, _kind: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        Ok(handler_box(host_redirect::HostRedirect::new(route)?))
    }

    fn new_filter(&self, kind: &str, config: &str) -> Result<FilterBox, ConfigError> {
        Ok(match kind {
            "cors" => filter_box(cors::Cors::new(config)?),
            "headers" => filter_box(headers::Headers::new(config)?),
            _ => filter_box(userid::UserId::new(config)?),
        })
    }
}

osprey_sdk::export_module!(Filters);
