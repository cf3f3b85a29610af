//! Module libraries: loading them through the stable ABI, and the registry of the handler
//! and filter types they provide.

mod host;
mod loader;
mod registry;
mod stock;
pub mod tcp;

pub use loader::{load_library, resolve_library};
pub use registry::Registry;
