//! Running a handler, or a route's filters and handler, the way the core does.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use abi_stable::std_types::{RStr, RString, RVec};

use crate::filter::{FilterBox, Step, Wants};
use crate::handler::{Handler, HandlerBox, Outcome, Reply};
use crate::request::Request;
use crate::response::{HeaderPair, Response};

use super::{host, TestRequest, TestResponse, Verdict};

/// Something that answers requests: a [`HandlerBox`] (as `Module::new_handler` builds it,
/// with its panic guard) or any [`Handler`].
pub trait Answers {
    /// Answer one request.
    fn answer(&self, req: &Request<'_>, resp: &mut Response) -> Outcome;
}

impl Answers for HandlerBox {
    fn answer(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        self.handle(req, resp)
    }
}

impl<H: Handler> Answers for H {
    fn answer(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        Handler::handle(self, req, resp)
    }
}

/// Call `handler` on `req`, awaiting an `Outcome::Later` to its end.
///
/// ```
/// use osprey_sdk::testing::{call, TestRequest, Verdict};
/// use osprey_sdk::{Handler, Outcome, Reply, Request, Response};
///
/// struct Later;
/// impl Handler for Later {
///     fn handle(&self, req: &Request<'_>, _: &mut Response) -> Outcome {
///         let path = req.path.to_string();
///         Outcome::later(async move {
///             let mut resp = Response::new();
///             resp.text(path);
///             Reply::Done(resp)
///         })
///     }
/// }
///
/// let resp = call(&Later, &TestRequest::get("/x"));
/// assert_eq!(resp.verdict, Verdict::Done);
/// assert_eq!(resp.text(), "/x");
/// ```
pub fn call(handler: &impl Answers, req: &TestRequest) -> TestResponse {
    run(&[], handler, req)
}

/// Run a route: each filter's `cache_key` and `before` in order (waiting on `Step::Wait` and
/// applying `request_headers`), the handler unless a filter answered, then `after` in reverse
/// order, as the core does. Filters are told `cancel` when the handler declines. Worker-mode
/// steps run on the calling thread.
pub fn run(filters: &[&FilterBox], handler: &impl Answers, req: &TestRequest) -> TestResponse {
    host::install();
    // As the core does: each filter's `wants`, asked once, decides which of its steps run.
    let wants: Vec<Wants> = filters.iter().map(|f| f.wants().effective()).collect();
    let mut key = RString::new();
    if wants.iter().any(|w| w.contains(Wants::KEY)) {
        key = RString::from(format!(
            "{}|{}|{}",
            req.host(),
            if req.secure { "https" } else { "http" },
            req.uri
        ));
        for (f, w) in filters.iter().zip(&wants) {
            if w.contains(Wants::CACHE_KEY) {
                req.with_view(|r| f.cache_key(r, &mut key));
            }
        }
    }
    let key = RStr::from_str(key.as_str());
    let mut resp = Response::new();
    let mut extra: Vec<HeaderPair> = Vec::new();
    let mut answered_by = None;
    for (i, (f, w)) in filters.iter().zip(&wants).enumerate() {
        let mut step = Step::Continue;
        let before = w.contains(Wants::BEFORE)
            || w.contains(Wants::BEFORE_OPTIONS) && req.method == "OPTIONS";
        // The core asks again after each wait, giving up after a minute; a test gives up
        // sooner with a clear failure.
        for _ in 0..100 {
            if !before {
                break;
            }
            step = req.with_view(|r| f.before(r, key, &mut resp));
            if step != Step::Wait {
                break;
            }
            block_on(f.wait(key));
        }
        match step {
            Step::Respond => {
                answered_by = Some(i);
                break;
            }
            Step::Wait => panic!("filter #{i} answered Wait 100 times"),
            Step::Continue if w.contains(Wants::REQUEST_HEADERS) => {
                let mut set = RVec::new();
                req.with_view(|r| f.request_headers(r, key, &mut set));
                extra.extend(set);
            }
            Step::Continue => {}
        }
    }
    let (after_from, verdict) = match answered_by {
        Some(i) => (i, Verdict::Done),
        None => {
            let outcome = req.with_view_replacing(&extra, |r| handler.answer(r, &mut resp));
            let verdict = match outcome {
                Outcome::Done => Verdict::Done,
                Outcome::Next => Verdict::Next,
                Outcome::Error(status) => Verdict::Error(status),
                Outcome::Later(future) => match block_on(future) {
                    Reply::Done(r) => {
                        resp = r;
                        Verdict::Done
                    }
                    Reply::Error(status) => Verdict::Error(status),
                },
            };
            if verdict == Verdict::Next {
                for (f, w) in filters.iter().zip(&wants).rev() {
                    if w.contains(Wants::CANCEL) {
                        f.cancel(key);
                    }
                }
                return TestResponse::new(verdict, Response::new());
            }
            if let Verdict::Error(status) = verdict {
                resp.status = status;
            }
            (filters.len(), verdict)
        }
    };
    for (f, w) in filters[..after_from].iter().zip(&wants).rev() {
        if w.contains(Wants::AFTER) {
            req.with_view(|r| f.after(r, key, &mut resp));
        }
    }
    TestResponse::new(verdict, resp)
}

/// Wake by unparking the test's thread.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Drive a future to its end on this thread.
///
/// # Panics
/// When it is still pending after 10 seconds: test futures have no reactor, so one waiting on
/// a real socket or timer of its own never finishes.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        let now = Instant::now();
        assert!(now < deadline, "the future was still pending after 10 s");
        std::thread::park_timeout(deadline - now);
    }
}
