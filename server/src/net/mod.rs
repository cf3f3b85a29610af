//! Listening sockets: one per network thread and interface, bound with SO_REUSEPORT so the
//! kernel spreads connections over threads with no shared accept lock. TLS, and the choice of
//! protocol for an accepted connection.

mod accept;
mod listener;
pub mod park;
mod tcp;
pub mod tls;
mod tls_io;

pub use accept::{serve_plain, serve_tls};
pub use listener::{bind, check_unused, parse_interface};
pub use tcp::FreshTcp;
