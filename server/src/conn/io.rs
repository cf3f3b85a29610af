//! What the connection loop needs of a transport. Plain TCP implements it here; TLS
//! implements it in `net/tls`.

use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;

use osprey_sdk::OpenFile;
use tokio::net::TcpStream;

pub trait Io {
    /// Wait until a read would make progress (no buffer is held while waiting).
    async fn readable(&mut self) -> io::Result<()>;

    /// Read what is available into `buf`'s spare capacity. `Ok(0)` is end of stream;
    /// `WouldBlock` means wait for `readable` again.
    fn try_read(&mut self, buf: &mut Vec<u8>) -> io::Result<usize>;

    /// Write all of `bufs`, in order, in as few system calls as possible.
    async fn write_all(&mut self, bufs: &[&[u8]]) -> io::Result<()>;

    /// Send `len` bytes of `file` from `offset`.
    async fn send_file(&mut self, file: &OpenFile, offset: u64, len: u64) -> io::Result<()>;

    /// Close after a final response: stop writing, then read and discard for a moment, so that
    /// unread request bytes do not make the kernel reset the connection and lose the response.
    async fn close(&mut self);
}

/// Lingering close: how long and how much to drain.
const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(2);
const LINGER_BYTES: usize = 256 * 1024;

impl Io for TcpStream {
    async fn readable(&mut self) -> io::Result<()> {
        TcpStream::readable(self).await
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

    async fn write_all(&mut self, bufs: &[&[u8]]) -> io::Result<()> {
        let mut index = 0;
        let mut offset = 0;
        while index < bufs.len() {
            let slices: arrayvec::ArrayVec<IoSlice, 8> = bufs[index..]
                .iter()
                .take(8)
                .enumerate()
                .map(|(i, b)| IoSlice::new(if i == 0 { &b[offset..] } else { b }))
                .collect();
            let written = match self.try_write_vectored(&slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable().await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut left = written;
            while left > 0 && index < bufs.len() {
                let rest = bufs[index].len() - offset;
                if left >= rest {
                    left -= rest;
                    index += 1;
                    offset = 0;
                } else {
                    offset += left;
                    left = 0;
                }
            }
            while index < bufs.len() && bufs[index].len() == offset {
                index += 1;
                offset = 0;
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
