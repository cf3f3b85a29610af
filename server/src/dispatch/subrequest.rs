//! Subrequests (`osprey_sdk::subrequest`): an internal `GET` a module starts while the core is
//! calling it for a request. It runs through the same pipeline ([`dispatch`](super::dispatch))
//! on the same network thread, with no socket: the parent's connection facts (`Peer`: remote
//! address, TLS) are its own. Limits (`limits.max_subrequest_depth`, `limits.max_subrequests`):
//! depth, count per client request, and loops. A subrequest shares its client request's id
//! and its `Cookie` (as nginx's share the main request's headers), and its head is written,
//! never parsed.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use async_ffi::LocalFfiFuture;
use osprey_sdk::abi_stable::sabi_trait::TD_Opaque;
use osprey_sdk::abi_stable::std_types::{RCowStr, RResult, RStr, RVec};
use osprey_sdk::fields::is_token;
use osprey_sdk::subrequest::{
    ParentBox, SubrequestError, SubrequestParent, SubrequestParent_TO, SubrequestStarted,
    SubrequestTarget,
};
use osprey_sdk::{HeaderPair, Request, Response};

use tokio::time::Instant;

use super::{
    dispatch_now, finish, start_clock, BodyLoc, Dispatched, Exchange, Finished, Peer, Routed,
};
use crate::config::Limits;
use crate::conn::pool;
use crate::http::header_check::{bad_target, has_control};
use crate::http::parse::{read_host, HostRead, Span, MAX_HEADERS};
use crate::http::HttpError;
use crate::request_id::RequestId;
use crate::server::Shared;

/// Where a request stands among subrequests, as its exchange carries it (`None`: a client
/// request that started none yet).
#[derive(Debug)]
pub enum Kin {
    /// A client request's own lineage, made with its first subrequest.
    Root(Arc<Lineage>),
    /// A subrequest's: its parent's lineage, and whether the parent reads only its body
    /// (`SubrequestTarget::body_only`). Its own lineage is made only when it starts
    /// subrequests itself (most fragments start none: nothing is allocated for them).
    Child(Arc<Lineage>, bool),
    /// A client request that started none yet, whose filters changed the `Cookie` its
    /// handler saw (empty: none), kept for the subrequests its `after` steps may start
    /// ([`keep_cookie`]). Boxed: every exchange carries a `Kin`, and a lineage would cost
    /// three allocations for every new visitor of a `userid` route.
    Cookie(Box<RCowStr<'static>>),
}

impl Kin {
    /// Whether `kin` is a subrequest's whose parent reads only its body.
    pub fn body_only(kin: &Option<Kin>) -> bool {
        matches!(kin, Some(Kin::Child(_, true)))
    }

    /// Whether `kin` is a subrequest's.
    pub fn subrequest(kin: &Option<Kin>) -> bool {
        matches!(kin, Some(Kin::Child(..)))
    }
}

/// Where a request that starts subrequests stands: how deep, its (host, URI) and its
/// parent's lineage (for loop detection), the count left to the whole client request, and
/// its id.
#[derive(Debug)]
pub struct Lineage {
    depth: u32,
    /// Host and URI, in one allocation (see [`place`]).
    at: Box<str>,
    up: Option<Arc<Lineage>>,
    left: Arc<AtomicU32>,
    id: RequestId,
    /// A client request's `Cookie` as its handler saw it, when filters changed it (empty:
    /// none), kept for the subrequests its `after` steps start ([`keep_cookie`]).
    cookie: OnceLock<RCowStr<'static>>,
}

impl Lineage {
    /// A client request's, which may start `count` subrequests.
    fn root(host: &str, uri: &str, count: u32, id: RequestId) -> Lineage {
        Lineage {
            depth: 0,
            at: place(host, uri),
            up: None,
            left: Arc::new(AtomicU32::new(count)),
            id,
            cookie: OnceLock::new(),
        }
    }

    /// Whether this request may start a subrequest to (`host` as the subrequest's view has
    /// it, `uri`): why not if not. One is taken from the count left when it may.
    fn admit(self: &Arc<Self>, host: &str, uri: &str, limits: &Limits) -> Result<(), String> {
        let max_depth = limits.max_subrequest_depth;
        if self.depth >= max_depth {
            return Err(format!(
                "subrequest to {uri} refused: subrequests nest deeper than {max_depth} \
                 (limits.max_subrequest_depth)"
            ));
        }
        let mut at = Some(self);
        while let Some(l) = at {
            if l.is_at(host, uri) {
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
        Ok(())
    }

    /// The lineage of an admitted subrequest of this request, (`host`, `uri`) as its view
    /// has them, made when it starts subrequests of its own.
    fn child(self: &Arc<Self>, host: &str, uri: &str) -> Lineage {
        Lineage {
            depth: self.depth + 1,
            at: place(host, uri),
            up: Some(self.clone()),
            left: self.left.clone(),
            id: self.id,
            cookie: OnceLock::new(),
        }
    }

    /// Whether this is the lineage of (`host`, `uri`): [`place`] compared, not built.
    fn is_at(&self, host: &str, uri: &str) -> bool {
        let at = self.at.as_bytes();
        at.len() == host.len() + 1 + uri.len()
            && at.starts_with(host.as_bytes())
            && at[host.len()] == b' '
            && at.ends_with(uri.as_bytes())
    }
}

/// `host` and `uri` as one text: neither has a space (both are checked for one), so two
/// places are the same exactly when their texts are.
fn place(host: &str, uri: &str) -> Box<str> {
    let mut at = String::with_capacity(host.len() + 1 + uri.len());
    at.push_str(host);
    at.push(' ');
    at.push_str(uri);
    at.into_boxed_str()
}

/// The request the core is calling a module for on this thread, if any.
#[derive(Clone, Copy)]
struct Current {
    shared: *const Arc<Shared>,
    peer: *const Arc<Peer>,
    /// Where the request stands among subrequests.
    lineage: *mut Option<Kin>,
    /// The request's view: its id and `Cookie`, which its subrequests share.
    view: *const Request<'static>,
}

thread_local! {
    static CURRENT: Cell<Option<Current>> = const { Cell::new(None) };
}

/// While alive, subrequests started on this thread are for the given request.
pub(super) struct Scope {
    prev: Option<Current>,
}

impl Scope {
    /// `lineage` must outlive the scope and not be touched elsewhere while it lasts; so must
    /// `view`, the request's view.
    pub(super) fn enter(
        shared: &Arc<Shared>,
        peer: &Arc<Peer>,
        lineage: &mut Option<Kin>,
        view: &Request<'_>,
    ) -> Scope {
        let now = Current {
            shared,
            peer,
            lineage,
            view: (view as *const Request<'_>).cast(),
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

fn refused(status: u16, message: String) -> SubrequestStarted {
    SubrequestStarted::refused(status, message.into())
}

/// A request that may start subrequests: what they inherit from it.
struct CoreParent {
    shared: Arc<Shared>,
    peer: Arc<Peer>,
    host: String,
    /// `host` checked once, for the subrequests that carry it (those that name no other).
    host_read: Result<HostRead, HttpError>,
    lineage: Arc<Lineage>,
    /// The `Cookie` its subrequests carry (unless one names its own).
    cookie: Option<String>,
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
    let (shared, peer, lineage, view) = unsafe {
        (
            (*current.shared).clone(),
            (*current.peer).clone(),
            &mut *current.lineage,
            &*current.view,
        )
    };
    let (host, uri) = (parent_host.as_str(), parent_uri.as_str());
    let lineage = match lineage {
        None | Some(Kin::Cookie(_)) => {
            let id = RequestId::copied(view.request_id.as_str(), shared.config.request_id.forward);
            let count = shared.config.limits.max_subrequests;
            let root = Arc::new(Lineage::root(host, uri, count, id));
            if let Some(Kin::Cookie(kept)) = lineage.take() {
                let _ = root.cookie.set(*kept);
            }
            *lineage = Some(Kin::Root(root.clone()));
            root
        }
        Some(Kin::Root(root)) => root.clone(),
        // Made for each handle (rarely more than one): kept, it would need a place of its own.
        Some(Kin::Child(up, _)) => Arc::new(up.child(host, uri)),
    };
    // The handler's `Cookie` kept past it for `after`'s subrequests, else the view's.
    let cookie = match lineage.cookie.get() {
        Some(kept) => (!kept.is_empty()).then(|| kept.to_string()),
        None => cookie_of(view),
    };
    Ok(CoreParent {
        shared,
        peer,
        host: host.to_owned(),
        host_read: read_host(host.as_bytes()),
        lineage,
        cookie: cookie.filter(|c| !has_control(c.as_bytes())),
    })
}

/// `req`'s `Cookie` lines as one value: what its subrequests carry.
fn cookie_of(req: &Request<'_>) -> Option<String> {
    joined(req.header_all("cookie"))
}

/// `Cookie` values as one, as HTTP/2's are joined for HTTP/1.1 (RFC 9113 8.2.3).
fn joined<'v>(mut values: impl Iterator<Item = &'v str>) -> Option<String> {
    let mut cookie = values.next()?.to_owned();
    for value in values {
        cookie.extend(["; ", value]);
    }
    Some(cookie)
}

/// The parent's `Cookie` for a subrequest to its own host: the client sent it for that
/// host, not for another vhost the subrequest names.
fn cookie_for<'c>(
    cookie: Option<&'c str>,
    parent_host: &str,
    target: &SubrequestTarget,
) -> Option<&'c str> {
    let named = target.host.as_str();
    cookie.filter(|_| named.is_empty() || named.eq_ignore_ascii_case(parent_host))
}

/// Filters' request headers (`Exchange::extra`) were for the handler and `after` sees the
/// client's, yet subrequests `after` starts (an SSI or templates page) carry the `Cookie` the
/// handler saw, a new visitor's id among it (`userid`): it is kept with the client request
/// (`Kin::Cookie`, or its lineage once it has one) as the filters' headers are let go. (A
/// subrequest's are not: its own subrequests carry its `Cookie` as its view shows it, its
/// parent's unless a filter changed it.)
pub(super) fn keep_cookie(ex: &mut Exchange) {
    let is_cookie = |h: &HeaderPair| h.name.eq_ignore_ascii_case("cookie");
    if matches!(ex.lineage, Some(Kin::Child(..))) || !ex.extra.iter().any(is_cookie) {
        return;
    }
    // Moved out of the filters' headers (one, as `userid` sets), or theirs joined.
    let mut set = ex
        .extra
        .iter_mut()
        .filter(|h| is_cookie(h) && !h.value.is_empty());
    let cookie = match (set.next(), set.next()) {
        (None, _) => "".into(),
        (Some(one), None) => std::mem::replace(&mut one.value, "".into()),
        (Some(_), Some(_)) => {
            let set = ex
                .extra
                .iter()
                .filter(|h| is_cookie(h) && !h.value.is_empty());
            RCowStr::Owned(
                joined(set.map(|h| h.value.as_str()))
                    .unwrap_or_default()
                    .into(),
            )
        }
    };
    match &ex.lineage {
        Some(Kin::Root(root)) => {
            let _ = root.cookie.set(cookie);
        }
        _ => ex.lineage = Some(Kin::Cookie(Box::new(cookie))),
    }
}

impl SubrequestParent for CoreParent {
    fn start(&self, target: &SubrequestTarget) -> SubrequestStarted {
        let uri = target.uri.as_str();
        if let Err(why) = check_target(uri, target) {
            return refused(400, format!("subrequest to {uri:?} refused: {why}"));
        }
        let (host, host_read) = match target_host((&self.host, &self.host_read), target) {
            Ok(host) => host,
            Err(e) => {
                let why = format!("subrequest to {uri:?} refused: {}", e.reason);
                return refused(e.status, why);
            }
        };
        let started = start_clock();
        let limits = &self.shared.config.limits;
        let cookie = cookie_for(self.cookie.as_deref(), &self.host, target);
        let parent = (&self.lineage, cookie);
        let ex = match exchange(limits, uri, (&host, host_read), target, parent) {
            Ok(ex) => ex,
            Err(e) => return refused(e.status, e.message.into()),
        };
        // Its host as its view has it (no port): as the lineages of its ancestors have theirs.
        if let Err(message) = self.lineage.admit(ex.head.host(&ex.buf), uri, limits) {
            pool::give_head(ex.head);
            return refused(500, message);
        }
        // Routed now, as the main pipeline's fast path: an inline answer (a cached fragment)
        // costs no future of its run, and goes back as it is (no future to box and poll).
        match dispatch_now(&self.shared, &self.peer, ex) {
            Routed::Answered(ex) => SubrequestStarted::Now(ended(&self.peer, started, ex)),
            Routed::Waits(rest) => {
                let (shared, peer) = (self.shared.clone(), self.peer.clone());
                SubrequestStarted::Later(LocalFfiFuture::new(async move {
                    match finish(&shared, &peer, rest).await {
                        Dispatched::Answered(ex) => ended(&peer, started, *ex),
                        Dispatched::Lost => lost(&peer, started),
                    }
                }))
            }
        }
    }
}

/// The host service behind `osprey_sdk::host::subrequest`.
pub extern "C" fn host_subrequest(
    parent_host: RStr<'_>,
    parent_uri: RStr<'_>,
    target: &SubrequestTarget,
) -> SubrequestStarted {
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

/// The subrequest's Host and its check: the parent's, checked once for all its subrequests,
/// or the one it names (another vhost), lower-cased and checked now.
fn target_host<'p>(
    (host, read): (&'p str, &Result<HostRead, HttpError>),
    target: &SubrequestTarget,
) -> Result<(Cow<'p, str>, HostRead), HttpError> {
    match target.host.as_str() {
        "" => Ok((Cow::Borrowed(host), read.clone()?)),
        named => {
            let named = named.to_ascii_lowercase();
            let read = read_host(named.as_bytes())?;
            Ok((Cow::Owned(named), read))
        }
    }
}

/// No bytes that would make the request line or a header say something else, and no body.
/// (The host is checked apart, as a Host header: [`read_host`].)
fn check_target(uri: &str, target: &SubrequestTarget) -> Result<(), &'static str> {
    // The request line's and a field value's rules, as a client's head is read by.
    if !uri.starts_with('/') || bad_target(uri.as_bytes()) {
        return Err("the URI must be a path (and query) without spaces or control bytes");
    }
    for h in target.headers.iter() {
        if !is_token(&h.name) || has_control(trim_ows(&h.value).as_bytes()) {
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
/// back; the limits on a client's head apply. `host` comes with its check, [`read_host`]'s.
/// It carries the parent's `Cookie` (`cookie`) unless the target names its own.
/// The head is the thread's pooled one (given back by [`ended`]).
fn exchange(
    limits: &Limits,
    uri: &str,
    (host, host_read): (&str, HostRead),
    target: &SubrequestTarget,
    (parent, cookie): (&Arc<Lineage>, Option<&str>),
) -> Result<Exchange, SubrequestError> {
    let mut headers = target.headers.iter();
    let cookie = cookie.filter(|_| !headers.any(|h| h.name.eq_ignore_ascii_case("cookie")));
    let fields: usize = target
        .headers
        .iter()
        .map(|h| h.name.len() + h.value.len() + 4)
        .sum::<usize>()
        + cookie.map_or(0, |c| c.len() + 10);
    let mut buf = take_buf(32 + uri.len() + host.len() + fields);
    // A head is large (room for every header): the thread's pooled one, emptied.
    let mut head = pool::take_head();
    head.reset();
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
    // A byte loop, not `memchr`: its vector set-up costs more than a URI this short takes.
    (head.path, head.query) = match uri.bytes().position(|b| b == b'?') {
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
    let count = 1 + cookie.is_some() as usize + target.headers.iter().filter(own).count();
    if count > limits.max_headers.min(MAX_HEADERS) {
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
    if let Some(cookie) = cookie {
        header(&mut buf, "Cookie", cookie);
    }
    for h in target.headers.iter().filter(own) {
        header(&mut buf, &h.name, trim_ows(&h.value));
    }
    buf.extend_from_slice(b"\r\n");
    head.len = buf.len();
    if head.len > limits.max_header_bytes {
        let why = format!("subrequest to {uri} refused: request headers too large");
        return Err(error(431, why));
    }
    host_read.set(&mut head, host_span);
    // Room for a handler's usual headers at once (not grown 0, 4, 8 as they are pushed).
    let resp = Response {
        headers: RVec::with_capacity(8),
        ..Response::default()
    };
    Ok(Exchange {
        buf,
        head,
        body: BodyLoc::InBuf(Default::default()),
        resp,
        extra: Vec::new(),
        stream: None,
        id: parent.id,
        lineage: Some(Kin::Child(parent.clone(), target.body_only)),
    })
}

/// Count and log the subrequest's run, and hand its response over; its head and buffer go
/// back to the pools. (Taken apart, not moved whole: the exchange is a few hundred bytes;
/// inlined, so it is not copied into the call either.)
#[inline(always)]
fn ended(
    peer: &Peer,
    started: Option<Instant>,
    ex: Exchange,
) -> RResult<Response, SubrequestError> {
    let Exchange {
        buf,
        head,
        resp,
        id,
        ..
    } = ex;
    super::finished::subrequest_finished(Finished {
        peer,
        request: Some((&buf[..], &*head)),
        status: resp.status,
        body_bytes: resp.body.len().unwrap_or(0),
        started,
        id: Some(id),
        set_cookies: &[],
    });
    pool::give_head(head);
    give_buf(buf);
    RResult::ROk(resp)
}

/// Count and log a subrequest whose worker job failed and took its exchange.
fn lost(peer: &Peer, started: Option<Instant>) -> RResult<Response, SubrequestError> {
    super::finished::subrequest_finished(Finished {
        peer,
        request: None,
        status: 500,
        body_bytes: 0,
        started,
        id: None,
        set_cookies: &[],
    });
    RResult::RErr(error(500, "the subrequest's worker job failed".into()))
}

thread_local! {
    /// The bytes of subrequests answered, for the next ones' heads: most answer inline, so
    /// one or two serve a whole page.
    static BUFS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for `len` bytes.
fn take_buf(len: usize) -> Vec<u8> {
    let mut buf = BUFS.with_borrow_mut(Vec::pop).unwrap_or_default();
    buf.reserve(len);
    buf
}

/// Keep `buf` for [`take_buf`] (a few, not large ones).
fn give_buf(mut buf: Vec<u8>) {
    if buf.capacity() <= 4096 {
        buf.clear();
        BUFS.with_borrow_mut(|bufs| {
            if bufs.len() < 8 {
                bufs.push(buf);
            }
        });
    }
}

/// A field value without the optional whitespace around it (RFC 9110 5.6.3: spaces, tabs).
fn trim_ows(value: &str) -> &str {
    // On bytes (`str::trim_matches` decodes a char at each end): both are ASCII, so the cut
    // falls between chars.
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let bytes = value.as_bytes();
    let start = bytes.iter().position(|b| !ows(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !ows(b)).map_or(start, |i| i + 1);
    &value[start..end]
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
        let child = |l: &Arc<Lineage>, uri: &str| {
            l.admit("h", uri, &limits)
                .map(|()| Arc::new(l.child("h", uri)))
        };
        assert!(child(&root, "/page")
            .unwrap_err()
            .contains("includes itself"));
        // The same URI on another host is not a loop.
        assert!(root.admit("other", "/page", &limits).is_ok());
        assert!(root.admit("h", "/pag", &limits).is_ok());
        assert!(root.admit("h ", "page", &limits).is_ok());
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
                .map(|&(name, value)| HeaderPair::new(name.to_owned(), value.to_owned()))
                .collect::<RVec<_>>(),
            body_only: false,
        }
    }

    /// `host` with its check.
    fn checked(host: &str) -> (&str, HostRead) {
        (host, read_host(host.as_bytes()).unwrap())
    }

    /// A client's head left in the thread's pool: every field differs from a subrequest's.
    fn dirty_pooled_head() {
        let buf = b"POST http://Other.Example:81/x/y?z=1 HTTP/1.0\r\nContent-Length: 3\r\n\
                    Expect: 100-continue\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\nabc";
        let head = crate::http::parse::parse(buf, &Limits::default())
            .unwrap()
            .unwrap();
        pool::give_head(Box::new(head));
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
            // The head is the pooled one, emptied of the last request's fields.
            dirty_pooled_head();
            let ex = exchange(&limits, uri, checked(host), &t, (&lineage, None)).unwrap();
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
    fn head_buffers_are_kept_for_the_next_subrequests() {
        let mut buf = take_buf(100);
        assert!(buf.is_empty() && buf.capacity() >= 100);
        buf.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let at = buf.as_ptr();
        give_buf(buf);
        let again = take_buf(10);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), at);
        // A large one is let go.
        give_buf(Vec::with_capacity(64 * 1024));
        assert!(take_buf(0).capacity() < 64 * 1024);
    }

    #[test]
    fn subrequests_share_the_client_requests_id() {
        let limits = Limits::default();
        let root = root(&limits);
        let t = target("/f", &[]);
        let ex = exchange(&limits, "/f", checked("h"), &t, (&root, None)).unwrap();
        assert_eq!(ex.id.text(&ex.buf), root.id.text(b""));
    }

    #[test]
    fn a_subrequest_carries_its_parents_cookie_unless_it_names_its_own() {
        let limits = Limits::default();
        let root = root(&limits);
        let cookie = |t: &SubrequestTarget| {
            let ex = exchange(&limits, "/f", checked("h"), t, (&root, Some("a=1; uid=x"))).unwrap();
            let parsed = crate::http::parse::parse(&ex.buf, &limits)
                .unwrap()
                .unwrap();
            assert_eq!(format!("{:?}", ex.head), format!("{parsed:?}"));
            let cookies = ex.head.headers.iter();
            let cookies = cookies.filter(|(n, _)| n.str(&ex.buf).eq_ignore_ascii_case("cookie"));
            cookies
                .map(|(_, v)| v.str(&ex.buf).to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(cookie(&target("/f", &[("X-A", "1")])), ["a=1; uid=x"]);
        // Not to another vhost: the client sent it for the parent's host.
        let to = |host: &str| SubrequestTarget {
            host: host.into(),
            ..target("/f", &[])
        };
        assert_eq!(cookie_for(Some("a=1"), "h.example", &to("")), Some("a=1"));
        assert_eq!(
            cookie_for(Some("a=1"), "h.example", &to("H.Example")),
            Some("a=1")
        );
        assert_eq!(
            cookie_for(Some("a=1"), "h.example", &to("other.example")),
            None
        );
        assert_eq!(cookie(&target("/f", &[("cookie", "b=2")])), ["b=2"]);
        // It counts against the header limit as a header of the target would.
        let many: Vec<(String, String)> = (1..limits.max_headers)
            .map(|i| (format!("X-{i}"), "v".into()))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let t = target("/m", &many);
        assert!(exchange(&limits, "/m", checked("h"), &t, (&root, None)).is_ok());
        let err = exchange(&limits, "/m", checked("h"), &t, (&root, Some("a=1")));
        assert_eq!(err.err().map(|e| e.status), Some(431));
    }

    #[test]
    fn a_target_read_for_its_body_only_says_so_to_its_handler() {
        let limits = Limits::default();
        let root = root(&limits);
        for body_only in [false, true] {
            let t = SubrequestTarget {
                body_only,
                ..target("/f", &[])
            };
            let ex = exchange(&limits, "/f", checked("h"), &t, (&root, None)).unwrap();
            assert_eq!(Kin::body_only(&ex.lineage), body_only);
        }
        // A client request is read whole.
        assert!(!Kin::body_only(&Some(Kin::Root(root))));
    }

    #[test]
    fn only_spaces_and_tabs_around_a_value_are_trimmed() {
        for (value, trimmed) in [
            (" \t a b\t ", "a b"),
            ("ü", "ü"),
            ("\t", ""),
            ("", ""),
            ("\u{a0}x\u{a0}", "\u{a0}x\u{a0}"),
        ] {
            assert_eq!(trim_ows(value), trimmed, "{value:?}");
        }
    }

    #[test]
    fn bad_targets_are_refused() {
        let limits = Limits::default();
        let refused =
            |uri: &str, headers: &[(&str, &str)]| check_target(uri, &target(uri, headers)).is_err();
        assert!(!refused("/ok?q", &[("X-A", "b c")]));
        assert!(refused("/a b", &[]));
        assert!(refused("a", &[]));
        assert!(refused("/a", &[("X A", "b")]));
        assert!(refused("/a", &[("X-A", "b\0")]));
        // Every control byte and DEL, anywhere in a long URI or value; a tab only in a value.
        for b in (0u8..0x20).chain([0x7f]) {
            let bad = format!("/{}{}", "a".repeat(20), b as char);
            assert!(refused(&bad, &[]), "{b:#x} in a URI");
            let value = format!("{}{}x", "v".repeat(20), b as char);
            assert_eq!(
                refused("/a", &[("X-A", &value)]),
                b != b'\t',
                "{b:#x} in a value"
            );
        }
        assert!(!refused("/caf\u{e9}?q=\u{1f426}", &[("X-A", "\u{e9}")]));
        assert!(refused("/a", &[("Content-Length", "5")]));
        assert!(refused("/a", &[("transfer-encoding", "chunked")]));
        // The limits on a client's head apply.
        let long = format!("/{}", "a".repeat(limits.max_request_line));
        let err = exchange(
            &limits,
            &long,
            checked("h"),
            &target(&long, &[]),
            (&root(&limits), None),
        );
        assert_eq!(err.err().map(|e| e.status), Some(414));
        let many: Vec<(String, String)> = (0..limits.max_headers)
            .map(|i| (format!("X-{i}"), "v".into()))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let err = exchange(
            &limits,
            "/m",
            checked("h"),
            &target("/m", &many),
            (&root(&limits), None),
        );
        assert_eq!(err.err().map(|e| e.status), Some(431));
    }

    #[test]
    fn the_parents_host_is_checked_once_and_another_vhost_on_its_own() {
        let to = |host: &str| SubrequestTarget {
            host: host.into(),
            ..target("/f", &[])
        };
        let parent = ("www.example", &read_host(b"www.example"));
        // No host named: the parent's, with its check.
        let (host, read) = target_host(parent, &to("")).unwrap();
        assert_eq!((&*host, &read), ("www.example", parent.1.as_ref().unwrap()));
        // Another vhost: lower-cased and checked, whatever the parent's check said.
        let limits = Limits::default();
        let (host, read) = target_host(parent, &to("Other.Example:8080")).unwrap();
        let ex = exchange(
            &limits,
            "/f",
            (&host, read),
            &to(""),
            (&root(&limits), None),
        )
        .unwrap();
        assert_eq!(ex.head.host(&ex.buf), "other.example");
        for bad in ["h:x", "a b", "h/x", "h\r\nX: 1", "[::1"] {
            let err = target_host(parent, &to(bad)).err();
            assert_eq!(err.map(|e| e.status), Some(400), "{bad:?}");
        }
        // A parent whose host failed its check: its subrequests are refused, not those
        // naming a good host.
        let broken = ("a b", &read_host(b"a b"));
        assert_eq!(
            target_host(broken, &to("")).err().map(|e| e.status),
            Some(400)
        );
        assert!(target_host(broken, &to("ok.example")).is_ok());
    }
}
