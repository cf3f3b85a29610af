//! Running one request through the routes: filters before, the handler (inline, on the worker
//! pool, or asynchronously), filters after; fall-through on decline; 404 / 405 at the end.

use std::ops::ControlFlow;
use std::sync::Arc;

use async_ffi::LocalFfiFuture;
use osprey_sdk::{Mode, Outcome, Reply, Request, Response};

use crate::router::Route;
use crate::server::Shared;

mod exchange;
mod finished;
mod route;
use route::{run_route, Advanced, Blocked, RouteRun, Suspended};
pub mod incoming;
pub mod subrequest;
use exchange::handler_error_response;
pub use exchange::{error_response, BodyLoc, Exchange, Peer};
pub use finished::{finished, start_clock, Finished};

/// How a request's run through the routes ended: `E` is the exchange, boxed as [`finish`]
/// gives it (a waiting request's exchange is boxed once, when it starts to wait, and goes to
/// the worker pool and back in that box rather than being copied at every step).
// `dispatch`'s `Answered` is every request's path: boxing the exchange would cost an
// allocation each.
#[allow(clippy::large_enum_variant)]
pub enum Dispatched<E = Exchange> {
    /// Answered — by a handler, a filter, the core's 404/405, or a busy pool's 503: the
    /// response is in `ex.resp`.
    Answered(E),
    /// A worker job failed and took the request with it: the caller answers 500 and closes.
    Lost,
}

/// How a step that may hop to the worker pool ended.
enum Ran<T> {
    /// It ran: the exchange is back, with what the step gave.
    Done(Box<Exchange>, T),
    /// The pool was full: the exchange carries a 503 and routing stops there.
    Busy(Box<Exchange>),
    /// The job failed and took the exchange.
    Lost,
}

impl<T> Ran<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Ran<U> {
        match self {
            Ran::Done(ex, t) => Ran::Done(ex, f(t)),
            Ran::Busy(ex) => Ran::Busy(ex),
            Ran::Lost => Ran::Lost,
        }
    }

    /// Go on with what the step gave, or (when it did not run) stop with what the caller gives.
    fn ran<U>(self) -> ControlFlow<Ran<U>, (Box<Exchange>, T)> {
        match self {
            Ran::Done(ex, t) => ControlFlow::Continue((ex, t)),
            Ran::Busy(ex) => ControlFlow::Break(Ran::Busy(ex)),
            Ran::Lost => ControlFlow::Break(Ran::Lost),
        }
    }
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
    // Inline: each caller (the bare route, the plain run) is on every request's path.
    #[inline]
    fn view<R>(&self, ex: &mut Exchange, f: impl FnOnce(&Request<'_>, &mut Response) -> R) -> R {
        let route = self.route();
        let on = (
            route.prefix(),
            ex.body_only(route),
            subrequest::Kin::subrequest(&ex.lineage),
        );
        let mut lineage = ex.lineage.take();
        let lineage_ref = &mut lineage;
        let out = ex.with_request(self.peer, on, self.info_start, |req, resp| {
            // The view's id and `Cookie`: copied only if a subrequest starts.
            let _scope = subrequest::Scope::enter(self.shared, self.peer, lineage_ref, req);
            f(req, resp)
        });
        ex.lineage = lineage;
        out
    }
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
    fn not_found(mut self, resp: &mut Response) {
        if self.allowed.is_empty() {
            error_response(resp, 404, "");
        } else {
            self.allowed.sort();
            self.allowed.dedup();
            error_response(resp, 405, "");
            resp.header("Allow", self.allowed.join(", "));
        }
    }
}

/// A request that routing could not finish without waiting.
pub struct Unfinished {
    ex: Box<Exchange>,
    routing: Routing,
    /// The route's run, stopped where it must wait.
    run: Suspended,
}

/// Routing done as far as it goes without waiting.
// As for `Dispatched`: the answered case stays unboxed.
#[allow(clippy::large_enum_variant)]
pub enum Routed {
    /// Answered: the response is in `ex.resp`.
    Answered(Exchange),
    /// A filter, a worker step or an asynchronous answer is next: see [`finish`].
    Waits(Box<Unfinished>),
}

impl Routed {
    /// The request waits: its exchange is boxed here, once, for the rest of its run. (Not
    /// inlined at its four call sites: they stay out of `dispatch_now`'s answered path,
    /// which is every request's.)
    #[inline(never)]
    fn waits(ex: Exchange, routing: Routing, run: Suspended) -> Routed {
        let ex = Box::new(ex);
        Routed::Waits(Box::new(Unfinished { ex, routing, run }))
    }
}

/// Route the request in `ex` as far as it goes without waiting: the common case (a fixed
/// answer, a cached file, inline filters around them) costs no future and no wait.
pub fn dispatch_now(shared: &Arc<Shared>, peer: &Arc<Peer>, mut ex: Exchange) -> Routed {
    let mut routing = Routing::default();
    while let Some(at) = routing.next_route(shared, peer, &ex) {
        let site = Site::at(shared, peer, at);
        let route = site.route();
        if route.filters.is_empty() && route.mode == Mode::Inline {
            // The shortest way: no filter, no run.
            let outcome = site.view(&mut ex, |req, resp| route.handler.handle(req, resp));
            match handled(outcome, &mut ex.resp) {
                Handled::Answered => {}
                Handled::Declined => continue,
                Handled::Later(future) => {
                    let run = RouteRun::later(at, future);
                    return Routed::waits(ex, routing, run);
                }
            }
            crate::stats::count_module(route.stat);
            return Routed::Answered(ex);
        }
        if route.filters.is_empty() && route.mode == Mode::Worker {
            // Straight to the pool: no request view is built on this thread.
            let run = RouteRun::pooled(at);
            return Routed::waits(ex, routing, run);
        }
        let mut run = match route.plain {
            true => match route::run_plain(site, &mut ex, at) {
                route::Plain::Answered => {
                    crate::stats::count_module(route.stat);
                    return Routed::Answered(ex);
                }
                route::Plain::Declined => continue,
                route::Plain::Stopped(run) => return Routed::waits(ex, routing, run),
                route::Plain::SetHeaders(i, set) => RouteRun::after_headers(site, &mut ex, i, set),
            },
            false => RouteRun::new(site, &mut ex, None),
        };
        match run.advance(site, &mut ex) {
            Advanced::Answered => {
                crate::stats::count_module(route.stat);
                return Routed::Answered(ex);
            }
            Advanced::Declined => continue,
            Advanced::Blocked(blocked) => {
                let (run, _) = run.suspend(at, blocked);
                return Routed::waits(ex, routing, run);
            }
        }
    }
    let Some(at) = routing.filtered_first_match(shared) else {
        routing.not_found(&mut ex.resp);
        return Routed::Answered(ex);
    };
    let site = Site::at(shared, peer, at);
    let mut run = RouteRun::new(site, &mut ex, Some(routing));
    match run.advance(site, &mut ex) {
        Advanced::Blocked(blocked) => {
            let (run, routing) = run.suspend(at, blocked);
            let routing = routing.unwrap_or_default();
            Routed::waits(ex, routing, run)
        }
        _ => Routed::Answered(ex),
    }
}

/// Route and answer the request in `ex`: the one pipeline every protocol's requests go
/// through (see `finished` for the step after the response is sent). A request that has to
/// wait finishes in a boxed future: the caller's future stays small.
pub async fn dispatch(shared: &Arc<Shared>, peer: &Arc<Peer>, ex: Exchange) -> Dispatched {
    match dispatch_now(shared, peer, ex) {
        Routed::Answered(ex) => Dispatched::Answered(ex),
        Routed::Waits(rest) => match Box::pin(finish(shared, peer, rest)).await {
            Dispatched::Answered(ex) => Dispatched::Answered(*ex),
            Dispatched::Lost => Dispatched::Lost,
        },
    }
}

/// Finish routing what [`dispatch_now`] left: the stopped route's run, then on down the
/// routes.
///
/// A waiting request's future is moved whole into a box (its connection's step), and the
/// general run's future is several KiB: the common waits, a filterless route's handler on the
/// worker pool or answering asynchronously (a proxy), are awaited here without it; the rest
/// is boxed.
pub async fn finish(
    shared: &Arc<Shared>,
    peer: &Arc<Peer>,
    rest: Box<Unfinished>,
) -> Dispatched<Box<Exchange>> {
    let site = Site::at(shared, peer, rest.run.at);
    if !rest.run.only_handler(site.route()) {
        return Box::pin(finish_run(shared, peer, *rest)).await;
    }
    let Unfinished {
        mut ex,
        routing,
        run,
    } = *rest;
    let ran = match run.blocked {
        Blocked::Reply(future) => {
            replied(future.await, &mut ex.resp);
            Ran::Done(ex, false)
        }
        _ => route::handler_on_pool(site, ex).await,
    };
    match ran {
        Ran::Done(ex, false) => {
            crate::stats::count_module(site.route().stat);
            Dispatched::Answered(ex)
        }
        Ran::Done(ex, true) => Box::pin(route_on(shared, peer, routing, ex)).await,
        Ran::Busy(ex) => Dispatched::Answered(ex),
        Ran::Lost => Dispatched::Lost,
    }
}

/// [`finish`] in general: resume the stopped route's run.
async fn finish_run(
    shared: &Arc<Shared>,
    peer: &Arc<Peer>,
    rest: Unfinished,
) -> Dispatched<Box<Exchange>> {
    let Unfinished {
        ex,
        mut routing,
        run,
    } = rest;
    let site = Site::at(shared, peer, run.at);
    let (run, blocked) = RouteRun::resume(site, run, &mut routing);
    // (A run around the core's 404 / 405 never declines.)
    match run_route(site, ex, run, Some(blocked)).await {
        Ran::Done(ex, Handled::Declined) => route_on(shared, peer, routing, ex).await,
        Ran::Done(ex, _) | Ran::Busy(ex) => Dispatched::Answered(ex),
        Ran::Lost => Dispatched::Lost,
    }
}

/// The request was declined: on down the routes.
async fn route_on(
    shared: &Arc<Shared>,
    peer: &Arc<Peer>,
    mut routing: Routing,
    mut ex: Box<Exchange>,
) -> Dispatched<Box<Exchange>> {
    loop {
        let Some(at) = routing.next_route(shared, peer, &ex) else {
            return unrouted(shared, peer, routing, ex).await;
        };
        let site = Site::at(shared, peer, at);
        let run = RouteRun::new(site, &mut ex, None);
        ex = match run_route(site, ex, run, None).await {
            Ran::Done(ex, Handled::Declined) => ex,
            Ran::Done(ex, _) | Ran::Busy(ex) => return Dispatched::Answered(ex),
            Ran::Lost => return Dispatched::Lost,
        };
    }
}

/// No route answered: the core's 404, or 405 when a route matched but for the method. The
/// first route that matched the path runs its filters around that answer, as if its handler
/// had given it: so a CORS filter puts its headers on the 404 / 405, and answers a preflight
/// `OPTIONS` to a route whose `methods` do not list OPTIONS.
async fn unrouted(
    shared: &Arc<Shared>,
    peer: &Arc<Peer>,
    mut routing: Routing,
    mut ex: Box<Exchange>,
) -> Dispatched<Box<Exchange>> {
    let Some(at) = routing.filtered_first_match(shared) else {
        routing.not_found(&mut ex.resp);
        return Dispatched::Answered(ex);
    };
    let site = Site::at(shared, peer, at);
    let run = RouteRun::new(site, &mut ex, Some(std::mem::take(&mut routing)));
    match run_route(site, ex, run, None).await {
        Ran::Done(ex, _) | Ran::Busy(ex) => Dispatched::Answered(ex),
        Ran::Lost => Dispatched::Lost,
    }
}
