//! HTTP/2 (the `h2` crate): over TLS when ALPN chose `h2`, and cleartext with prior knowledge
//! (h2c, detected by the connection preface). Each stream runs as its own local task and goes
//! through the same `dispatch` as HTTP/1.1 (see `stream`).

mod flood;
mod rewind;
mod stream;

pub use rewind::Rewind;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::dispatch::Peer;
use crate::server::Shared;

/// Streams in flight on a connection, and a wake-up when one ends.
#[derive(Default)]
struct Streams {
    active: Cell<usize>,
    last_done: Cell<Option<Instant>>,
    ended: Notify,
}

/// Held by a stream task while it runs.
struct StreamGuard(Rc<Streams>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.active.set(self.0.active.get() - 1);
        self.0.last_done.set(Some(Instant::now()));
        self.0.ended.notify_one();
    }
}

/// Serve an HTTP/2 connection until the client or the server ends it.
pub async fn serve<T>(io: T, peer: Arc<Peer>, shared: Arc<Shared>, mut stop: watch::Receiver<bool>)
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let cfg = &shared.config.http2;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(cfg.max_concurrent_streams)
        .initial_window_size(cfg.initial_window_size)
        .initial_connection_window_size(cfg.initial_connection_window_size)
        .max_frame_size(cfg.max_frame_size)
        .max_header_list_size(cfg.max_header_list_size)
        .max_send_buffer_size(cfg.max_send_buffer_size);
    let flood = flood::Flood::new(cfg.max_control_frames);
    let io = flood::Counted::new(io, flood.clone());
    let handshake = builder.handshake::<_, Bytes>(io);
    let mut conn = match tokio::time::timeout(shared.timeouts.header, handshake).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => {
            tracing::debug!(peer = %peer.remote, "HTTP/2 handshake failed: {e}");
            return;
        }
        Err(_) => return,
    };
    let streams = Rc::new(Streams::default());
    let max_requests = shared.config.limits.max_requests_per_connection;
    let mut served = 0u64;
    let mut closing = false;
    let mut last_start = Instant::now();
    loop {
        let idle_since = streams
            .last_done
            .get()
            .map_or(last_start, |d| d.max(last_start));
        let idle_deadline = idle_since + shared.timeouts.keepalive;
        let idle = streams.active.get() == 0;
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((req, respond))) => {
                    served += 1;
                    last_start = Instant::now();
                    streams.active.set(streams.active.get() + 1);
                    let guard = StreamGuard(streams.clone());
                    let (peer, shared) = (peer.clone(), shared.clone());
                    tokio::task::spawn_local(async move {
                        stream::handle(req, respond, &peer, &shared).await;
                        drop(guard);
                    });
                    if served >= max_requests && !closing {
                        conn.graceful_shutdown();
                        closing = true;
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(peer = %peer.remote, "HTTP/2 connection ended: {e}");
                    break;
                }
                None => break,
            },
            _ = streams.ended.notified() => {}
            _ = flood.tripped() => {
                tracing::info!(peer = %peer.remote, "HTTP/2 control-frame flood: closing");
                conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                closing = true;
            }
            _ = stop.changed(), if !closing => {
                conn.graceful_shutdown();
                closing = true;
            }
            _ = tokio::time::sleep_until(idle_deadline), if idle && !closing => {
                conn.graceful_shutdown();
                closing = true;
            }
        }
    }
    // Stream tasks still running fail fast once the connection is gone.
    drop(conn);
    while streams.active.get() > 0 {
        streams.ended.notified().await;
    }
}
