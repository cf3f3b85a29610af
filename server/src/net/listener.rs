use std::net::{SocketAddr, ToSocketAddrs};

use socket2::{Domain, Protocol, Socket, Type};

/// `":8055"` (every IPv4 address), `"127.0.0.1:8055"`, `"[::1]:8055"`, `"localhost:8055"`.
pub fn parse_interface(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_owned()
    };
    if let Ok(addr) = full.parse::<SocketAddr>() {
        return Ok(addr);
    }
    full.to_socket_addrs()
        .map_err(|e| format!("bad interface `{text}`: {e}"))?
        .next()
        .ok_or_else(|| format!("bad interface `{text}`: no address"))
}

/// Fail with EADDRINUSE when another process already listens on `addr`. SO_REUSEPORT would
/// otherwise let a second server (same user) silently share the port and half the traffic.
pub fn check_unused(addr: SocketAddr) -> std::io::Result<()> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())
}

/// A non-blocking listening socket with SO_REUSEPORT (several threads bind the same address).
pub fn bind(addr: SocketAddr, backlog: i32) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    // Accepted sockets inherit it: no setsockopt per connection.
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_in_use_is_detected_despite_reuseport() {
        let ours = bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        let addr = ours.local_addr().unwrap();
        assert_eq!(
            check_unused(addr).unwrap_err().kind(),
            std::io::ErrorKind::AddrInUse
        );
        drop(ours);
        assert!(check_unused(addr).is_ok());
    }

    #[test]
    fn parses_nxweb_style_interfaces() {
        assert_eq!(
            parse_interface(":8055").unwrap(),
            "0.0.0.0:8055".parse().unwrap()
        );
        assert_eq!(
            parse_interface("[::1]:80").unwrap(),
            "[::1]:80".parse().unwrap()
        );
        assert_eq!(
            parse_interface("127.0.0.1:1").unwrap(),
            "127.0.0.1:1".parse().unwrap()
        );
        assert!(parse_interface("nonsense").is_err());
    }
}
