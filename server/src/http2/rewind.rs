//! A transport that first gives back bytes already read from it: the HTTP/1 loop reads the
//! first bytes of a cleartext connection, and when they are the HTTP/2 preface it hands them
//! over with the socket (no peek per connection to decide).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct Rewind<T> {
    read: Vec<u8>,
    pos: usize,
    inner: T,
}

impl<T> Rewind<T> {
    pub fn new(read: Vec<u8>, inner: T) -> Self {
        Rewind {
            read,
            pos: 0,
            inner,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.pos < this.read.len() {
            let n = buf.remaining().min(this.read.len() - this.pos);
            buf.put_slice(&this.read[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.read.len() {
                this.read = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn gives_back_the_read_bytes_then_reads_on() {
        let inner: &[u8] = b" world";
        let mut r = Rewind::new(b"hello".to_vec(), inner);
        let mut all = String::new();
        r.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "hello world");
    }
}
