//! TCP connections through the host: a module's own copy of tokio has no reactor, so a module
//! that talks to another server (a cache store such as Redis, say) asks the host to connect,
//! and reads and writes with futures polled on the network thread that connected. The
//! connection is a [`Tunnel`](crate::Tunnel) object, the byte stream both ways that upgraded
//! connections use. Keep a connection on the network thread that made it (a per-thread pool):
//! its readiness comes from that thread's reactor.

use std::time::Duration;

use abi_stable::std_types::{RResult, RSlice, RSliceMut, RString};
use async_ffi::{ContextExt, FfiPoll, LocalFfiFuture};

use crate::tunnel::TunnelBox;

/// The answer of the host's `tcp_connect`: the connection, or why there is none.
pub type ConnectFuture = LocalFfiFuture<RResult<TunnelBox, RString>>;

/// A TCP connection made by the host (see the module documentation).
pub struct TcpStream(TunnelBox);

fn millis(d: Duration) -> u64 {
    d.as_millis().clamp(1, u64::MAX as u128) as u64
}

/// Turn one poll of the connection into a `Poll` (a panic inside the host is an error).
fn ready<T>(p: FfiPoll<RResult<T, RString>>) -> std::task::Poll<Result<T, String>> {
    match p {
        FfiPoll::Ready(r) => std::task::Poll::Ready(r.into_result().map_err(RString::into_string)),
        FfiPoll::Pending => std::task::Poll::Pending,
        FfiPoll::Panicked => std::task::Poll::Ready(Err("the connection panicked".into())),
    }
}

impl TcpStream {
    /// Connect to `addr` (`host:port`, `[v6]:port`; a name is resolved by the host) within
    /// `connect_timeout`. Each later read or write that waits longer than `io_timeout`
    /// (`None`: no limit) fails with `timed out`; the connection stays usable after that.
    /// Await it only on the network thread that called this.
    pub async fn connect(
        addr: &str,
        connect_timeout: Duration,
        io_timeout: Option<Duration>,
    ) -> Result<TcpStream, String> {
        let io = io_timeout.map_or(0, millis);
        crate::host::tcp_connect(addr, millis(connect_timeout), io)
            .await
            .into_result()
            .map(TcpStream)
            .map_err(RString::into_string)
    }

    /// Read into `buf`: how many bytes came, `0` at the end of the stream.
    pub async fn read(&mut self, buf: &mut [u8]) -> Result<usize, String> {
        std::future::poll_fn(|cx| {
            cx.with_ffi_context(|fcx| ready(self.0.poll_read(fcx, RSliceMut::from(&mut *buf))))
        })
        .await
    }

    /// Write all of `data`.
    pub async fn write_all(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            let n = std::future::poll_fn(|cx| {
                cx.with_ffi_context(|fcx| ready(self.0.poll_write(fcx, RSlice::from(data))))
            })
            .await?;
            if n == 0 {
                return Err("the connection is closed".into());
            }
            data = &data[n..];
        }
        Ok(())
    }

    /// Close the sending side (the peer reads the end of the stream).
    pub async fn shutdown(&mut self) -> Result<(), String> {
        std::future::poll_fn(|cx| cx.with_ffi_context(|fcx| ready(self.0.poll_shutdown(fcx)))).await
    }
}

impl std::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TcpStream")
    }
}
