//! The connection loop's one I/O step: write what the output holds (one vectored write of the
//! frames and the bodies held by reference), else read.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::READ_ROOM;
use crate::http2::core::Core;

pub enum Step {
    Read(usize),
    Wrote,
}

/// Write what is in the output buffer, and read into `rbuf`: whichever is ready first.
pub fn io_step<T: AsyncRead + AsyncWrite + Unpin>(
    cx: &mut std::task::Context<'_>,
    io: &mut T,
    rbuf: &mut Vec<u8>,
    core: &RefCell<Core>,
    unflushed: &mut bool,
) -> Poll<io::Result<Step>> {
    if *unflushed {
        match Pin::new(&mut *io).poll_flush(cx) {
            Poll::Ready(Ok(())) => *unflushed = false,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
    }
    {
        let mut c = core.borrow_mut();
        let mut out = c.output();
        if out.queued() > 0 {
            let wrote = out.write_with(|slices| {
                let wrote = match slices {
                    [one] => Pin::new(&mut *io).poll_write(cx, one),
                    _ => Pin::new(&mut *io).poll_write_vectored(cx, slices),
                };
                match wrote {
                    Poll::Ready(Ok(n)) => (n, Poll::Ready(Ok(n))),
                    other => (0, other),
                }
            });
            match wrote {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(_)) => {
                    *unflushed = true;
                    return Poll::Ready(Ok(Step::Wrote));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
    }
    {
        // A client that sends but does not read is not read either once its answers pile up.
        let mut c = core.borrow_mut();
        if c.output().queued() > 4 * c.out_limit {
            return Poll::Pending;
        }
    }
    if rbuf.capacity() - rbuf.len() < READ_ROOM / 2 {
        rbuf.reserve(READ_ROOM);
    }
    let mut buf = ReadBuf::uninit(rbuf.spare_capacity_mut());
    match Pin::new(io).poll_read(cx, &mut buf) {
        Poll::Ready(Ok(())) => {
            let n = buf.filled().len();
            // SAFETY: `n` bytes of the spare capacity were just filled.
            unsafe { rbuf.set_len(rbuf.len() + n) };
            Poll::Ready(Ok(Step::Read(n)))
        }
        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        Poll::Pending => Poll::Pending,
    }
}
