//! What an accepted connection speaks: TLS or not, then HTTP/2 or HTTP/1.1.

use std::sync::Arc;

use rustls::ServerConfig;
use tokio::net::TcpStream;

use super::tls_io::{self, Accepted};
use crate::conn::{wait, Served};
use crate::dispatch::Peer;
use crate::http2::{self, Rewind};
use crate::server::Shared;

/// Serve one accepted connection to its end. `tls`: the listener's TLS configuration.
pub async fn serve_connection(
    tcp: TcpStream,
    remote: String,
    tls: Option<Arc<ServerConfig>>,
    shared: Arc<Shared>,
) {
    // Every branch but plain HTTP/1.1 is boxed: an async fn's state is as large as its
    // largest branch, and an idle plain connection must not pay for a TLS or h2 state.
    match tls {
        Some(config) => {
            let peer = Arc::new(Peer {
                remote,
                secure: true,
                http2: false,
            });
            let serving = Box::pin(serve_tls(tcp, config, peer, shared));
            serving.await
        }
        None => {
            let h2c = shared.config.http2.enabled;
            let peer = Arc::new(Peer {
                remote,
                secure: false,
                http2: false,
            });
            // HTTP/1.1 unless the first bytes are the HTTP/2 preface (h2c, prior knowledge).
            let served = crate::conn::serve(tcp, peer.clone(), shared.clone(), h2c).await;
            if let Served::Http2(tcp, read) = served {
                let peer = Arc::new(Peer {
                    remote: peer.remote.clone(),
                    secure: false,
                    http2: true,
                });
                let io = Rewind::new(read, tcp);
                let serving = Box::pin(http2::serve(io, peer, shared, wait::stop_signal()));
                serving.await
            }
        }
    }
}

/// The TLS handshake, then HTTP/2 (ALPN `h2`) or HTTP/1.1 over TLS.
async fn serve_tls(
    tcp: TcpStream,
    config: Arc<ServerConfig>,
    peer: Arc<Peer>,
    shared: Arc<Shared>,
) {
    match tls_io::accept(tcp, config, shared.timeouts.header).await {
        Some(Accepted::Http2(stream)) => {
            let peer = Arc::new(Peer {
                remote: peer.remote.clone(),
                secure: true,
                http2: true,
            });
            http2::serve(stream, peer, shared, wait::stop_signal()).await
        }
        Some(Accepted::Http1(io)) => {
            crate::conn::serve(io, peer, shared, false).await;
        }
        None => {}
    }
}
