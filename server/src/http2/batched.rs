//! The write side of an HTTP/2 connection, batched. The h2 crate writes each DATA frame over
//! 256 bytes with a write of its own (its encoder holds one such frame at a time), so a batch of
//! small responses cost a system call each. Here what h2 writes during one turn of the
//! connection's loop is gathered, and the loop sends it in one write at the end of the turn
//! ([`Flusher::written`]).

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes gathered before h2 is made to wait for the socket.
const MAX_GATHERED: usize = 256 * 1024;

struct Shared<T> {
    io: T,
    out: Vec<u8>,
    /// Bytes of `out` already written.
    sent: usize,
    /// The loop, waiting for something to write.
    idle: Option<Waker>,
}

impl<T: AsyncWrite + Unpin> Shared<T> {
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            match Pin::new(&mut self.io).poll_write(cx, &self.out[self.sent..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.sent += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.out.clear();
        self.sent = 0;
        Pin::new(&mut self.io).poll_flush(cx)
    }
}

/// The transport as h2 sees it: reads pass through, writes are gathered.
pub struct Batched<T>(Rc<RefCell<Shared<T>>>);

/// The connection loop's handle on what is gathered.
pub struct Flusher<T>(Rc<RefCell<Shared<T>>>);

/// Wrap `io`.
pub fn batched<T>(io: T) -> (Batched<T>, Flusher<T>) {
    let shared = Rc::new(RefCell::new(Shared {
        io,
        out: Vec::new(),
        sent: 0,
        idle: None,
    }));
    (Batched(shared.clone()), Flusher(shared))
}

impl<T: AsyncWrite + Unpin> Flusher<T> {
    /// Write what is gathered; when nothing is, wait until something is, then write it.
    pub async fn written(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| {
            let mut shared = self.0.borrow_mut();
            if shared.out.is_empty() {
                shared.idle = Some(cx.waker().clone());
                return Poll::Pending;
            }
            shared.poll_drain(cx)
        })
        .await
    }

    /// Write what is gathered, if anything.
    pub async fn drain(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.0.borrow_mut().poll_drain(cx)).await
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Batched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0.borrow_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Batched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut shared = self.0.borrow_mut();
        if shared.out.len() >= MAX_GATHERED {
            // The peer is slow to read: h2 waits until the socket takes some.
            match shared.poll_drain(cx) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                _ if shared.out.len() >= MAX_GATHERED => return Poll::Pending,
                _ => {}
            }
        }
        if let Some(idle) = shared.idle.take() {
            // The connection's loop writes it at its next turn.
            idle.wake();
        }
        let mut n = 0;
        for b in bufs {
            shared.out.extend_from_slice(b);
            n += b.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// What is gathered leaves at the end of the loop's turn, not at each of h2's flushes.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut shared = self.0.borrow_mut();
        std::task::ready!(shared.poll_drain(cx))?;
        Pin::new(&mut shared.io).poll_shutdown(cx)
    }
}
