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

    /// Read into `buf`'s spare capacity (at least 1 byte of it); `Ok(0)` at the end of stream.
    pub fn poll_read_buf(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut Vec<u8>,
    ) -> Poll<io::Result<usize>> {
        match self {
            Conn::Plain(s) => loop {
                std::task::ready!(s.poll_read_ready(cx))?;
                match s.try_read_buf(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    done => return Poll::Ready(done),
                }
            },
            Conn::Tls(s) => {
                let len = buf.len();
                buf.resize(buf.capacity(), 0);
                let mut rb = ReadBuf::new(&mut buf[len..]);
                let polled = Pin::new(s.as_mut()).poll_read(cx, &mut rb);
                let n = rb.filled().len();
                buf.truncate(len + n);
                polled.map_ok(|()| n)
            }
        }
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
