//! A fake host for tests: log lines captured, counters readable, backends and their answers
//! scripted by the test. State is per thread, so tests running in parallel do not mix.

use std::cell::RefCell;
use std::sync::Once;

use abi_stable::{
    prefix_type::PrefixTypeTrait,
    std_types::{ROption, RResult, RStr, Tuple2},
};
use async_ffi::LocalFfiFuture;

use crate::host::{Host, Level, Stats};
use crate::response::Response;
use crate::subrequest::{
    ParentBox, SubrequestError, SubrequestParent, SubrequestParent_TO, SubrequestStarted,
    SubrequestTarget,
};
use crate::upstream::{BackendId, UpstreamError, UpstreamFuture, UpstreamRequest};

/// How a test answers upstream requests: the backend's name and the request in, the response
/// (or the error the host would report) out.
type Script = Box<dyn FnMut(&str, &UpstreamRequest<'static>) -> Result<Response, UpstreamError>>;

/// How a test answers subrequests: the target (host filled in from the parent) in, the answer out.
type SubScript = Box<dyn FnMut(&SubrequestTarget) -> Result<Response, SubrequestError>>;

#[derive(Default)]
struct State {
    logs: Vec<(Level, String)>,
    counters: Vec<(String, u64)>,
    backends: Vec<String>,
    script: Option<Script>,
    sent: Vec<(String, UpstreamRequest<'static>)>,
    sub_script: Option<SubScript>,
    subrequests: Vec<SubrequestTarget>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// Make the fake host the one `osprey_sdk::host` uses (once per test binary). Every
/// `testing` entry point calls it; call it yourself before code that logs or registers
/// counters outside them.
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let host = Host {
            log,
            backend,
            upstream_request,
            stats,
            counter,
            counter_add,
            subrequest,
            subrequest_parent,
            tcp_connect,
            spawn,
            upstream_health,
        }
        .leak_into_prefix();
        crate::host::install(host, "test");
    });
}

/// No network in unit tests: connecting fails, saying so.
extern "C" fn tcp_connect(
    addr: RStr<'_>,
    _connect_ms: u64,
    _io_ms: u64,
) -> crate::tcp::ConnectFuture {
    let message = format!("cannot connect to {addr}: the test host lends no TCP connections");
    LocalFfiFuture::new(async move { RResult::RErr(message.into()) })
}

/// No network thread in unit tests: tasks are not run.
extern "C" fn spawn(_task: LocalFfiFuture<()>) -> bool {
    false
}

extern "C" fn upstream_health() -> abi_stable::std_types::RVec<crate::upstream::ServerHealth> {
    abi_stable::std_types::RVec::new()
}

/// Forget this thread's logs, counters, backends and upstream script.
pub fn reset() {
    STATE.with(|s| *s.borrow_mut() = State::default());
}

/// The log lines written on this thread so far.
pub fn logs() -> Vec<(Level, String)> {
    STATE.with(|s| s.borrow().logs.clone())
}

/// Whether some log line at `level` contains `text`.
pub fn logged(level: Level, text: &str) -> bool {
    STATE.with(|s| {
        s.borrow()
            .logs
            .iter()
            .any(|(l, m)| *l == level && m.contains(text))
    })
}

/// A counter's value (0 when never registered).
pub fn counter_value(name: &str) -> u64 {
    STATE.with(|s| {
        s.borrow()
            .counters
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    })
}

/// Declare a backend, as the configuration's `backends` would, so `host::backend(name)` finds it.
pub fn add_backend(name: &str) -> BackendId {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let id = match s.backends.iter().position(|b| b == name) {
            Some(i) => i,
            None => {
                s.backends.push(name.to_owned());
                s.backends.len() - 1
            }
        };
        BackendId(id as u32)
    })
}

/// Answer upstream requests with `script` from now on (without one they fail with 502).
pub fn on_upstream(
    script: impl FnMut(&str, &UpstreamRequest<'static>) -> Result<Response, UpstreamError> + 'static,
) {
    STATE.with(|s| s.borrow_mut().script = Some(Box::new(script)));
}

/// The upstream requests sent so far, with their backend's name. The client headers of
/// `forward` that go upstream ([`UpstreamRequest::forwarded`]) are in `headers`, before the
/// module's own, as the host writes them.
pub fn upstream_requests() -> Vec<(String, UpstreamRequest<'static>)> {
    STATE.with(|s| s.borrow().sent.clone())
}

/// Answer subrequests with `script` from now on (without one they answer 404).
pub fn on_subrequest(
    script: impl FnMut(&SubrequestTarget) -> Result<Response, SubrequestError> + 'static,
) {
    STATE.with(|s| s.borrow_mut().sub_script = Some(Box::new(script)));
}

/// The subrequests started so far (`host` filled in from the parent when it was empty).
pub fn subrequests() -> Vec<SubrequestTarget> {
    STATE.with(|s| s.borrow().subrequests.clone())
}

extern "C" fn subrequest(
    parent_host: RStr<'_>,
    _parent_uri: RStr<'_>,
    target: &SubrequestTarget,
) -> SubrequestStarted {
    let mut target = target.clone();
    if target.host.is_empty() {
        target.host = parent_host.into();
    }
    let mut script = STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.subrequests.push(target.clone());
        s.sub_script.take()
    });
    // The script runs without the state borrowed, so it may use the testing API itself.
    let answer = match script.as_mut() {
        Some(script) => script(&target),
        None => {
            let mut resp = Response::new();
            resp.status(404);
            Ok(resp)
        }
    };
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if s.sub_script.is_none() {
            s.sub_script = script;
        }
    });
    SubrequestStarted::Later(LocalFfiFuture::new(async move { RResult::from(answer) }))
}

/// The test kit's parent handle: the scripted answers, for the request it was taken for.
struct TestParent {
    host: String,
    uri: String,
}

impl SubrequestParent for TestParent {
    fn start(&self, target: &SubrequestTarget) -> SubrequestStarted {
        subrequest(self.host.as_str().into(), self.uri.as_str().into(), target)
    }
}

extern "C" fn subrequest_parent(
    parent_host: RStr<'_>,
    parent_uri: RStr<'_>,
) -> RResult<ParentBox, SubrequestError> {
    let parent = TestParent {
        host: parent_host.to_string(),
        uri: parent_uri.to_string(),
    };
    RResult::ROk(SubrequestParent_TO::from_value(
        parent,
        abi_stable::sabi_trait::TD_Opaque,
    ))
}

extern "C" fn log(level: Level, _module: RStr<'_>, message: RStr<'_>) {
    STATE.with(|s| s.borrow_mut().logs.push((level, message.to_string())));
}

extern "C" fn backend(name: RStr<'_>) -> ROption<BackendId> {
    STATE.with(|s| {
        s.borrow()
            .backends
            .iter()
            .position(|b| b == name.as_str())
            .map(|i| BackendId(i as u32))
            .into()
    })
}

extern "C" fn upstream_request(id: BackendId, request: UpstreamRequest<'_>) -> UpstreamFuture {
    let request = owned(request);
    let answer = STATE.with(|s| {
        let mut s = s.borrow_mut();
        let Some(name) = s.backends.get(id.0 as usize).cloned() else {
            return Err(UpstreamError {
                status: 500,
                message: format!("no backend #{}", id.0).into(),
            });
        };
        s.sent.push((name.clone(), request.clone()));
        // The script runs without the state borrowed, so it may use the testing API itself.
        let mut script = s.script.take();
        drop(s);
        let answer = match script.as_mut() {
            Some(script) => script(&name, &request),
            None => Err(UpstreamError {
                status: 502,
                message: "no upstream script: call testing::on_upstream".into(),
            }),
        };
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            if s.script.is_none() {
                s.script = script;
            }
        });
        answer
    });
    LocalFfiFuture::new(async move { RResult::from(answer) })
}

/// The request as the host sends it, the forwarded client headers copied into `headers`.
fn owned(request: UpstreamRequest<'_>) -> UpstreamRequest<'static> {
    let mut headers: abi_stable::std_types::RVec<crate::HeaderPair> = request
        .forwarded()
        .map(|h| {
            let value = String::from_utf8_lossy(h.value.as_slice()).into_owned();
            crate::HeaderPair::new(h.name.as_str().to_owned(), value)
        })
        .collect();
    headers.extend(request.headers.iter().cloned());
    UpstreamRequest {
        method: request.method.to_string().into(),
        target: request.target.to_string().into(),
        forward: abi_stable::std_types::RSlice::EMPTY,
        except: abi_stable::std_types::RSlice::EMPTY,
        headers,
        body: request.body,
        client_ip: request.client_ip.to_string().into(),
        body_stream: request.body_stream,
    }
}

extern "C" fn stats() -> Stats {
    STATE.with(|s| Stats {
        counters: s
            .borrow()
            .counters
            .iter()
            .map(|(n, v)| Tuple2(n.as_str().into(), *v))
            .collect(),
        ..Stats::default()
    })
}

extern "C" fn counter(name: RStr<'_>) -> u32 {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        match s.counters.iter().position(|(n, _)| n == name.as_str()) {
            Some(i) => i as u32,
            None => {
                s.counters.push((name.to_string(), 0));
                (s.counters.len() - 1) as u32
            }
        }
    })
}

extern "C" fn counter_add(id: u32, delta: u64) {
    STATE.with(|s| {
        if let Some((_, v)) = s.borrow_mut().counters.get_mut(id as usize) {
            *v += delta;
        }
    });
}
