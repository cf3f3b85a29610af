//! HTTP/2, Osprey's own: over TLS when ALPN chose `h2`, and cleartext with prior knowledge
//! (h2c, detected by the connection preface). `session` runs the connection (frames, flow
//! control, stream states), `hpack` and `frame` are the codecs, `request` turns a header block
//! into the request head, each stream goes through the same `dispatch` as HTTP/1.1 inside the
//! connection's task (`stream`), `response` writes its frames, and `output` holds them (and the
//! bodies sent by reference) until they are written.

mod core;
mod fields;
mod flood;
mod frame;
mod hpack;
mod output;
mod request;
mod response;
mod rewind;
mod session;
mod stream;

pub use rewind::Rewind;
pub use session::run as serve;
