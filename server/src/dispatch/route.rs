//! One route in full: filters' `before` in order, the handler, filters' `after` in reverse.
//!
//! Where the run stands is data ([`Phase`]). [`RouteRun::advance`] takes it as far as it goes
//! without waiting — on a request's first pass that is usually to the end (inline filters
//! around an inline handler cost no future) — and says what stops it ([`Blocked`]: a filter's
//! `Wait`, a step for the worker pool, an asynchronous answer). [`run_route`] waits for that
//! and advances again.

use std::ops::ControlFlow;

use async_ffi::LocalFfiFuture;
use osprey_sdk::abi_stable::std_types::{RStr, RString, RVec};
use osprey_sdk::{HeaderPair, Mode, Reply, Request, Response, Step, Wants};

use super::{error_response, handled, replied, Exchange, Handled, Ran, Routing, Site};
use crate::router::{Route, RouteFilter};

/// How long the core waits on a filter's [`Step::Wait`] future before asking again, and how
/// many times it asks before it goes on without the filter's answer.
const WAIT_ROUND: std::time::Duration = std::time::Duration::from_millis(500);
const WAIT_ROUNDS: u32 = 120;

/// The next step of a route's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Filter `i`'s `before` (the handler once `i` is past the last filter).
    Before(usize),
    Handler,
    /// `after` of filters `0..n`, from `n - 1` down (the run is over at 0).
    After(usize),
}

/// What a run cannot go past without waiting.
pub enum Blocked {
    /// Filter `i`'s `before` answered `Wait`: await its wait future, then ask again.
    FilterWait(usize),
    /// The next step runs on the worker pool.
    Pool,
    /// The handler answers asynchronously.
    Reply(LocalFfiFuture<Reply>),
}

/// How far [`RouteRun::advance`] went.
pub enum Advanced {
    /// The response is in the exchange.
    Answered,
    /// The handler declined: routing goes on with the next route.
    Declined,
    Blocked(Blocked),
}

/// What ended a stretch of steps on one request view.
enum Stretch {
    /// The run stopped: answered, declined, or a step must wait.
    Stop(Advanced),
    /// A filter set request headers: the steps after it see them.
    SetHeaders(RVec<HeaderPair>),
    /// The run was answered: `after` sees the client's headers, not the filters'.
    ClientHeaders,
}

/// A run that stopped to wait, carried to [`run_route`] (see [`RouteRun::suspend`]).
pub struct Suspended {
    pub at: (usize, usize),
    key: String,
    phase: Phase,
    /// The core's 404 / 405 takes the handler's place (see `unrouted`).
    unrouted: bool,
    pub blocked: Blocked,
}

impl Suspended {
    /// Whether all that is left is `route`'s handler — on the worker pool, or answering
    /// asynchronously — with no filter around it: the common waits, which `finish` awaits
    /// without a route run.
    pub fn only_handler(&self, route: &Route) -> bool {
        !matches!(self.blocked, Blocked::FilterWait(_))
            && self.phase == Phase::Handler
            && !self.unrouted
            && route.filters.is_empty()
    }
}

/// One route's run. Filters whose `before` let the request go on are told when it ends
/// without their `after` (`Filter::cancel`): on drop, as many as the phase says.
pub struct RouteRun<'a> {
    filters: &'a [RouteFilter],
    /// `host|scheme|uri`, then each filter's variant; empty when no filter reads it, or
    /// before the first step.
    key: String,
    phase: Phase,
    /// With `Some`, the core's 404 / 405 takes the handler's place: the filters of the first
    /// route that matched the path wrap the core's answer.
    unrouted: Option<Routing>,
    /// The route's module answers (not the core's 404 / 405): counted in its stats.
    counted: bool,
    /// `Wait` answers awaited so far.
    waited: u32,
}

impl Drop for RouteRun<'_> {
    fn drop(&mut self) {
        let pending = match self.phase {
            Phase::Before(i) => i,
            Phase::Handler => self.filters.len(),
            Phase::After(n) => n,
        };
        for f in self.filters[..pending].iter().rev() {
            if f.wants(Wants::CANCEL) {
                f.filter.cancel(RStr::from_str(&self.key));
            }
        }
    }
}

impl<'a> RouteRun<'a> {
    /// A run from the first filter.
    pub fn new(site: Site<'a>, ex: &mut Exchange, unrouted: Option<Routing>) -> RouteRun<'a> {
        ex.extra.clear();
        RouteRun {
            filters: &site.route().filters[..],
            // Built on the first step's request view.
            key: String::new(),
            phase: Phase::Before(0),
            counted: unrouted.is_none(),
            unrouted,
            waited: 0,
        }
    }

    /// A filterless route whose handler answered asynchronously.
    pub fn later(at: (usize, usize), future: LocalFfiFuture<Reply>) -> Suspended {
        Self::stopped(at, Phase::Handler, Blocked::Reply(future))
    }

    /// A filterless route whose handler runs on the worker pool.
    pub fn pooled(at: (usize, usize)) -> Suspended {
        Self::stopped(at, Phase::Handler, Blocked::Pool)
    }

    /// A run of a route that reads no key, stopped at `phase` by `blocked`.
    fn stopped(at: (usize, usize), phase: Phase, blocked: Blocked) -> Suspended {
        Suspended {
            at,
            key: String::new(),
            phase,
            unrouted: false,
            blocked,
        }
    }

    /// The run of a plain route (`run_plain`) whose filter `i` set request headers `set`: on
    /// from the next filter, on a view with them.
    pub fn after_headers(
        site: Site<'a>,
        ex: &mut Exchange,
        i: usize,
        set: RVec<HeaderPair>,
    ) -> RouteRun<'a> {
        ex.extra.extend(set);
        RouteRun {
            filters: &site.route().filters[..],
            key: String::new(),
            phase: Phase::Before(i + 1),
            counted: true,
            unrouted: None,
            waited: 0,
        }
    }

    /// Hand the run over to wait (the filters stay pending).
    pub fn suspend(mut self, at: (usize, usize), blocked: Blocked) -> (Suspended, Option<Routing>) {
        let suspended = Suspended {
            at,
            key: std::mem::take(&mut self.key),
            phase: std::mem::replace(&mut self.phase, Phase::After(0)),
            unrouted: !self.counted,
            blocked,
        };
        (suspended, self.unrouted.take())
    }

    /// The run `suspend` handed over (an unrouted one takes `routing`).
    pub fn resume(site: Site<'a>, s: Suspended, routing: &mut Routing) -> (RouteRun<'a>, Blocked) {
        let run = RouteRun {
            filters: &site.route().filters,
            key: s.key,
            phase: s.phase,
            unrouted: s.unrouted.then(|| std::mem::take(routing)),
            counted: !s.unrouted,
            waited: 0,
        };
        (run, s.blocked)
    }

    /// The core's own answers are not the route's module's.
    pub fn counted(&self) -> bool {
        self.counted
    }

    /// Run steps until the route is answered or declined, or a step must wait. The request
    /// view is built once for every stretch of steps that leaves the request as it is.
    pub fn advance(&mut self, site: Site<'_>, ex: &mut Exchange) -> Advanced {
        loop {
            let extra = !ex.extra.is_empty();
            match site.view(ex, |req, resp| self.stretch(site, req, resp, extra)) {
                Stretch::Stop(advanced) => return advanced,
                Stretch::SetHeaders(set) => ex.extra.extend(set),
                Stretch::ClientHeaders => client_headers(ex),
            }
        }
    }

    /// Run steps on one request view until the run stops or the view must change. `extra`:
    /// the view has filters' request headers.
    fn stretch(
        &mut self,
        site: Site<'_>,
        req: &Request<'_>,
        resp: &mut Response,
        extra: bool,
    ) -> Stretch {
        let route = site.route();
        if self.key.is_empty() && route.keyed {
            self.key = cache_key(site, req);
        }
        loop {
            match self.phase {
                Phase::Before(i) if i == self.filters.len() => self.phase = Phase::Handler,
                Phase::Before(i) => {
                    let f = &self.filters[i];
                    let key = RStr::from_str(&self.key);
                    let before = f.before_for(req.method.as_str());
                    if before
                        && f.wants(Wants::BEFORE_MODE)
                        && f.filter.before_mode(req, key) == Mode::Worker
                    {
                        return Stretch::Stop(Advanced::Blocked(Blocked::Pool));
                    }
                    let step = match before {
                        true => f.filter.before(req, key, resp),
                        false => Step::Continue,
                    };
                    match step {
                        Step::Continue => {
                            self.phase = Phase::Before(i + 1);
                            if let Some(set) = f.request_headers(req, key) {
                                return Stretch::SetHeaders(set);
                            }
                        }
                        // A filter answered (a cache hit): `after` of the filters before it runs.
                        Step::Respond => {
                            self.phase = Phase::After(i);
                            if extra {
                                return Stretch::ClientHeaders;
                            }
                        }
                        Step::Wait => {
                            return Stretch::Stop(Advanced::Blocked(Blocked::FilterWait(i)))
                        }
                    }
                }
                Phase::Handler => {
                    if let Some(routing) = self.unrouted.take() {
                        routing.not_found(resp);
                    } else if route.mode == Mode::Worker {
                        return Stretch::Stop(Advanced::Blocked(Blocked::Pool));
                    } else {
                        match handled(route.handler.handle(req, resp), resp) {
                            Handled::Answered => {}
                            Handled::Declined => return Stretch::Stop(Advanced::Declined),
                            Handled::Later(future) => {
                                return Stretch::Stop(Advanced::Blocked(Blocked::Reply(future)));
                            }
                        }
                    }
                    // Filters' request headers were for the handler: `after` sees the client's.
                    self.phase = Phase::After(self.filters.len());
                    if extra {
                        return Stretch::ClientHeaders;
                    }
                }
                Phase::After(0) => return Stretch::Stop(Advanced::Answered),
                Phase::After(n) => {
                    let f = &self.filters[n - 1];
                    if f.wants(Wants::AFTER_MODE) && f.filter.after_mode(req, resp) == Mode::Worker
                    {
                        return Stretch::Stop(Advanced::Blocked(Blocked::Pool));
                    }
                    f.after(req, RStr::from_str(&self.key), resp);
                    self.phase = Phase::After(n - 1);
                }
            }
        }
    }

    /// Filter `i`'s `before` answered `step`.
    fn took(&mut self, site: Site<'_>, ex: &mut Exchange, i: usize, step: Step) -> Option<Blocked> {
        match step {
            Step::Continue => {
                let set = self.request_headers(site, ex, i);
                self.went_on(ex, i, set);
            }
            // A filter answered (a cache hit): `after` of the filters before it runs.
            Step::Respond => {
                client_headers(ex);
                self.phase = Phase::After(i);
            }
            Step::Wait => return Some(Blocked::FilterWait(i)),
        }
        None
    }

    /// The request headers filter `i` sets for the handler (only a filter that takes part
    /// is given a view of the request).
    fn request_headers(
        &self,
        site: Site<'_>,
        ex: &mut Exchange,
        i: usize,
    ) -> Option<RVec<HeaderPair>> {
        let f = &self.filters[i];
        if !f.wants(Wants::REQUEST_HEADERS) {
            return None;
        }
        site.view(ex, |req, _| {
            f.request_headers(req, RStr::from_str(&self.key))
        })
    }

    /// Filter `i` let the request go on, setting request headers `set`.
    fn went_on(&mut self, ex: &mut Exchange, i: usize, set: Option<RVec<HeaderPair>>) {
        if let Some(set) = set {
            ex.extra.extend(set);
        }
        self.phase = Phase::Before(i + 1);
    }

    /// The handler (or the core) answered; filters see error pages too (a cache may answer
    /// with a stale entry).
    fn answered(&mut self, ex: &mut Exchange) {
        client_headers(ex);
        self.phase = Phase::After(self.filters.len());
    }

    /// Wait for what `blocked` needs and take the step it held up. Gives whether the handler
    /// declined (on the worker pool).
    async fn unblock(&mut self, site: Site<'_>, ex: Box<Exchange>, blocked: Blocked) -> Ran<bool> {
        let mut ex = ex;
        match blocked {
            Blocked::FilterWait(i) => self.wait(site, &mut ex, i).await,
            Blocked::Reply(future) => {
                replied(future.await, &mut ex.resp);
                self.answered(&mut ex);
            }
            Blocked::Pool => return self.on_pool(site, ex).await,
        }
        Ran::Done(ex, false)
    }

    /// Filter `i` answered `Wait`: await its future (`before` is asked again next), or go on
    /// without its answer once waited long enough.
    async fn wait(&mut self, site: Site<'_>, ex: &mut Exchange, i: usize) {
        if self.waited == WAIT_ROUNDS {
            let set = self.request_headers(site, ex, i);
            return self.went_on(ex, i, set);
        }
        self.waited += 1;
        let wait = self.filters[i].filter.wait(RStr::from_str(&self.key));
        let _ = tokio::time::timeout(WAIT_ROUND, wait).await;
    }

    /// Take the next step on the worker pool. Gives whether the handler declined.
    async fn on_pool(&mut self, site: Site<'_>, ex: Box<Exchange>) -> Ran<bool> {
        match self.phase {
            Phase::Before(i) => {
                let key = self.key.clone();
                let step = on_pool(site, ex, move |route, req, resp| {
                    route.filters[i]
                        .filter
                        .before(req, RStr::from_str(&key), resp)
                });
                let (mut ex, step) = match step.await.ran() {
                    ControlFlow::Continue(ran) => ran,
                    ControlFlow::Break(stop) => return stop,
                };
                if self.took(site, &mut ex, i, step).is_some() {
                    self.wait(site, &mut ex, i).await;
                }
                Ran::Done(ex, false)
            }
            Phase::Handler => {
                let (mut ex, declined) = match handler_on_pool(site, ex).await.ran() {
                    ControlFlow::Continue(ran) => ran,
                    ControlFlow::Break(stop) => return stop,
                };
                if !declined {
                    self.answered(&mut ex);
                }
                Ran::Done(ex, declined)
            }
            Phase::After(n) => {
                let key = self.key.clone();
                let after = on_pool(site, ex, move |route, req, resp| {
                    route.filters[n - 1]
                        .filter
                        .after(req, RStr::from_str(&key), resp)
                });
                // On a full pool the filters before this one are skipped: the answer is the
                // pool's 503 (and they are told, as the phase says).
                self.phase = Phase::After(n - 1);
                after.await.map(|()| false)
            }
        }
    }
}

/// Filters' request headers were for the handler; `after` sees the client's. The `Cookie`
/// the handler saw stays for the subrequests `after` starts (`subrequest::keep_cookie`).
fn client_headers(ex: &mut Exchange) {
    if !ex.extra.is_empty() {
        super::subrequest::keep_cookie(ex);
        ex.extra.clear();
    }
}

/// How far [`run_plain`] went.
pub enum Plain {
    Answered,
    Declined,
    /// A filter's `Wait` or an asynchronous answer: the rest is a [`RouteRun`]'s.
    Stopped(Suspended),
    /// Filter `i` set request headers: the rest needs a request view with them, a
    /// [`RouteRun`]'s from the next filter ([`RouteRun::after_headers`]).
    SetHeaders(usize, RVec<HeaderPair>),
}

/// The run of a `plain` route (`Route::plain`: inline `before`/`request_headers`/`after`
/// steps only, no key, an inline handler), the common filtered one, on one request view and
/// without a [`RouteRun`]: it has no phase to keep unless it stops or a filter sets request
/// headers, and then hands over to one at the same step. (Its filters want no `cancel`.)
pub fn run_plain(site: Site<'_>, ex: &mut Exchange, at: (usize, usize)) -> Plain {
    let route = site.route();
    let filters = &route.filters[..];
    ex.extra.clear();
    site.view(ex, |req, resp| {
        let (method, key) = (req.method.as_str(), RStr::from_str(""));
        for (i, f) in filters.iter().enumerate() {
            let step = match f.before_for(method) {
                true => f.filter.before(req, key, resp),
                false => Step::Continue,
            };
            match step {
                Step::Continue => {
                    if let Some(set) = f.request_headers(req, key) {
                        return Plain::SetHeaders(i, set);
                    }
                }
                Step::Respond => return afters(&filters[..i], req, resp),
                Step::Wait => {
                    let wait = Blocked::FilterWait(i);
                    return Plain::Stopped(RouteRun::stopped(at, Phase::Before(i), wait));
                }
            }
        }
        match handled(route.handler.handle(req, resp), resp) {
            Handled::Answered => afters(filters, req, resp),
            Handled::Declined => Plain::Declined,
            Handled::Later(future) => {
                let reply = Blocked::Reply(future);
                Plain::Stopped(RouteRun::stopped(at, Phase::Handler, reply))
            }
        }
    })
}

/// The `after` steps of a plain route's `filters`, from the last.
fn afters(filters: &[RouteFilter], req: &Request<'_>, resp: &mut Response) -> Plain {
    for f in filters.iter().rev() {
        f.after(req, RStr::from_str(""), resp);
    }
    Plain::Answered
}

/// Run a route from where `run` stands (waiting first for `blocked`) to its end. Gives
/// `Handled::Answered` or `Handled::Declined`.
pub async fn run_route(
    site: Site<'_>,
    mut ex: Box<Exchange>,
    mut run: RouteRun<'_>,
    mut blocked: Option<Blocked>,
) -> Ran<Handled> {
    loop {
        if let Some(blocked) = blocked.take() {
            ex = match run.unblock(site, ex, blocked).await {
                Ran::Done(ex, false) => ex,
                Ran::Done(ex, true) => return Ran::Done(ex, Handled::Declined),
                Ran::Busy(ex) => return Ran::Busy(ex),
                Ran::Lost => return Ran::Lost,
            };
        }
        match run.advance(site, &mut ex) {
            Advanced::Answered => {
                if run.counted() {
                    crate::stats::count_module(site.route().stat);
                }
                return Ran::Done(ex, Handled::Answered);
            }
            Advanced::Declined => return Ran::Done(ex, Handled::Declined),
            Advanced::Blocked(b) => blocked = Some(b),
        }
    }
}

/// `host|scheme|uri`, then each filter's variant.
fn cache_key(site: Site<'_>, req: &Request<'_>) -> String {
    let (host, uri) = (req.host.as_str(), req.uri.as_str());
    let scheme = if site.peer.secure { "https" } else { "http" };
    // Room for the filters' variants too.
    let mut key = RString::with_capacity(host.len() + scheme.len() + uri.len() + 32);
    for part in [host, "|", scheme, "|", uri] {
        key.push_str(part);
    }
    for f in &site.route().filters {
        if f.wants(Wants::CACHE_KEY) {
            f.filter.cache_key(req, &mut key);
        }
    }
    key.into_string()
}

/// Run the route's handler on the worker pool. Gives whether it declined.
pub fn handler_on_pool<'a>(
    site: Site<'a>,
    ex: Box<Exchange>,
) -> impl std::future::Future<Output = Ran<bool>> + 'a {
    // (A future cannot cross threads: the job says only whether the handler declined.)
    on_pool(site, ex, |route, req, resp| {
        match handled(route.handler.handle(req, resp), resp) {
            Handled::Answered => false,
            Handled::Declined => true,
            Handled::Later(_) => {
                tracing::error!("a worker handler returned an asynchronous answer; use an inline handler for that");
                error_response(resp, 500, "");
                false
            }
        }
    })
}

/// Run `step` on the worker pool on the exchange, which goes there and back in its box (the
/// exchange is a few hundred bytes, copied at every move into the job, the task and back).
async fn on_pool<T: Send + 'static>(
    site: Site<'_>,
    mut ex: Box<Exchange>,
    step: impl FnOnce(&Route, &Request<'_>, &mut Response) -> T + Send + 'static,
) -> Ran<T> {
    let Some(place) = site.shared.pool.reserve() else {
        error_response(&mut ex.resp, 503, "the server is busy");
        return Ran::Busy(ex);
    };
    let (shared, peer) = (site.shared.clone(), site.peer.clone());
    let (index, info_start) = (site.index, site.info_start);
    let job = move |ex: &mut Box<Exchange>| {
        let route = shared.router.route(index);
        let on = (
            route.prefix(),
            ex.body_only(route),
            super::subrequest::Kin::subrequest(&ex.lineage),
        );
        ex.with_request(&peer, on, info_start, |req, resp| step(route, req, resp))
    };
    match place.run(ex, job).await {
        Some((ex, out)) => Ran::Done(ex, out),
        None => Ran::Lost,
    }
}
