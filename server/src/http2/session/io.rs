//! The connection loop's one I/O step: write what the output buffer holds, else read.

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
        let c = &mut *c;
        if c.written < c.out.len() {
            match Pin::new(&mut *io).poll_write(cx, &c.out[c.written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    c.written += n;
                    if c.written == c.out.len() {
                        c.out.clear();
                        c.written = 0;
                    }
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
        let c = core.borrow();
        if c.out.len() - c.written > 4 * c.out_limit {
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
