//! HTTP/2, Osprey's own: over TLS when ALPN chose `h2`, and cleartext with prior knowledge
//! (h2c, detected by the connection preface). `session` runs the connection (frames, flow
//! control, stream states), `hpack` and `frame` are the codecs, `request` turns a header block
//! into the request head, each stream goes through the same `dispatch` as HTTP/1.1 inside the
//! connection's task (`stream`), and `response` writes its frames.

mod core;
mod fields;
mod flood;
mod frame;
mod hpack;
mod request;
mod response;
mod rewind;
mod session;
mod stream;

pub use rewind::Rewind;
pub use session::run as serve;
