//! The Osprey server as a library: the `osprey` binary (`main.rs`) is its command line, and the
//! fuzz targets (`fuzz/`) drive the parsers in here directly.
// The connection's transport trait is used only inside this crate; no Send bound is wanted.
#![allow(async_fn_in_trait)]

pub mod access_log;
pub mod body;
pub mod check;
pub mod config;
pub mod conn;
pub mod daemon;
pub mod dispatch;
pub mod http;
pub mod http2;
pub mod int_hash;
pub mod log;
pub mod log_limit;
pub mod modules;
pub mod net;
pub mod reload;
pub mod request_id;
pub mod router;
pub mod scaffold;
pub mod sender;
pub mod server;
pub mod stats;
pub mod upstream;
pub mod worker;
