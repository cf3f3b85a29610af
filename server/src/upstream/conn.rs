//! A connection to an upstream server: plain TCP, or TLS over it (`backends.<name>.tls`).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

pub enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Conn {
    /// The socket, for the pool's liveness check.
    pub fn raw_fd(&self) -> RawFd {
        match self {
            Conn::Plain(s) => s.as_raw_fd(),
            Conn::Tls(s) => s.get_ref().0.as_raw_fd(),
        }
    }

    /// Nothing arrived since the last read drained the socket, as far as the reactor knows:
    /// no data, no end of stream, no error (a close it has not polled yet is missed, so
    /// only for requests that can be sent again). Plain TCP only, and without a system call.
    pub fn quiet(&self) -> bool {
        let Conn::Plain(s) = self else {
            return false;
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        s.poll_read_ready(&mut cx).is_pending()
    }

    /// Read into `buf`'s spare capacity (at least 1 byte of it); `Ok(0)` at the end of stream.
    /// Through `poll_read`, which forgets the socket's readiness after a read that did not
    /// fill the space (it drained the socket): [`Conn::quiet`] relies on that.
    pub fn poll_read_buf(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut Vec<u8>,
    ) -> Poll<io::Result<usize>> {
        let mut rb = ReadBuf::uninit(buf.spare_capacity_mut());
        std::task::ready!(Pin::new(&mut *self).poll_read(cx, &mut rb))?;
        let n = rb.filled().len();
        // SAFETY: `poll_read` initialised and filled the first `n` bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n) };
        Poll::Ready(Ok(n))
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, data),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    /// Waits until `conn.quiet()` is `want`, letting the reactor run between looks.
    async fn settles(conn: &Conn, want: bool) -> bool {
        for _ in 0..500 {
            if conn.quiet() == want {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        false
    }

    #[tokio::test]
    async fn quiet_until_the_peer_sends_or_closes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (mut peer, _) = accepted.unwrap();
        let mut conn = Conn::Plain(client.unwrap());
        assert!(settles(&conn, true).await, "a fresh connection is quiet");
        // Bytes arrive: not quiet; once they are read to the end of what came, quiet again.
        peer.write_all(b"x").await.unwrap();
        assert!(settles(&conn, false).await, "stray bytes are seen");
        // (A read that fills less than the buffer drained the socket: the exchange and the
        // body stream read so.)
        let mut buf = Vec::with_capacity(64);
        let n = std::future::poll_fn(|cx| conn.poll_read_buf(cx, &mut buf)).await;
        assert_eq!((n.unwrap(), &buf[..]), (1, &b"x"[..]));
        assert!(conn.quiet(), "a read that drained the socket clears it");
        // The peer closes: not quiet.
        drop(peer);
        assert!(settles(&conn, false).await, "a close is seen");
        // TLS connections are never called quiet (their check is the socket's own).
    }
}
