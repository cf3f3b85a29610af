//! HTTP rules that modules share, written once: conditional requests (RFC 9110 §13), byte
//! ranges (§14), `Accept-Encoding` negotiation (§12.5.3), request-path cleaning for modules
//! that map paths to files, and error pages.
//!
//! Every stock module that answers with validators, ranges or files uses these, so a client
//! sees one behaviour whichever module answered.

pub mod conditional;
pub mod encoding;
pub mod path;
pub mod range;
pub mod status;

pub use conditional::{evaluate, Precondition, Validators};
pub use encoding::{accepts, quality};
pub use path::{clean_path, BadPath, CleanPath};
pub use range::{requested_ranges, Ranges};
pub use status::{error_page, reason, respond_error};

#[cfg(test)]
pub(crate) mod test_request {
    use abi_stable::std_types::{RSlice, RStr};

    use crate::{Header, Request};

    /// Run `f` on a request with this method and these headers.
    pub fn with_request<R>(
        method: &str,
        headers: &[(&str, &str)],
        f: impl FnOnce(&Request<'_>) -> R,
    ) -> R {
        let headers: Vec<Header<'_>> = headers
            .iter()
            .map(|(name, value)| Header {
                name: RStr::from(*name),
                value: RSlice::from_slice(value.as_bytes()),
            })
            .collect();
        let empty = RStr::from("");
        let req = Request {
            method: RStr::from(method),
            path: RStr::from("/"),
            query: empty,
            uri: RStr::from("/"),
            path_info: RStr::from("/"),
            route_prefix: empty,
            http_minor: 1,
            http2: false,
            host: RStr::from("localhost"),
            remote_addr: RStr::from("127.0.0.1:1"),
            secure: false,
            body_only: false,
            subrequest: false,
            request_id: empty,
            headers: RSlice::from_slice(&headers),
            body: RSlice::from_slice(&[]),
            body_stream: abi_stable::std_types::ROption::RNone,
        };
        f(&req)
    }
}
