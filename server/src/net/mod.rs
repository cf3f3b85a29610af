//! Listening sockets: one per network thread and interface, bound with SO_REUSEPORT so the
//! kernel spreads connections over threads with no shared accept lock.

mod listener;

pub use listener::{bind, check_unused, parse_interface};
