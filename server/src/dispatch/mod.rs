//! Running one request through the routes: filters before, the handler (inline, on the worker
//! pool, or asynchronously), filters after; fall-through on decline; 404 / 405 at the end.

use std::sync::Arc;

use async_ffi::LocalFfiFuture;
use osprey_sdk::abi_stable::std_types::{RStr, RString, RVec};
use osprey_sdk::{Mode, Outcome, Reply, Request, Response, Step};

use crate::router::Route;
use crate::server::Shared;

mod exchange;
pub use exchange::{error_response, BodyLoc, Exchange, Peer};

/// A handler result that can come back from a worker thread.
enum Answer {
    Done,
    Next,
    Error(u16),
    /// The pool was full: the exchange is [`lost`] and already holds a 503.
    Busy,
    /// No route answered: the core's 404 or 405 is in the response (see [`unrouted`]).
    Unrouted,
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
    fn route(&self) -> &'a Route {
        self.shared.router.route(self.index)
    }

    /// Run `f` on the request view as this route sees it.
    fn view<R>(&self, ex: &mut Exchange, f: impl FnOnce(&Request<'_>, &mut Response) -> R) -> R {
        ex.with_request(self.peer, self.route().prefix(), self.info_start, f)
    }
}

/// Run one filter's `before` (on the worker pool when it asks, waiting while it answers
/// `Wait`); after `Continue`, collect the request headers it sets. `Err`: the pool was full
/// and the exchange now carries a 503.
async fn before_step(
    site: Site<'_>,
    mut ex: Exchange,
    filter: usize,
    key: &str,
) -> Option<Result<(Exchange, Step), Exchange>> {
    let f = &site.route().filters[filter];
    for _ in 0..WAIT_ROUNDS {
        let step;
        (ex, step) = match run_before(site, ex, filter, key).await? {
            Ok(result) => result,
            Err(busy) => return Some(Err(busy)),
        };
        match step {
            Step::Wait => {
                let _ = tokio::time::timeout(WAIT_ROUND, f.wait(RStr::from_str(key))).await;
            }
            Step::Continue => break,
            Step::Respond => return Some(Ok((ex, Step::Respond))),
        }
    }
    let mut set = RVec::new();
    site.view(&mut ex, |req, _| {
        f.request_headers(req, RStr::from_str(key), &mut set)
    });
    ex.extra.extend(set);
    Some(Ok((ex, Step::Continue)))
}

/// Where routing a request stands: how far down the routes it went, and the methods of the
/// routes that matched but for the method (for a 405's `Allow`). Routes are matched one at a
/// time, as they are tried: the first usually answers.
#[derive(Default)]
pub struct Routing {
    next: usize,
    allowed: Vec<String>,
    /// The first route that matched the path and host, whatever the method: its filters see
    /// the core's 404 / 405 if no route answers.
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
pub enum Routed {
    /// Answered: the response is in `ex.resp`.
    Done(Exchange),
    /// A filter, a worker handler or an asynchronous answer is next: see [`finish`].
    Unfinished(Box<Unfinished>),
}

/// Route the request in `ex` as far as inline handlers without filters take it: the common
/// case (a fixed answer, a cached file) costs no future, no allocation and no wait.
pub fn dispatch_now(shared: &Arc<Shared>, peer: &Arc<Peer>, mut ex: Exchange) -> Routed {
    let mut routing = Routing::default();
    while let Some((index, info_start)) = routing.next_route(shared, peer, &ex) {
        let site = Site {
            shared,
            peer,
            index,
            info_start,
        };
        let route = site.route();
        if !route.filters.is_empty() || route.mode == Mode::Worker {
            let at = Some((index, info_start));
            return Routed::Unfinished(Box::new(Unfinished {
                ex,
                routing,
                at,
                later: None,
            }));
        }
        let outcome = site.view(&mut ex, |req, resp| route.handler.handle(req, resp));
        match outcome {
            Outcome::Done => {}
            Outcome::Next => {
                ex.resp.clear();
                continue;
            }
            Outcome::Error(status) => error_response(&mut ex.resp, status, ""),
            Outcome::Later(future) => {
                let at = Some((index, info_start));
                return Routed::Unfinished(Box::new(Unfinished {
                    ex,
                    routing,
                    at,
                    later: Some(future),
                }));
            }
        }
        crate::stats::count_module(route.stat);
        return Routed::Done(ex);
    }
    if routing.filtered_first_match(shared).is_some() {
        return Routed::Unfinished(Box::new(Unfinished {
            ex,
            routing,
            at: None,
            later: None,
        }));
    }
    routing.not_found(&mut ex);
    Routed::Done(ex)
}

/// Route and answer the request in `ex`; the response is left in `ex.resp`. `None` when the
/// exchange was lost to a failed worker job (the connection must close).
pub async fn dispatch(shared: &Arc<Shared>, peer: &Arc<Peer>, ex: Exchange) -> Option<Exchange> {
    match dispatch_now(shared, peer, ex) {
        Routed::Done(ex) => Some(ex),
        Routed::Unfinished(rest) => finish(shared, peer, *rest).await,
    }
}

/// Finish routing what [`dispatch_now`] left: await an asynchronous answer, or run the route
/// in full, then go on down the routes.
pub async fn finish(shared: &Arc<Shared>, peer: &Arc<Peer>, rest: Unfinished) -> Option<Exchange> {
    let Unfinished {
        mut ex,
        mut routing,
        at,
        later,
    } = rest;
    let mut next = at;
    if let (Some(future), Some(at)) = (later, at) {
        let route = shared.router.route(at.0);
        match future.await {
            Reply::Done(resp) => ex.resp = resp,
            Reply::Error(status) => error_response(&mut ex.resp, status, ""),
        }
        crate::stats::count_module(route.stat);
        return Some(ex);
    }
    while let Some((index, info_start)) = next.take() {
        let site = Site {
            shared,
            peer,
            index,
            info_start,
        };
        let answered;
        (ex, answered) = run_route(site, ex, None).await?;
        if answered {
            return Some(ex);
        }
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
) -> Option<Exchange> {
    let Some((index, info_start)) = routing.filtered_first_match(shared) else {
        routing.not_found(&mut ex);
        return Some(ex);
    };
    let site = Site {
        shared,
        peer,
        index,
        info_start,
    };
    run_route(site, ex, Some(routing)).await.map(|(ex, _)| ex)
}

/// One route in full: filters before, the handler (inline, on the pool, or asynchronous),
/// filters after. `false`: the handler declined. With `unrouted`, the core's 404 / 405 takes
/// the handler's place ([`unrouted`]).
async fn run_route(
    site: Site<'_>,
    mut ex: Exchange,
    unrouted: Option<Routing>,
) -> Option<(Exchange, bool)> {
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
        (ex, step) = match before_step(site, ex, i, &key).await? {
            Ok(result) => result,
            // The pool was full; `pending` tells the filters that ran.
            Err(busy) => return Some((busy, true)),
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
            let answer;
            (ex, answer) = match unrouted {
                Some(routing) => {
                    routing.not_found(&mut ex);
                    (ex, Answer::Unrouted)
                }
                None => run_handler(site, ex).await?,
            };
            // Filters' request headers were for the handler; `after` sees the client's.
            ex.extra.clear();
            match answer {
                Answer::Done => route.filters.len(),
                Answer::Next => {
                    ex.resp.clear();
                    return Some((ex, false));
                }
                // Filters see error pages too: a cache may answer with a stale entry.
                Answer::Error(status) => {
                    crate::stats::count_module(route.stat);
                    error_response(&mut ex.resp, status, "");
                    route.filters.len()
                }
                Answer::Busy => return Some((ex, true)),
                Answer::Unrouted => route.filters.len(),
            }
        }
    };
    for i in (0..after_from).rev() {
        pending.count = i;
        let busy;
        (ex, busy) = run_after(site, ex, i, &key).await?;
        if busy {
            break;
        }
    }
    if counted {
        crate::stats::count_module(route.stat);
    }
    Some((ex, true))
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

/// A handler's answer, or the future that will give it.
fn settled(outcome: Outcome) -> Result<Answer, LocalFfiFuture<Reply>> {
    match outcome {
        Outcome::Done => Ok(Answer::Done),
        Outcome::Next => Ok(Answer::Next),
        Outcome::Error(s) => Ok(Answer::Error(s)),
        Outcome::Later(future) => Err(future),
    }
}

async fn run_handler(site: Site<'_>, mut ex: Exchange) -> Option<(Exchange, Answer)> {
    if site.route().mode == Mode::Worker {
        let answered = on_pool(site, ex, |route, req, resp| {
            settled(route.handler.handle(req, resp)).unwrap_or_else(|_| {
                tracing::error!("a worker handler returned an asynchronous answer; use an inline handler for that");
                Answer::Error(500)
            })
        });
        return match answered.await? {
            Ok(result) => Some(result),
            Err(busy) => Some((busy, Answer::Busy)),
        };
    }
    let outcome = site.view(&mut ex, |req, resp| site.route().handler.handle(req, resp));
    let answer = match settled(outcome) {
        Ok(answer) => answer,
        Err(future) => match future.await {
            Reply::Done(resp) => {
                ex.resp = resp;
                Answer::Done
            }
            Reply::Error(s) => Answer::Error(s),
        },
    };
    Some((ex, answer))
}

/// A filter's `before` step, inline or on the worker pool as its `before_mode` asks.
/// `Err` carries the final 503 answer of a busy pool.
async fn run_before(
    site: Site<'_>,
    mut ex: Exchange,
    filter: usize,
    key: &str,
) -> Option<Result<(Exchange, Step), Exchange>> {
    let f = &site.route().filters[filter];
    let mode = site.view(&mut ex, |req, _| f.before_mode(req, RStr::from_str(key)));
    if mode == Mode::Inline {
        let step = site.view(&mut ex, |req, resp| {
            f.before(req, RStr::from_str(key), resp)
        });
        return Some(Ok((ex, step)));
    }
    let key = key.to_owned();
    on_pool(site, ex, move |route, req, resp| {
        route.filters[filter].before(req, RStr::from_str(&key), resp)
    })
    .await
}

/// A filter's `after` step, inline or on the worker pool. `true`: the pool was busy and the
/// exchange now carries its 503 (the filters before this one are skipped).
async fn run_after(
    site: Site<'_>,
    mut ex: Exchange,
    filter: usize,
    key: &str,
) -> Option<(Exchange, bool)> {
    let f = &site.route().filters[filter];
    let mode = site.view(&mut ex, |req, resp| f.after_mode(req, resp));
    if mode == Mode::Inline {
        site.view(&mut ex, |req, resp| f.after(req, RStr::from_str(key), resp));
        return Some((ex, false));
    }
    let key = key.to_owned();
    let done = on_pool(site, ex, move |route, req, resp| {
        route.filters[filter].after(req, RStr::from_str(&key), resp)
    });
    match done.await? {
        Ok((ex, ())) => Some((ex, false)),
        Err(busy) => Some((busy, true)),
    }
}

/// Run `step` on the worker pool with the exchange moved there and back. `Err`: the pool was
/// full; the exchange carries a 503. `None`: the job failed and took the request.
async fn on_pool<T: Send + 'static>(
    site: Site<'_>,
    mut ex: Exchange,
    step: impl FnOnce(&Route, &Request<'_>, &mut Response) -> T + Send + 'static,
) -> Option<Result<(Exchange, T), Exchange>> {
    let Some(place) = site.shared.pool.reserve() else {
        error_response(&mut ex.resp, 503, "the server is busy");
        return Some(Err(ex));
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
    place.run(job).await.map(Ok)
}
