//! The upstream side of an upgraded connection (after a 101): the socket, and any bytes the
//! upstream sent right after its head.

use std::pin::Pin;
use std::task::Poll;

use osprey_sdk::abi_stable::std_types::{RResult, RSlice, RSliceMut, RString};
use osprey_sdk::{FfiContext, FfiPoll, Tunnel};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::conn::Conn;
use super::state::ActiveGuard;

pub struct UpstreamTunnel {
    pub stream: Conn,
    pub early: Vec<u8>,
    /// An upgraded connection counts as in flight for least_conn while it lasts.
    pub _guard: ActiveGuard,
}

fn convert<T>(p: Poll<std::io::Result<T>>) -> FfiPoll<RResult<T, RString>> {
    match p {
        Poll::Ready(Ok(v)) => FfiPoll::Ready(RResult::ROk(v)),
        Poll::Ready(Err(e)) => FfiPoll::Ready(RResult::RErr(e.to_string().into())),
        Poll::Pending => FfiPoll::Pending,
    }
}

impl Tunnel for UpstreamTunnel {
    fn poll_read(
        &mut self,
        cx: &mut FfiContext<'_>,
        mut buf: RSliceMut<'_, u8>,
    ) -> FfiPoll<RResult<usize, RString>> {
        let buf = buf.as_mut_slice();
        if !self.early.is_empty() {
            let n = buf.len().min(self.early.len());
            buf[..n].copy_from_slice(&self.early[..n]);
            self.early.drain(..n);
            return FfiPoll::Ready(RResult::ROk(n));
        }
        cx.with_context(|cx| {
            let mut rb = ReadBuf::new(buf);
            convert(
                Pin::new(&mut self.stream)
                    .poll_read(cx, &mut rb)
                    .map_ok(|()| rb.filled().len()),
            )
        })
    }

    fn poll_write(
        &mut self,
        cx: &mut FfiContext<'_>,
        data: RSlice<'_, u8>,
    ) -> FfiPoll<RResult<usize, RString>> {
        cx.with_context(|cx| convert(Pin::new(&mut self.stream).poll_write(cx, data.as_slice())))
    }

    fn poll_shutdown(&mut self, cx: &mut FfiContext<'_>) -> FfiPoll<RResult<(), RString>> {
        cx.with_context(|cx| convert(Pin::new(&mut self.stream).poll_shutdown(cx)))
    }
}
