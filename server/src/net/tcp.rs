//! A plain TCP connection before it is registered with the event loop.
//!
//! When a connection is accepted its request has usually arrived already. It is answered with
//! plain non-blocking system calls (`Conn::arrived` advances the connection's state machine on
//! the unregistered socket), and only a connection that then has to wait (for the client, or
//! for room to write) is registered and gets a task. One that closes after its answer (a
//! client's `Connection: close`) costs a read, a write and a close: no epoll registration and
//! deregistration, and no task.

use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::conn::io::{send_file_now, send_on, write_now, FilePart, Io};

/// A just-accepted connection, not registered with the event loop: it can read and write
/// what the socket allows now, and never waits. (To wait, a connection moves to a tokio
/// `TcpStream`: see `Conn::with_io`.)
pub struct FreshTcp(pub std::net::TcpStream);

/// Read into `buf`'s spare capacity (grown first when nearly full).
fn read_fresh(stream: &std::net::TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(4096);
    }
    let spare = buf.spare_capacity_mut();
    // SAFETY: recv(2) writes at most `spare.len()` bytes into the spare capacity, and only
    // the bytes it reports written are then counted as initialised.
    let n = unsafe {
        nix::libc::recv(
            stream.as_raw_fd(),
            spare.as_mut_ptr().cast(),
            spare.len(),
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above.
    unsafe { buf.set_len(buf.len() + n as usize) };
    Ok(n as usize)
}

/// What a fresh connection cannot do without waiting.
fn must_wait() -> io::Error {
    io::Error::other("a fresh connection cannot wait; register it first")
}

impl Io for FreshTcp {
    // It waits as a tokio `TcpStream`, which parks.
    const PARKS: bool = true;

    fn poll_readable(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Err(must_wait()))
    }

    fn try_read(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        read_fresh(&self.0, buf)
    }

    fn try_write(&mut self, bufs: &[&[u8]]) -> io::Result<usize> {
        write_now(
            bufs,
            |b| (&self.0).write(b),
            |v| (&self.0).write_vectored(v),
        )
    }

    fn try_write_last(&mut self, bufs: &[&[u8]]) -> io::Result<usize> {
        let fd = self.0.as_raw_fd();
        write_now(
            bufs,
            |b| send_on(fd, b, true),
            |v| (&self.0).write_vectored(v),
        )
    }

    fn try_send_file(&mut self, head: &[u8], part: FilePart) -> io::Result<(usize, u64)> {
        send_file_now(self.0.as_raw_fd(), head, part, |call| call())
    }

    async fn write_all(&mut self, _bufs: &[&[u8]], _idle: Duration) -> io::Result<()> {
        Err(must_wait())
    }

    async fn send_file(&mut self, _head: &[u8], _: FilePart<'_>, _: Duration) -> io::Result<()> {
        Err(must_wait())
    }

    async fn close(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::io::Cork;
    use osprey_sdk::OpenFile;
    use std::io::Read;

    /// A client and the fresh (non-blocking) server side of its connection.
    fn connected() -> (std::net::TcpStream, FreshTcp) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (client, FreshTcp(server))
    }

    #[test]
    fn reads_and_writes_what_the_socket_allows_now() {
        let (mut client, mut tcp) = connected();
        let mut buf = Vec::new();
        assert_eq!(
            tcp.try_read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        client.write_all(b"ping").unwrap();
        let n = loop {
            match tcp.try_read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(&buf[..n], b"ping");
        assert_eq!(tcp.try_write(&[b"po", b"", b"ng"]).unwrap(), 4);
        let mut got = [0u8; 4];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pong");
    }

    #[test]
    fn last_bytes_wait_for_the_close_and_leave_with_it() {
        let (mut client, mut tcp) = connected();
        assert_eq!(tcp.try_write_last(&[b"bye"]).unwrap(), 3);
        std::thread::sleep(Duration::from_millis(50));
        client.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let held = client.read_to_end(&mut got).unwrap_err();
        assert_eq!(held.kind(), io::ErrorKind::WouldBlock);
        assert!(got.is_empty(), "sent before the close: {got:?}");
        drop(tcp);
        client.set_nonblocking(false).unwrap();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"bye");
    }

    /// Send a head and a 200 KiB file on a fresh connection as `cork` says, the client
    /// reading meanwhile; the socket's TCP_CORK during and after, and what arrived.
    fn send_file_corked(cork: Cork) -> (bool, bool, usize) {
        let (mut client, mut tcp) = connected();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            client.read_to_end(&mut got).unwrap();
            got.len()
        });
        let path =
            std::env::temp_dir().join(format!("osprey-cork-{}-{cork:?}", std::process::id()));
        std::fs::write(&path, vec![b'x'; 200 * 1024]).unwrap();
        let file = OpenFile::new(std::fs::File::open(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        let (mut head, mut offset, len) = (&b"HEAD"[..], 0u64, 200 * 1024u64);
        let mut corked_while_sending = false;
        while !head.is_empty() || offset < len {
            let part = FilePart {
                file: &file,
                offset,
                len: len - offset,
                cork,
            };
            let (h, f) = tcp.try_send_file(head, part).unwrap();
            (head, offset) = (&head[h..], offset + f);
            if offset < len {
                corked_while_sending |= socket2::SockRef::from(&tcp.0).tcp_cork().unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let corked_after = socket2::SockRef::from(&tcp.0).tcp_cork().unwrap();
        drop(tcp);
        (corked_while_sending, corked_after, reader.join().unwrap())
    }

    #[test]
    fn a_short_sendfile_is_taken_as_a_full_socket_without_a_call_for_eagain() {
        let (_client, tcp) = connected();
        let socket = socket2::SockRef::from(&tcp.0);
        socket.set_send_buffer_size(64 * 1024).unwrap();
        let len = 8u64 << 20;
        let path = std::env::temp_dir().join(format!("osprey-short-{}", std::process::id()));
        std::fs::write(&path, vec![b'x'; len as usize]).unwrap();
        let file = OpenFile::new(std::fs::File::open(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        let fd = tcp.0.as_raw_fd();
        let mut calls = 0;
        let whole = FilePart {
            file: &file,
            offset: 0,
            len,
            cork: Cork::No,
        };
        let (head, sent) = send_file_now(fd, b"HEAD", whole, |call| {
            calls += 1;
            call()
        })
        .unwrap();
        assert!(head == 4 && sent > 0 && sent < len, "{head} {sent}");
        // The head's send and one sendfile: the short one says the socket is full.
        assert_eq!(calls, 2);
        let again = send_file_now(fd, b"", whole.after(sent), |call| call());
        assert_eq!(
            again.unwrap(),
            (0, 0),
            "the socket had room after a short send"
        );
    }

    #[test]
    fn large_files_are_sent_corked_until_done_or_until_the_close() {
        let all = 4 + 200 * 1024;
        let (during, after, got) = send_file_corked(Cork::UntilDone);
        assert!(!after && got == all, "{during} {after} {got}");
        let (_, after, got) = send_file_corked(Cork::UntilClose);
        assert!(after && got == all, "{after} {got}");
        let (during, after, got) = send_file_corked(Cork::No);
        assert!(!during && !after && got == all, "{during} {after} {got}");
        assert_eq!(Cork::for_file(64 * 1024, true), Cork::No);
        assert_eq!(Cork::for_file(64 * 1024 + 1, false), Cork::UntilDone);
        assert_eq!(Cork::for_file(64 * 1024 + 1, true), Cork::UntilClose);
    }
}
