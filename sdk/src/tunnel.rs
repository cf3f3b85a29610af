//! A byte tunnel: what a `101 Switching Protocols` response carries. After writing the 101 the
//! core stops speaking HTTP on the client connection and copies bytes both ways between the
//! client and the tunnel until either side closes (WebSocket and other upgrades).

use abi_stable::{
    sabi_trait,
    std_types::{RBox, RResult, RSlice, RSliceMut, RString},
};
use async_ffi::{FfiContext, FfiPoll};

/// A byte stream both ways, after a `101 Switching Protocols`.
#[sabi_trait]
pub trait Tunnel: Send {
    /// Read into `buf`; `ROk(0)` is the end of the stream.
    fn poll_read(
        &mut self,
        cx: &mut FfiContext<'_>,
        buf: RSliceMut<'_, u8>,
    ) -> FfiPoll<RResult<usize, RString>>;

    /// Write some of `data`; returns how much was taken.
    fn poll_write(
        &mut self,
        cx: &mut FfiContext<'_>,
        data: RSlice<'_, u8>,
    ) -> FfiPoll<RResult<usize, RString>>;

    /// No more data will be written.
    #[sabi(last_prefix_field)]
    fn poll_shutdown(&mut self, cx: &mut FfiContext<'_>) -> FfiPoll<RResult<(), RString>>;
}

/// A boxed [`Tunnel`] as a response carries it (`Body::Upgrade`).
pub type TunnelBox = Tunnel_TO<'static, RBox<()>>;
