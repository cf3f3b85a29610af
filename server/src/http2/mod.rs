//! HTTP/2 (the `h2` crate): over TLS when ALPN chose `h2`, and cleartext with prior knowledge
//! (h2c, detected by the connection preface). Each stream goes through the same `dispatch` as
//! HTTP/1.1 (see `stream`), inside the connection's task.

mod batched;
mod fields;
mod flood;
#[allow(dead_code)]
mod frame;
// Used by the connection of the next step.
#[allow(dead_code)]
mod hpack;
mod rewind;
mod stream;

pub use rewind::Rewind;

use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::dispatch::Peer;
use crate::server::Shared;

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
    let (io, flusher) = batched::batched(io);
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
    // The connection's streams run inside its own task rather than a task each: every response
    // that is ready is queued before the connection is polled again, and h2 writes what is
    // queued in one go, so the frames of many streams leave in one write.
    let mut running = FuturesUnordered::new();
    let max_requests = shared.config.limits.max_requests_per_connection;
    let mut served = 0u64;
    let mut closing = false;
    let mut last_start = Instant::now();
    let mut last_done: Option<Instant> = None;
    'serve: loop {
        let idle_since = last_done.map_or(last_start, |d| d.max(last_start));
        let idle_deadline = idle_since + shared.timeouts.keepalive;
        let idle = running.is_empty();
        tokio::select! {
            biased;
            // What h2 wrote during the last turn leaves in one write.
            drained = flusher.written() => {
                if let Err(e) = drained {
                    tracing::debug!(peer = %peer.remote, "HTTP/2 connection ended: {e}");
                    break 'serve;
                }
            }
            Some(()) = running.next(), if !idle => {
                // Every other stream that is done too, before the connection writes.
                while let Some(Some(())) = running.next().now_or_never() {}
                last_done = Some(Instant::now());
            }
            first = conn.accept() => {
                let mut next = first;
                loop {
                    match next {
                        Some(Ok((req, respond))) => {
                            served += 1;
                            last_start = Instant::now();
                            // Boxed straight from the call: an async block around it
                            // would move the stream's future once more.
                            let stream = stream::handle(req, respond, peer.clone(), shared.clone());
                            running.push(Box::pin(stream));
                            if served >= max_requests && !closing {
                                conn.graceful_shutdown();
                                closing = true;
                            }
                        }
                        Some(Err(e)) => {
                            tracing::debug!(peer = %peer.remote, "HTTP/2 connection ended: {e}");
                            break 'serve;
                        }
                        None => break 'serve,
                    }
                    // Every request already received is taken before any is answered: their
                    // answers then leave together.
                    match conn.accept().now_or_never() {
                        Some(more) => next = more,
                        None => break,
                    }
                }
            }
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
    // h2's last frames (a GOAWAY), then the streams still running fail fast once the
    // connection is gone.
    let _ = tokio::time::timeout(shared.timeouts.write, flusher.drain()).await;
    drop(conn);
    while running.next().await.is_some() {}
}
