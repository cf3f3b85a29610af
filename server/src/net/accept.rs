//! What an accepted connection speaks: TLS or not, then HTTP/2 or HTTP/1.1.
//!
//! Each is a function returning the connection's whole future, built so that the values it
//! owns are stored once (an `async fn`'s arguments would be kept beside the state built from
//! them): an idle connection's task is mostly its [`Conn`].

use std::future::Future;
use std::sync::Arc;

use rustls::ServerConfig;
use tokio::net::TcpStream;

use super::tls_io::{self, Accepted};
use crate::conn::{wait, Conn, Served};
use crate::dispatch::Peer;
use crate::http2::{self, Rewind};
use crate::server::{Counted, Shared};

/// A plain connection: HTTP/1.1, or h2c when its first bytes are the HTTP/2 preface.
pub fn serve_plain(
    tcp: TcpStream,
    remote: String,
    shared: Arc<Shared>,
    counted: Counted,
) -> impl Future<Output = ()> {
    let h2c = shared.config.http2.enabled;
    let peer = Arc::new(Peer {
        remote,
        secure: false,
        http2: false,
    });
    let mut conn = Conn::new(tcp, peer, shared, h2c);
    async move {
        let _counted = counted;
        if let Served::Http2 = conn.serve().await {
            let (tcp, read, peer, shared) = conn.into_parts();
            let peer = Arc::new(Peer {
                remote: peer.remote.clone(),
                secure: false,
                http2: true,
            });
            let io = Rewind::new(read, tcp);
            // Boxed: an HTTP/1 connection's task must not carry an h2 state.
            Box::pin(http2::serve(io, peer, shared, wait::stop_signal())).await
        }
    }
}

/// A TLS connection: the handshake, then HTTP/2 (ALPN `h2`) or HTTP/1.1 over TLS. (A TLS
/// connection's state is large, so all of it lives in one allocation of its own.)
pub fn serve_tls(
    tcp: TcpStream,
    remote: String,
    config: Arc<ServerConfig>,
    shared: Arc<Shared>,
    counted: Counted,
) -> impl Future<Output = ()> {
    let serving = Box::pin(tls_connection(tcp, remote, config, shared));
    async move {
        let _counted = counted;
        serving.await
    }
}

async fn tls_connection(
    tcp: TcpStream,
    remote: String,
    config: Arc<ServerConfig>,
    shared: Arc<Shared>,
) {
    match tls_io::accept(tcp, config, shared.timeouts.header).await {
        Some(Accepted::Http2(stream)) => {
            let peer = Arc::new(Peer {
                remote,
                secure: true,
                http2: true,
            });
            http2::serve(stream, peer, shared, wait::stop_signal()).await
        }
        Some(Accepted::Http1(io)) => {
            let peer = Arc::new(Peer {
                remote,
                secure: true,
                http2: false,
            });
            Conn::new(io, peer, shared, false).serve().await;
        }
        None => {}
    }
}
