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
    match tls {
        Some(config) => match tls_io::accept(tcp, config, shared.timeouts.header).await {
            Some(Accepted::Http2(stream)) => {
                http2::serve(stream, peer(true, true), shared, stop).await
            }
            Some(Accepted::Http1(io)) => {
                crate::conn::serve(io, peer(true, false), shared, stop).await
            }
            None => {}
        },
        None if shared.config.http2.enabled => {
            match http2::detect(&tcp, &shared, &mut stop).await {
                Opening::Http2 => http2::serve(tcp, peer(false, true), shared, stop).await,
                Opening::Http1 => crate::conn::serve(tcp, peer(false, false), shared, stop).await,
                Opening::Gone => {}
            }
        }
        None => crate::conn::serve(tcp, peer(false, false), shared, stop).await,
    }
}
