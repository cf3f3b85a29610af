//! What a test inspects after a run.

use std::os::fd::AsRawFd;

use abi_stable::std_types::{ROption, RResult};
use async_ffi::ContextExt;

use crate::response::{Body, Response};

/// How the handler answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `Outcome::Done` / `Reply::Done`, or a filter answered.
    Done,
    /// `Outcome::Next`: the route declined.
    Next,
    /// `Outcome::Error(status)` / `Reply::Error(status)`: the core would send its error page
    /// with the headers the handler set (see [`Outcome::Error`](crate::Outcome::Error)).
    Error(u16),
}

/// The answer to a test request: the verdict, the response as the module left it (with an
/// error's status set), and the body read into memory (streams drained, files read).
#[derive(Debug)]
pub struct TestResponse {
    /// How the handler answered.
    pub verdict: Verdict,
    /// The response as the module left it (an error's status set).
    pub response: Response,
    /// The body's bytes.
    pub body: Vec<u8>,
}

impl TestResponse {
    pub(super) fn new(verdict: Verdict, mut response: Response) -> Self {
        let body = read_body(&mut response.body);
        TestResponse {
            verdict,
            response,
            body,
        }
    }

    /// The status code (an error's status for `Verdict::Error`).
    pub fn status(&self) -> u16 {
        self.response.status
    }

    /// The first value of a header (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.response.get_header(name)
    }

    /// Every value of a header, in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.response
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
            .collect()
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The body's bytes; a stream is drained and left as `Body::Bytes`.
fn read_body(body: &mut Body) -> Vec<u8> {
    match body {
        Body::Stream(stream) => {
            let mut out = Vec::new();
            loop {
                let chunk = super::block_on(std::future::poll_fn(|cx| {
                    match cx
                        .with_ffi_context(|cx| stream.poll_chunk(cx))
                        .try_into_poll()
                    {
                        Ok(poll) => poll,
                        Err(_) => panic!("the body stream panicked"),
                    }
                }));
                match chunk {
                    ROption::RSome(RResult::ROk(bytes)) => out.extend_from_slice(&bytes),
                    ROption::RSome(RResult::RErr(e)) => panic!("the body stream failed: {e}"),
                    ROption::RNone => break,
                }
            }
            *body = Body::Bytes(out.clone().into());
            out
        }
        Body::File(range) => {
            let mut out = vec![0u8; range.len as usize];
            // SAFETY: the descriptor stays open while `range` holds the file; the `File` is
            // forgotten rather than closed.
            let file = std::mem::ManuallyDrop::new(unsafe {
                <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(range.file.as_raw_fd())
            });
            std::os::unix::fs::FileExt::read_exact_at(&*file, &mut out, range.offset)
                .expect("reading the response's file range");
            out
        }
        Body::Upgrade(_) => Vec::new(),
        other => other.as_bytes().unwrap_or_default().to_vec(),
    }
}
