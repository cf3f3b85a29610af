//! After a `101 Switching Protocols`: copy bytes both ways between the client connection and
//! the response's tunnel until either side closes, fails, or both stay idle for `idle`.

use std::io;
use std::task::Poll;
use std::time::Duration;

use async_ffi::ContextExt;
use osprey_sdk::abi_stable::std_types::{RResult, RSlice, RSliceMut};
use osprey_sdk::{FfiPoll, TunnelBox};

use super::io::Io;

const BUF: usize = 16 * 1024;

fn ready<T>(
    p: FfiPoll<RResult<T, osprey_sdk::abi_stable::std_types::RString>>,
) -> Poll<io::Result<T>> {
    match p {
        FfiPoll::Ready(RResult::ROk(v)) => Poll::Ready(Ok(v)),
        FfiPoll::Ready(RResult::RErr(e)) => Poll::Ready(Err(io::Error::other(e.into_string()))),
        FfiPoll::Pending => Poll::Pending,
        FfiPoll::Panicked => Poll::Ready(Err(io::Error::other("tunnel panicked"))),
    }
}

async fn tunnel_read(t: &mut TunnelBox, buf: &mut [u8]) -> io::Result<usize> {
    std::future::poll_fn(|cx| {
        ready(cx.with_ffi_context(|fcx| t.poll_read(fcx, RSliceMut::from_mut_slice(buf))))
    })
    .await
}

async fn tunnel_write_all(t: &mut TunnelBox, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let n = std::future::poll_fn(|cx| {
            ready(cx.with_ffi_context(|fcx| t.poll_write(fcx, RSlice::from_slice(data))))
        })
        .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        data = &data[n..];
    }
    Ok(())
}

async fn tunnel_shutdown(t: &mut TunnelBox) {
    let _ = std::future::poll_fn(|cx| ready(cx.with_ffi_context(|fcx| t.poll_shutdown(fcx)))).await;
}

enum Event {
    Client(io::Result<()>),
    Upstream(io::Result<usize>),
}

pub async fn splice<I: Io>(
    io: &mut I,
    pending: &[u8],
    mut tunnel: TunnelBox,
    idle: Duration,
) -> io::Result<()> {
    tunnel_write_all(&mut tunnel, pending).await?;
    let mut down = vec![0u8; BUF];
    let mut up: Vec<u8> = Vec::with_capacity(BUF);
    loop {
        let event = tokio::time::timeout(idle, async {
            tokio::select! {
                r = io.readable() => Event::Client(r),
                r = tunnel_read(&mut tunnel, &mut down) => Event::Upstream(r),
            }
        })
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "tunnel idle"))?;
        match event {
            Event::Client(r) => {
                r?;
                up.clear();
                match io.try_read(&mut up) {
                    Ok(0) => {
                        tunnel_shutdown(&mut tunnel).await;
                        return Ok(());
                    }
                    Ok(_) => tokio::time::timeout(idle, tunnel_write_all(&mut tunnel, &up))
                        .await
                        .map_err(|_| {
                            io::Error::new(io::ErrorKind::TimedOut, "tunnel write timed out")
                        })??,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            Event::Upstream(r) => match r? {
                0 => return Ok(()),
                n => io.write_all(&[&down[..n]], idle).await?,
            },
        }
    }
}
