//! The response a handler builds. The core serialises it: status line, `Date`, `Server`,
//! `Content-Length` or chunked framing, and the body by the fastest means it has.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, RawFd};
use std::os::unix::fs::FileExt;

use abi_stable::{
    sabi_trait,
    std_types::{RArc, RBox, RCowStr, ROption, RResult, RString, RVec},
    StableAbi,
};
use async_ffi::{FfiContext, FfiPoll};

use crate::fields::same_name;
use crate::fixed_header::FixedHeader;

/// A response header. Static text is borrowed, so fixed headers cost no allocation.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct HeaderPair {
    /// The header name.
    pub name: RCowStr<'static>,
    /// The header value (no CR or LF: the core refuses those with a 500).
    pub value: RCowStr<'static>,
    /// Set by [`FixedHeader::pair`]: the header was checked when configured and is written
    /// from its encoded line (while `name` and `value` are still its own).
    pub fixed: Option<&'static FixedHeader>,
}

/// Equal by name and value, fixed or not.
impl PartialEq for HeaderPair {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.value == other.value
    }
}

impl Eq for HeaderPair {}

impl HeaderPair {
    /// A header from any text (checked by the core when the response is written).
    pub fn new(name: impl Into<HeaderText>, value: impl Into<HeaderText>) -> Self {
        HeaderPair {
            name: name.into(),
            value: value.into(),
            fixed: None,
        }
    }
}

/// Text for a header name or value: a `&'static str` (no copy) or a `String`.
pub type HeaderText = RCowStr<'static>;

/// An open file whose descriptor closes when the last reference goes. Modules keep these in
/// open-file caches; the core sends ranges of them with `sendfile(2)`.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct OpenFile {
    fd: i32,
}

impl OpenFile {
    /// Take ownership of an open file.
    pub fn new(file: std::fs::File) -> Self {
        OpenFile {
            fd: file.into_raw_fd(),
        }
    }
}

impl AsRawFd for OpenFile {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl AsFd for OpenFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is owned by `self` and stays open while it is borrowed.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

impl OpenFile {
    /// Read into `buf` from `offset` (pread(2)): the bytes read, 0 at the end of the file.
    /// The file's own position is neither used nor moved, so any number of responses may read
    /// one `OpenFile` at once.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.borrowed().read_at(buf, offset)
    }

    /// Fill `buf` from `offset`; an `UnexpectedEof` error if the file ends first (it shrank).
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.borrowed().read_exact_at(buf, offset)
    }

    /// The file as a `std::fs::File` that does not close the descriptor when dropped.
    fn borrowed(&self) -> std::mem::ManuallyDrop<std::fs::File> {
        // SAFETY: `self` owns the descriptor and outlives the returned value's use; the
        // `ManuallyDrop` never closes it.
        std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(self.fd) })
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        // SAFETY: `fd` came from `into_raw_fd` and is owned by this value alone.
        drop(unsafe { std::fs::File::from_raw_fd(self.fd) });
    }
}

/// A byte range of an open file.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct FileRange {
    /// The file.
    pub file: RArc<OpenFile>,
    /// Where the range starts.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
}

/// A body produced piece by piece (length unknown in advance). The core polls it on the
/// connection's thread and sends chunked encoding (or closes after it, for HTTP/1.0).
#[sabi_trait]
pub trait BodyStream: Send {
    /// The next chunk; `ROption::RNone` at the end; an error aborts the response (the core
    /// closes the connection, as headers are already sent).
    fn poll_chunk(
        &mut self,
        cx: &mut FfiContext<'_>,
    ) -> FfiPoll<ROption<RResult<RVec<u8>, RString>>>;

    /// The total length, when known in advance: the core then sends `Content-Length` instead
    /// of chunked framing, and a stream that yields another number of bytes is an error.
    #[sabi(last_prefix_field)]
    fn known_len(&self) -> ROption<u64> {
        ROption::RNone
    }
}

/// A boxed [`BodyStream`] as the response carries it.
pub type StreamBox = BodyStream_TO<'static, RBox<()>>;

/// What the response carries after its headers.
#[repr(C, u8)]
#[derive(StableAbi)]
pub enum Body {
    /// No body (`Content-Length: 0`, or none at all for 204/304).
    Empty,
    /// Bytes owned by this response.
    Bytes(RVec<u8>),
    /// Bytes shared with a cache: served any number of times without a copy.
    Shared(RArc<RVec<u8>>),
    /// A range of an open file, sent with `sendfile(2)` on plain TCP.
    File(FileRange),
    /// A body of unknown length.
    Stream(StreamBox),
    /// No body: with status 101, the connection becomes this tunnel once the head is sent.
    Upgrade(crate::tunnel::TunnelBox),
}

impl Body {
    /// The length when known in advance.
    pub fn len(&self) -> Option<u64> {
        match self {
            Body::Empty => Some(0),
            Body::Bytes(b) => Some(b.len() as u64),
            Body::Shared(b) => Some(b.len() as u64),
            Body::File(f) => Some(f.len),
            Body::Stream(s) => s.known_len().into_option(),
            Body::Upgrade(_) => Some(0),
        }
    }

    /// Whether the body is known to be empty.
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// The body's bytes when they are in memory.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Body::Empty => Some(&[]),
            Body::Bytes(b) => Some(b.as_slice()),
            Body::Shared(b) => Some(b.as_slice()),
            _ => None,
        }
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Empty => write!(f, "Empty"),
            Body::Bytes(b) => write!(f, "Bytes({})", b.len()),
            Body::Shared(b) => write!(f, "Shared({})", b.len()),
            Body::File(r) => write!(f, "File({}+{})", r.offset, r.len),
            Body::Stream(_) => write!(f, "Stream"),
            Body::Upgrade(_) => write!(f, "Upgrade"),
        }
    }
}

/// A response under construction. It starts as `200 OK`, no headers, empty body.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers in the order they are sent.
    pub headers: RVec<HeaderPair>,
    /// What follows the headers.
    pub body: Body,
}

impl Default for Response {
    fn default() -> Self {
        Response {
            status: 200,
            headers: RVec::new(),
            body: Body::Empty,
        }
    }
}

impl Response {
    /// `200 OK`, no headers, empty body.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forget everything, keeping allocated capacity (the core reuses responses).
    pub fn clear(&mut self) {
        self.status = 200;
        self.headers.clear();
        self.body = Body::Empty;
    }

    /// Set the status code.
    pub fn status(&mut self, status: u16) -> &mut Self {
        self.status = status;
        self
    }

    /// Add a header (repeated names are kept, e.g. several `Set-Cookie`).
    pub fn header(
        &mut self,
        name: impl Into<HeaderText>,
        value: impl Into<HeaderText>,
    ) -> &mut Self {
        self.headers.push(HeaderPair::new(name, value));
        self
    }

    /// Add a header fixed by the configuration: no copy, no check per request.
    #[inline]
    pub fn fixed_header(&mut self, header: &'static FixedHeader) -> &mut Self {
        self.headers.push(header.pair());
        self
    }

    /// Replace every header of this name with a fixed one.
    pub fn set_fixed_header(&mut self, header: &'static FixedHeader) -> &mut Self {
        self.remove_header(header.name());
        self.fixed_header(header)
    }

    /// Add a header whose name is fixed by the configuration (`name`, made with an empty
    /// value) and whose value is this answer's: the core checks the value, not the name.
    #[inline]
    pub fn header_named(
        &mut self,
        name: &'static FixedHeader,
        value: impl Into<HeaderText>,
    ) -> &mut Self {
        self.headers.push(HeaderPair {
            name: name.name().into(),
            value: value.into(),
            fixed: Some(name),
        });
        self
    }

    /// Replace every header of this name with [`header_named`](Response::header_named)'s.
    pub fn set_header_named(
        &mut self,
        name: &'static FixedHeader,
        value: impl Into<HeaderText>,
    ) -> &mut Self {
        self.remove_header(name.name());
        self.header_named(name, value)
    }

    /// Replace every header of this name with one value.
    pub fn set_header(
        &mut self,
        name: impl Into<HeaderText>,
        value: impl Into<HeaderText>,
    ) -> &mut Self {
        let name = name.into();
        self.remove_header(&name);
        self.header(name, value)
    }

    /// Remove every header of this name.
    pub fn remove_header(&mut self, name: &str) -> &mut Self {
        self.remove_headers(&[name])
    }

    /// Remove every header with one of these names, in one pass over the list (each
    /// [`remove_header`](Response::remove_header) rebuilds it).
    // Inline: usually there is none to remove (`set_header` of a new name), and the look
    // costs less than a call.
    #[inline]
    pub fn remove_headers(&mut self, names: &[&str]) -> &mut Self {
        match self.headers.iter().position(|h| named(h, names)) {
            Some(first) => self.remove_from(first, names),
            None => self,
        }
    }

    /// [`remove_headers`](Response::remove_headers) from the first header to remove.
    #[inline(never)]
    fn remove_from(&mut self, first: usize, names: &[&str]) -> &mut Self {
        // Kept headers slide down over the removed ones, in order (`RVec::retain` goes
        // through a drain, several times slower); the removed end up past `kept`.
        let mut kept = first;
        for i in first + 1..self.headers.len() {
            if !named(&self.headers[i], names) {
                self.headers.swap(kept, i);
                kept += 1;
            }
        }
        self.headers.truncate(kept);
        self
    }

    /// The first value of a header (case-insensitive).
    pub fn get_header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| same_name(h.name.as_str(), name))
            .map(|h| h.value.as_str())
    }

    /// Set `Content-Type`.
    pub fn content_type(&mut self, value: impl Into<HeaderText>) -> &mut Self {
        self.set_header("Content-Type", value)
    }

    /// An owned body.
    pub fn body(&mut self, bytes: impl Into<Vec<u8>>) -> &mut Self {
        self.body = Body::Bytes(RVec::from(bytes.into()));
        self
    }

    /// A body shared with a cache.
    pub fn body_shared(&mut self, bytes: RArc<RVec<u8>>) -> &mut Self {
        self.body = Body::Shared(bytes);
        self
    }

    /// A file range, sent with `sendfile(2)` where the transport allows.
    pub fn body_file(&mut self, file: RArc<OpenFile>, offset: u64, len: u64) -> &mut Self {
        self.body = Body::File(FileRange { file, offset, len });
        self
    }

    /// A streamed body of unknown length.
    pub fn body_stream(&mut self, stream: impl BodyStream + 'static) -> &mut Self {
        self.body = Body::Stream(BodyStream_TO::from_value(
            stream,
            abi_stable::sabi_trait::TD_Opaque,
        ));
        self
    }

    /// A complete HTML response (`text/html; charset=utf-8`).
    pub fn html(&mut self, html: impl Into<Vec<u8>>) -> &mut Self {
        self.content_type("text/html; charset=utf-8").body(html)
    }

    /// A complete plain-text response.
    pub fn text(&mut self, text: impl Into<Vec<u8>>) -> &mut Self {
        self.content_type("text/plain; charset=utf-8").body(text)
    }

    /// A redirect with a small HTML body.
    pub fn redirect(&mut self, status: u16, location: &str) -> &mut Self {
        let escaped = crate::params::html_escape(location);
        self.status(status)
            .set_header("Location", location.to_owned())
            .html(format!("<a href=\"{escaped}\">{escaped}</a>\n"))
    }
}

/// Whether the header has one of these names (case-insensitive).
#[inline]
fn named(h: &HeaderPair, names: &[&str]) -> bool {
    let name = h.name.as_str();
    names.iter().any(|n| same_name(name, n))
}

#[cfg(test)]
mod open_file_tests {
    use super::*;

    #[test]
    fn reads_at_offsets_without_moving_or_closing_the_file() {
        let path = std::env::temp_dir().join(format!("osprey-openfile-{}", std::process::id()));
        std::fs::write(&path, b"0123456789").unwrap();
        let file = OpenFile::new(std::fs::File::open(&path).unwrap());
        let mut buf = [0u8; 4];
        assert_eq!(file.read_at(&mut buf, 3).unwrap(), 4);
        assert_eq!(&buf, b"3456");
        file.read_exact_at(&mut buf, 6).unwrap();
        assert_eq!(&buf, b"6789");
        let shrank = file.read_exact_at(&mut buf, 8).unwrap_err();
        assert_eq!(shrank.kind(), std::io::ErrorKind::UnexpectedEof);
        // Still open: the reads borrowed the descriptor.
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), 4);
        assert!(is_open(file.as_fd()));
        std::fs::remove_file(path).unwrap();
    }

    fn is_open(fd: BorrowedFd<'_>) -> bool {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).is_ok()
    }
}

#[cfg(test)]
mod header_tests {
    use super::Response;

    #[test]
    fn remove_headers_drops_every_named_one_in_any_case_and_keeps_the_order() {
        let mut r = Response::new();
        r.header("ETag", "\"a\"")
            .header("Content-Type", "text/html")
            .header("last-modified", "x")
            .header("Vary", "Accept")
            .header("ETAG", "\"b\"");
        r.remove_headers(&["etag", "Last-Modified", "Accept-Ranges"]);
        let left: Vec<&str> = r.headers.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(left, ["Content-Type", "Vary"]);
        r.remove_headers(&["Accept-Ranges"]);
        assert_eq!(r.headers.len(), 2, "none named: none removed");
        r.remove_header("vary");
        assert_eq!(r.get_header("Content-Type"), Some("text/html"));
        assert_eq!(r.headers.len(), 1);
        r.header("A", "1")
            .header("B", "2")
            .header("a", "3")
            .header("C", "4");
        r.remove_header("a");
        let left: Vec<&str> = r.headers.iter().map(|h| h.value.as_str()).collect();
        assert_eq!(
            left,
            ["text/html", "2", "4"],
            "the first match onward slides down"
        );
    }
}
