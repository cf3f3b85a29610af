//! The TLS transport: the handshake (tokio-rustls), then either an HTTP/2 stream (ALPN `h2`)
//! or [`TlsIo`], which drives the rustls connection over the TCP socket itself so that the
//! HTTP/1.1 loop keeps its readiness-based, no-buffer-while-idle reading.

use std::cell::RefCell;
use std::io::{self, IoSlice, Read, Write};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::{ServerConfig, ServerConnection};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::conn::io::{FilePart, Io};

/// Bytes read from a file per TLS write (several full TLS records).
const FILE_CHUNK: usize = 64 * 1024;
/// How long a closing connection may take to accept its close_notify alert.
const CLOSE_NOTIFY_TIME: Duration = Duration::from_secs(2);
/// File chunk buffers kept per thread for reuse.
const MAX_POOLED_CHUNKS: usize = 16;

thread_local! {
    static CHUNKS: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// A connection after its handshake (moved once, straight into its serving task).
#[allow(clippy::large_enum_variant)]
pub enum Accepted {
    /// ALPN chose `h2`.
    Http2(Box<TlsStream<TcpStream>>),
    /// HTTP/1.1 (ALPN `http/1.1` or none).
    Http1(TlsIo),
}

/// Handshake on an accepted socket, within `timeout`. `None`: the connection is done (failed
/// handshake, or plain HTTP on the TLS port, which was answered with a 400).
pub async fn accept(
    mut tcp: TcpStream,
    config: Arc<ServerConfig>,
    timeout: Duration,
) -> Option<Accepted> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(timeout, tcp.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => return None,
    }
    // A TLS connection starts with a handshake record (content type 22).
    if first[0] != 0x16 {
        if first[0].is_ascii_alphabetic() {
            plain_http_error(&mut tcp).await;
        }
        return None;
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let stream = match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!("TLS handshake failed: {e}");
            return None;
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            return None;
        }
    };
    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
        return Some(Accepted::Http2(Box::new(stream)));
    }
    let (tcp, tls) = stream.into_inner();
    Some(Accepted::Http1(TlsIo {
        tcp,
        tls,
        eof: false,
    }))
}

/// nginx's answer to a plain HTTP request on an HTTPS port.
async fn plain_http_error(tcp: &mut TcpStream) {
    let body =
        crate::http::status::error_page(400, "The plain HTTP request was sent to an HTTPS port.");
    let mut out = Vec::with_capacity(256 + body.len());
    let headers = [osprey_sdk::HeaderPair::new(
        "Content-Type",
        "text/html; charset=utf-8",
    )];
    crate::http::encode::write_head(
        &mut out,
        1,
        400,
        &headers,
        crate::http::encode::ResponseFraming::Length(body.len() as u64),
        false,
    );
    out.extend_from_slice(body.as_ref());
    if Io::write_all(tcp, &[&out], Duration::from_secs(5))
        .await
        .is_ok()
    {
        Io::close(tcp).await;
    }
}

/// A rustls server connection driven over a non-blocking TCP socket.
pub struct TlsIo {
    tcp: TcpStream,
    tls: ServerConnection,
    /// The TCP stream reached end of file.
    eof: bool,
}

/// `Read`/`Write` over a tokio socket that return `WouldBlock` instead of waiting.
struct NonBlocking<'a>(&'a TcpStream);

impl Read for NonBlocking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for NonBlocking<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl TlsIo {
    /// Write pending TLS records without waiting. `Ok(true)`: nothing is left.
    fn push_tls(&mut self) -> io::Result<bool> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut NonBlocking(&self.tcp)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Write every pending TLS record, waiting for the socket as needed (at most `idle` for
    /// each wait).
    async fn flush_tls(&mut self, idle: Duration) -> io::Result<()> {
        while !self.push_tls()? {
            tokio::time::timeout(idle, self.tcp.writable())
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "write timed out"))??;
        }
        Ok(())
    }

    /// Process received records; an error queues an alert, which is sent if possible.
    fn process(&mut self) -> io::Result<rustls::IoState> {
        match self.tls.process_new_packets() {
            Ok(state) => Ok(state),
            Err(e) => {
                let _ = self.push_tls();
                Err(tls_error(e))
            }
        }
    }
}

impl Io for TlsIo {
    /// Ready at once when rustls already holds decrypted bytes (they may have arrived with the
    /// handshake, or several records in one read); otherwise wait for the socket.
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let state = self.process()?;
        if state.plaintext_bytes_to_read() > 0 || state.peer_has_closed() || self.eof {
            return Poll::Ready(Ok(()));
        }
        self.tcp.poll_read_ready(cx)
    }

    fn try_read(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        loop {
            let start = buf.len();
            buf.resize(buf.capacity(), 0);
            let read = self.tls.reader().read(&mut buf[start..]);
            buf.truncate(start + *read.as_ref().unwrap_or(&0));
            match read {
                // Ok(0): the client sent close_notify.
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if self.eof {
                return Ok(0);
            }
            match self.tls.read_tls(&mut NonBlocking(&self.tcp)) {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            self.process()?;
            // Answers rustls owes the peer (key updates, alerts) go out when they can.
            self.push_tls()?;
        }
    }

    async fn write_all(&mut self, bufs: &[&[u8]], idle: Duration) -> io::Result<()> {
        for b in bufs {
            let mut rest: &[u8] = b;
            while !rest.is_empty() {
                let n = self.tls.writer().write(rest)?;
                rest = &rest[n..];
                if !rest.is_empty() {
                    // rustls's send buffer is full: drain it to the socket.
                    self.flush_tls(idle).await?;
                }
            }
        }
        self.flush_tls(idle).await
    }

    /// Read the range in large chunks with pread(2) into a reused per-thread buffer and write
    /// them through TLS.
    async fn send_file(
        &mut self,
        head: &[u8],
        part: FilePart<'_>,
        idle: Duration,
    ) -> io::Result<()> {
        self.write_all(&[head], idle).await?;
        let mut chunk = Chunk::take();
        let mut off = part.offset;
        let end = part.offset + part.len;
        while off < end {
            let want = ((end - off) as usize).min(FILE_CHUNK);
            let n = part.file.read_at(&mut chunk.0[..want], off)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while being sent",
                ));
            }
            self.write_all(&[&chunk.0[..n]], idle).await?;
            off += n as u64;
        }
        Ok(())
    }

    fn close_now(&mut self) -> bool {
        self.tls.send_close_notify();
        self.push_tls().unwrap_or(true)
    }

    async fn finish_close(&mut self) {
        let _ = self.flush_tls(CLOSE_NOTIFY_TIME).await;
    }

    async fn close(&mut self) {
        self.tls.send_close_notify();
        if self.flush_tls(CLOSE_NOTIFY_TIME).await.is_ok() {
            Io::close(&mut self.tcp).await;
        }
    }
}

/// A file chunk buffer from the thread's pool, returned on drop.
struct Chunk(Box<[u8]>);

impl Chunk {
    fn take() -> Chunk {
        let pooled = CHUNKS.with(|c| c.borrow_mut().pop());
        Chunk(pooled.unwrap_or_else(|| vec![0u8; FILE_CHUNK].into_boxed_slice()))
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        CHUNKS.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() < MAX_POOLED_CHUNKS {
                c.push(buf);
            }
        });
    }
}
