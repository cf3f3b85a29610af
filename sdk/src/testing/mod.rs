//! Unit-testing modules without a server (cargo feature `testing`).
//!
//! Build a [`TestRequest`] (field by field or from raw HTTP/1.1 text), hand it to a handler
//! with [`call`] or to a route's filters and handler with [`run`], and inspect the
//! [`TestResponse`]. `Later` futures are driven to their end; the host services the module
//! uses answer from a fake host whose state is per test thread: [`logs`] and [`logged`],
//! [`counter_value`], and scripted backends ([`add_backend`], [`on_upstream`],
//! [`upstream_requests`]). Build the module as the server would with [`module`], its
//! handlers and filters from route JSON with [`handler`] and [`filter`].
//!
//! In the module's `Cargo.toml`:
//!
//! ```toml
//! [dev-dependencies]
//! osprey-sdk = { path = "../sdk", features = ["testing"] }
//! ```
//!
//! ```
//! use osprey_sdk::testing::{call, TestRequest, Verdict};
//! use osprey_sdk::{Handler, Outcome, Request, Response};
//!
//! struct Hello;
//! impl Handler for Hello {
//!     fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
//!         match req.query_param("name") {
//!             Some(name) => {
//!                 resp.text(format!("hello {name}"));
//!                 Outcome::Done
//!             }
//!             None => Outcome::Error(400),
//!         }
//!     }
//! }
//!
//! let resp = call(&Hello, &TestRequest::get("/?name=you"));
//! assert_eq!((resp.status(), resp.text().as_str()), (200, "hello you"));
//! assert_eq!(call(&Hello, &TestRequest::get("/")).verdict, Verdict::Error(400));
//! ```

mod host;
mod request;
mod response;
mod run;

pub use host::{
    add_backend, counter_value, install, logged, logs, on_subrequest, on_upstream, reset,
    subrequests, upstream_requests,
};
pub use request::TestRequest;
pub use response::{TestResponse, Verdict};
pub use run::{block_on, call, run, Answers};

use crate::{ConfigError, FilterBox, HandlerBox, Module};

/// Build the module from its `modules.<NAME>` JSON (`"null"` when absent), with the fake host
/// installed first so counters it registers are readable.
pub fn module<M: Module>(config: &str) -> Result<M, ConfigError> {
    install();
    M::new(config)
}

/// Build a handler from its route's JSON, as the server does for `"handler": kind`.
pub fn handler<M: Module>(module: &M, kind: &str, route: &str) -> Result<HandlerBox, ConfigError> {
    install();
    module.new_handler(kind, route)
}

/// Build a filter from its JSON in a route's `filters`.
pub fn filter<M: Module>(module: &M, kind: &str, config: &str) -> Result<FilterBox, ConfigError> {
    install();
    module.new_filter(kind, config)
}

#[cfg(test)]
mod tests;
