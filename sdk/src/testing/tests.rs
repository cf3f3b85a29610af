//! The test kit's own tests: it must run routes as the core does.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use abi_stable::std_types::{ROption, RResult, RSlice, RString, RVec};

use super::*;
use crate::host::{self, Counter, Level};
use crate::{
    filter_box, handler_box, BodyStream, FfiContext, FfiPoll, Filter, Handler, Outcome, Reply,
    Request, Response, Step, UpstreamRequest,
};

struct Echo;
impl Handler for Echo {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        let seen = req.header("x-seen").unwrap_or("-").to_owned();
        resp.text(format!("{} {} {seen}", req.method, req.path_info));
        Outcome::Done
    }
}

/// Tags the key and the response; answers itself for `?hit`.
struct Tag(&'static str);
impl Filter for Tag {
    fn cache_key(&self, _: &Request<'_>, key: &mut String) {
        key.push('|');
        key.push_str(self.0);
    }
    fn before(&self, req: &Request<'_>, key: &str, resp: &mut Response) -> Step {
        if req.query.as_str() == "hit" {
            resp.text(format!("hit {key}"));
            return Step::Respond;
        }
        Step::Continue
    }
    fn request_headers(&self, _: &Request<'_>, _: &str, set: &mut RVec<crate::HeaderPair>) {
        set.push(crate::HeaderPair::new("X-Seen", self.0));
    }
    fn after(&self, _: &Request<'_>, _: &str, resp: &mut Response) {
        resp.header("X-After", self.0);
    }
}

#[test]
fn runs_filters_around_the_handler_in_core_order() {
    let (a, b) = (filter_box(Tag("a")), filter_box(Tag("b")));
    let resp = run(
        &[&a, &b],
        &Echo,
        &TestRequest::get("/p/x").route_prefix("/p"),
    );
    // Both filters' headers reach the handler, in filter order (as in the core).
    assert_eq!(resp.text(), "GET /x a");
    assert_eq!(resp.header_all("x-after"), ["b", "a"]);
    // A filter that answers skips the handler and later filters; earlier `after`s still run.
    let resp = run(&[&a, &b], &Echo, &TestRequest::get("/p?hit"));
    assert_eq!(resp.text(), "hit localhost|http|/p?hit|a|b");
    assert_eq!(resp.header_all("x-after"), Vec::<&str>::new());
}

/// Counts every step called on it; declares `wants`.
struct Declares(crate::Wants, Arc<AtomicU32>);
impl Filter for Declares {
    fn wants(&self) -> crate::Wants {
        self.0
    }
    fn cache_key(&self, _: &Request<'_>, key: &mut String) {
        self.1.fetch_add(1, Ordering::Relaxed);
        key.push_str("|declares");
    }
    fn before(&self, _: &Request<'_>, _: &str, _: &mut Response) -> Step {
        self.1.fetch_add(10, Ordering::Relaxed);
        Step::Continue
    }
    fn after(&self, _: &Request<'_>, key: &str, resp: &mut Response) {
        self.1.fetch_add(100, Ordering::Relaxed);
        resp.header("X-Key", key.to_owned());
    }
}

#[test]
fn only_the_steps_a_filter_wants_run() {
    use crate::Wants;
    let calls = Arc::new(AtomicU32::new(0));
    let after_only = filter_box(Declares(Wants::AFTER, calls.clone()));
    let resp = run(&[&after_only], &Echo, &TestRequest::get("/p"));
    // No key is built when no filter reads it; only `after` ran.
    assert_eq!(resp.header("x-key"), Some(""));
    assert_eq!(calls.swap(0, Ordering::Relaxed), 100);
    // A filter that reads the key has it built, with the variants of those that add one.
    let keyed = filter_box(Declares(
        Wants::KEY | Wants::CACHE_KEY | Wants::AFTER,
        calls.clone(),
    ));
    let resp = run(&[&keyed], &Echo, &TestRequest::get("/p"));
    assert_eq!(resp.header("x-key"), Some("localhost|http|/p|declares"));
    assert_eq!(calls.swap(0, Ordering::Relaxed), 101);
    // Not declaring: every step, as before `wants` existed.
    let all = filter_box(Declares(Wants::ALL, calls.clone()));
    run(&[&all], &Echo, &TestRequest::get("/p"));
    assert_eq!(calls.swap(0, Ordering::Relaxed), 111);
    // `before` for OPTIONS only: not called for a GET.
    let preflight = filter_box(Declares(
        Wants::BEFORE_OPTIONS | Wants::AFTER,
        calls.clone(),
    ));
    run(&[&preflight], &Echo, &TestRequest::get("/p"));
    assert_eq!(calls.swap(0, Ordering::Relaxed), 100);
    run(&[&preflight], &Echo, &TestRequest::new("OPTIONS", "/p"));
    assert_eq!(calls.load(Ordering::Relaxed), 110);
}

struct Cancels(Arc<AtomicU32>);
impl Filter for Cancels {
    fn cancel(&self, _: &str) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_declining_handler_cancels_the_filters() {
    struct Decline;
    impl Handler for Decline {
        fn handle(&self, _: &Request<'_>, _: &mut Response) -> Outcome {
            Outcome::Next
        }
    }
    let count = Arc::new(AtomicU32::new(0));
    let f = filter_box(Cancels(count.clone()));
    let resp = run(&[&f], &Decline, &TestRequest::get("/"));
    assert_eq!(resp.verdict, Verdict::Next);
    assert_eq!(count.load(Ordering::Relaxed), 1);
}

#[test]
fn errors_keep_headers_and_panics_become_500() {
    struct Fail;
    impl Handler for Fail {
        fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
            if req.path.as_str() == "/panic" {
                panic!("boom");
            }
            resp.header("Access-Control-Allow-Origin", "*");
            Outcome::Error(404)
        }
    }
    let boxed = handler_box(Fail);
    let resp = call(&boxed, &TestRequest::get("/"));
    assert_eq!((resp.verdict, resp.status()), (Verdict::Error(404), 404));
    assert_eq!(resp.header("access-control-allow-origin"), Some("*"));
    let resp = call(&boxed, &TestRequest::get("/panic"));
    assert_eq!(resp.verdict, Verdict::Error(500));
    assert!(logged(Level::Error, "boom"), "{:?}", logs());
}

#[test]
fn scripted_backends_answer_later_futures() {
    reset();
    struct Proxy(crate::BackendId);
    impl Handler for Proxy {
        fn handle(&self, req: &Request<'_>, _: &mut Response) -> Outcome {
            let fut = host::upstream_request(
                self.0,
                UpstreamRequest {
                    method: "GET".into(),
                    target: req.uri.as_str().into(),
                    forward: req.headers,
                    except: RSlice::EMPTY,
                    headers: RVec::new(),
                    body: RVec::new(),
                    client_ip: req.remote_ip().into(),
                    body_stream: ROption::RNone,
                },
            );
            Outcome::later(async move {
                match fut.await {
                    RResult::ROk(resp) => Reply::Done(resp),
                    RResult::RErr(e) => Reply::Error(e.status),
                }
            })
        }
    }
    install();
    let id = add_backend("app");
    assert_eq!(host::backend("app"), Some(id));
    let proxy = Proxy(id);
    assert_eq!(
        call(&proxy, &TestRequest::get("/a")).verdict,
        Verdict::Error(502)
    );
    on_upstream(|backend, req| {
        let mut resp = Response::new();
        resp.text(format!("{backend} got {}", req.target));
        Ok(resp)
    });
    assert_eq!(call(&proxy, &TestRequest::get("/b")).text(), "app got /b");
    let sent = upstream_requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(&*sent[1].1.target, "/b");
}

#[test]
fn counters_and_streams_are_readable() {
    reset();
    install();
    let served = Counter::register("kit_served");
    struct Stream(u8);
    impl BodyStream for Stream {
        fn poll_chunk(
            &mut self,
            _: &mut FfiContext<'_>,
        ) -> FfiPoll<ROption<RResult<RVec<u8>, RString>>> {
            self.0 += 1;
            FfiPoll::Ready(match self.0 {
                1..=3 => ROption::RSome(RResult::ROk(vec![b'0' + self.0].into())),
                _ => ROption::RNone,
            })
        }
    }
    struct Streams(Counter);
    impl Handler for Streams {
        fn handle(&self, _: &Request<'_>, resp: &mut Response) -> Outcome {
            self.0.incr();
            resp.body_stream(Stream(0));
            Outcome::Done
        }
    }
    let h = Streams(served);
    call(&h, &TestRequest::get("/"));
    assert_eq!(call(&h, &TestRequest::get("/")).text(), "123");
    assert_eq!(counter_value("kit_served"), 2);
    assert_eq!(host::stats().unwrap().counters.len(), 1);
}

/// Counts a streamed body's pieces and bytes.
struct Upload;
impl Handler for Upload {
    fn handle(&self, req: &Request<'_>, _resp: &mut Response) -> Outcome {
        let Some(mut body) = req.take_body_stream() else {
            return Outcome::Error(400);
        };
        Outcome::later(async move {
            let (mut pieces, mut bytes) = (0, 0);
            while let Some(Ok(piece)) = crate::next_chunk(&mut body).await {
                pieces += 1;
                bytes += piece.len();
            }
            let mut r = Response::new();
            r.text(format!("{pieces} pieces, {bytes} bytes"));
            Reply::Done(r)
        })
    }
    fn streams_request_body(&self) -> bool {
        true
    }
}

#[test]
fn bodies_can_be_handed_as_streams() {
    let req = TestRequest::post("/up").body(vec![7u8; 10]).streamed(4);
    assert_eq!(call(&Upload, &req).text(), "3 pieces, 10 bytes");
    // Buffered, the stream is not there.
    let req = TestRequest::post("/up").body(vec![7u8; 10]);
    assert_eq!(call(&Upload, &req).status(), 400);
}
