//! What an accepted connection speaks: TLS or not, then HTTP/2 or HTTP/1.1.
//!
//! Each is a function returning the connection's whole future, built so that the values it
//! owns are stored once (an `async fn`'s arguments would be kept beside the state built from
//! them): an idle connection's task is mostly its [`Conn`].

use std::future::Future;
use std::sync::Arc;

use rustls::ServerConfig;
use tokio::net::TcpStream;

use super::park;
use super::tcp::FreshTcp;
use super::tls_io::{self, Accepted};
use crate::conn::{wait, Conn, Served, Wait};
use crate::dispatch::Peer;
use crate::http2::{self, Rewind};
use crate::server::{Counted, Shared};

/// A plain connection (`tcp` non-blocking): HTTP/1.1, or h2c when its first bytes are the
/// HTTP/2 preface. What arrived with it is answered at once; `None` when that was all (the
/// connection is closed), else the future that serves the rest.
pub fn serve_plain(
    tcp: std::net::TcpStream,
    remote: String,
    shared: Arc<Shared>,
    counted: Counted,
) -> Option<impl Future<Output = ()>> {
    let peer = Arc::new(Peer {
        remote,
        secure: false,
        http2: false,
    });
    serve_fresh(Conn::new(FreshTcp(tcp), peer, shared), counted, None)
}

/// Serve a connection not registered with the event loop (just accepted, or back from
/// parking in the lot's spot `spot`): answer what has arrived at once, and return the future
/// that serves the rest, `None` when it is closed (or parked).
///
/// One that answered its request and now waits for the next parks at once: most
/// just-accepted clients (a browser's spare connection, a burst of them) then stay quiet, and
/// a task and an event-loop registration for their first two seconds were most of the memory
/// they left behind; one back from the lot stays there, as nginx keeps a connection in its
/// one epoll set (no `epoll_ctl`, no task: a client that asks every half second for a large
/// file, answered at once, went out of the lot and back each time). One that has to wait
/// (a body, the worker pool, an answer the socket did not take) leaves the lot for a task,
/// and parks again only when quiet (`conn::wait::QUIET_SWEEPS`).
pub(super) fn serve_fresh(
    mut fresh: Conn<FreshTcp>,
    counted: Counted,
    spot: Option<u32>,
) -> Option<impl Future<Output = ()>> {
    let wait = fresh.arrived();
    match (&wait, fresh.served()) {
        (Wait::Read, _) if fresh.rests() && park::open() => {
            park::park_fresh(fresh, counted, spot);
            return None;
        }
        (Wait::Done, Served::Closed) => {
            // Closing its socket takes it out of the lot's set.
            drop(fresh);
            if let Some(spot) = spot {
                park::vacate(spot);
            }
            return None;
        }
        _ => {}
    }
    if let Some(spot) = spot {
        park::leave(spot, &fresh.io().0);
    }
    // From here on it may wait: register it with the event loop.
    let mut conn = fresh.with_io(|f| TcpStream::from_std(f.0)).ok()?;
    Some(async move {
        match conn.drive(wait).await {
            Served::Closed => drop(counted),
            Served::Parked => park::park(conn, counted),
            Served::Http2 => {
                let _counted = counted;
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
    })
}

/// A TLS connection: the handshake, then HTTP/2 (ALPN `h2`) or HTTP/1.1 over TLS. (A TLS
/// connection's state is large, so all of it lives in one allocation of its own.)
pub fn serve_tls(
    tcp: std::net::TcpStream,
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
    tcp: std::net::TcpStream,
    remote: String,
    config: Arc<ServerConfig>,
    shared: Arc<Shared>,
) {
    let Ok(tcp) = TcpStream::from_std(tcp) else {
        return;
    };
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
            Conn::new(io, peer, shared).serve().await;
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn answer(client: &mut std::net::TcpStream) -> String {
        let mut buf = [0u8; 1024];
        let n = client.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// A connection whose request came with it is answered and parked at once: no task or
    /// event-loop registration is made for it (they were most of an idle connection's cost,
    /// freed only two seconds later). When it sends again, it is served from the lot, and
    /// stays there.
    #[test]
    fn a_connection_answered_on_arrival_parks_at_once() {
        let shared = Shared::for_tests(r#"{"workers": 1}"#);
        let runtime = crate::server::plain_runtime();
        runtime.block_on(async {
            park::start();
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            client
                .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                .unwrap();
            let (tcp, _) = listener.accept().unwrap();
            tcp.set_nonblocking(true).unwrap();
            let task = serve_plain(tcp, "127.0.0.1:1".into(), shared, Counted::for_test());
            assert!(task.is_none(), "answered on arrival: no task");
            assert_eq!(park::parked(), 1, "it waits in the lot");
            let first = answer(&mut client);
            assert!(first.starts_with("HTTP/1.1 "), "{first}");
            let again = tokio::task::spawn_blocking(move || {
                client
                    .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                    .unwrap();
                (answer(&mut client), client)
            });
            let (again, _client) = again.await.unwrap();
            assert!(again.starts_with("HTTP/1.1 "), "{again}");
            assert_eq!(park::parked(), 1, "served again and back in its spot");
            // Left in the lot on purpose: the thread's locals then drop it, which must not
            // abort (a network thread that ends without `park::stop`).
        });
    }

    /// An idle plain connection's task is this future in a tokio task cell (128-byte aligned,
    /// about 100 bytes of its own). Up to 152 bytes the cell is a 256-byte block, which the
    /// allocator serves without padding; past it, 512. (`osprey-bench --only idle` measures
    /// the resident memory per idle connection that follows from it.)
    #[test]
    fn an_idle_plain_connection_task_fits_a_256_byte_cell() {
        let shared = Shared::for_tests(r#"{"workers": 1}"#);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let _client = TcpStream::connect(addr).await.unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            let tcp = tcp.into_std().unwrap();
            let counted = crate::server::Counted::for_test();
            let task = serve_plain(tcp, "127.0.0.1:1".into(), shared, counted)
                .expect("nothing arrived: the connection waits");
            let size = std::mem::size_of_val(&task);
            // Tokio's TcpStream is 24 bytes in release builds, 32 in debug ones.
            let limit = 152 + std::mem::size_of::<TcpStream>() - 24;
            assert!(size <= limit, "the connection future grew to {size} bytes");
        });
    }
}
