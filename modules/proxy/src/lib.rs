//! `proxy`: the `http_proxy` handler. It holds the proxying *policy* — which backend, how the
//! path is rewritten, which headers go upstream and which come back — and leaves the machinery
//! (pools, balancing, health checks, retries, strict parsing) to the host's upstream service.
//! No I/O of its own: it awaits the host's future and hands the host's body stream (or, after
//! a 101, its tunnel) on.
//!
//! ```json
//! {"prefix": "/app", "handler": "http_proxy", "backend": "app", "uri": "/", "proxy_copy_host": true}
//! ```

use osprey_sdk::abi_stable::std_types::{RArc, RCowStr, RResult, RSlice, RStr, RVec};
use osprey_sdk::{
    handler_box, host, parse_config, BackendId, BodySlot, ConfigError, FixedHeader, Handler,
    HandlerBox, HeaderPair, HeaderText, Module, Outcome, Reply, Request, Response, UpstreamRequest,
};
use serde::Deserialize;
use std::sync::OnceLock;

/// The server's allocator (mimalloc) for the request and header lists built here: glibc's
/// free cost about twice as much per request.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;

/// What this proxy adds to `Via`.
const VIA: &str = "1.1 osprey";

/// The client headers this handler reads: it replaces them (or, `Connection` and `Upgrade`,
/// decides whether to pass the upgrade on). The others go upstream as the host forwards them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Other,
    Connection,
    Upgrade,
    Host,
    ForwardedFor,
    Via,
}

/// A header's kind, found with one comparison or two (by the name's length first): every
/// header of every request goes through here.
fn kind(name: &str) -> Kind {
    let is = |lower: &str| osprey_sdk::fields::is_named(name.as_bytes(), lower.as_bytes());
    match name.len() {
        3 if is("via") => Kind::Via,
        4 if is("host") => Kind::Host,
        7 if is("upgrade") => Kind::Upgrade,
        10 if is("connection") => Kind::Connection,
        15 if is("x-forwarded-for") => Kind::ForwardedFor,
        _ => Kind::Other,
    }
}

/// The client's headers the handler sets itself: not forwarded as they are (`Host`, and
/// what the host drops as hop-by-hop, the host leaves out on its own).
const REPLACED: &[RStr<'static>] = &[
    RStr::from_str("x-forwarded-for"),
    RStr::from_str("x-forwarded-proto"),
    RStr::from_str("x-forwarded-host"),
    RStr::from_str("via"),
];

/// The headers this handler adds, checked once (`FixedHeader`): the host writes them without
/// checking their names again, and the constant ones without checking them at all.
struct Names {
    forwarded_for: &'static FixedHeader,
    forwarded_host: &'static FixedHeader,
    http: &'static FixedHeader,
    https: &'static FixedHeader,
    via: &'static FixedHeader,
    via_alone: &'static FixedHeader,
}

impl Names {
    fn get() -> &'static Names {
        static NAMES: OnceLock<Names> = OnceLock::new();
        NAMES.get_or_init(|| {
            let fixed = |name, value| FixedHeader::new(name, value).expect("a valid header");
            Names {
                forwarded_for: fixed("X-Forwarded-For", ""),
                forwarded_host: fixed("X-Forwarded-Host", ""),
                http: fixed("X-Forwarded-Proto", "http"),
                https: fixed("X-Forwarded-Proto", "https"),
                via: fixed("Via", ""),
                via_alone: fixed("Via", VIA),
            }
        })
    }
}

fn is_via(name: &str) -> bool {
    osprey_sdk::fields::is_named(name.as_bytes(), b"via")
}

/// A header of a fixed name with this value.
fn named(name: &'static FixedHeader, value: impl Into<HeaderText>) -> HeaderPair {
    HeaderPair {
        name: name.name().into(),
        value: value.into(),
        fixed: Some(name),
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
            names: Names::get(),
            uri: conf.uri,
            copy_host: conf.proxy_copy_host,
            buffer_body: conf.proxy_request_buffering,
        }))
    }
}

struct Proxy {
    backend: BackendId,
    names: &'static Names,
    uri: Option<String>,
    copy_host: bool,
    buffer_body: bool,
}

impl Proxy {
    /// The target sent upstream: the route prefix replaced by `uri`, if set.
    fn target<'a>(&self, req: &Request<'a>) -> RCowStr<'a> {
        let Some(base) = &self.uri else {
            // As it is: borrowed for the call.
            return req.uri.as_str().into();
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
        target.into()
    }

    /// The headers the handler adds to the client's (`ip`: the client's address), read from
    /// them in one pass: the upgrade, `Host` when copied, and the forwarding ones.
    fn headers(&self, req: &Request<'_>, ip: &str) -> RVec<HeaderPair> {
        let mut out = RVec::with_capacity(6);
        let (mut host, mut upgrade, mut upgrade_asked) = (None, None, false);
        let (mut forwarded_for, mut via) = (String::new(), String::new());
        for h in req.headers.iter() {
            let kind = kind(h.name.as_str());
            if kind == Kind::Other {
                continue;
            }
            // Values that are not UTF-8 are not read.
            let Some(value) = h.value_str() else {
                continue;
            };
            match kind {
                Kind::Other => {}
                Kind::Connection => {
                    upgrade_asked |= value
                        .split(',')
                        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
                }
                Kind::Upgrade => upgrade = upgrade.or(Some(value)),
                Kind::Host => host = host.or(Some(value)),
                Kind::ForwardedFor => append(&mut forwarded_for, value),
                Kind::Via => append(&mut via, value),
            }
        }
        // A protocol upgrade (WebSocket) asked for with `Connection: upgrade` is passed on;
        // the host then tunnels the connection after the upstream's 101.
        if let (1, true, Some(proto)) = (req.http_minor, upgrade_asked, upgrade) {
            out.push(pair("Upgrade", proto.to_owned()));
        }
        if let (true, Some(h)) = (self.copy_host, host) {
            out.push(pair("Host", h.to_owned()));
        }
        let names = self.names;
        append(&mut forwarded_for, ip);
        out.push(named(names.forwarded_for, forwarded_for));
        out.push(if req.secure { names.https } else { names.http }.pair());
        if let Some(h) = host {
            out.push(named(names.forwarded_host, h.to_owned()));
        }
        out.push(if via.is_empty() {
            names.via_alone.pair()
        } else {
            named(names.via, with_via(via))
        });
        out
    }
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
            method: req.method.as_str().into(),
            target: self.target(req),
            // The client's headers as parsed, without a copy: the host drops the hop-by-hop.
            forward: req.headers,
            except: RSlice::from_slice(REPLACED),
            headers: self.headers(req, ip),
            body: RVec::from(req.body.as_slice()),
            client_ip: ip.into(),
            body_stream: req
                .take_body_stream()
                .map(|stream| RArc::new(BodySlot::new(stream)))
                .into(),
        };
        let pending = host::upstream_request(self.backend, request);
        let names = self.names;
        Outcome::later(async move {
            match pending.await {
                RResult::ROk(mut resp) => {
                    let mut earlier = String::new();
                    for h in resp.headers.iter().filter(|h| is_via(&h.name)) {
                        append(&mut earlier, &h.value);
                    }
                    // Alone (the common case), the fixed line: written with no check.
                    if earlier.is_empty() {
                        resp.headers.push(names.via_alone.pair());
                    } else {
                        resp.set_header_named(names.via, with_via(earlier));
                    }
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
            .header("X-Forwarded-Proto", "https")
            .header("accept", "text/html")
            .remote_addr("192.0.2.7:5000");
        let resp = testing::call(&h, &req);
        assert_eq!(
            (resp.verdict, resp.text().as_str()),
            (Verdict::Done, "from app")
        );
        assert_eq!(resp.header("via"), Some("1.0 origin, 1.1 osprey"));
        let sent = testing::upstream_requests();
        let (backend, up) = &sent[0];
        assert_eq!((backend.as_str(), &*up.target), ("app", "/v1/items?id=3"));
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
        assert_eq!(header("x-forwarded-proto").as_deref(), Some("http"));
        // Repeated client headers go each in its place, the forwarding ones after them.
        let names: Vec<&str> = up.headers.iter().map(|h| &*h.name).collect();
        assert_eq!(
            names,
            [
                "Accept",
                "accept",
                "X-Forwarded-For",
                "X-Forwarded-Proto",
                "X-Forwarded-Host",
                "Via"
            ]
        );
        assert_eq!(header("x-hop"), None);
        assert_eq!(header("host"), None);
    }

    /// An answer without `Via` gets this proxy's alone, once; one with two keeps both first.
    #[test]
    fn via_is_appended_once() {
        testing::reset();
        testing::add_backend("app");
        let h = proxy(r#"{"backend": "app"}"#);
        for (upstream, expect) in [
            (&[][..], "1.1 osprey"),
            (&["1.0 a", "1.1 b"][..], "1.0 a, 1.1 b, 1.1 osprey"),
        ] {
            testing::on_upstream(move |_, _| {
                let mut resp = Response::new();
                for via in upstream {
                    resp.header("Via", *via);
                }
                resp.text("x");
                Ok(resp)
            });
            let resp = testing::call(&h, &TestRequest::get("/x"));
            assert_eq!(resp.header_all("via"), [expect]);
        }
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
