//! What the connection loop needs of a transport. Plain TCP implements it here; TLS
//! implements it in `net/tls`.

use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::task::{Context, Poll};

use osprey_sdk::OpenFile;
use tokio::net::TcpStream;

pub trait Io {
    /// Whether a read would make progress; if not, `cx` is woken when it would. Waiting this
    /// way holds no buffer and no future state.
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Wait until a read would make progress.
    async fn readable(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_readable(cx)).await
    }

    /// Read what is available into `buf`'s spare capacity. `Ok(0)` is end of stream;
    /// `WouldBlock` means wait for `readable` again.
    fn try_read(&mut self, buf: &mut Vec<u8>) -> io::Result<usize>;

    /// Write what the transport takes now of `bufs`, in order, without waiting; `WouldBlock`
    /// when it takes nothing. The default takes nothing: callers then use `write_all`.
    fn try_write(&mut self, _bufs: &[&[u8]]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Write all of `bufs`, in order, in as few system calls as possible.
    async fn write_all(&mut self, bufs: &[&[u8]]) -> io::Result<()>;

    /// Send `len` bytes of `file` from `offset`.
    async fn send_file(&mut self, file: &OpenFile, offset: u64, len: u64) -> io::Result<()>;

    /// Close after a final response: stop writing, then read and discard for a moment, so that
    /// unread request bytes do not make the kernel reset the connection and lose the response.
    async fn close(&mut self);

    /// Close after a final response when the client has sent all it will (it asked for the
    /// close and every byte it sent was read): no lingering; the socket closes when dropped.
    /// `false`: the transport still has bytes to write first ([`Io::finish_close`]).
    fn close_now(&mut self) -> bool {
        true
    }

    /// Write what [`Io::close_now`] could not.
    async fn finish_close(&mut self) {}
}

/// Slices of `bufs` from `index`/`offset` on, at most 8, for one vectored write.
pub(crate) fn slices<'a>(
    bufs: &[&'a [u8]],
    index: usize,
    offset: usize,
) -> arrayvec::ArrayVec<IoSlice<'a>, 8> {
    bufs[index..]
        .iter()
        .take(8)
        .enumerate()
        .map(|(i, b)| IoSlice::new(if i == 0 { &b[offset..] } else { b }))
        .collect()
}

/// One write of `bufs` from `index`/`offset` on: send(2) for a single slice (cheaper in the
/// kernel than writev), else writev(2).
fn write_once(tcp: &TcpStream, bufs: &[&[u8]], index: usize, offset: usize) -> io::Result<usize> {
    if index + 1 == bufs.len() {
        TcpStream::try_write(tcp, &bufs[index][offset..])
    } else {
        tcp.try_write_vectored(&slices(bufs, index, offset))
    }
}

/// Move `index`/`offset` past `written` bytes of `bufs` (and past empty slices).
pub(crate) fn advance(bufs: &[&[u8]], index: &mut usize, offset: &mut usize, mut written: usize) {
    while *index < bufs.len() {
        let rest = bufs[*index].len() - *offset;
        if written < rest {
            *offset += written;
            return;
        }
        written -= rest;
        *index += 1;
        *offset = 0;
    }
}

/// Lingering close: how long and how much to drain.
const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(2);
const LINGER_BYTES: usize = 256 * 1024;

impl Io for TcpStream {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }

    fn try_read(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        let room = buf.capacity() - buf.len();
        let n = self.try_read_buf(buf)?;
        if n > 0 && n < room {
            // A short read drained the socket: forget the readiness now, so the next wait
            // goes straight to epoll instead of first paying for a recv that says EAGAIN.
            // (Tokio only clears readiness that is not newer than what this call saw.)
            let _ = self.try_io(tokio::io::Interest::READABLE, || {
                Err::<(), _>(io::ErrorKind::WouldBlock.into())
            });
        }
        Ok(n)
    }

    fn try_write(&mut self, bufs: &[&[u8]]) -> io::Result<usize> {
        let mut written = 0;
        let (mut index, mut offset) = (0, 0);
        advance(bufs, &mut index, &mut offset, 0);
        while index < bufs.len() {
            match write_once(self, bufs, index, offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    written += n;
                    advance(bufs, &mut index, &mut offset, n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && written > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    async fn write_all(&mut self, bufs: &[&[u8]]) -> io::Result<()> {
        let (mut index, mut offset) = (0, 0);
        advance(bufs, &mut index, &mut offset, 0);
        while index < bufs.len() {
            match write_once(self, bufs, index, offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => advance(bufs, &mut index, &mut offset, n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable().await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn close(&mut self) {
        use tokio::io::AsyncWriteExt;
        if self.shutdown().await.is_err() {
            return;
        }
        let mut scratch = Vec::with_capacity(16 * 1024);
        let mut drained = 0;
        let deadline = tokio::time::Instant::now() + LINGER_TIME;
        while drained < LINGER_BYTES {
            match tokio::time::timeout_at(deadline, TcpStream::readable(self)).await {
                Ok(Ok(())) => {}
                _ => return,
            }
            scratch.clear();
            match self.try_read_buf(&mut scratch) {
                Ok(0) => return,
                Ok(n) => drained += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }

    /// sendfile(2) from the connection's own task: drain until EAGAIN, then wait.
    async fn send_file(&mut self, file: &OpenFile, offset: u64, len: u64) -> io::Result<()> {
        let mut off = offset as i64;
        let end = offset + len;
        while (off as u64) < end {
            let want = ((end - off as u64) as usize).min(1 << 30);
            let result = self.try_io(tokio::io::Interest::WRITABLE, || {
                // SAFETY: both descriptors are open for the duration of the call.
                let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(file.as_raw_fd()) };
                nix::sys::sendfile::sendfile(&*self, fd, Some(&mut off), want)
                    .map_err(io::Error::from)
            });
            match result {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file shrank while being sent",
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable().await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
