//! HTTP/1.x wire format: parsing requests, decoding chunked bodies, encoding responses.

pub mod body_buf;
pub mod chunked;
pub mod date;
pub mod diagnose;
pub mod encode;
pub mod parse;
pub mod status;

/// A protocol error: answered with `status`, `reason` in the body, then the connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpError {
    pub status: u16,
    pub reason: &'static str,
}

impl HttpError {
    pub const fn new(status: u16, reason: &'static str) -> Self {
        HttpError { status, reason }
    }
}

/// Bad request with a reason.
pub const fn bad(reason: &'static str) -> HttpError {
    HttpError::new(400, reason)
}
