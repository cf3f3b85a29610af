//! Subrequests (`osprey_sdk::subrequest`): an internal `GET` a module starts while the core is
//! calling it for a request. It runs through the same pipeline ([`dispatch`](super::dispatch))
//! on the same network thread, with no socket: the parent's connection facts (`Peer`: remote
//! address, TLS) are its own. Limits (`limits.max_subrequest_depth`, `limits.max_subrequests`):
//! depth, count per client request, and loops.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use async_ffi::LocalFfiFuture;
use osprey_sdk::abi_stable::sabi_trait::TD_Opaque;
use osprey_sdk::abi_stable::std_types::{RResult, RStr};
use osprey_sdk::subrequest::{
    ParentBox, SubrequestError, SubrequestFuture, SubrequestParent, SubrequestParent_TO,
    SubrequestTarget,
};
use osprey_sdk::Response;

use tokio::time::Instant;

use super::{
    dispatch_now, finish, start_clock, BodyLoc, Dispatched, Exchange, Finished, Peer, Routed,
};
use crate::config::Limits;
use crate::server::Shared;

/// Where a request stands among subrequests: how deep, its (host, URI) and its parent's
/// lineage (for loop detection), and the count left to the whole client request.
#[derive(Debug)]
pub struct Lineage {
    depth: u32,
    host: Box<str>,
    uri: Box<str>,
    up: Option<Arc<Lineage>>,
    left: Arc<AtomicU32>,
}

impl Lineage {
    /// A client request's, which may start `count` subrequests.
    fn root(host: &str, uri: &str, count: u32) -> Lineage {
        Lineage {
            depth: 0,
            host: host.into(),
            uri: uri.into(),
            up: None,
            left: Arc::new(AtomicU32::new(count)),
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
    ) -> Scope {
        let now = Current {
            shared,
            peer,
            lineage,
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
    let lineage = lineage.get_or_insert_with(|| Arc::new(Lineage::root(host, uri, count)));
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
        let buf = request_bytes(uri, &host, &target);
        let started = start_clock();
        let ex = match exchange(&self.shared, &self.peer, buf, lineage) {
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

/// No bytes that would make the request line or a header say something else.
fn check_target(uri: &str, host: &str, target: &SubrequestTarget) -> Result<(), &'static str> {
    let clean = |s: &str| !s.bytes().any(|b| b <= b' ' || b == 0x7f);
    if !uri.starts_with('/') || !clean(uri) {
        return Err("the URI must be a path (and query) without spaces or control bytes");
    }
    if !clean(host) || host.contains('/') {
        return Err("the host is not a host name");
    }
    let bad_header = target.headers.iter().any(|h| {
        !clean(&h.name)
            || h.name.contains(':')
            || memchr::memchr2(b'\r', b'\n', h.value.as_bytes()).is_some()
    });
    if bad_header {
        return Err("a header name or value is not valid");
    }
    Ok(())
}

/// The subrequest in HTTP/1.1 form, as the core parses every request (HTTP/2's too).
fn request_bytes(uri: &str, host: &str, target: &SubrequestTarget) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64 + uri.len() + host.len());
    buf.extend_from_slice(b"GET ");
    buf.extend_from_slice(uri.as_bytes());
    buf.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    buf.extend_from_slice(host.as_bytes());
    buf.extend_from_slice(b"\r\n");
    for h in target.headers.iter() {
        if h.name.eq_ignore_ascii_case("host") {
            continue;
        }
        buf.extend_from_slice(h.name.as_bytes());
        buf.extend_from_slice(b": ");
        buf.extend_from_slice(h.value.as_bytes());
        buf.extend_from_slice(b"\r\n");
    }
    buf.extend_from_slice(b"\r\n");
    buf
}

/// The subrequest parsed, as the pipeline takes it.
fn exchange(
    shared: &Shared,
    peer: &Peer,
    buf: Vec<u8>,
    lineage: Arc<Lineage>,
) -> Result<Exchange, SubrequestError> {
    // Parsed in place: a head is large, and is not moved into its box.
    let mut head = Box::<crate::http::parse::Head>::default();
    match crate::http::parse::parse_into(&buf, &shared.config.limits, &mut head) {
        Ok(true) => {}
        Ok(false) => return Err(error(400, "the subrequest's head is incomplete".into())),
        Err(e) => {
            let why = format!("the subrequest is not valid HTTP: {}", e.reason);
            return Err(error(e.status, why));
        }
    }
    let id = (shared.config.request_id).for_request(&peer.remote, &buf, &head);
    Ok(Exchange {
        buf,
        head,
        body: BodyLoc::InBuf(Default::default()),
        resp: Response::default(),
        extra: Vec::new(),
        stream: None,
        id,
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

    #[test]
    fn depth_loops_and_count_are_limited() {
        let limits = Limits::default();
        let root = Arc::new(Lineage::root("h", "/page", limits.max_subrequests));
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
        let root = Arc::new(Lineage::root("h", "/page", limits.max_subrequests));
        for i in 0..limits.max_subrequests {
            child(&root, &format!("/f{i}")).unwrap();
        }
        let refused = child(&root, "/one-more").unwrap_err();
        assert!(refused.contains("more than 64"), "{refused}");
    }
}
