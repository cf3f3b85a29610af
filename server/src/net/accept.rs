//! What an accepted connection speaks: TLS or not, then HTTP/2 or HTTP/1.1.

use std::sync::Arc;

use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::tls_io::{self, Accepted};
use crate::dispatch::Peer;
use crate::http2::{self, Opening};
use crate::server::Shared;

/// Serve one accepted connection to its end. `tls`: the listener's TLS configuration.
pub async fn serve_connection(
    tcp: TcpStream,
    remote: String,
    tls: Option<Arc<ServerConfig>>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let peer = |secure, http2| {
        Arc::new(Peer {
            remote: remote.clone(),
            secure,
            http2,
        })
    };
    // Every branch but plain HTTP/1.1 is boxed: an async fn's state is as large as its
    // largest branch, and an idle plain connection must not pay for a TLS or h2 state.
    match tls {
        Some(config) => {
            let serving = Box::pin(serve_tls(tcp, config, peer(true, false), shared, stop));
            serving.await
        }
        None if shared.config.http2.enabled => {
            let detecting = Box::pin(http2::detect(&tcp, &shared, &mut stop));
            match detecting.await {
                Opening::Http2 => {
                    let serving = Box::pin(http2::serve(tcp, peer(false, true), shared, stop));
                    serving.await
                }
                Opening::Http1 => crate::conn::serve(tcp, peer(false, false), shared, stop).await,
                Opening::Gone => {}
            }
        }
        None => crate::conn::serve(tcp, peer(false, false), shared, stop).await,
    }
}

/// The TLS handshake, then HTTP/2 (ALPN `h2`) or HTTP/1.1 over TLS.
async fn serve_tls(
    tcp: TcpStream,
    config: Arc<ServerConfig>,
    peer: Arc<Peer>,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) {
    match tls_io::accept(tcp, config, shared.timeouts.header).await {
        Some(Accepted::Http2(stream)) => {
            let peer = Arc::new(Peer {
                remote: peer.remote.clone(),
                secure: true,
                http2: true,
            });
            http2::serve(stream, peer, shared, stop).await
        }
        Some(Accepted::Http1(io)) => crate::conn::serve(io, peer, shared, stop).await,
        None => {}
    }
}
