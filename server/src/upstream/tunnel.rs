//! The upstream side of an upgraded connection (after a 101): the socket, and any bytes the
//! upstream sent right after its head.

use std::pin::Pin;

use osprey_sdk::abi_stable::std_types::{RResult, RSlice, RSliceMut, RString};
use osprey_sdk::{FfiContext, FfiPoll, Tunnel};
use tokio::io::AsyncWrite;

use super::conn::Conn;
use super::state::ActiveGuard;
use crate::modules::tcp::{ffi_poll, poll_read_into};

pub struct UpstreamTunnel {
    pub stream: Conn,
    pub early: Vec<u8>,
    /// An upgraded connection counts as in flight for least_conn while it lasts.
    pub _guard: ActiveGuard,
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
        cx.with_context(|cx| ffi_poll(poll_read_into(Pin::new(&mut self.stream), cx, buf)))
    }

    fn poll_write(
        &mut self,
        cx: &mut FfiContext<'_>,
        data: RSlice<'_, u8>,
    ) -> FfiPoll<RResult<usize, RString>> {
        cx.with_context(|cx| ffi_poll(Pin::new(&mut self.stream).poll_write(cx, data.as_slice())))
    }

    fn poll_shutdown(&mut self, cx: &mut FfiContext<'_>) -> FfiPoll<RResult<(), RString>> {
        cx.with_context(|cx| ffi_poll(Pin::new(&mut self.stream).poll_shutdown(cx)))
    }
}
