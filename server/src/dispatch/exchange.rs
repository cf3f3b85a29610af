//! A request in flight with its response, and the request view modules see.

use arrayvec::ArrayVec;
use osprey_sdk::abi_stable::std_types::{RSlice, RStr};
use osprey_sdk::{BodySlot, Header, HeaderPair, Request, Response, BODY_ONLY};

use super::subrequest::Kin;
use crate::http::body_buf::BodyBuf;
use crate::http::parse::{Head, Span, MAX_HEADERS};
use crate::http::status;
use crate::request_id::{self, RequestId, RequestIds};
use crate::router::Route;

/// Where a request's body is.
#[derive(Debug)]
pub enum BodyLoc {
    /// Contiguous in the read buffer (Content-Length bodies).
    InBuf(Span),
    /// Read into a buffer of its own (chunked, large, HTTP/2).
    Owned(BodyBuf),
}

/// Facts about the connection a request came on.
#[derive(Debug)]
pub struct Peer {
    /// `ip:port` of the client.
    pub remote: String,
    pub secure: bool,
    pub http2: bool,
}

/// One request in flight and its response. It owns its bytes, so it can move to a worker
/// thread and back.
pub struct Exchange {
    pub buf: Vec<u8>,
    pub head: Box<Head>,
    pub body: BodyLoc,
    pub resp: Response,
    /// Request headers set by filters (`Filter::request_headers`): each replaces the client's
    /// headers of that name; an empty value removes them.
    pub extra: Vec<HeaderPair>,
    /// The body as it arrives, for a handler that streams request bodies.
    pub stream: Option<Box<BodySlot>>,
    pub id: RequestId,
    /// Where the request stands among subrequests (`None` for a client request that started
    /// none yet).
    pub lineage: Option<Kin>,
}

impl Exchange {
    /// A client's request as its connection read it (HTTP/1.1 or a stream of HTTP/2): its id
    /// given (`ids`: the configuration's), no filter headers and no lineage yet, the response
    /// taken from the thread's pool.
    #[inline(always)]
    pub fn client(
        ids: &RequestIds,
        peer: &Peer,
        (buf, head): (Vec<u8>, Box<Head>),
        body: BodyLoc,
        stream: Option<Box<BodySlot>>,
    ) -> Exchange {
        let id = ids.for_request(&peer.remote, &buf, &head);
        Exchange {
            buf,
            head,
            body,
            resp: crate::conn::pool::take_response(),
            extra: Vec::new(),
            stream,
            id,
            lineage: None,
        }
    }

    /// Whether `route`'s handler may answer with the body only ([`Request::body_only`]): the
    /// request is a subrequest whose parent reads only its body, and no filter of the route
    /// keys a cache (the answer could be stored and served to a client); or a filter said
    /// it replaces the body ([`BODY_ONLY`]).
    pub fn body_only(&self, route: &Route) -> bool {
        !route.keyed
            && (Kin::body_only(&self.lineage) || self.extra.iter().any(|h| h.name == BODY_ONLY))
    }

    /// Build the borrowed request view and run `f` on it; `body_only` is
    /// [`body_only`](Exchange::body_only)'s and `subrequest` [`Kin::subrequest`]'s, asked
    /// before the lineage is taken out.
    /// (`inline(always)`: left to itself, the compiler stopped inlining it into the hello
    /// route's path once the subrequest scope took the view, +50 instructions a request.)
    #[inline(always)]
    pub fn with_request<R>(
        &mut self,
        peer: &Peer,
        (prefix, body_only, subrequest): (&str, bool, bool),
        info_start: usize,
        f: impl FnOnce(&Request<'_>, &mut Response) -> R,
    ) -> R {
        let buf = &self.buf[..];
        let head = &self.head;
        let extra = &self.extra;
        let id = self.id.text(buf);
        let replaced = |name: &str| {
            extra.iter().any(|h| h.name.eq_ignore_ascii_case(name))
                || (self.id.forward && name.eq_ignore_ascii_case(request_id::HEADER))
        };
        // Filled in place: collected, the array (4 KiB) would be copied on its way here.
        let mut headers: ArrayVec<Header<'_>, { MAX_HEADERS + 8 }> = ArrayVec::new();
        for (n, v) in head.headers.iter() {
            let h = Header {
                name: RStr::from_str(n.str(buf)),
                value: RSlice::from_slice(v.get(buf)),
            };
            if (extra.is_empty() && !self.id.forward) || !replaced(&h.name) {
                headers.push(h);
            }
        }
        if self.id.forward {
            let _ = headers.try_push(Header {
                name: RStr::from_str(request_id::HEADER),
                value: RSlice::from_slice(id.as_bytes()),
            });
        }
        for h in extra.iter().filter(|h| !h.value.is_empty()) {
            let _ = headers.try_push(Header {
                name: RStr::from_str(&h.name),
                value: RSlice::from_slice(h.value.as_bytes()),
            });
        }
        let body: &[u8] = match &self.body {
            BodyLoc::InBuf(span) => span.get(buf),
            BodyLoc::Owned(v) => &v[..],
        };
        let path = head.path(buf);
        let req = Request {
            method: RStr::from_str(head.method(buf)),
            path: RStr::from_str(path),
            query: RStr::from_str(head.query.str(buf)),
            uri: RStr::from_str(if head.uri.is_empty() {
                "/"
            } else {
                head.uri.str(buf)
            }),
            path_info: RStr::from_str(&path[info_start.min(path.len())..]),
            route_prefix: RStr::from_str(prefix),
            http_minor: head.minor,
            http2: peer.http2,
            host: RStr::from_str(head.host(buf)),
            remote_addr: RStr::from_str(&peer.remote),
            secure: peer.secure,
            body_only,
            subrequest,
            request_id: RStr::from_str(id),
            headers: RSlice::from_slice(&headers),
            body: RSlice::from_slice(body),
            body_stream: self.stream.as_deref().into(),
        };
        f(&req, &mut self.resp)
    }

    /// Put the request id on the response when the configuration asks (`request_id.response`).
    pub fn stamp_id(&mut self, ids: &request_id::RequestIds) {
        if ids.response {
            let id = self.id.text(&self.buf).to_owned();
            self.resp.set_header(request_id::HEADER, id);
        }
    }

    pub(crate) fn method(&self) -> &str {
        self.head.method(&self.buf)
    }
}

/// Answer a handler's `Outcome::Error` / `Reply::Error` with the core's error page, keeping
/// the headers the handler set (CORS, `Cache-Control`, cookies: nginx's `add_header ... always`)
/// except those that describe a body the page replaces.
pub fn handler_error_response(resp: &mut Response, status: u16) {
    let mut kept = std::mem::take(&mut resp.headers);
    kept.retain(|h| !describes_body(&h.name));
    error_response(resp, status, "");
    kept.append(&mut resp.headers);
    resp.headers = kept;
}

/// Headers about the representation in the body, wrong for an error page.
fn describes_body(name: &str) -> bool {
    let name = name.as_bytes();
    name.len() >= 8 && name[..8].eq_ignore_ascii_case(b"content-")
        || [
            &b"etag"[..],
            b"last-modified",
            b"transfer-encoding",
            b"accept-ranges",
        ]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}

/// Fill `resp` with the core's error page.
pub fn error_response(resp: &mut Response, status: u16, detail: &str) {
    resp.clear();
    resp.status(status)
        .content_type("text/html; charset=utf-8")
        .body(status::error_page(status, detail));
}
