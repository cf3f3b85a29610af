//! Answering from a cached file entry: validators, preconditions (304 / 412), ranges (206 /
//! 416 / multipart), and the precompressed variant. The HTTP rules are the SDK's.

use std::hash::{Hash, Hasher};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use osprey_sdk::http::range::{content_range, multipart, unsatisfied_range};
use osprey_sdk::http::{self, Precondition, Ranges, Validators};
use osprey_sdk::{Body, FixedHeader, Outcome, Request, Response};

use crate::files::{Entry, Source, Variant};

/// Ranges beyond this many are not worth a multipart answer; the whole file is sent.
const MAX_RANGES: usize = 16;
/// A multipart answer is built in memory; beyond this many bytes the whole file is sent.
const MULTIPART_LIMIT: u64 = 1024 * 1024;

/// The headers a file's answer carries, checked once: the core checks neither the names nor
/// the constant values again per answer (see `FixedHeader`).
struct Fixed {
    vary: &'static FixedHeader,
    gzip: &'static FixedHeader,
    ranges: &'static FixedHeader,
    // Names only: the values are each file's own.
    last_modified: &'static FixedHeader,
    etag: &'static FixedHeader,
    content_type: &'static FixedHeader,
}

static FIXED: LazyLock<Fixed> = LazyLock::new(|| {
    let fixed = |name, value| FixedHeader::new(name, value).expect("a valid header");
    Fixed {
        vary: fixed("Vary", "Accept-Encoding"),
        gzip: fixed("Content-Encoding", "gzip"),
        ranges: fixed("Accept-Ranges", "bytes"),
        last_modified: fixed("Last-Modified", ""),
        etag: fixed("ETag", ""),
        content_type: fixed("Content-Type", ""),
    }
});

pub fn serve(req: &Request<'_>, resp: &mut Response, entry: &Entry) -> Outcome {
    let gz = entry.gz.as_ref().filter(|_| http::accepts(req, "gzip"));
    let v = gz.unwrap_or(&entry.plain);
    let fixed = &*FIXED;
    // Validators are for clients: a parent that reads only the body (an SSI include) is
    // spared their copies.
    if !req.body_only {
        resp.header_named(fixed.last_modified, v.last_modified.clone())
            .header_named(fixed.etag, v.etag.clone());
    }
    if entry.gz.is_some() {
        resp.fixed_header(fixed.vary);
    }
    if gz.is_some() {
        resp.fixed_header(fixed.gzip);
    }
    let validators = Validators {
        etag: Some(&v.etag),
        last_modified: Some(v.mtime),
    };
    match http::evaluate(req, &validators) {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            resp.status(304);
            return Outcome::Done;
        }
        Precondition::Failed => {
            // The error page is not the gzip variant's bytes.
            resp.remove_header("Content-Encoding");
            http::respond_error(
                resp,
                412,
                "the file does not match the request's preconditions",
            );
            return Outcome::Done;
        }
    }
    if !req.body_only {
        resp.fixed_header(fixed.ranges);
    }
    let ranges = http::requested_ranges(req, &validators, v.size);
    match ranges {
        Ranges::Full => {
            resp.header_named(fixed.content_type, entry.content_type);
            full(resp, v);
        }
        Ranges::Unsatisfiable => {
            resp.remove_header("Content-Encoding")
                .header("Content-Range", unsatisfied_range(v.size));
            http::respond_error(resp, 416, "no requested range lies within the file");
        }
        Ranges::Some(r) if r.len() == 1 => {
            let (first, last) = r[0];
            resp.status(206)
                .header_named(fixed.content_type, entry.content_type)
                .header("Content-Range", content_range((first, last), v.size));
            resp.body = slice(v, first, last);
        }
        Ranges::Some(r) => {
            let total: u64 = r.iter().map(|(a, b)| b - a + 1).sum();
            match (r.len() <= MAX_RANGES && total <= MULTIPART_LIMIT).then(|| read_ranges(v, &r)) {
                Some(Ok(parts)) => {
                    let boundary = boundary(&v.etag);
                    let refs: Vec<_> = r
                        .iter()
                        .copied()
                        .zip(parts.iter().map(Vec::as_slice))
                        .collect();
                    resp.status(206)
                        .header(
                            "Content-Type",
                            format!("multipart/byteranges; boundary={boundary}"),
                        )
                        .body(multipart(&boundary, entry.content_type, v.size, &refs));
                }
                Some(Err(e)) => {
                    osprey_sdk::host::error(&format!("static: reading ranges: {e}"));
                    return Outcome::Error(500);
                }
                None => {
                    resp.header_named(fixed.content_type, entry.content_type);
                    full(resp, v);
                }
            }
        }
    }
    Outcome::Done
}

fn full(resp: &mut Response, v: &Variant) {
    resp.body = match &v.source {
        Source::Memory(bytes) => Body::Shared(bytes.clone()),
        Source::File(file) => Body::File(osprey_sdk::FileRange {
            file: file.clone(),
            offset: 0,
            len: v.size,
        }),
    };
}

fn slice(v: &Variant, first: u64, last: u64) -> Body {
    match &v.source {
        Source::Memory(bytes) => Body::Bytes(bytes[first as usize..=last as usize].to_vec().into()),
        Source::File(file) => Body::File(osprey_sdk::FileRange {
            file: file.clone(),
            offset: first,
            len: last - first + 1,
        }),
    }
}

fn read_ranges(v: &Variant, ranges: &[(u64, u64)]) -> std::io::Result<Vec<Vec<u8>>> {
    ranges
        .iter()
        .map(|&(first, last)| match &v.source {
            Source::Memory(bytes) => Ok(bytes[first as usize..=last as usize].to_vec()),
            Source::File(file) => {
                // SAFETY: the descriptor stays open while `file` (an RArc) is alive.
                let fd = unsafe { BorrowedFd::borrow_raw(file.as_raw_fd()) };
                let mut buf = vec![0; (last - first + 1) as usize];
                let mut done = 0;
                while done < buf.len() {
                    match nix::sys::uio::pread(fd, &mut buf[done..], (first + done as u64) as i64)?
                    {
                        0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                        n => done += n,
                    }
                }
                Ok(buf)
            }
        })
        .collect()
}

/// A boundary unlikely to occur in the content: a hash of the ETag, a counter and the pid.
fn boundary(etag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    etag.hash(&mut h);
    COUNTER.fetch_add(1, Ordering::Relaxed).hash(&mut h);
    std::process::id().hash(&mut h);
    format!("osprey-{:016x}", h.finish())
}
