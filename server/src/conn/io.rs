//! What the connection loop needs of a transport. Plain TCP implements it here; TLS
//! implements it in `net/tls`.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::task::{Context, Poll};
use std::time::Duration;

use osprey_sdk::{FileRange, OpenFile};
use tokio::net::TcpStream;

pub trait Io {
    /// Whether a connection on this transport parks when quiet between requests (its task
    /// ends and `net::park` watches the socket): plain TCP does, TLS keeps its state.
    const PARKS: bool = false;

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

    /// [`Io::try_write`] of the last bytes before a close: they may wait for it, so that the
    /// FIN leaves in their segment instead of one of its own.
    fn try_write_last(&mut self, bufs: &[&[u8]]) -> io::Result<usize> {
        self.try_write(bufs)
    }

    /// Write what the transport takes now of `head`, then of `part`, without waiting: how
    /// many bytes of each went. The default sends nothing: callers then use `send_file`.
    fn try_send_file(&mut self, _head: &[u8], _part: FilePart) -> io::Result<(usize, u64)> {
        Ok((0, 0))
    }

    /// Write all of `bufs`, in order, in as few system calls as possible. Fails with
    /// `TimedOut` when the peer takes nothing for `idle` (as nginx's `send_timeout`: a slow
    /// steady reader is served, one that stops is dropped).
    async fn write_all(&mut self, bufs: &[&[u8]], idle: Duration) -> io::Result<()>;

    /// Write `head`, then `part` (sendfile(2) where the transport allows, the head joining
    /// the file's first bytes). `idle` as for `write_all`.
    async fn send_file(&mut self, head: &[u8], part: FilePart, idle: Duration) -> io::Result<()>;

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

/// Whether a file body is sent corked (TCP_CORK, as nginx's `tcp_nopush`). sendfile(2) moves
/// a file in rounds of 64 KiB and pushes each round's tail as a short segment of its own;
/// corked, only full segments leave until the body is done.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cork {
    /// Small enough for one round: the head's MSG_MORE is all it needs.
    No,
    /// Uncorked once the body is out (the connection goes on).
    UntilDone,
    /// Left corked: the close that follows pushes the tail, with the FIN in its segment.
    UntilClose,
}

/// What is sent of a file body at once: `len` bytes of `file` from `offset`, corked as `cork`
/// says (one value for the transports' file calls, made in one place from a body's range).
#[derive(Clone, Copy)]
pub struct FilePart<'a> {
    pub file: &'a OpenFile,
    pub offset: u64,
    pub len: u64,
    pub cork: Cork,
}

impl<'a> FilePart<'a> {
    /// What is left of `range` after its first `from` bytes, on a connection that closes after
    /// the body or not (the cork follows the whole body's length).
    #[inline]
    pub fn rest_of(range: &'a FileRange, from: u64, closing: bool) -> FilePart<'a> {
        FilePart {
            file: &range.file,
            offset: range.offset + from,
            len: range.len - from,
            cork: Cork::for_file(range.len, closing),
        }
    }

    /// What is left after its first `sent` bytes.
    #[inline]
    pub fn after(self, sent: u64) -> FilePart<'a> {
        FilePart {
            offset: self.offset + sent,
            len: self.len - sent,
            ..self
        }
    }
}

impl Cork {
    /// For a file body of `len` bytes on a connection that closes after it or not.
    pub fn for_file(len: u64, closing: bool) -> Cork {
        const ROUND: u64 = 64 * 1024;
        match (len > ROUND, closing) {
            (false, _) => Cork::No,
            (true, false) => Cork::UntilDone,
            (true, true) => Cork::UntilClose,
        }
    }
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

/// One write of `bufs` from `index`/`offset` on: `single` (send(2), cheaper in the kernel than
/// writev) for the last slice, else `vectored` (writev(2)).
pub(crate) fn write_once(
    bufs: &[&[u8]],
    index: usize,
    offset: usize,
    single: impl FnOnce(&[u8]) -> io::Result<usize>,
    vectored: impl FnOnce(&[IoSlice]) -> io::Result<usize>,
) -> io::Result<usize> {
    if index + 1 == bufs.len() {
        single(&bufs[index][offset..])
    } else {
        vectored(&slices(bufs, index, offset))
    }
}

/// Write what the socket takes now of `bufs`, one [`write_once`] after another; `WouldBlock`
/// only when it takes nothing.
pub(crate) fn write_now(
    bufs: &[&[u8]],
    mut single: impl FnMut(&[u8]) -> io::Result<usize>,
    mut vectored: impl FnMut(&[IoSlice]) -> io::Result<usize>,
) -> io::Result<usize> {
    let mut written = 0;
    let (mut index, mut offset) = (0, 0);
    advance(bufs, &mut index, &mut offset, 0);
    while index < bufs.len() {
        match write_once(bufs, index, offset, &mut single, &mut vectored) {
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

/// send(2) on socket `fd`. `more` (MSG_MORE): the bytes may wait for what follows (more
/// bytes, or the FIN of a close) to leave in the same segment.
pub(crate) fn send_on(fd: RawFd, buf: &[u8], more: bool) -> io::Result<usize> {
    use nix::libc::{MSG_MORE, MSG_NOSIGNAL};
    let flags = if more {
        MSG_MORE | MSG_NOSIGNAL
    } else {
        MSG_NOSIGNAL
    };
    // SAFETY: `buf` is valid for reads of its length for the whole call.
    let n = unsafe { nix::libc::send(fd, buf.as_ptr().cast(), buf.len(), flags) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Lingering close: how long and how much to drain.
const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(2);
const LINGER_BYTES: usize = 256 * 1024;

impl Io for TcpStream {
    const PARKS: bool = true;

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
        write_now(
            bufs,
            |b| TcpStream::try_write(self, b),
            |v| self.try_write_vectored(v),
        )
    }

    fn try_write_last(&mut self, bufs: &[&[u8]]) -> io::Result<usize> {
        let fd = self.as_raw_fd();
        write_now(
            bufs,
            |b| self.try_io(tokio::io::Interest::WRITABLE, || send_on(fd, b, true)),
            |v| self.try_write_vectored(v),
        )
    }

    async fn write_all(&mut self, bufs: &[&[u8]], idle: Duration) -> io::Result<()> {
        let (mut index, mut offset) = (0, 0);
        advance(bufs, &mut index, &mut offset, 0);
        while index < bufs.len() {
            let single = |b: &[u8]| TcpStream::try_write(self, b);
            match write_once(bufs, index, offset, single, |v| self.try_write_vectored(v)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => advance(bufs, &mut index, &mut offset, n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => writable(self, idle).await?,
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

    fn try_send_file(&mut self, head: &[u8], part: FilePart) -> io::Result<(usize, u64)> {
        let fd = self.as_raw_fd();
        send_file_now(fd, head, part, |call| {
            self.try_io(tokio::io::Interest::WRITABLE, call)
        })
    }

    /// sendfile(2) from the connection's own task: send until the socket is full (a short
    /// sendfile or EAGAIN), then wait.
    async fn send_file(
        &mut self,
        mut head: &[u8],
        mut part: FilePart<'_>,
        idle: Duration,
    ) -> io::Result<()> {
        loop {
            let (head_sent, file_sent) = Io::try_send_file(self, head, part)?;
            head = &head[head_sent..];
            part = part.after(file_sent);
            if head.is_empty() && part.len == 0 {
                return Ok(());
            }
            writable(self, idle).await?;
        }
    }
}

/// Send what socket `fd` takes now of `head`, then of `part`: how many bytes of each went.
/// The head goes with MSG_MORE, so that it leaves in one segment with the file's first bytes
/// (as nginx's `tcp_nopush`); a large file is sent as the part's `cork` says. `call` makes one
/// system call (through the event loop's readiness, for a registered socket).
pub(crate) fn send_file_now(
    fd: RawFd,
    head: &[u8],
    part: FilePart,
    mut call: impl FnMut(&mut dyn FnMut() -> io::Result<usize>) -> io::Result<usize>,
) -> io::Result<(usize, u64)> {
    let FilePart {
        file,
        offset,
        len,
        cork,
    } = part;
    // SAFETY: the socket is open for the duration of the call.
    let out = unsafe { BorrowedFd::borrow_raw(fd) };
    let socket = socket2::SockRef::from(&out);
    // The head is only unsent on the first call for a body.
    if cork != Cork::No && !head.is_empty() {
        socket.set_tcp_cork(true)?;
    }
    let mut head_sent = 0;
    while head_sent < head.len() {
        let rest = &head[head_sent..];
        let sent = call(&mut || send_on(fd, rest, len > 0));
        match sent {
            Ok(n) => head_sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok((head_sent, 0)),
            Err(e) => return Err(e),
        }
    }
    let mut file_sent = 0u64;
    while file_sent < len {
        let mut off = (offset + file_sent) as i64;
        let want = (len - file_sent).min(1 << 30) as usize;
        let mut short = 0;
        let sent = call(&mut || {
            let n = nix::sys::sendfile::sendfile(out, file, Some(&mut off), want)?;
            if n > 0 && n < want {
                // Short: the socket is full (as nginx reads it). Reported as WouldBlock, so
                // the socket's readiness is forgotten and the wait goes straight to epoll,
                // instead of first paying for a sendfile that says EAGAIN. The kernel marks
                // a socket a partial send left full, so room to write wakes us. (A file
                // that shrank meanwhile now ends in the write timeout, its answer cut as before.)
                short = n;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match sent {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while being sent",
                ))
            }
            Ok(n) => file_sent += n as u64,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                file_sent += short as u64;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    if cork == Cork::UntilDone && file_sent == len {
        socket.set_tcp_cork(false)?;
    }
    Ok((head_sent, file_sent))
}

/// Wait until `tcp` takes more bytes, at most `idle`.
async fn writable(tcp: &TcpStream, idle: Duration) -> io::Result<()> {
    tokio::time::timeout(idle, tcp.writable())
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "write timed out"))?
}
