//! Subrequests (`osprey_sdk::subrequest`): an internal `GET` a module starts while the core is
//! calling it for a request. It runs through the same pipeline ([`dispatch`](super::dispatch))
//! on the same network thread, with no socket: the parent's connection facts (`Peer`: remote
//! address, TLS) are its own. Limits (`limits.max_subrequest_depth`, `limits.max_subrequests`):
//! depth, count per client request, and loops. A subrequest shares its client request's id
//! (as nginx's do) and its head is written, never parsed.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use async_ffi::LocalFfiFuture;
use osprey_sdk::abi_stable::sabi_trait::TD_Opaque;
use osprey_sdk::abi_stable::std_types::{RResult, RStr};
use osprey_sdk::fields::{is_field_value, is_token};
use osprey_sdk::subrequest::{
    ParentBox, SubrequestError, SubrequestFuture, SubrequestParent, SubrequestParent_TO,
    SubrequestTarget,
};
use osprey_sdk::{HeaderPair, Response};

use tokio::time::Instant;

use super::{
    dispatch_now, finish, start_clock, BodyLoc, Dispatched, Exchange, Finished, Peer, Routed,
};
use crate::config::Limits;
use crate::http::parse::{Head, Span, MAX_HEADERS};
use crate::request_id::RequestId;
use crate::server::Shared;

/// Where a request stands among subrequests: how deep, its (host, URI) and its parent's
/// lineage (for loop detection), the count left to the whole client request, and its id.
#[derive(Debug)]
pub struct Lineage {
    depth: u32,
    host: Box<str>,
    uri: Box<str>,
    up: Option<Arc<Lineage>>,
    left: Arc<AtomicU32>,
    id: RequestId,
}

impl Lineage {
    /// A client request's, which may start `count` subrequests.
    fn root(host: &str, uri: &str, count: u32, id: RequestId) -> Lineage {
        Lineage {
            depth: 0,
            host: host.into(),
            uri: uri.into(),
            up: None,
            left: Arc::new(AtomicU32::new(count)),
            id,
        }
    }

    /// The lineage of a subrequest of this request to (`host`, `uri`), or why there is none.
    fn child(self: &Arc<Self>, host: &str, uri: &str, limits: &Limits) -> Result<Lineage, String> {
        let max_depth = limits.max_subrequest_depth;
        if self.depth >= max_depth {
            return Err(format!(
                "subrequest to {uri} refused: subrequests nest deeper than {max_depth} \
                 (limits.max_subrequest_depth)"
            ));
        }
        let mut at = Some(self);
        while let Some(l) = at {
            if *l.host == *host && *l.uri == *uri {
                return Err(format!(
                    "subrequest to {uri} refused: it includes itself (a subrequest loop)"
                ));
            }
            at = l.up.as_ref();
        }
        let took = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if took.is_err() {
            return Err(format!(
                "subrequest to {uri} refused: more than {} subrequests for one request \
                 (limits.max_subrequests)",
                limits.max_subrequests
            ));
        }
        Ok(Lineage {
            depth: self.depth + 1,
            host: host.into(),
            uri: uri.into(),
            up: Some(self.clone()),
            left: self.left.clone(),
            id: self.id,
        })
    }
}

/// The request the core is calling a module for on this thread, if any.
#[derive(Clone, Copy)]
struct Current {
    shared: *const Arc<Shared>,
    peer: *const Arc<Peer>,
    /// The request's lineage, made on its first subrequest.
    lineage: *mut Option<Arc<Lineage>>,
    /// The id its subrequests share.
    id: RequestId,
}

thread_local! {
    static CURRENT: Cell<Option<Current>> = const { Cell::new(None) };
}

/// While alive, subrequests started on this thread are for the given request.
pub(super) struct Scope {
    prev: Option<Current>,
}

impl Scope {
    /// `lineage` must outlive the scope and not be touched elsewhere while it lasts.
    pub(super) fn enter(
        shared: &Arc<Shared>,
        peer: &Arc<Peer>,
        lineage: &mut Option<Arc<Lineage>>,
        id: RequestId,
    ) -> Scope {
        let now = Current {
            shared,
            peer,
            lineage,
            id,
        };
        Scope {
            prev: CURRENT.replace(Some(now)),
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        CURRENT.set(self.prev);
    }
}

fn refused(status: u16, message: String) -> SubrequestFuture {
    LocalFfiFuture::new(async move {
        RResult::RErr(SubrequestError {
            status,
            message: message.into(),
        })
    })
}

/// A request that may start subrequests: what they inherit from it.
struct CoreParent {
    shared: Arc<Shared>,
    peer: Arc<Peer>,
    host: String,
    lineage: Arc<Lineage>,
}

/// The request the core is calling a module for on this thread, as a parent.
fn current_parent(
    parent_host: RStr<'_>,
    parent_uri: RStr<'_>,
) -> Result<CoreParent, SubrequestError> {
    let Some(current) = CURRENT.get() else {
        return Err(error(
            500,
            "a subrequest must be started while its parent request is being handled \
             (inline, on its network thread)"
                .into(),
        ));
    };
    // SAFETY: `current` is set only by a live `Scope`, whose referents outlive it, and this
    // runs inside the module call that scope wraps.
    let (shared, peer, lineage) = unsafe {
        (
            (*current.shared).clone(),
            (*current.peer).clone(),
            &mut *current.lineage,
        )
    };
    let (host, uri) = (parent_host.as_str(), parent_uri.as_str());
    let count = shared.config.limits.max_subrequests;
    let lineage =
        lineage.get_or_insert_with(|| Arc::new(Lineage::root(host, uri, count, current.id)));
    Ok(CoreParent {
        shared,
        peer,
        host: host.to_owned(),
        lineage: lineage.clone(),
    })
}

impl SubrequestParent for CoreParent {
    fn start(&self, target: SubrequestTarget) -> SubrequestFuture {
        let uri = target.uri.as_str();
        let host = match target.host.as_str() {
            "" => self.host.clone(),
            other => other.to_ascii_lowercase(),
        };
        if let Err(why) = check_target(uri, &host, &target) {
            return refused(400, format!("subrequest to {uri:?} refused: {why}"));
        }
        let lineage = match self.lineage.child(&host, uri, &self.shared.config.limits) {
            Ok(lineage) => Arc::new(lineage),
            Err(message) => return refused(500, message),
        };
        let started = start_clock();
        let ex = match exchange(&self.shared.config.limits, uri, &host, &target, lineage) {
            Ok(ex) => ex,
            Err(e) => return refused(e.status, e.message.into()),
        };
        // Routed now, as the main pipeline's fast path: an inline answer (a cached fragment)
        // costs no future of its run.
        match dispatch_now(&self.shared, &self.peer, ex) {
            Routed::Answered(ex) => {
                let answer = ended(&self.peer, started, Dispatched::Answered(ex));
                LocalFfiFuture::new(std::future::ready(answer.into()))
            }
            Routed::Waits(rest) => {
                let (shared, peer) = (self.shared.clone(), self.peer.clone());
                LocalFfiFuture::new(async move {
                    let dispatched = finish(&shared, &peer, rest).await;
                    ended(&peer, started, dispatched).into()
                })
            }
        }
    }
}

/// The host service behind `osprey_sdk::host::subrequest`.
pub extern "C" fn host_subrequest(
    parent_host: RStr<'_>,
    parent_uri: RStr<'_>,
    target: SubrequestTarget,
) -> SubrequestFuture {
    match current_parent(parent_host, parent_uri) {
        Ok(parent) => parent.start(target),
        Err(e) => refused(e.status, e.message.into()),
    }
}

/// The host service behind `osprey_sdk::host::subrequest_parent`.
pub extern "C" fn host_subrequest_parent(
    parent_host: RStr<'_>,
    parent_uri: RStr<'_>,
) -> RResult<ParentBox, SubrequestError> {
    current_parent(parent_host, parent_uri)
        .map(|p| SubrequestParent_TO::from_value(p, TD_Opaque))
        .into()
}

/// No bytes that would make the request line or a header say something else, and no body.
fn check_target(uri: &str, host: &str, target: &SubrequestTarget) -> Result<(), &'static str> {
    let clean = |s: &str| !s.bytes().any(|b| b <= b' ' || b == 0x7f);
    if !uri.starts_with('/') || !clean(uri) {
        return Err("the URI must be a path (and query) without spaces or control bytes");
    }
    if !clean(host) || host.contains('/') {
        return Err("the host is not a host name");
    }
    for h in target.headers.iter() {
        if !is_token(&h.name) || !is_field_value(h.value.trim_matches([' ', '\t'])) {
            return Err("a header name or value is not valid");
        }
        let name = h.name.as_str();
        if name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
        {
            return Err("a subrequest has no body (no Content-Length or Transfer-Encoding)");
        }
    }
    Ok(())
}

/// The subrequest as the pipeline takes it: its head in HTTP/1.1 form (the request view and
/// the access log read those bytes), its spans noted as the bytes are written, not parsed
/// back; the limits on a client's head apply.
fn exchange(
    limits: &Limits,
    uri: &str,
    host: &str,
    target: &SubrequestTarget,
    lineage: Arc<Lineage>,
) -> Result<Exchange, SubrequestError> {
    let fields: usize = target
        .headers
        .iter()
        .map(|h| h.name.len() + h.value.len() + 4)
        .sum();
    let mut buf = Vec::with_capacity(32 + uri.len() + host.len() + fields);
    // Sized in place: a head is large, and is not moved into its box.
    let mut head = Box::<Head>::default();
    let put = |buf: &mut Vec<u8>, bytes: &[u8]| {
        let start = buf.len() as u32;
        buf.extend_from_slice(bytes);
        Span {
            start,
            end: buf.len() as u32,
        }
    };
    head.method = put(&mut buf, b"GET");
    buf.push(b' ');
    head.uri = put(&mut buf, uri.as_bytes());
    (head.path, head.query) = match memchr::memchr(b'?', uri.as_bytes()) {
        Some(q) => {
            let q = head.uri.start + q as u32;
            let path = Span { end: q, ..head.uri };
            (
                path,
                Span {
                    start: q + 1,
                    ..head.uri
                },
            )
        }
        None => (head.uri, Span::default()),
    };
    buf.extend_from_slice(b" HTTP/1.1\r\n");
    if buf.len() - 2 > limits.max_request_line {
        return Err(error(
            414,
            format!("subrequest to {uri} refused: request line too long"),
        ));
    }
    let own = |h: &&HeaderPair| !h.name.eq_ignore_ascii_case("host");
    if 1 + target.headers.iter().filter(own).count() > limits.max_headers.min(MAX_HEADERS) {
        let why = format!("subrequest to {uri} refused: too many headers");
        return Err(error(431, why));
    }
    let mut header = |buf: &mut Vec<u8>, name: &str, value: &str| {
        let name = put(buf, name.as_bytes());
        buf.extend_from_slice(b": ");
        let value = put(buf, value.as_bytes());
        buf.extend_from_slice(b"\r\n");
        head.headers.push((name, value));
        value
    };
    let host_span = header(&mut buf, "Host", host);
    for h in target.headers.iter().filter(own) {
        header(&mut buf, &h.name, h.value.trim_matches([' ', '\t']));
    }
    buf.extend_from_slice(b"\r\n");
    head.len = buf.len();
    if head.len > limits.max_header_bytes {
        let why = format!("subrequest to {uri} refused: request headers too large");
        return Err(error(431, why));
    }
    crate::http::parse::set_host(&mut head, &buf, host_span).map_err(|e| {
        error(
            e.status,
            format!("subrequest to {uri} refused: {}", e.reason),
        )
    })?;
    Ok(Exchange {
        buf,
        head,
        body: BodyLoc::InBuf(Default::default()),
        resp: Response::default(),
        extra: Vec::new(),
        stream: None,
        id: lineage.id,
        lineage: Some(lineage),
    })
}

/// Count and log the subrequest's run, and hand its response over.
fn ended(
    peer: &Peer,
    started: Option<Instant>,
    dispatched: Dispatched,
) -> Result<Response, SubrequestError> {
    let (ex, status) = match dispatched {
        Dispatched::Answered(ex) => {
            let status = ex.resp.status;
            (Some(ex), status)
        }
        Dispatched::Lost => (None, 500),
    };
    super::finished::subrequest_finished(Finished {
        peer,
        request: ex.as_ref().map(|ex| (&ex.buf[..], &*ex.head)),
        status,
        body_bytes: ex.as_ref().and_then(|ex| ex.resp.body.len()).unwrap_or(0),
        started,
        id: ex.as_ref().map(|ex| ex.id),
        set_cookies: &[],
    });
    match ex {
        Some(ex) => Ok(ex.resp),
        None => Err(error(500, "the subrequest's worker job failed".into())),
    }
}

fn error(status: u16, message: String) -> SubrequestError {
    SubrequestError {
        status,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::abi_stable::std_types::RVec;

    /// A client request's id.
    fn some_id() -> RequestId {
        let buf = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n";
        let head = crate::http::parse::parse(buf, &Limits::default())
            .unwrap()
            .unwrap();
        crate::request_id::RequestIds::default().for_request("1.2.3.4:5", buf, &head)
    }

    fn root(limits: &Limits) -> Arc<Lineage> {
        Arc::new(Lineage::root(
            "h",
            "/page",
            limits.max_subrequests,
            some_id(),
        ))
    }

    #[test]
    fn depth_loops_and_count_are_limited() {
        let limits = Limits::default();
        let root_of = root;
        let root = root_of(&limits);
        let child = |l: &Arc<Lineage>, uri: &str| l.child("h", uri, &limits).map(Arc::new);
        assert!(child(&root, "/page")
            .unwrap_err()
            .contains("includes itself"));
        // The same URI on another host is not a loop.
        assert!(root.child("other", "/page", &limits).is_ok());
        let mut at = child(&root, "/a").unwrap();
        // A loop through an ancestor further up.
        assert!(child(&at, "/page").unwrap_err().contains("includes itself"));
        for d in 2..=limits.max_subrequest_depth {
            at = child(&at, &format!("/d{d}")).unwrap();
        }
        let refused = child(&at, "/deeper").unwrap_err();
        assert!(refused.contains("deeper than 8"), "{refused}");
        let root = root_of(&limits);
        for i in 0..limits.max_subrequests {
            child(&root, &format!("/f{i}")).unwrap();
        }
        let refused = child(&root, "/one-more").unwrap_err();
        assert!(refused.contains("more than 64"), "{refused}");
    }

    fn target(uri: &str, headers: &[(&str, &str)]) -> SubrequestTarget {
        SubrequestTarget {
            uri: uri.into(),
            host: "".into(),
            headers: headers
                .iter()
                .map(|&(name, value)| HeaderPair {
                    name: name.to_owned().into(),
                    value: value.to_owned().into(),
                })
                .collect::<RVec<_>>(),
        }
    }

    #[test]
    fn the_written_head_is_the_one_the_parser_reads() {
        let limits = Limits::default();
        let headers = [("X-Raw", " 1\t"), ("host", "ignored"), ("Accept", "text/*")];
        for (uri, host) in [
            ("/a/b?x=1&y", "Example.COM:8080"),
            ("/", "[::1]"),
            ("/p?", "h"),
        ] {
            let t = target(uri, &headers);
            let lineage = root(&limits);
            let ex = exchange(&limits, uri, host, &t, lineage).unwrap();
            let parsed = crate::http::parse::parse(&ex.buf, &limits)
                .unwrap()
                .unwrap();
            assert_eq!(
                format!("{:?}", ex.head),
                format!("{parsed:?}"),
                "{uri} {host}"
            );
        }
    }

    #[test]
    fn subrequests_share_the_client_requests_id() {
        let limits = Limits::default();
        let root = root(&limits);
        let t = target("/f", &[]);
        let child = Arc::new(root.child("h", "/f", &limits).unwrap());
        let ex = exchange(&limits, "/f", "h", &t, child).unwrap();
        assert_eq!(ex.id.text(&ex.buf), root.id.text(b""));
    }

    #[test]
    fn bad_targets_are_refused() {
        let limits = Limits::default();
        let refused = |uri: &str, host: &str, headers: &[(&str, &str)]| {
            check_target(uri, host, &target(uri, headers)).is_err()
        };
        assert!(!refused("/ok?q", "h", &[("X-A", "b c")]));
        assert!(refused("/a b", "h", &[]));
        assert!(refused("a", "h", &[]));
        assert!(refused("/a", "h/x", &[]));
        assert!(refused("/a", "h", &[("X A", "b")]));
        assert!(refused("/a", "h", &[("X-A", "b\0")]));
        assert!(refused("/a", "h", &[("Content-Length", "5")]));
        assert!(refused("/a", "h", &[("transfer-encoding", "chunked")]));
        // The limits on a client's head apply.
        let long = format!("/{}", "a".repeat(limits.max_request_line));
        let err = exchange(&limits, &long, "h", &target(&long, &[]), root(&limits));
        assert_eq!(err.err().map(|e| e.status), Some(414));
        let many: Vec<(String, String)> = (0..limits.max_headers)
            .map(|i| (format!("X-{i}"), "v".into()))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let err = exchange(&limits, "/m", "h", &target("/m", &many), root(&limits));
        assert_eq!(err.err().map(|e| e.status), Some(431));
        let err = exchange(&limits, "/m", "h:x", &target("/m", &[]), root(&limits));
        assert_eq!(err.err().map(|e| e.status), Some(400));
    }
}
