//! The host's TCP service for modules (`osprey_sdk::tcp`): connect with a timeout, then reads
//! and writes polled on the network thread, each failing when it waits longer than the
//! connection's I/O timeout. Also `spawn`, which runs a module's detached task on the network
//! thread that asks (writes-behind that outlive a request).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use async_ffi::LocalFfiFuture;
use osprey_sdk::abi_stable::sabi_trait::TD_Opaque;
use osprey_sdk::abi_stable::std_types::{RResult, RSlice, RSliceMut, RStr, RString};
use osprey_sdk::tcp::ConnectFuture;
use osprey_sdk::tunnel::Tunnel_TO;
use osprey_sdk::{FfiContext, FfiPoll, Tunnel};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

thread_local! {
    static NETWORK_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Called by each network thread as it starts: `spawn` works there.
pub fn on_network_thread() {
    NETWORK_THREAD.with(|n| n.set(true));
}

pub extern "C" fn spawn(task: LocalFfiFuture<()>) -> bool {
    if !NETWORK_THREAD.with(Cell::get) {
        return false;
    }
    tokio::task::spawn_local(task);
    true
}

pub extern "C" fn tcp_connect(addr: RStr<'_>, connect_ms: u64, io_ms: u64) -> ConnectFuture {
    let addr = addr.as_str().to_owned();
    LocalFfiFuture::new(async move {
        let limit = Duration::from_millis(connect_ms.max(1));
        let stream = match tokio::time::timeout(limit, TcpStream::connect(&addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return RResult::RErr(format!("cannot connect to {addr}: {e}").into()),
            Err(_) => return RResult::RErr(format!("cannot connect to {addr}: timed out").into()),
        };
        let _ = stream.set_nodelay(true);
        let conn = Conn {
            stream,
            io_timeout: (io_ms > 0).then(|| Duration::from_millis(io_ms)),
            deadline: None,
        };
        RResult::ROk(Tunnel_TO::from_value(conn, TD_Opaque))
    })
}

/// A stream's poll as a [`Tunnel`] answers it (the error as its text).
pub(crate) fn ffi_poll<T>(p: Poll<std::io::Result<T>>) -> FfiPoll<RResult<T, RString>> {
    match p {
        Poll::Ready(r) => FfiPoll::Ready(r.map_err(|e| RString::from(e.to_string())).into()),
        Poll::Pending => FfiPoll::Pending,
    }
}

/// One read of `stream` into `buf`: how many bytes.
pub(crate) fn poll_read_into<S: AsyncRead>(
    stream: Pin<&mut S>,
    cx: &mut std::task::Context<'_>,
    buf: &mut [u8],
) -> Poll<std::io::Result<usize>> {
    let mut rb = ReadBuf::new(buf);
    stream.poll_read(cx, &mut rb).map_ok(|()| rb.filled().len())
}

struct Conn {
    stream: TcpStream,
    io_timeout: Option<Duration>,
    /// Armed when a read or write first waits; cleared when one completes.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl Conn {
    /// Poll one operation under the I/O timeout.
    fn timed<T>(
        &mut self,
        cx: &mut FfiContext<'_>,
        op: impl FnOnce(Pin<&mut TcpStream>, &mut std::task::Context<'_>) -> Poll<std::io::Result<T>>,
    ) -> FfiPoll<RResult<T, RString>> {
        cx.with_context(|cx| match op(Pin::new(&mut self.stream), cx) {
            Poll::Ready(r) => {
                self.deadline = None;
                ffi_poll(Poll::Ready(r))
            }
            Poll::Pending => {
                let Some(limit) = self.io_timeout else {
                    return FfiPoll::Pending;
                };
                let deadline = self
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        self.deadline = None;
                        FfiPoll::Ready(RResult::RErr("timed out".into()))
                    }
                    Poll::Pending => FfiPoll::Pending,
                }
            }
        })
    }
}

impl Tunnel for Conn {
    fn poll_read(
        &mut self,
        cx: &mut FfiContext<'_>,
        mut buf: RSliceMut<'_, u8>,
    ) -> FfiPoll<RResult<usize, RString>> {
        self.timed(cx, |s, cx| poll_read_into(s, cx, buf.as_mut_slice()))
    }

    fn poll_write(
        &mut self,
        cx: &mut FfiContext<'_>,
        data: RSlice<'_, u8>,
    ) -> FfiPoll<RResult<usize, RString>> {
        self.timed(cx, |s, cx| s.poll_write(cx, data.as_slice()))
    }

    fn poll_shutdown(&mut self, cx: &mut FfiContext<'_>) -> FfiPoll<RResult<(), RString>> {
        self.timed(cx, |s, cx| s.poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::tcp::TcpStream as ModuleStream;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn run(test: impl Future<Output = ()>) {
        osprey_sdk::host::install(super::super::host::host(), "test");
        crate::server::plain_runtime().block_on(test);
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_module_connects_writes_and_reads_through_the_host() {
        run(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let echo = tokio::task::spawn_local(async move {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0; 5];
                s.read_exact(&mut buf).await.unwrap();
                s.write_all(&buf).await.unwrap();
            });
            let mut conn = ModuleStream::connect(&addr, SECOND, Some(SECOND))
                .await
                .unwrap();
            conn.write_all(b"hello").await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0; 3];
            loop {
                match conn.read(&mut buf).await.unwrap() {
                    0 => break,
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
            assert_eq!(got, b"hello");
            echo.await.unwrap();
        });
    }

    #[test]
    fn a_read_that_waits_too_long_fails_and_the_connection_stays_usable() {
        run(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let silent = tokio::task::spawn_local(async move {
                let (mut s, _) = listener.accept().await.unwrap();
                rx.await.unwrap();
                s.write_all(b"late").await.unwrap();
            });
            let io = Duration::from_millis(100);
            let mut conn = ModuleStream::connect(&addr, SECOND, Some(io))
                .await
                .unwrap();
            let started = std::time::Instant::now();
            let mut buf = [0; 8];
            assert_eq!(conn.read(&mut buf).await, Err("timed out".to_owned()));
            assert!(started.elapsed() >= io && started.elapsed() < SECOND);
            tx.send(()).unwrap();
            assert_eq!(conn.read(&mut buf).await, Ok(4));
            silent.await.unwrap();
        });
    }

    #[test]
    fn connecting_fails_with_the_reason() {
        run(async {
            // A port nobody listens on: bound, then closed.
            let addr = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .to_string();
            let err = ModuleStream::connect(&addr, SECOND, None)
                .await
                .unwrap_err();
            assert!(
                err.starts_with(&format!("cannot connect to {addr}: ")),
                "{err}"
            );
            let err = ModuleStream::connect("no-port", SECOND, None)
                .await
                .unwrap_err();
            assert!(err.starts_with("cannot connect to no-port: "), "{err}");
        });
    }

    #[test]
    fn spawn_runs_tasks_only_on_network_threads() {
        run(async {
            let (tx, rx) = tokio::sync::oneshot::channel();
            assert!(
                !osprey_sdk::host::spawn(async {}),
                "not a network thread yet"
            );
            on_network_thread();
            assert!(osprey_sdk::host::spawn(async move {
                tx.send(7).unwrap();
            }));
            assert_eq!(rx.await, Ok(7));
        });
    }
}
