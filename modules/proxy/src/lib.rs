//! `proxy`: the `http_proxy` handler. It holds the proxying *policy* — which backend, how the
//! path is rewritten, which headers go upstream and which come back — and leaves the machinery
//! (pools, balancing, health checks, retries, strict parsing) to the host's upstream service.
//! No I/O of its own: it awaits the host's future and hands the host's body stream (or, after
//! a 101, its tunnel) on.
//!
//! ```json
//! {"prefix": "/app", "handler": "http_proxy", "backend": "app", "uri": "/", "proxy_copy_host": true}
//! ```

use osprey_sdk::abi_stable::std_types::{RArc, RCowStr, RResult, RString, RVec};
use osprey_sdk::{
    handler_box, host, parse_config, BackendId, BodySlot, ConfigError, Handler, HandlerBox,
    HeaderPair, HeaderText, Module, Outcome, Reply, Request, Response, UpstreamRequest,
};
use serde::Deserialize;

/// The server's allocator (mimalloc) for the request and header lists built here: glibc's
/// free cost about twice as much per request.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;

/// What this proxy adds to `Via`.
const VIA: &str = "1.1 osprey";

/// What the proxy does with a client request header.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// End-to-end: sent on as it is.
    Forward,
    /// Describes the client connection (RFC 9110 7.6.1), or is set by this handler.
    Drop,
    /// The rest are read, then dropped or replaced.
    Connection,
    Upgrade,
    Host,
    ForwardedFor,
    Via,
}

/// A header's kind, found with one comparison or two (by the name's length first): every
/// header of every request goes through here.
fn kind(name: &str) -> Kind {
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    match name.len() {
        2 if is("te") => Kind::Drop,
        3 if is("via") => Kind::Via,
        4 if is("host") => Kind::Host,
        6 if is("expect") => Kind::Drop,
        7 if is("upgrade") => Kind::Upgrade,
        7 if is("trailer") => Kind::Drop,
        10 if is("connection") => Kind::Connection,
        10 if is("keep-alive") => Kind::Drop,
        14 if is("content-length") => Kind::Drop,
        15 if is("x-forwarded-for") => Kind::ForwardedFor,
        16 if is("proxy-connection") || is("x-forwarded-host") => Kind::Drop,
        17 if is("transfer-encoding") || is("x-forwarded-proto") => Kind::Drop,
        19 if is("proxy-authorization") => Kind::Drop,
        _ => Kind::Forward,
    }
}

/// A route's own keys (`parse_config` rejects any other that the core does not read).
#[derive(Deserialize)]
struct RouteConf {
    /// A name from the configuration's `backends`.
    backend: String,
    /// Replaces the route prefix in the path sent upstream (NXWEB's `uri`; `""` sends the path
    /// below the prefix as it is).
    uri: Option<String>,
    /// Send the client's `Host` upstream instead of the server's address.
    #[serde(default)]
    proxy_copy_host: bool,
    /// Read the request body whole before sending it (with a `Content-Length`, and replayable
    /// on another server) instead of streaming it as it arrives.
    #[serde(default)]
    proxy_request_buffering: bool,
}

struct ProxyModule;

impl Module for ProxyModule {
    const NAME: &'static str = "proxy";
    const HANDLERS: &'static [&'static str] = &["http_proxy"];

    fn new(config: &str) -> Result<Self, ConfigError> {
        let _: std::collections::BTreeMap<String, ()> = parse_config(config)?;
        Ok(ProxyModule)
    }

    fn new_handler(&self, _type_name: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        let conf: RouteConf = parse_config(route)?;
        let backend = host::backend(&conf.backend).ok_or_else(|| {
            ConfigError::at_key(
                route,
                "backend",
                format!("no backend named `{}` in `backends`", conf.backend),
            )
        })?;
        if let Some(uri) = &conf.uri {
            // `""` (NXWEB): the path below the prefix, as it is.
            let path = uri.is_empty() || uri.starts_with('/');
            if !path || uri.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'?') {
                return Err(ConfigError::at_key(
                    route,
                    "uri",
                    "uri must be empty or a path starting with `/`",
                ));
            }
        }
        Ok(handler_box(Proxy {
            backend,
            uri: conf.uri,
            copy_host: conf.proxy_copy_host,
            buffer_body: conf.proxy_request_buffering,
        }))
    }
}

struct Proxy {
    backend: BackendId,
    uri: Option<String>,
    copy_host: bool,
    buffer_body: bool,
}

impl Proxy {
    /// The target sent upstream: the route prefix replaced by `uri`, if set.
    fn target(&self, req: &Request<'_>) -> String {
        let Some(base) = &self.uri else {
            // Copied as it is (`to_string` went through `Display`: ~600 instructions more).
            return req.uri.as_str().to_owned();
        };
        let info = req.path_info.as_str();
        let mut target = String::with_capacity(base.len() + info.len() + req.query.len() + 2);
        match (base.ends_with('/'), info.strip_prefix('/')) {
            (true, Some(rest)) => {
                target.push_str(base);
                target.push_str(rest);
            }
            _ => {
                target.push_str(base);
                target.push_str(info);
            }
        }
        if target.is_empty() {
            // `"uri": ""` and the prefix itself was asked for.
            target.push('/');
        }
        if !req.query.is_empty() {
            target.push('?');
            target.push_str(&req.query);
        }
        target
    }

    /// The headers to send: the client's end-to-end ones and the forwarding ones (`ip`: the
    /// client's address). One pass reads what the forwarding headers need, one copies.
    fn headers(&self, req: &Request<'_>, ip: &str) -> RVec<HeaderPair> {
        let mut out = RVec::with_capacity(req.headers.len() + 5);
        // Headers named in `Connection` are hop-by-hop too.
        let mut listed: Vec<&str> = Vec::new();
        let (mut host, mut upgrade) = (None, None);
        let (mut forwarded_for, mut via) = (String::new(), String::new());
        for h in req.headers.iter() {
            let kind = kind(h.name.as_str());
            if matches!(kind, Kind::Forward | Kind::Drop) {
                continue;
            }
            // Values that are not UTF-8 are not read (nor forwarded).
            let Some(value) = h.value_str() else {
                continue;
            };
            match kind {
                Kind::Forward | Kind::Drop => {}
                Kind::Connection => {
                    listed.extend(value.split(',').map(str::trim).filter(|t| !t.is_empty()))
                }
                Kind::Upgrade => upgrade = upgrade.or(Some(value)),
                Kind::Host => host = host.or(Some(value)),
                Kind::ForwardedFor => append(&mut forwarded_for, value),
                Kind::Via => append(&mut via, value),
            }
        }
        for h in req.headers.iter() {
            let name = h.name.as_str();
            if kind(name) != Kind::Forward || listed.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                continue;
            }
            // The core rejected control bytes; bytes that are not UTF-8 are dropped with the header.
            if let Some(value) = h.value_str() {
                out.push(pair(forwarded_name(name), value.to_owned()));
            }
        }
        // A protocol upgrade (WebSocket) asked for with `Connection: upgrade` is passed on;
        // the host then tunnels the connection after the upstream's 101.
        if req.http_minor == 1 && listed.iter().any(|t| t.eq_ignore_ascii_case("upgrade")) {
            if let Some(proto) = upgrade {
                out.push(pair("Upgrade", proto.to_owned()));
            }
        }
        if let (true, Some(h)) = (self.copy_host, host) {
            out.push(pair("Host", h.to_owned()));
        }
        append(&mut forwarded_for, ip);
        out.push(pair("X-Forwarded-For", forwarded_for));
        out.push(pair(
            "X-Forwarded-Proto",
            if req.secure { "https" } else { "http" },
        ));
        if let Some(h) = host {
            out.push(pair("X-Forwarded-Host", h.to_owned()));
        }
        out.push(pair("Via", with_via(via)));
        out
    }
}

/// A client's header name, borrowed when it is one commonly sent, spelled as HTTP/1.1
/// clients (or, lowercase, HTTP/2 ones) do: a copy and its free saved per header.
fn forwarded_name(name: &str) -> HeaderText {
    macro_rules! common {
        ($($n:literal),*) => {
            match name {
                $($n => RCowStr::from($n),)*
                _ => RCowStr::from(name.to_owned()),
            }
        };
    }
    common!(
        "User-Agent",
        "Accept",
        "Accept-Encoding",
        "Accept-Language",
        "Cookie",
        "Referer",
        "Authorization",
        "Content-Type",
        "Cache-Control",
        "If-None-Match",
        "If-Modified-Since",
        "Origin",
        "user-agent",
        "accept",
        "accept-encoding",
        "accept-language",
        "cookie",
        "referer",
        "authorization",
        "content-type",
        "cache-control",
        "if-none-match",
        "if-modified-since",
        "origin"
    )
}

/// A list header's values joined as one (`a, b`).
fn append(list: &mut String, value: &str) {
    if !list.is_empty() {
        list.push_str(", ");
    }
    list.push_str(value);
}

/// Static names and values are borrowed, not copied.
fn pair(name: impl Into<HeaderText>, value: impl Into<HeaderText>) -> HeaderPair {
    HeaderPair::new(name, value)
}

/// `Via` with this proxy appended to the earlier ones: the constant itself when there were
/// none (the common case).
fn with_via(mut earlier: String) -> HeaderText {
    if earlier.is_empty() {
        return RCowStr::from(VIA);
    }
    append(&mut earlier, VIA);
    RCowStr::from(earlier)
}

impl Handler for Proxy {
    fn handle(&self, req: &Request<'_>, _resp: &mut Response) -> Outcome {
        let ip = req.remote_ip();
        let request = UpstreamRequest {
            method: RString::from(req.method.as_str()),
            target: self.target(req).into(),
            headers: self.headers(req, ip),
            body: RVec::from(req.body.as_slice()),
            client_ip: RString::from(ip),
            body_stream: req
                .take_body_stream()
                .map(|stream| RArc::new(BodySlot::new(stream)))
                .into(),
        };
        let pending = host::upstream_request(self.backend, request);
        Outcome::later(async move {
            match pending.await {
                RResult::ROk(mut resp) => {
                    let mut earlier = String::new();
                    for h in resp
                        .headers
                        .iter()
                        .filter(|h| h.name.eq_ignore_ascii_case("via"))
                    {
                        append(&mut earlier, &h.value);
                    }
                    let via = with_via(earlier);
                    resp.set_header("Via", via);
                    Reply::Done(resp)
                }
                RResult::RErr(e) => {
                    host::warn(&e.message);
                    Reply::Error(e.status)
                }
            }
        })
    }

    fn streams_request_body(&self) -> bool {
        !self.buffer_body
    }
}

osprey_sdk::export_module!(ProxyModule);

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::testing::{self, TestRequest, Verdict};

    fn proxy(route: &str) -> HandlerBox {
        let module: ProxyModule = testing::module("null").unwrap();
        testing::handler(&module, "http_proxy", route).unwrap()
    }

    #[test]
    fn rewrites_the_target_and_forwarding_headers() {
        testing::reset();
        testing::add_backend("app");
        testing::on_upstream(|_, _| {
            let mut resp = Response::new();
            resp.header("Via", "1.0 origin").text("from app");
            Ok(resp)
        });
        let h = proxy(r#"{"prefix": "/app", "backend": "app", "uri": "/v1/"}"#);
        let req = TestRequest::get("/app/items?id=3")
            .route_prefix("/app")
            .header("Host", "front.example")
            .header("Connection", "keep-alive, X-Hop")
            .header("X-Hop", "drop me")
            .header("X-Forwarded-For", "10.0.0.1")
            .header("Accept", "*/*")
            .remote_addr("192.0.2.7:5000");
        let resp = testing::call(&h, &req);
        assert_eq!(
            (resp.verdict, resp.text().as_str()),
            (Verdict::Done, "from app")
        );
        assert_eq!(resp.header("via"), Some("1.0 origin, 1.1 osprey"));
        let sent = testing::upstream_requests();
        let (backend, up) = &sent[0];
        assert_eq!(
            (backend.as_str(), up.target.as_str()),
            ("app", "/v1/items?id=3")
        );
        let header = |name: &str| {
            up.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| h.value.to_string())
        };
        assert_eq!(
            header("x-forwarded-for").as_deref(),
            Some("10.0.0.1, 192.0.2.7")
        );
        assert_eq!(header("x-forwarded-host").as_deref(), Some("front.example"));
        assert_eq!(header("accept").as_deref(), Some("*/*"));
        assert_eq!(header("x-hop"), None);
        assert_eq!(header("host"), None);
    }

    #[test]
    fn upstream_failures_become_their_status_and_a_warning() {
        testing::reset();
        testing::add_backend("app");
        testing::on_upstream(|_, _| {
            Err(osprey_sdk::UpstreamError {
                status: 504,
                message: "upstream timed out".into(),
            })
        });
        let h = proxy(r#"{"backend": "app"}"#);
        let resp = testing::call(&h, &TestRequest::get("/x"));
        assert_eq!(resp.verdict, Verdict::Error(504));
        assert!(testing::logged(
            osprey_sdk::host::Level::Warn,
            "upstream timed out"
        ));
    }

    #[test]
    fn unknown_backend_is_a_config_error_naming_the_key() {
        testing::reset();
        let module: ProxyModule = testing::module("null").unwrap();
        let err = testing::handler(&module, "http_proxy", r#"{"backend": "nope"}"#)
            .err()
            .unwrap();
        assert!(err.to_string().contains("no backend named `nope`"), "{err}");
    }
}
