//! The last step of every request, whatever carried it (HTTP/1.1, HTTP/2): count it in the
//! server's statistics and write its access-log line. Protocols call [`finished`] once a
//! response has left (or failed to), and nowhere else counts or logs a request.

use tokio::time::Instant;

use osprey_sdk::HeaderPair;

use super::Peer;
use crate::http::parse::Head;
use crate::request_id::{IdText, RequestId};

/// What the statistics and the access log record of one request.
pub struct Finished<'a> {
    pub peer: &'a Peer,
    /// The request's bytes and its parsed head; `None` when it could not be parsed.
    pub request: Option<(&'a [u8], &'a Head)>,
    pub status: u16,
    /// Body bytes sent (as framed; nginx's `$body_bytes_sent`).
    pub body_bytes: u64,
    /// When the request started; `None` when the access log is off (no clock read then).
    pub started: Option<Instant>,
    /// The request's id (`None` when it could not be parsed).
    pub id: Option<RequestId>,
    /// Response headers that may set cookies (`access_log_fields`' `cookie:NAME`).
    pub set_cookies: &'a [HeaderPair],
}

/// When a request starts: the clock is read only if a line will be written.
pub fn start_clock() -> Option<Instant> {
    crate::access_log::enabled().then(Instant::now)
}

/// Count the request and log it.
pub fn finished(done: Finished<'_>) {
    crate::stats::count_request();
    log(done, None);
}

/// The request line's protocol of a subrequest in the access log, which marks it as one.
pub const SUBREQUEST_PROTOCOL: &str = "SUBREQUEST";

/// Count a subrequest (the `subrequests` counter, not `requests`) and log it, marked.
pub fn subrequest_finished(done: Finished<'_>) {
    use std::sync::OnceLock;
    static COUNTER: OnceLock<u32> = OnceLock::new();
    crate::stats::counter_add(
        *COUNTER.get_or_init(|| crate::stats::counter("subrequests")),
        1,
    );
    log(done, Some(SUBREQUEST_PROTOCOL));
}

/// Write the access-log line; `protocol` replaces the request's own.
fn log(done: Finished<'_>, protocol: Option<&'static str>) {
    let Some(started) = done.started else {
        return;
    };
    // A request lost to a busy worker pool comes back without its bytes.
    let request = done.request.filter(|(buf, head)| buf.len() >= head.len);
    let header = |name: &str| {
        request.and_then(|(buf, head)| {
            head.headers
                .iter()
                .find(|(n, _)| n.str(buf).eq_ignore_ascii_case(name))
                .map(|(_, v)| v.get(buf))
        })
    };
    let protocol = match request {
        _ if protocol.is_some() => protocol.unwrap_or_default(),
        _ if done.peer.http2 => "HTTP/2.0",
        Some((_, head)) if head.minor == 0 => "HTTP/1.0",
        _ => "HTTP/1.1",
    };
    let mut room = IdText::default();
    crate::access_log::record(&crate::access_log::Entry {
        remote: &done.peer.remote,
        method: request.map(|(buf, head)| head.method(buf)),
        uri: request.map_or(&[][..], |(buf, head)| head.uri.str(buf).as_bytes()),
        protocol,
        status: done.status,
        body_bytes: done.body_bytes,
        referer: header("referer"),
        user_agent: header("user-agent"),
        duration: started.elapsed(),
        request_id: match (done.id, request) {
            (Some(id), Some((buf, _))) => id.text(buf, &mut room),
            _ => "-",
        },
        cookie: &|name| {
            let set = crate::access_log::set_cookie_value(done.set_cookies, name);
            set.or_else(|| {
                let (buf, head) = request?;
                head.headers
                    .iter()
                    .filter(|(n, _)| n.str(buf).eq_ignore_ascii_case("cookie"))
                    .flat_map(|(_, v)| osprey_sdk::params::cookies(v.str(buf)))
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.as_bytes())
            })
        },
    });
}
