//! The conformance cases, by h2spec section: each sends its frames on a connection that has
//! finished the handshake and checks what the server does.

mod fields;
mod generic;
mod hpack;
mod http2;

pub use fields::{allowed_field_cases, field_cases, http1_status_cases};
pub use generic::generic_cases;
pub use hpack::hpack_cases;
pub use http2::http2_cases;
