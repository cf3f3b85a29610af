//! Requests for tests: built field by field or parsed from raw HTTP/1.1 text.

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{ROption, RResult, RSlice, RStr, RString, RVec};
use async_ffi::{FfiContext, FfiPoll};

use crate::request::{Header, Request};
use crate::request_body::BodySlot;
use crate::response::{BodyStream, BodyStream_TO, HeaderPair};

/// A request as a test writes it. [`TestRequest::with_view`] lends it to a handler as the
/// borrowed [`Request`] the core would build, routing included (`path_info` after the route
/// prefix, the query split off, `host` from the `Host` header).
///
/// ```
/// use osprey_sdk::testing::TestRequest;
///
/// let req = TestRequest::get("/ads/banner?site=a%26b")
///     .route_prefix("/ads")
///     .header("Host", "Example.com:8080")
///     .cookie("uid", "42");
/// req.with_view(|r| {
///     assert_eq!(r.path_info.as_str(), "/banner");
///     assert_eq!(r.host.as_str(), "example.com");
///     assert_eq!(r.query_param("site").as_deref(), Some("a&b"));
///     assert_eq!(r.cookie("uid"), Some("42"));
/// });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// Origin form: path and query.
    pub uri: String,
    /// Headers in order, as (name, value).
    pub headers: Vec<(String, Vec<u8>)>,
    /// The (decoded) body.
    pub body: Vec<u8>,
    /// The client's `ip:port`.
    pub remote_addr: String,
    /// Came over TLS.
    pub secure: bool,
    /// A subrequest whose parent reads only its body (`Request::body_only`).
    pub body_only: bool,
    /// A subrequest (`Request::subrequest`).
    pub subrequest: bool,
    /// The request's id (`Request::request_id`; the core gives each request a fresh one).
    pub request_id: String,
    /// Came over HTTP/2.
    pub http2: bool,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub http_minor: u8,
    /// The matching route's prefix (empty: a catch-all route).
    pub route_prefix: String,
    /// Hand the body as a stream (`Request::take_body_stream`), in pieces of this many bytes,
    /// as the core does for a handler that streams request bodies; 0: buffered in `body`.
    pub stream_pieces: usize,
}

impl TestRequest {
    /// A request with no headers and no body, from `127.0.0.1:40000`, over plain HTTP/1.1.
    pub fn new(method: &str, uri: &str) -> Self {
        TestRequest {
            method: method.to_owned(),
            uri: uri.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            remote_addr: "127.0.0.1:40000".to_owned(),
            secure: false,
            body_only: false,
            subrequest: false,
            request_id: "0123456789abcdef0123456789abcdef".to_owned(),
            http2: false,
            http_minor: 1,
            route_prefix: String::new(),
            stream_pieces: 0,
        }
    }

    /// A `GET` request.
    pub fn get(uri: &str) -> Self {
        Self::new("GET", uri)
    }

    /// A `HEAD` request.
    pub fn head(uri: &str) -> Self {
        Self::new("HEAD", uri)
    }

    /// A `POST` request (add a body with [`TestRequest::body`]).
    pub fn post(uri: &str) -> Self {
        Self::new("POST", uri)
    }

    /// Parse raw HTTP/1.1 text: request line, headers, and the body after the blank line
    /// (`Content-Length` bytes of it when given). Chunked bodies are refused: the core hands
    /// modules decoded bodies, so give those with [`TestRequest::body`].
    ///
    /// ```
    /// use osprey_sdk::testing::TestRequest;
    ///
    /// let req = TestRequest::parse(
    ///     b"POST /f HTTP/1.1\r\nHost: a\r\nContent-Type: application/x-www-form-urlencoded\r\n\
    ///       Content-Length: 3\r\n\r\nx=1",
    /// ).unwrap();
    /// req.with_view(|r| assert_eq!(r.form_params().get("x"), Some("1")));
    /// assert!(TestRequest::parse(b"GET / HTTP/1.1\r\n").is_err());
    /// ```
    pub fn parse(raw: &[u8]) -> Result<Self, String> {
        let mut slots = [httparse::EMPTY_HEADER; 100];
        let mut head = httparse::Request::new(&mut slots);
        let len = match head.parse(raw) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Err("the request head is incomplete".into()),
            Err(e) => return Err(format!("bad request head: {e}")),
        };
        let mut req = TestRequest::new(head.method.unwrap_or("GET"), head.path.unwrap_or("/"));
        req.http_minor = head.version.unwrap_or(1);
        for h in head.headers.iter() {
            req.headers.push((h.name.to_owned(), h.value.to_vec()));
        }
        let rest = &raw[len..];
        req.body = match req.header_value("content-length") {
            Some(n) => {
                let n: usize = n
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad Content-Length {n:?}"))?;
                rest.get(..n)
                    .ok_or_else(|| format!("Content-Length {n} but {} body bytes", rest.len()))?
                    .to_vec()
            }
            None if req.header_value("transfer-encoding").is_some() => {
                return Err("chunked bodies are not decoded here: use TestRequest::body".into())
            }
            None => rest.to_vec(),
        };
        Ok(req)
    }

    /// Add a header (repeats are kept).
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.headers
            .push((name.to_owned(), value.as_ref().to_vec()));
        self
    }

    /// Add a cookie to the request's `Cookie` header.
    pub fn cookie(mut self, name: &str, value: &str) -> Self {
        match self
            .headers
            .iter_mut()
            .find(|(n, _)| n.eq_ignore_ascii_case("cookie"))
        {
            Some((_, v)) => v.extend_from_slice(format!("; {name}={value}").as_bytes()),
            None => self
                .headers
                .push(("Cookie".into(), format!("{name}={value}").into_bytes())),
        }
        self
    }

    /// Set the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Hand the body to the handler as a stream in pieces of `piece` bytes (see
    /// [`Handler::streams_request_body`](crate::Handler::streams_request_body)).
    pub fn streamed(mut self, piece: usize) -> Self {
        self.stream_pieces = piece.max(1);
        self
    }

    /// The client's address, `ip:port` (`[v6]:port`).
    pub fn remote_addr(mut self, addr: &str) -> Self {
        self.remote_addr = addr.to_owned();
        self
    }

    /// Came over TLS.
    pub fn secure(mut self, secure: bool) -> Self {
        self.secure = secure;
        self
    }

    /// A subrequest whose parent reads only its body (`Request::body_only`).
    pub fn body_only(mut self, body_only: bool) -> Self {
        self.body_only = body_only;
        self
    }

    /// A subrequest (`Request::subrequest`).
    pub fn subrequest(mut self, subrequest: bool) -> Self {
        self.subrequest = subrequest;
        self
    }

    /// Came over HTTP/2.
    pub fn http2(mut self, http2: bool) -> Self {
        self.http2 = http2;
        self
    }

    /// The prefix of the route that matched; `path_info` is what follows it.
    pub fn route_prefix(mut self, prefix: &str) -> Self {
        self.route_prefix = prefix.to_owned();
        self
    }

    fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// The host the core would report: the `Host` header lower-cased without its port, or
    /// `localhost`.
    pub fn host(&self) -> String {
        let host = self.header_value("host").unwrap_or("localhost").trim();
        let host = match host.rfind(':') {
            Some(i) if !host.ends_with(']') => &host[..i],
            _ => host,
        };
        host.to_ascii_lowercase()
    }

    /// Run `f` on the request view a handler gets.
    ///
    /// # Panics
    /// When the route prefix does not match the path (the core would not route it there).
    pub fn with_view<T>(&self, f: impl FnOnce(&Request<'_>) -> T) -> T {
        self.with_view_replacing(&[], f)
    }

    /// As [`with_view`](Self::with_view), with headers replaced as a filter's
    /// `request_headers` asks (each replaces every header of its name; empty removes it).
    pub(crate) fn with_view_replacing<T>(
        &self,
        replaced: &[HeaderPair],
        f: impl FnOnce(&Request<'_>) -> T,
    ) -> T {
        let host = self.host();
        let (path, query) = self.uri.split_once('?').unwrap_or((&self.uri, ""));
        let path_info = path_info(&self.route_prefix, path).unwrap_or_else(|| {
            panic!(
                "route prefix {:?} does not match path {path:?}",
                self.route_prefix
            )
        });
        let is_replaced = |name: &str| replaced.iter().any(|h| h.name.eq_ignore_ascii_case(name));
        let mut headers: Vec<Header<'_>> = self
            .headers
            .iter()
            .filter(|(n, _)| !is_replaced(n))
            .map(|(n, v)| Header {
                name: RStr::from_str(n),
                value: RSlice::from_slice(v),
            })
            .collect();
        headers.extend(
            replaced
                .iter()
                .filter(|h| !h.value.is_empty())
                .map(|h| Header {
                    name: RStr::from_str(&h.name),
                    value: RSlice::from_slice(h.value.as_bytes()),
                }),
        );
        let slot = (self.stream_pieces > 0).then(|| {
            let pieces: Vec<Vec<u8>> = self
                .body
                .chunks(self.stream_pieces)
                .map(<[u8]>::to_vec)
                .collect();
            let len = self.body.len() as u64;
            BodySlot::new(BodyStream_TO::from_value(
                Pieces(pieces.into_iter(), len),
                TD_Opaque,
            ))
        });
        let req = Request {
            method: RStr::from_str(&self.method),
            path: RStr::from_str(path),
            query: RStr::from_str(query),
            uri: RStr::from_str(&self.uri),
            path_info: RStr::from_str(path_info),
            route_prefix: RStr::from_str(&self.route_prefix),
            http_minor: self.http_minor,
            http2: self.http2,
            host: RStr::from_str(&host),
            remote_addr: RStr::from_str(&self.remote_addr),
            secure: self.secure,
            body_only: self.body_only,
            subrequest: self.subrequest,
            request_id: RStr::from_str(&self.request_id),
            headers: RSlice::from_slice(&headers),
            body: RSlice::from_slice(if slot.is_some() { &[] } else { &self.body }),
            body_stream: slot.as_ref().into(),
        };
        f(&req)
    }
}

/// What follows `prefix` in `path`, as the core's router splits it (`/a` matches `/a` and
/// `/a/...`, not `/ab`; `/` matches only `/`).
fn path_info<'p>(prefix: &str, path: &'p str) -> Option<&'p str> {
    if prefix.is_empty() {
        return Some(path);
    }
    if prefix == "/" {
        return (path == "/").then_some("/");
    }
    let bare = prefix.strip_suffix('/').unwrap_or(prefix);
    let rest = path.strip_prefix(bare)?;
    (rest.is_empty() && !prefix.ends_with('/') || rest.starts_with('/')).then_some(rest)
}

/// A body handed out in pieces, as the core streams a request body.
struct Pieces(std::vec::IntoIter<Vec<u8>>, u64);

impl BodyStream for Pieces {
    fn poll_chunk(
        &mut self,
        _cx: &mut FfiContext<'_>,
    ) -> FfiPoll<ROption<RResult<RVec<u8>, RString>>> {
        FfiPoll::Ready(self.0.next().map(|p| RResult::ROk(p.into())).into())
    }

    fn known_len(&self) -> ROption<u64> {
        ROption::RSome(self.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_path_info_as_the_router_does() {
        assert_eq!(path_info("/a", "/a"), Some(""));
        assert_eq!(path_info("/a", "/a/b"), Some("/b"));
        assert_eq!(path_info("/a/", "/a/b"), Some("/b"));
        assert_eq!(path_info("/a", "/ab"), None);
        assert_eq!(path_info("", "/x"), Some("/x"));
    }

    #[test]
    fn parses_raw_requests() {
        let req = TestRequest::parse(b"GET /x?q=1 HTTP/1.0\r\nHost: h\r\nX-A: 1\r\n\r\n").unwrap();
        assert_eq!((req.method.as_str(), req.uri.as_str()), ("GET", "/x?q=1"));
        assert_eq!(req.http_minor, 0);
        assert_eq!(req.headers.len(), 2);
        assert!(TestRequest::parse(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab").is_err());
        assert!(
            TestRequest::parse(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").is_err()
        );
    }

    #[test]
    fn filter_headers_replace_the_clients() {
        let req = TestRequest::get("/").header("A", "1").header("B", "2");
        let set = [HeaderPair::new("a", "9"), HeaderPair::new("b", "")];
        req.with_view_replacing(&set, |r| {
            assert_eq!(r.header("a"), Some("9"));
            assert_eq!(r.header("b"), None);
            assert_eq!(r.headers.len(), 1);
        });
    }

    #[test]
    fn host_loses_port_and_case() {
        assert_eq!(TestRequest::get("/").header("Host", "A.b:81").host(), "a.b");
        assert_eq!(
            TestRequest::get("/").header("Host", "[::1]").host(),
            "[::1]"
        );
        assert_eq!(TestRequest::get("/").host(), "localhost");
    }
}
