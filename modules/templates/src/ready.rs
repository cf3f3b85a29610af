//! Taking what is ready now. Subrequests can be started only while the core is calling the
//! filter, so the parents (whose own parents and includes are known only once they are read)
//! must answer at once; answers are taken without waiting, on the network thread.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use async_ffi::{ContextExt, FfiPoll};
use osprey_sdk::abi_stable::std_types::ROption;
use osprey_sdk::Body;

/// The output of `f` if it is ready after one poll.
pub fn now<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(f).poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// The whole of `body`, at most `max` bytes, read now (a file range is read with `pread`; a
/// stream must have every chunk ready).
pub fn read_body(body: Body, max: usize) -> Result<Vec<u8>, String> {
    if body.len().is_some_and(|n| n > max as u64) {
        return Err(format!("it is over {max} bytes (max_size)"));
    }
    match body {
        Body::Empty => Ok(Vec::new()),
        Body::Bytes(b) => Ok(b.into_vec()),
        Body::Shared(b) => Ok(b.as_slice().to_vec()),
        Body::File(range) => {
            let mut text = vec![0; range.len as usize];
            range
                .file
                .read_exact_at(&mut text, range.offset)
                .map_err(|e| format!("reading it failed: {e}"))?;
            Ok(text)
        }
        Body::Stream(mut stream) => {
            let mut text = Vec::new();
            let mut cx = Context::from_waker(Waker::noop());
            loop {
                match cx.with_ffi_context(|fcx| stream.poll_chunk(fcx)) {
                    FfiPoll::Ready(ROption::RNone) => return Ok(text),
                    FfiPoll::Ready(ROption::RSome(chunk)) => {
                        let chunk = chunk.into_result().map_err(|e| e.into_string())?;
                        text.extend_from_slice(&chunk);
                        if text.len() > max {
                            return Err(format!("it is over {max} bytes (max_size)"));
                        }
                    }
                    FfiPoll::Panicked => return Err("its body panicked".into()),
                    FfiPoll::Pending => return Err("its body was not ready at once".into()),
                }
            }
        }
        Body::Upgrade(_) => Err("it is a tunnel".into()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use osprey_sdk::abi_stable::std_types::{RResult, RString, RVec};
    use osprey_sdk::{BodyStream, FfiContext, Response};

    use super::*;

    /// A stream giving these polls in turn (`None`: pending), then its end.
    struct Script(VecDeque<Option<Result<&'static str, &'static str>>>);

    impl BodyStream for Script {
        fn poll_chunk(
            &mut self,
            _cx: &mut FfiContext<'_>,
        ) -> FfiPoll<ROption<RResult<RVec<u8>, RString>>> {
            match self.0.pop_front() {
                None => FfiPoll::Ready(ROption::RNone),
                Some(None) => FfiPoll::Pending,
                Some(Some(Ok(s))) => {
                    FfiPoll::Ready(ROption::RSome(RResult::ROk(s.as_bytes().into())))
                }
                Some(Some(Err(e))) => FfiPoll::Ready(ROption::RSome(RResult::RErr(e.into()))),
            }
        }
    }

    fn stream(script: Vec<Option<Result<&'static str, &'static str>>>) -> Body {
        let mut resp = Response::new();
        resp.body_stream(Script(script.into()));
        resp.body
    }

    #[test]
    fn bodies_in_memory_and_ready_streams_are_read() {
        assert_eq!(
            read_body(Body::Bytes(b"abc".to_vec().into()), 3).unwrap(),
            b"abc"
        );
        assert_eq!(read_body(Body::Empty, 0).unwrap(), b"");
        let s = stream(vec![Some(Ok("ab")), Some(Ok("")), Some(Ok("c"))]);
        assert_eq!(read_body(s, 10).unwrap(), b"abc");
    }

    #[test]
    fn late_failing_or_large_bodies_are_refused() {
        let late = stream(vec![Some(Ok("a")), None]);
        assert_eq!(
            read_body(late, 10).unwrap_err(),
            "its body was not ready at once"
        );
        let failing = stream(vec![Some(Err("gone"))]);
        assert_eq!(read_body(failing, 10).unwrap_err(), "gone");
        let large = stream(vec![Some(Ok("abcd")), Some(Ok("efgh"))]);
        assert!(read_body(large, 5).unwrap_err().contains("max_size"));
        assert!(read_body(Body::Bytes(b"abcdef".to_vec().into()), 5)
            .unwrap_err()
            .contains("max_size"));
    }
}
