//! Types of the host's upstream service: the reverse-proxy machinery (connection pools, load
//! balancing, health checks, retries) lives in the core; a module asks it to send a request to
//! a configured backend and gets the response head with a streamed body.

use abi_stable::{
    std_types::{RArc, RCowStr, ROption, RResult, RSlice, RStr, RString, RVec},
    StableAbi,
};
use async_ffi::LocalFfiFuture;

use crate::fields::is_named;
use crate::request::Header;
use crate::request_body::BodySlot;
use crate::response::{HeaderPair, Response};

/// A backend named in the configuration's `backends`, resolved once with
/// [`host::backend`](crate::host::backend) when a route is built.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackendId(pub u32);

/// A request to send upstream. The host adds the framing headers (`Content-Length`,
/// `Connection`) itself and drops any the module passes; it adds `Host: <server address>`
/// when `headers` has no `Host`.
///
/// The client's headers go on as they were parsed, without a copy: `forward` is usually the
/// request's own [`Request::headers`](crate::Request::headers), of which the host sends, in
/// their order, every one that [`forwarded`](UpstreamRequest::forwarded) keeps: not those
/// about the client connection or the host's own ([`HeaderRole`]), not `Proxy-Authorization`
/// (meant for this proxy), not those the client's `Connection` names, and not those named in
/// `except` (the ones the module replaces in `headers`). `headers` follow them.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct UpstreamRequest<'a> {
    /// `GET`, `POST`, ...: decides whether a failed attempt may be retried on another server.
    pub method: RCowStr<'a>,
    /// Origin-form target: path and query (`/a/b?c`).
    pub target: RCowStr<'a>,
    /// Client headers to pass on as they are (see above).
    pub forward: RSlice<'a, Header<'a>>,
    /// Names in `forward` not to pass on, in lowercase (letters and `-`).
    pub except: RSlice<'a, RStr<'a>>,
    /// End-to-end headers to send after those of `forward`.
    pub headers: RVec<HeaderPair>,
    /// The request body.
    pub body: RVec<u8>,
    /// The client's address (without port), for `ip_hash` balancing.
    pub client_ip: RCowStr<'a>,
    /// The body as it arrives from the client (`Request::take_body_stream`), sent instead of
    /// `body`: with `Content-Length` when its length is known, else chunked. It cannot be
    /// replayed, so once a byte of it was sent the request is not retried.
    pub body_stream: ROption<RArc<BodySlot>>,
}

impl<'a> UpstreamRequest<'a> {
    /// The headers of `forward` that go upstream, in order (the rule above).
    pub fn forwarded(&self) -> impl Iterator<Item = &Header<'a>> + '_ {
        let listed = connection_listed(&self.forward);
        self.forward.iter().filter(move |h| {
            let name = h.name.as_str();
            header_role(name) == HeaderRole::EndToEnd
                && !is_named(name.as_bytes(), b"proxy-authorization")
                && !self
                    .except
                    .iter()
                    .any(|e| is_named(name.as_bytes(), e.as_bytes()))
                && !listed.iter().any(|l| l.eq_ignore_ascii_case(name))
        })
    }
}

/// The names a client's `Connection` headers list, but those already not forwarded
/// (`keep-alive`, `upgrade`, `close`): nearly always none, and then nothing is allocated.
fn connection_listed<'a>(headers: &[Header<'a>]) -> Vec<&'a str> {
    let mut listed = Vec::new();
    for h in headers {
        let name = h.name.as_str();
        if !is_named(name.as_bytes(), b"connection") {
            continue;
        }
        let tokens = std::str::from_utf8(h.value.as_slice())
            .unwrap_or("")
            .split(',');
        listed.extend(
            tokens
                .map(str::trim)
                .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("close"))
                .filter(|t| header_role(t) == HeaderRole::EndToEnd),
        );
    }
    listed
}

/// What a request header name is to the host's upstream service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderRole {
    /// Sent as it is.
    EndToEnd,
    /// `Host`: the server's address unless `headers` gives one.
    Host,
    /// `Upgrade`: in `headers`, the host sends `Connection: upgrade` with it and tunnels the
    /// connection after a 101; never taken from `forward`.
    Upgrade,
    /// About one connection (RFC 9110 §7.6.1: `Connection`, `Keep-Alive`,
    /// `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`) or the body's framing,
    /// which the host writes (`Content-Length`, `Expect`: it answers `100-continue` itself):
    /// never sent as given.
    Hop,
}

/// A request header name's role, by its length first: every header of every proxied request
/// goes through here.
pub fn header_role(name: &str) -> HeaderRole {
    let is = |lower: &str| is_named(name.as_bytes(), lower.as_bytes());
    match name.len() {
        2 if is("te") => HeaderRole::Hop,
        4 if is("host") => HeaderRole::Host,
        6 if is("expect") => HeaderRole::Hop,
        7 if is("upgrade") => HeaderRole::Upgrade,
        7 if is("trailer") => HeaderRole::Hop,
        10 if is("connection") || is("keep-alive") => HeaderRole::Hop,
        14 if is("content-length") => HeaderRole::Hop,
        16 if is("proxy-connection") => HeaderRole::Hop,
        17 if is("transfer-encoding") => HeaderRole::Hop,
        _ => HeaderRole::EndToEnd,
    }
}

/// Why no response came: `status` is what to answer (502 for connection or protocol failures,
/// 504 for timeouts), `message` says what happened, for the log.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct UpstreamError {
    /// The status to answer the client with.
    pub status: u16,
    /// What happened, for the log.
    pub message: RString,
}

/// The answer of [`host::upstream_request`](crate::host::upstream_request): the upstream's
/// status and end-to-end headers, with a body that streams from the upstream connection
/// (its length is known when the upstream sent `Content-Length`).
pub type UpstreamFuture = LocalFfiFuture<RResult<Response, UpstreamError>>;

/// Where an upstream server stands, as the balancer sees it.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamState {
    /// In service.
    Up,
    /// Its active health checks say it is down.
    Down,
    /// Passively ejected (`max_fails` failures), for `fail_timeout`.
    Ejected,
    /// Its ejection is over: the next request to it is the probe that decides.
    Checking,
}

impl UpstreamState {
    /// `up`, `down`, `ejected`, `checking`.
    pub fn name(self) -> &'static str {
        match self {
            UpstreamState::Up => "up",
            UpstreamState::Down => "down",
            UpstreamState::Ejected => "ejected",
            UpstreamState::Checking => "checking",
        }
    }
}

/// One upstream server of a backend of the current configuration, for the status page
/// ([`host::upstream_health`](crate::host::upstream_health)).
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct ServerHealth {
    /// The backend's name in `backends`.
    pub backend: RString,
    /// The server's address as configured.
    pub server: RString,
    /// The address it is reached at now (a name's current resolution).
    pub address: RString,
    /// Its state now.
    pub state: UpstreamState,
    /// Requests in flight to it, over every network thread.
    pub in_flight: u64,
    /// Responses it gave since start (or since its backend was last changed by a reload).
    pub responses: u64,
    /// Failed attempts since then (connect errors, timeouts, invalid responses, ...).
    pub fails: u64,
    /// Time to its response heads, a moving average in microseconds (0 before the first).
    pub response_us: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(name: &'a str, value: &'a str) -> Header<'a> {
        Header {
            name: RStr::from_str(name),
            value: RSlice::from_slice(value.as_bytes()),
        }
    }

    #[test]
    fn forwards_end_to_end_headers_in_order_but_hop_by_hop_listed_and_excepted_ones() {
        let client = [
            header("Accept", "a"),
            header("Host", "front"),
            header("X-Hop", "by Connection"),
            header("Connection", "keep-alive, X-Hop, close"),
            header("accept", "b"),
            header("Keep-Alive", "timeout=5"),
            header("TE", "trailers"),
            header("Upgrade", "websocket"),
            header("Content-Length", "3"),
            header("Transfer-Encoding", "chunked"),
            header("Expect", "100-continue"),
            header("Proxy-Authorization", "Basic x"),
            header("Proxy-Connection", "keep-alive"),
            header("Trailer", "X"),
            header("X-Forwarded-For", "10.0.0.1"),
            header("Via", "1.0 a"),
            header("Cookie", "c=1"),
        ];
        let except = [RStr::from_str("x-forwarded-for"), RStr::from_str("via")];
        let req = UpstreamRequest {
            method: "GET".into(),
            target: "/".into(),
            forward: RSlice::from_slice(&client),
            except: RSlice::from_slice(&except),
            headers: RVec::new(),
            body: RVec::new(),
            client_ip: "1.2.3.4".into(),
            body_stream: ROption::RNone,
        };
        let sent: Vec<(&str, &[u8])> = req
            .forwarded()
            .map(|h| (h.name.as_str(), h.value.as_slice()))
            .collect();
        assert_eq!(
            sent,
            [("Accept", &b"a"[..]), ("accept", b"b"), ("Cookie", b"c=1")]
        );
    }
}
