//! # osprey-sdk
//!
//! Everything a module for the [Osprey](https://example.invalid) application server is written
//! against. A module is a `cdylib` crate that implements [`Module`], builds [`Handler`]s and
//! [`Filter`]s from route configuration, and exports itself with [`export_module!`]. The
//! server loads it at start-up with abi_stable's checked loading, so a module built against an
//! incompatible SDK is refused with a clear message instead of misbehaving.
//!
//! See `sdk/README.md` for a five-minute guide.

// Every public item is documented (the SDK is what module authors read).
#![warn(missing_docs)]
// abi_stable's sabi_trait expansion trips this lint (fixed upstream after 0.11).
#![allow(non_local_definitions)]

pub mod alloc;
pub mod clock;
pub mod config;
pub mod cookie;
pub mod escape;
pub mod fields;
pub mod filter;
pub mod fixed_header;
pub mod handler;
pub mod host;
pub mod http;
pub mod module;
pub mod params;
pub mod random;
pub mod request;
pub mod request_body;
pub mod response;
pub mod subrequest;
pub mod tcp;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tunnel;
pub mod upstream;
pub mod wants;

pub use async_ffi::{FfiContext, FfiPoll};
pub use config::{parse_config, ConfigError};
pub use filter::{filter_box, FfiFilter, Filter, FilterBox, Step, WaitFuture, Wants, BODY_ONLY};
pub use fixed_header::FixedHeader;
pub use handler::{handler_box, FfiHandler, Handler, HandlerBox, Mode, Outcome, Reply};
pub use module::{Lifecycle, Module, ModuleRef, ModuleRoot};
pub use request::{Header, Request};
pub use request_body::{next_chunk, BodySlot};
pub use response::{
    Body, BodyStream, FileRange, HeaderPair, HeaderText, OpenFile, Response, StreamBox,
};
pub use subrequest::{Composite, Fetch, Subrequest, SubrequestError};
pub use tunnel::{Tunnel, TunnelBox};
pub use upstream::{
    header_role, BackendId, HeaderRole, ServerHealth, UpstreamError, UpstreamFuture,
    UpstreamRequest, UpstreamState,
};

/// Re-exported so modules need no direct dependency on these crates.
pub use abi_stable;
pub use serde;
pub use serde_json;

#[doc(hidden)]
pub mod __private {
    pub use abi_stable::library::{
        __call_root_module_loader as call_root_module_loader, CheckTypeLayout, LibHeader,
        RootModuleResult,
    };
}
