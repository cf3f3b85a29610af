//! Running one request through the routes: filters before, the handler (inline, on the worker
//! pool, or asynchronously), filters after; fall-through on decline; 404 / 405 at the end.

use std::sync::Arc;

use async_ffi::LocalFfiFuture;
use osprey_sdk::abi_stable::std_types::{RStr, RString, RVec};
use osprey_sdk::{Mode, Outcome, Reply, Request, Response, Step};

use crate::router::Route;
use crate::server::Shared;

mod exchange;
mod finished;
pub mod incoming;
pub mod subrequest;
use exchange::handler_error_response;
pub use exchange::{error_response, BodyLoc, Exchange, Peer};
pub use finished::{finished, start_clock, Finished};

/// How a request's run through the routes ended.
// `Answered` is every request's path: boxing the exchange would cost an allocation each.
#[allow(clippy::large_enum_variant)]
pub enum Dispatched {
    /// Answered — by a handler, a filter, the core's 404/405, or a busy pool's 503: the
    /// response is in `ex.resp`.
    Answered(Exchange),
    /// A worker job failed and took the request with it: the caller answers 500 and closes.
    Lost,
}

/// How a step that may hop to the worker pool ended.
enum Ran<T> {
    /// It ran: the exchange is back, with what the step gave.
    Done(Exchange, T),
    /// The pool was full: the exchange carries a 503 and routing stops there.
    Busy(Exchange),
    /// The job failed and took the exchange.
    Lost,
}

/// What a handler's outcome means for routing.
enum Handled {
    Answered,
    /// Routing goes on with the next matching route.
    Declined,
    Later(LocalFfiFuture<Reply>),
}

/// Apply a handler's outcome to the response: the one place an `Outcome` is read.
fn handled(outcome: Outcome, resp: &mut Response) -> Handled {
    match outcome {
        Outcome::Done => Handled::Answered,
        Outcome::Next => {
            resp.clear();
            Handled::Declined
        }
        Outcome::Error(status) => {
            handler_error_response(resp, status);
            Handled::Answered
        }
        Outcome::Later(future) => Handled::Later(future),
    }
}

/// Apply an asynchronous handler's reply to the response.
fn replied(reply: Reply, resp: &mut Response) {
    match reply {
        Reply::Done(answer) => *resp = answer,
        Reply::Error(status) => handler_error_response(resp, status),
    }
}

/// Filters `0..count` let the request go on in `before` and have not had their `after`;
/// if the request ends without it, they are told (`Filter::cancel`).
struct Pending<'a> {
    filters: &'a [osprey_sdk::FilterBox],
    key: &'a str,
    count: usize,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        for f in self.filters[..self.count].iter().rev() {
            f.cancel(RStr::from_str(self.key));
        }
    }
}

/// How long the core waits on a filter's [`Step::Wait`] future before asking again, and how
/// many times it asks before it goes on without the filter's answer.
const WAIT_ROUND: std::time::Duration = std::time::Duration::from_millis(500);
const WAIT_ROUNDS: u32 = 120;

/// The route a request is being tried on, and the connection it came on.
#[derive(Clone, Copy)]
struct Site<'a> {
    shared: &'a Arc<Shared>,
    peer: &'a Arc<Peer>,
    /// The route's index in the router.
    index: usize,
    /// Where the path info starts in the path.
    info_start: usize,
}

impl<'a> Site<'a> {
    /// Route `at.0`, whose path info starts at `at.1`.
    fn at(shared: &'a Arc<Shared>, peer: &'a Arc<Peer>, at: (usize, usize)) -> Site<'a> {
        Site {
            shared,
            peer,
            index: at.0,
            info_start: at.1,
        }
    }

    fn route(&self) -> &'a Route {
        self.shared.router.route(self.index)
    }

    /// Run `f` on the request view as this route sees it; subrequests started meanwhile are
    /// this request's.
    fn view<R>(&self, ex: &mut Exchange, f: impl FnOnce(&Request<'_>, &mut Response) -> R) -> R {
        let mut lineage = ex.lineage.take();
        let scope = subrequest::Scope::enter(self.shared, self.peer, &mut lineage);
        let out = ex.with_request(self.peer, self.route().prefix(), self.info_start, f);
        drop(scope);
        ex.lineage = lineage;
        out
    }
}

/// Run one filter's `before` (on the worker pool when it asks, waiting while it answers
/// `Wait`); after `Continue`, collect the request headers it sets.
async fn before_step(site: Site<'_>, ex: Exchange, filter: usize, key: &str) -> Ran<Step> {
    let f = &site.route().filters[filter];
    let mut ex = ex;
    for _ in 0..WAIT_ROUNDS {
        let step;
        (ex, step) = match run_before(site, ex, filter, key).await {
            Ran::Done(ex, step) => (ex, step),
            other => return other,
        };
        match step {
            Step::Wait => {
                let _ = tokio::time::timeout(WAIT_ROUND, f.wait(RStr::from_str(key))).await;
            }
            Step::Continue => break,
            Step::Respond => return Ran::Done(ex, Step::Respond),
        }
    }
    let mut set = RVec::new();
    site.view(&mut ex, |req, _| {
        f.request_headers(req, RStr::from_str(key), &mut set)
    });
    ex.extra.extend(set);
    Ran::Done(ex, Step::Continue)
}

/// Where routing a request stands: how far down the routes it went, and the methods of the
/// routes that matched but for the method (for a 405's `Allow`). Routes are matched one at a
/// time, as they are tried: the first usually answers.
#[derive(Default)]
pub struct Routing {
    next: usize,
    allowed: Vec<String>,
    /// The first route that matched the path and host, whatever the method: its filters see
    /// the core's 404 / 405 if no route answers ([`unrouted`]).
    first_match: Option<(usize, usize)>,
}

impl Routing {
    /// The next route that takes this request, with where its path info starts.
    fn next_route(
        &mut self,
        shared: &Shared,
        peer: &Peer,
        ex: &Exchange,
    ) -> Option<(usize, usize)> {
        let buf = &ex.buf;
        let (path, host) = (ex.head.path(buf), ex.head.host(buf));
        while let Some((index, route)) = shared.router.after(self.next) {
            self.next = index + 1;
            let Some((_, info)) = route.matches(path, host, peer.secure) else {
                continue;
            };
            let at = (index, path.len() - info.len());
            self.first_match.get_or_insert(at);
            if route.allows(ex.method()) {
                return Some(at);
            }
            self.allowed.extend(route.methods().iter().cloned());
        }
        None
    }

    /// The first route that matched the path, if it has filters.
    fn filtered_first_match(&self, shared: &Shared) -> Option<(usize, usize)> {
        self.first_match
            .filter(|&(i, _)| !shared.router.route(i).filters.is_empty())
    }

    /// No route answered: 404, or 405 when some route would have with another method.
    fn not_found(mut self, ex: &mut Exchange) {
        if self.allowed.is_empty() {
            error_response(&mut ex.resp, 404, "");
        } else {
            self.allowed.sort();
            self.allowed.dedup();
            error_response(&mut ex.resp, 405, "");
            ex.resp.header("Allow", self.allowed.join(", "));
        }
    }
}

/// A request that routing could not finish without waiting.
pub struct Unfinished {
    ex: Exchange,
    routing: Routing,
    /// The route to run in full (filters, worker pool), or the route whose handler answered
    /// `Later` with this future; `None`: no route answered, and a route's filters are to see
    /// the core's 404 / 405 ([`unrouted`]).
    at: Option<(usize, usize)>,
    later: Option<LocalFfiFuture<Reply>>,
}

/// Routing done as far as it goes without waiting.
// As for `Dispatched`: the answered case stays unboxed.
#[allow(clippy::large_enum_variant)]
pub enum Routed {
    /// Answered: the response is in `ex.resp`.
    Answered(Exchange),
    /// A filter, a worker handler or an asynchronous answer is next: see [`finish`].
    Waits(Box<Unfinished>),
}

/// Route the request in `ex` as far as inline handlers without filters take it: the common
/// case (a fixed answer, a cached file) costs no future, no allocation and no wait.
pub fn dispatch_now(shared: &Arc<Shared>, peer: &Arc<Peer>, mut ex: Exchange) -> Routed {
    let mut routing = Routing::default();
    while let Some(at) = routing.next_route(shared, peer, &ex) {
        let site = Site::at(shared, peer, at);
        let route = site.route();
        let waits = |ex, routing, later| {
            Routed::Waits(Box::new(Unfinished {
                ex,
                routing,
                at: Some(at),
                later,
            }))
        };
        if !route.filters.is_empty() || route.mode == Mode::Worker {
            return waits(ex, routing, None);
        }
        let outcome = site.view(&mut ex, |req, resp| route.handler.handle(req, resp));
        match handled(outcome, &mut ex.resp) {
            Handled::Answered => {}
            Handled::Declined => continue,
            Handled::Later(future) => return waits(ex, routing, Some(future)),
        }
        crate::stats::count_module(route.stat);
        return Routed::Answered(ex);
    }
    if routing.filtered_first_match(shared).is_some() {
        return Routed::Waits(Box::new(Unfinished {
            ex,
            routing,
            at: None,
            later: None,
        }));
    }
    routing.not_found(&mut ex);
    Routed::Answered(ex)
}

/// Route and answer the request in `ex`: the one pipeline every protocol's requests go
/// through (see `finished` for the step after the response is sent).
pub async fn dispatch(shared: &Arc<Shared>, peer: &Arc<Peer>, ex: Exchange) -> Dispatched {
    match dispatch_now(shared, peer, ex) {
        Routed::Answered(ex) => Dispatched::Answered(ex),
        Routed::Waits(rest) => finish(shared, peer, *rest).await,
    }
}

/// Finish routing what [`dispatch_now`] left: await an asynchronous answer, or run the route
/// in full, then go on down the routes.
pub async fn finish(shared: &Arc<Shared>, peer: &Arc<Peer>, rest: Unfinished) -> Dispatched {
    let Unfinished {
        mut ex,
        mut routing,
        at,
        later,
    } = rest;
    if let (Some(future), Some(at)) = (later, at) {
        replied(future.await, &mut ex.resp);
        crate::stats::count_module(shared.router.route(at.0).stat);
        return Dispatched::Answered(ex);
    }
    let mut next = at;
    while let Some(at) = next.take() {
        ex = match run_route(Site::at(shared, peer, at), ex, None).await {
            Ran::Done(ex, Handled::Declined) => ex,
            Ran::Done(ex, _) | Ran::Busy(ex) => return Dispatched::Answered(ex),
            Ran::Lost => return Dispatched::Lost,
        };
        next = routing.next_route(shared, peer, &ex);
    }
    unrouted(shared, peer, routing, ex).await
}

/// No route answered: the core's 404, or 405 when a route matched but for the method. The
/// first route that matched the path runs its filters around that answer, as if its handler
/// had given it: so a CORS filter puts its headers on the 404 / 405, and answers a preflight
/// `OPTIONS` to a route whose `methods` do not list OPTIONS.
async fn unrouted(
    shared: &Arc<Shared>,
    peer: &Arc<Peer>,
    routing: Routing,
    mut ex: Exchange,
) -> Dispatched {
    let Some(at) = routing.filtered_first_match(shared) else {
        routing.not_found(&mut ex);
        return Dispatched::Answered(ex);
    };
    match run_route(Site::at(shared, peer, at), ex, Some(routing)).await {
        Ran::Done(ex, _) | Ran::Busy(ex) => Dispatched::Answered(ex),
        Ran::Lost => Dispatched::Lost,
    }
}

/// One route in full: filters before, the handler (inline, on the pool, or asynchronous),
/// filters after. Gives `Handled::Answered` or `Handled::Declined`. With `unrouted`, the
/// core's 404 / 405 takes the handler's place ([`unrouted`]).
async fn run_route(site: Site<'_>, mut ex: Exchange, unrouted: Option<Routing>) -> Ran<Handled> {
    let route = site.route();
    // The core's own answers are not the module's.
    let counted = unrouted.is_none();
    let key = if route.filters.is_empty() {
        String::new()
    } else {
        cache_key(site, &mut ex)
    };
    // Filters before the handler; one may answer (a cache hit) or ask to wait.
    let mut answered_by = None;
    let mut pending = Pending {
        filters: &route.filters,
        key: &key,
        count: 0,
    };
    ex.extra.clear();
    for i in 0..route.filters.len() {
        let step;
        (ex, step) = match before_step(site, ex, i, &key).await {
            Ran::Done(ex, step) => (ex, step),
            // The pool was full or the job failed; `pending` tells the filters that ran.
            Ran::Busy(ex) => return Ran::Busy(ex),
            Ran::Lost => return Ran::Lost,
        };
        if step == Step::Respond {
            answered_by = Some(i);
            break;
        }
        pending.count = i + 1;
    }
    let after_from = match answered_by {
        Some(i) => {
            // A filter answered (a cache hit): `after` sees the client's headers here too.
            ex.extra.clear();
            i
        }
        None => {
            let declined;
            (ex, declined) = match unrouted {
                Some(routing) => {
                    routing.not_found(&mut ex);
                    (ex, false)
                }
                None => match run_handler(site, ex).await {
                    Ran::Done(ex, Handled::Declined) => (ex, true),
                    Ran::Done(ex, _) => (ex, false),
                    Ran::Busy(ex) => return Ran::Busy(ex),
                    Ran::Lost => return Ran::Lost,
                },
            };
            // Filters' request headers were for the handler; `after` sees the client's.
            ex.extra.clear();
            if declined {
                return Ran::Done(ex, Handled::Declined);
            }
            // Filters see error pages too: a cache may answer with a stale entry.
            route.filters.len()
        }
    };
    for i in (0..after_from).rev() {
        pending.count = i;
        match run_after(site, ex, i, &key).await {
            Ran::Done(back, ()) => ex = back,
            // The filters before this one are skipped: the answer is the pool's 503.
            Ran::Busy(busy) => {
                ex = busy;
                break;
            }
            Ran::Lost => return Ran::Lost,
        }
    }
    if counted {
        crate::stats::count_module(route.stat);
    }
    Ran::Done(ex, Handled::Answered)
}

/// `host|scheme|uri`, then each filter's variant.
fn cache_key(site: Site<'_>, ex: &mut Exchange) -> String {
    let buf = &ex.buf;
    let mut key = RString::from(format!(
        "{}|{}|{}",
        ex.head.host(buf),
        if site.peer.secure { "https" } else { "http" },
        ex.head.uri.str(buf)
    ));
    for filter in &site.route().filters {
        site.view(ex, |req, _| filter.cache_key(req, &mut key));
    }
    key.into_string()
}

/// The handler, inline (awaiting an asynchronous answer) or on the worker pool. Gives
/// `Handled::Answered` or `Handled::Declined`.
async fn run_handler(site: Site<'_>, mut ex: Exchange) -> Ran<Handled> {
    if site.route().mode == Mode::Worker {
        // (A future cannot cross threads: the job says only whether the handler declined.)
        let declined = on_pool(site, ex, |route, req, resp| {
            match handled(route.handler.handle(req, resp), resp) {
                Handled::Answered => false,
                Handled::Declined => true,
                Handled::Later(_) => {
                    tracing::error!("a worker handler returned an asynchronous answer; use an inline handler for that");
                    error_response(resp, 500, "");
                    false
                }
            }
        });
        return match declined.await {
            Ran::Done(ex, true) => Ran::Done(ex, Handled::Declined),
            Ran::Done(ex, false) => Ran::Done(ex, Handled::Answered),
            Ran::Busy(ex) => Ran::Busy(ex),
            Ran::Lost => Ran::Lost,
        };
    }
    let outcome = site.view(&mut ex, |req, resp| site.route().handler.handle(req, resp));
    match handled(outcome, &mut ex.resp) {
        Handled::Later(future) => {
            replied(future.await, &mut ex.resp);
            Ran::Done(ex, Handled::Answered)
        }
        settled => Ran::Done(ex, settled),
    }
}

/// A filter's `before` step, inline or on the worker pool as its `before_mode` asks.
async fn run_before(site: Site<'_>, mut ex: Exchange, filter: usize, key: &str) -> Ran<Step> {
    let f = &site.route().filters[filter];
    let mode = site.view(&mut ex, |req, _| f.before_mode(req, RStr::from_str(key)));
    if mode == Mode::Inline {
        let step = site.view(&mut ex, |req, resp| {
            f.before(req, RStr::from_str(key), resp)
        });
        return Ran::Done(ex, step);
    }
    let key = key.to_owned();
    on_pool(site, ex, move |route, req, resp| {
        route.filters[filter].before(req, RStr::from_str(&key), resp)
    })
    .await
}

/// A filter's `after` step, inline or on the worker pool.
async fn run_after(site: Site<'_>, mut ex: Exchange, filter: usize, key: &str) -> Ran<()> {
    let f = &site.route().filters[filter];
    let mode = site.view(&mut ex, |req, resp| f.after_mode(req, resp));
    if mode == Mode::Inline {
        site.view(&mut ex, |req, resp| f.after(req, RStr::from_str(key), resp));
        return Ran::Done(ex, ());
    }
    let key = key.to_owned();
    on_pool(site, ex, move |route, req, resp| {
        route.filters[filter].after(req, RStr::from_str(&key), resp)
    })
    .await
}

/// Run `step` on the worker pool with the exchange moved there and back.
async fn on_pool<T: Send + 'static>(
    site: Site<'_>,
    mut ex: Exchange,
    step: impl FnOnce(&Route, &Request<'_>, &mut Response) -> T + Send + 'static,
) -> Ran<T> {
    let Some(place) = site.shared.pool.reserve() else {
        error_response(&mut ex.resp, 503, "the server is busy");
        return Ran::Busy(ex);
    };
    let (shared, peer) = (site.shared.clone(), site.peer.clone());
    let (index, info_start) = (site.index, site.info_start);
    let job = move || {
        let route = shared.router.route(index);
        let out = ex.with_request(&peer, route.prefix(), info_start, |req, resp| {
            step(route, req, resp)
        });
        (ex, out)
    };
    match place.run(job).await {
        Some((ex, out)) => Ran::Done(ex, out),
        None => Ran::Lost,
    }
}
