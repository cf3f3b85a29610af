//! Subrequests: an internal `GET` of a URI that runs through the server's full routing and filter
//! pipeline on the network thread of the request that asked for it, with no socket. Its answer is
//! an ordinary [`Response`] (status, headers, a body that may stream). A [`Composite`] body
//! assembles literal bytes, file ranges and subrequest bodies in order.
//!
//! ```no_run
//! # use osprey_sdk::{Request, Response};
//! # use osprey_sdk::subrequest::{Composite, Subrequest};
//! fn handle(req: &Request<'_>, resp: &mut Response) {
//!     let header = Subrequest::get("/fragments/header.html").start(req);
//!     let clock = Subrequest::get("/curtime?max_age=5").start(req);
//!     let page = Composite::new()
//!         .bytes(b"<html><body>".to_vec())
//!         .fetch(header)
//!         .fetch(clock)
//!         .bytes(b"</body></html>".to_vec());
//!     resp.content_type("text/html").body_stream(page);
//! }
//! ```

use std::borrow::Cow;
use std::collections::VecDeque;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use abi_stable::{
    sabi_trait,
    std_types::{RArc, RBox, ROption, RResult, RString, RVec},
    StableAbi,
};
use async_ffi::{FfiContext, FfiPoll, LocalFfiFuture};

use crate::request::Request;
use crate::response::{Body, BodyStream, FileRange, HeaderPair, HeaderText, Response, StreamBox};

/// What a subrequest fetches, as the host receives it.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct SubrequestTarget {
    /// Origin-form target: path and query (`/a/b?c`).
    pub uri: RString,
    /// The virtual host to route it to; empty: the parent request's host.
    pub host: RString,
    /// Request headers to send with it (the subrequest has no others but `Host` and, on the
    /// parent's host, its parent's `Cookie`, which a `Cookie` here replaces).
    pub headers: RVec<HeaderPair>,
    /// The parent reads only its body (see [`Subrequest::body_only`]).
    pub body_only: bool,
}

/// Why a subrequest gave no response: over a limit (depth, count per request), a loop, a target
/// that is not a valid URI, or a call made outside a request's handling. `status` is what the
/// caller would answer with; `message` says what happened, for the log.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct SubrequestError {
    /// The status that describes the failure (500 for limits and loops, 400 for a bad URI).
    pub status: u16,
    /// What happened, for the log.
    pub message: RString,
}

impl std::fmt::Display for SubrequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.status)
    }
}

/// The host's answer to a subrequest: the response as the pipeline left it (any status; a body
/// of bytes, a file range or a stream).
pub type SubrequestFuture = LocalFfiFuture<RResult<Response, SubrequestError>>;

/// A started subrequest as the host hands it back: answered while it was started (an inline
/// handler, a cache hit, a refusal: no future to box and poll), or a future of the answer.
#[repr(C, u8)]
#[derive(StableAbi)]
pub enum SubrequestStarted {
    /// The answer (or the refusal), there when the call returned.
    Now(RResult<Response, SubrequestError>),
    /// The answer to come.
    Later(SubrequestFuture),
}

impl SubrequestStarted {
    /// A refusal, answered at once.
    pub fn refused(status: u16, message: RString) -> SubrequestStarted {
        SubrequestStarted::Now(RResult::RErr(SubrequestError { status, message }))
    }
}

/// The host's handle on a request that may start subrequests later (see [`Parent`]).
#[sabi_trait]
pub trait SubrequestParent: Send + Sync {
    /// Start a subrequest for the request this handle was taken for. The host copies what it
    /// needs of `target` (so a caller may reuse one target for several subrequests).
    #[sabi(last_prefix_field)]
    fn start(&self, target: &SubrequestTarget) -> SubrequestStarted;
}

/// A boxed [`SubrequestParent`] as the host hands it over.
pub type ParentBox = SubrequestParent_TO<'static, RBox<()>>;

/// A request's right to start subrequests after the core's call for it has returned: from a
/// response body being streamed (e.g. a page whose includes are known only once a backend's
/// body has arrived) or a later future. Take it during the call; it is `Send` and may be kept
/// in a body, but the subrequests it starts run on the network thread that polls them.
pub struct Parent(Result<ParentBox, SubrequestError>);

impl Parent {
    /// The handle for `req`, the request being handled (same rule as [`Subrequest::start`]).
    pub fn of(req: &Request<'_>) -> Parent {
        Parent(crate::host::subrequest_parent(req))
    }

    /// Start `sub` for the request this handle was taken for.
    pub fn start(&self, sub: Subrequest) -> Fetch {
        let started = self.started(&sub.target);
        Fetch::new(sub.target.uri.into_string(), started)
    }

    /// [`start`](Parent::start) for a subrequest kept to start others like it (e.g. with the
    /// same headers, its URI changed by [`Subrequest::set_uri`]): nothing of it is consumed.
    pub fn start_ref(&self, sub: &Subrequest) -> Fetch {
        Fetch::new(sub.target.uri.to_string(), self.started(&sub.target))
    }

    fn started(&self, target: &SubrequestTarget) -> SubrequestStarted {
        match &self.0 {
            Ok(parent) => parent.start(target),
            Err(e) => SubrequestStarted::Now(RResult::RErr(e.clone())),
        }
    }
}

/// An internal `GET`, built then [started](Subrequest::start).
#[derive(Debug, Clone)]
pub struct Subrequest {
    target: SubrequestTarget,
}

impl Subrequest {
    /// A `GET` of `uri` (path and query, e.g. `/frag?id=2`) on the parent request's host.
    pub fn get(uri: impl Into<String>) -> Subrequest {
        Subrequest {
            target: SubrequestTarget {
                uri: uri.into().into(),
                host: RString::new(),
                // Room for one (as `ssi` sends): a list grown from empty costs more.
                headers: RVec::with_capacity(1),
                body_only: false,
            },
        }
    }

    /// Change the URI it fetches (path and query), keeping the rest.
    pub fn set_uri(&mut self, uri: &str) {
        self.target.uri.clear();
        self.target.uri.push_str(uri);
    }

    /// Route it to another virtual host.
    pub fn host(mut self, host: impl Into<String>) -> Subrequest {
        self.target.host = host.into().into();
        self
    }

    /// Send a request header with it.
    pub fn header(mut self, name: impl Into<HeaderText>, value: impl Into<HeaderText>) -> Self {
        self.target.headers.push(HeaderPair::new(name, value));
        self
    }

    /// Say that only its body will be read (an SSI include): its handler sees
    /// [`Request::body_only`] and may leave out what only a client reads (validators), unless
    /// a filter of its route keys a cache (the answer may be stored and served to clients).
    pub fn body_only(mut self) -> Self {
        self.target.body_only = true;
        self
    }

    /// Start it for `parent`, the request being handled. Call this while the core is calling
    /// the module for `parent` on its network thread (in `handle`, a filter's `before` or
    /// `after` run inline); the answer may be awaited later, on that same thread (inside an
    /// [`Outcome::later`](crate::Outcome::later) future or a [`Composite`] body). Depth,
    /// count and loop limits are checked here; a failure comes back as the answer.
    pub fn start(self, parent: &Request<'_>) -> Fetch {
        let started = crate::host::subrequest(parent, &self.target);
        Fetch::new(self.target.uri.into_string(), started)
    }
}

/// A started subrequest: a future of its response.
///
/// It may be stored in a response body (which must be `Send`), but is polled only on the
/// network thread that started it: polled elsewhere it fails, dropped elsewhere it is leaked.
pub struct Fetch {
    /// The target, for log lines.
    uri: String,
    /// `None` once the answer was taken.
    answer: Option<SubrequestStarted>,
    thread: u64,
}

// SAFETY: the future is only polled or dropped on the thread that created it (checked above
// every use); on another thread it is neither touched nor dropped.
unsafe impl Send for Fetch {}

// A ready answer is moved out, never pinned (its body's trait objects are not `Unpin`).
impl Unpin for Fetch {}

impl Fetch {
    fn new(uri: String, answer: SubrequestStarted) -> Fetch {
        Fetch {
            uri,
            answer: Some(answer),
            thread: thread_number(),
        }
    }

    /// The URI it fetches.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    fn on_its_thread(&self) -> bool {
        thread_number() == self.thread
    }
}

/// A number for the calling thread, never given to another (as a `ThreadId`, whose
/// `thread::current()` costs a reference count taken and dropped at each use).
fn thread_number() -> u64 {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static NUMBER: Cell<u64> = const { Cell::new(0) });
    NUMBER.with(|n| match n.get() {
        0 => {
            let new = NEXT.fetch_add(1, Ordering::Relaxed);
            n.set(new);
            new
        }
        known => known,
    })
}

impl Future for Fetch {
    type Output = Result<Response, SubrequestError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if !this.on_its_thread() {
            return Poll::Ready(Err(SubrequestError {
                status: 500,
                message: "a subrequest was awaited off its network thread".into(),
            }));
        }
        match this.answer.take() {
            None => Poll::Ready(Err(SubrequestError {
                status: 500,
                message: "a subrequest was awaited after it ended".into(),
            })),
            Some(SubrequestStarted::Now(answer)) => Poll::Ready(answer.into_result()),
            Some(SubrequestStarted::Later(mut future)) => match Pin::new(&mut future).poll(cx) {
                Poll::Ready(answer) => Poll::Ready(answer.into_result()),
                Poll::Pending => {
                    this.answer = Some(SubrequestStarted::Later(future));
                    Poll::Pending
                }
            },
        }
    }
}

impl Drop for Fetch {
    fn drop(&mut self) {
        // A future is the network thread's; an answer already there may go anywhere.
        if !self.on_its_thread() {
            if let Some(SubrequestStarted::Later(future)) = self.answer.take() {
                std::mem::forget(future);
            }
        }
    }
}

/// The marker a failed piece becomes when [`Composite::error_marker`] sets none.
pub const DEFAULT_ERROR_MARKER: &[u8] = b"<!--[subrequest error]-->";

/// Bytes read from a file per chunk.
const FILE_CHUNK: u64 = 64 * 1024;
/// Ready pieces are sent together up to this size: one write (one chunk, one DATA frame)
/// for a page whose fragments are all there, not one per piece.
const GATHER: usize = 64 * 1024;

/// One piece of a composite body. The large ones (a subrequest, its answer) are boxed: the
/// pieces are moved in and out of the queue, and most are bytes.
enum Piece {
    Bytes(RVec<u8>),
    /// A part of bytes shared with a cache or a kept document, sent from there.
    Shared(RArc<RVec<u8>>, Range<usize>),
    File(FileRange),
    /// A subrequest, then its answer once it came.
    Fetch(Box<Fetch>),
    /// The subrequest's URI (for log lines) and its answer.
    Answer(Box<(String, Result<Response, SubrequestError>)>),
    /// A body being sent; `started` once a byte of it went out.
    Stream {
        stream: StreamBox,
        started: bool,
    },
    /// A failure met while gathering, given after the bytes before it.
    Failed(RString),
}

impl Piece {
    /// The piece that sends `body` (none for an empty one).
    fn of(body: Body) -> Option<Piece> {
        match body {
            Body::Empty | Body::Upgrade(_) => None,
            Body::Bytes(b) => Some(Piece::Bytes(b)),
            Body::Shared(b) => {
                let all = 0..b.len();
                Some(Piece::Shared(b, all))
            }
            Body::File(f) => Some(Piece::File(f)),
            Body::Stream(stream) => Some(Piece::Stream {
                stream,
                started: false,
            }),
        }
    }
}

/// What [`Composite::poll_piece`] did.
enum Took {
    /// Appended the next piece's bytes (or some of them) to the output.
    Appended,
    /// A piece failed after its output started: the stream fails.
    Failed(RString),
    /// No pieces left.
    End,
}

/// A response body made of ordered pieces: literal bytes, file ranges and subrequest bodies.
/// The subrequests run at once, side by side; their bodies go out in document order, each as
/// soon as it and everything before it is ready (chunked on HTTP/1.1, DATA frames on HTTP/2).
///
/// Only `200` answers are included. A subrequest that fails or answers another status before
/// any of its body went out becomes the error marker (logged); a body that fails after its
/// output started fails the whole stream, and the core cuts the response, as headers and part
/// of the body are gone.
pub struct Composite {
    pieces: VecDeque<Piece>,
    marker: Cow<'static, [u8]>,
}

impl Default for Composite {
    fn default() -> Self {
        Composite::new()
    }
}

impl Composite {
    /// No pieces; the marker is [`DEFAULT_ERROR_MARKER`].
    pub fn new() -> Composite {
        Composite::with_capacity(0)
    }

    /// [`new`](Composite::new) with room for `pieces` pieces (a page whose parts are known).
    pub fn with_capacity(pieces: usize) -> Composite {
        Composite {
            pieces: VecDeque::with_capacity(pieces),
            marker: Cow::Borrowed(DEFAULT_ERROR_MARKER),
        }
    }

    /// What a failed piece becomes (may be empty).
    pub fn error_marker(mut self, marker: impl Into<Vec<u8>>) -> Composite {
        self.marker = Cow::Owned(marker.into());
        self
    }

    /// Literal bytes.
    pub fn bytes(mut self, bytes: impl Into<Vec<u8>>) -> Composite {
        self.push_bytes(bytes);
        self
    }

    /// Literal bytes shared with a cache.
    pub fn shared(mut self, bytes: RArc<RVec<u8>>) -> Composite {
        let all = 0..bytes.len();
        self.push_shared(&bytes, all);
        self
    }

    /// A range of an open file.
    pub fn file(mut self, range: FileRange) -> Composite {
        self.pieces.push_back(Piece::File(range));
        self
    }

    /// A subrequest's body.
    pub fn fetch(mut self, fetch: Fetch) -> Composite {
        self.push_fetch(fetch);
        self
    }

    /// [`bytes`](Composite::bytes) for a builder held by reference.
    pub fn push_bytes(&mut self, bytes: impl Into<Vec<u8>>) {
        let bytes: Vec<u8> = bytes.into();
        if !bytes.is_empty() {
            self.pieces.push_back(Piece::Bytes(bytes.into()));
        }
    }

    /// The bytes of `range` in `bytes`, kept by reference (not copied) until they are sent:
    /// e.g. the text of a kept document between its directives. Panics if `range` is not
    /// within `bytes`, as slicing would.
    pub fn push_shared(&mut self, bytes: &RArc<RVec<u8>>, range: Range<usize>) {
        if !bytes[range.clone()].is_empty() {
            self.pieces.push_back(Piece::Shared(bytes.clone(), range));
        }
    }

    /// [`fetch`](Composite::fetch) for a builder held by reference.
    pub fn push_fetch(&mut self, fetch: Fetch) {
        self.pieces.push_back(Piece::Fetch(Box::new(fetch)));
    }

    /// Start `sub` for `parent` and add its body: [`push_fetch`](Composite::push_fetch) of
    /// [`Parent::start_ref`], but a `200` answered while it was started (a fragment answered
    /// inline or from a cache) goes in as its body at once, with no `Fetch` kept for it.
    pub fn push_started(&mut self, parent: &Parent, sub: &Subrequest) {
        match parent.started(&sub.target) {
            SubrequestStarted::Now(RResult::ROk(resp)) if resp.status == 200 => {
                self.push_body(resp.body)
            }
            started => self.push_fetch(Fetch::new(sub.target.uri.to_string(), started)),
        }
    }

    /// A body piece as it is (bytes, a file range or a stream): e.g. a subrequest's answer
    /// already awaited.
    pub fn push_body(&mut self, body: Body) {
        if let Some(piece) = Piece::of(body) {
            self.pieces.push_back(piece);
        }
    }

    /// Whether there is nothing left to send.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The whole body now, when every piece is ready without waiting (fragments answered
    /// inline or from caches): then it goes out as one bytes body, with `Content-Length`
    /// rather than chunked. Otherwise the composite to stream, its subrequests started and
    /// the bytes ready so far kept at its front. Call it where a subrequest may be started
    /// (it runs them): in `handle` or a filter step run inline.
    pub fn ready_now(mut self) -> Result<RVec<u8>, Composite> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.poll_gathered(&mut cx) {
            Poll::Ready(None) => Ok(RVec::new()),
            Poll::Ready(Some(Ok(all))) if self.pieces.is_empty() => Ok(all),
            Poll::Ready(Some(Ok(some))) => {
                self.pieces.push_front(Piece::Bytes(some));
                Err(self)
            }
            Poll::Ready(Some(Err(e))) => {
                self.pieces.push_front(Piece::Failed(e));
                Err(self)
            }
            Poll::Pending => Err(self),
        }
    }

    /// Move every subrequest on, so they run side by side; keep the answers that came.
    fn advance_fetches(&mut self, cx: &mut Context<'_>) {
        for piece in self.pieces.iter_mut() {
            if let Piece::Fetch(fetch) = piece {
                if let Poll::Ready(answer) = Pin::new(&mut **fetch).poll(cx) {
                    *piece = Piece::Answer(Box::new((std::mem::take(&mut fetch.uri), answer)));
                }
            }
        }
    }

    /// The marker for a piece that failed before its output started, appended to `out`.
    fn marker(&self, why: &str, out: &mut Vec<u8>) -> Poll<Took> {
        crate::host::warn(&format!("composite body: {why}"));
        out.extend_from_slice(&self.marker);
        Poll::Ready(Took::Appended)
    }

    /// The bytes the pieces at the front have ready (up to [`GATHER`]): the output is sized
    /// once, not grown a doubling at a time.
    fn ready_len(&self) -> usize {
        let mut n = 0;
        for piece in &self.pieces {
            n += match piece {
                Piece::Bytes(b) => b.len(),
                Piece::Shared(_, range) => range.len(),
                Piece::File(f) => f.len.min(FILE_CHUNK) as usize,
                Piece::Answer(answer) => match &answer.1 {
                    Ok(r) if r.status == 200 => match &r.body {
                        Body::Stream(_) => break,
                        body => body.len().unwrap_or(0).min(GATHER as u64) as usize,
                    },
                    // A marker.
                    _ => 0,
                },
                _ => break,
            };
            if n >= GATHER {
                break;
            }
        }
        n.min(GATHER)
    }

    /// The pieces ready now, gathered into one chunk (up to [`GATHER`] bytes).
    fn poll_gathered(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<RVec<u8>, RString>>> {
        self.advance_fetches(cx);
        let mut out = Vec::with_capacity(self.ready_len());
        loop {
            let took = self.poll_piece(cx, &mut out);
            match took {
                Poll::Ready(Took::Appended) if out.len() < GATHER => continue,
                Poll::Ready(Took::Failed(e)) if out.is_empty() => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Took::Failed(e)) => self.pieces.push_front(Piece::Failed(e)),
                Poll::Ready(Took::End) | Poll::Pending if out.is_empty() => {
                    return took.map(|_| None);
                }
                _ => {}
            }
            return Poll::Ready(Some(Ok(out.into())));
        }
    }

    /// Append the bytes of the next piece that has some ready to `out`.
    fn poll_piece(&mut self, cx: &mut Context<'_>, out: &mut Vec<u8>) -> Poll<Took> {
        loop {
            let Some(piece) = self.pieces.pop_front() else {
                return Poll::Ready(Took::End);
            };
            match piece {
                Piece::Bytes(b) => out.extend_from_slice(&b),
                Piece::Shared(b, range) => out.extend_from_slice(&b[range]),
                Piece::File(range) => {
                    if range.len == 0 {
                        continue;
                    }
                    let n = range.len.min(FILE_CHUNK);
                    let at = out.len();
                    out.resize(at + n as usize, 0);
                    if let Err(e) = range.file.read_exact_at(&mut out[at..], range.offset) {
                        out.truncate(at);
                        let why = format!("reading a file piece: {e}");
                        return Poll::Ready(Took::Failed(why.into()));
                    }
                    if n < range.len {
                        self.pieces.push_front(Piece::File(FileRange {
                            file: range.file,
                            offset: range.offset + n,
                            len: range.len - n,
                        }));
                    }
                }
                Piece::Fetch(fetch) => {
                    self.pieces.push_front(Piece::Fetch(fetch));
                    return Poll::Pending;
                }
                Piece::Answer(answer) => match *answer {
                    (uri, Err(e)) => {
                        return self.marker(&format!("subrequest {uri} failed: {e}"), out);
                    }
                    (uri, Ok(resp)) if resp.status != 200 => {
                        let why = format!("subrequest {uri} answered {}", resp.status);
                        return self.marker(&why, out);
                    }
                    (_, Ok(resp)) => {
                        // The answer's body takes its place.
                        if let Some(piece) = Piece::of(resp.body) {
                            self.pieces.push_front(piece);
                        }
                        continue;
                    }
                },
                Piece::Stream {
                    mut stream,
                    started,
                } => match poll_stream(&mut stream, cx) {
                    Poll::Pending => {
                        self.pieces.push_front(Piece::Stream { stream, started });
                        return Poll::Pending;
                    }
                    Poll::Ready(None) => continue,
                    Poll::Ready(Some(Ok(chunk))) => {
                        out.extend_from_slice(&chunk);
                        self.pieces.push_front(Piece::Stream {
                            stream,
                            started: started || !chunk.is_empty(),
                        });
                    }
                    Poll::Ready(Some(Err(e))) if !started => {
                        return self.marker(&format!("subrequest body failed: {e}"), out);
                    }
                    Poll::Ready(Some(Err(e))) => {
                        let why = format!("a subrequest body failed after its output started: {e}");
                        return Poll::Ready(Took::Failed(why.into()));
                    }
                },
                Piece::Failed(e) => return Poll::Ready(Took::Failed(e)),
            }
            return Poll::Ready(Took::Appended);
        }
    }
}

fn poll_stream(
    stream: &mut StreamBox,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<RVec<u8>, RString>>> {
    use async_ffi::ContextExt;
    match cx.with_ffi_context(|fcx| stream.poll_chunk(fcx)) {
        FfiPoll::Ready(ROption::RNone) => Poll::Ready(None),
        FfiPoll::Ready(ROption::RSome(chunk)) => Poll::Ready(Some(chunk.into_result())),
        FfiPoll::Panicked => Poll::Ready(Some(Err("the body stream panicked".into()))),
        FfiPoll::Pending => Poll::Pending,
    }
}

impl BodyStream for Composite {
    fn poll_chunk(
        &mut self,
        cx: &mut FfiContext<'_>,
    ) -> FfiPoll<ROption<RResult<RVec<u8>, RString>>> {
        cx.with_context(|cx| match self.poll_gathered(cx) {
            Poll::Ready(chunk) => FfiPoll::Ready(chunk.map(RResult::from).into()),
            Poll::Pending => FfiPoll::Pending,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that gives `first`, then fails (`fail`) or waits for ever.
    struct Then {
        first: Option<&'static [u8]>,
        fail: bool,
    }

    impl BodyStream for Then {
        fn poll_chunk(
            &mut self,
            _cx: &mut FfiContext<'_>,
        ) -> FfiPoll<ROption<RResult<RVec<u8>, RString>>> {
            match self.first.take() {
                Some(b) => FfiPoll::Ready(ROption::RSome(RResult::ROk(b.to_vec().into()))),
                None if self.fail => FfiPoll::Ready(ROption::RSome(RResult::RErr("cut".into()))),
                None => FfiPoll::Pending,
            }
        }
    }

    fn with_stream(first: &'static [u8], fail: bool) -> Composite {
        let mut resp = Response::default();
        resp.body_stream(Then {
            first: Some(first),
            fail,
        });
        let mut page = Composite::new().bytes("a");
        page.push_body(std::mem::replace(&mut resp.body, Body::Empty));
        page.bytes("c")
    }

    fn poll(page: &mut Composite) -> Poll<Option<Result<RVec<u8>, RString>>> {
        page.poll_gathered(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn a_fetch_is_polled_only_on_its_thread() {
        let ready = || {
            let answer = async { RResult::ROk(Response::default()) };
            Fetch::new(
                "/f".into(),
                SubrequestStarted::Later(LocalFfiFuture::new(answer)),
            )
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut here = ready();
        assert!(matches!(
            Pin::new(&mut here).poll(&mut cx),
            Poll::Ready(Ok(_))
        ));
        let mut there = ready();
        let (refused, number) = std::thread::spawn(move || {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let got = Pin::new(&mut there).poll(&mut cx);
            let refused = matches!(got, Poll::Ready(Err(e)) if e.message.contains("off its"));
            (refused, thread_number())
        })
        .join()
        .unwrap();
        assert!(refused, "polled on another thread");
        assert_ne!(number, thread_number());
        assert_eq!(thread_number(), thread_number());
    }

    #[test]
    fn an_answer_there_at_start_is_ready_once() {
        let resp = Response {
            status: 204,
            ..Response::default()
        };
        let mut fetch = Fetch::new("/f".into(), SubrequestStarted::Now(RResult::ROk(resp)));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let got = Pin::new(&mut fetch).poll(&mut cx);
        assert!(matches!(got, Poll::Ready(Ok(r)) if r.status == 204));
        let again = Pin::new(&mut fetch).poll(&mut cx);
        assert!(matches!(again, Poll::Ready(Err(e)) if e.message.contains("after it ended")));
        // A refusal is an answer there at once, too.
        let mut refused = Fetch::new("/g".into(), SubrequestStarted::refused(500, "no".into()));
        let got = Pin::new(&mut refused).poll(&mut cx);
        assert!(matches!(got, Poll::Ready(Err(e)) if e.status == 500));
    }

    /// Answers `/later` with a future, others at once: 200 with their URI, `/missing` 404.
    struct NowParent;

    impl SubrequestParent for NowParent {
        fn start(&self, target: &SubrequestTarget) -> SubrequestStarted {
            let mut resp = Response::default();
            match target.uri.as_str() {
                "/missing" => resp.status = 404,
                uri => {
                    resp.status = 200;
                    resp.body = Body::Bytes(uri.as_bytes().to_vec().into());
                }
            }
            match target.uri.as_str() {
                "/later" => {
                    SubrequestStarted::Later(LocalFfiFuture::new(async move { RResult::ROk(resp) }))
                }
                _ => SubrequestStarted::Now(RResult::ROk(resp)),
            }
        }
    }

    #[test]
    fn started_answers_there_at_once_go_in_as_their_bodies() {
        let parent = Parent(Ok(SubrequestParent_TO::from_value(
            NowParent,
            abi_stable::sabi_trait::TD_Opaque,
        )));
        let mut page = Composite::new().error_marker("!");
        let mut sub = Subrequest::get("/a");
        page.push_started(&parent, &sub);
        for uri in ["/missing", "/later", "/b"] {
            sub.set_uri(uri);
            page.push_started(&parent, &sub);
        }
        // Only the 404 and the future are kept as fetches, to be polled.
        let fetches = page.pieces.iter().filter(|p| matches!(p, Piece::Fetch(_)));
        assert_eq!(fetches.count(), 2);
        let all = page.ready_now().ok().unwrap();
        assert_eq!(all.as_slice(), b"/a!/later/b");
    }

    #[test]
    fn ready_now_gives_the_whole_body_or_keeps_what_was_ready_in_order() {
        let shared = RArc::new(RVec::from(b"b".to_vec()));
        let all = Composite::new().bytes("a").shared(shared).ready_now();
        assert_eq!(all.ok().unwrap().as_slice(), b"ab");
        // Parts of shared bytes, in order, an empty one left out.
        let doc = RArc::new(RVec::from(b"<p>text</p>".to_vec()));
        let mut page = Composite::with_capacity(3);
        page.push_shared(&doc, 3..7);
        page.push_shared(&doc, 0..0);
        page.push_bytes("|");
        page.push_shared(&doc, 0..3);
        assert_eq!(page.pieces.len(), 3);
        assert_eq!(page.ready_now().ok().unwrap().as_slice(), b"text|<p>");
        // More bytes than one gathered chunk: streamed, the first chunk kept in front.
        let big = Composite::new()
            .bytes(vec![b'x'; GATHER / 2 + 1])
            .bytes(vec![b'y'; GATHER / 2 + 1])
            .bytes("z");
        let mut streamed = big.ready_now().err().unwrap();
        assert!(matches!(poll(&mut streamed), Poll::Ready(Some(Ok(b))) if b.len() == GATHER + 2));
        assert!(matches!(poll(&mut streamed), Poll::Ready(Some(Ok(b))) if b.as_slice() == b"z"));
        assert!(Composite::new().ready_now().ok().unwrap().is_empty());

        // A piece that waits: the bytes before it stay first, nothing after it goes.
        let mut waits = with_stream(b"b", false).ready_now().err().unwrap();
        assert!(matches!(poll(&mut waits), Poll::Ready(Some(Ok(b))) if b.as_slice() == b"ab"));
        assert!(poll(&mut waits).is_pending());

        // A piece that fails after its output started: its bytes, then the failure.
        let mut fails = with_stream(b"b", true).ready_now().err().unwrap();
        assert!(matches!(poll(&mut fails), Poll::Ready(Some(Ok(b))) if b.as_slice() == b"ab"));
        assert!(matches!(poll(&mut fails), Poll::Ready(Some(Err(_)))));
    }
}
