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
pub fn bind(
    addr: SocketAddr,
    backlog: i32,
    deferred: bool,
) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    // Accepted sockets inherit it: no setsockopt per connection.
    socket.set_tcp_nodelay(true)?;
    if deferred {
        // A connection that stays silent is still accepted after about a second (when the
        // kernel gives up waiting), and then meets the header timeout.
        defer_accept(&socket, 1)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    Ok(socket.into())
}

/// TCP_DEFER_ACCEPT: `accept` returns a connection once its first bytes have arrived, so that
/// it is answered at once: no readiness registration, no wake-up for the handshake alone.
fn defer_accept(socket: &Socket, seconds: nix::libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket and an int option of the right size.
    let done = unsafe {
        nix::libc::setsockopt(
            socket.as_raw_fd(),
            nix::libc::IPPROTO_TCP,
            nix::libc::TCP_DEFER_ACCEPT,
            (&seconds as *const nix::libc::c_int).cast(),
            std::mem::size_of::<nix::libc::c_int>() as nix::libc::socklen_t,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_in_use_is_detected_despite_reuseport() {
        let ours = bind("127.0.0.1:0".parse().unwrap(), 16, true).unwrap();
        let addr = ours.local_addr().unwrap();
        assert_eq!(
            check_unused(addr).unwrap_err().kind(),
            std::io::ErrorKind::AddrInUse
        );
        drop(ours);
        assert!(check_unused(addr).is_ok());
    }

    fn defer_seconds(listener: &std::net::TcpListener) -> nix::libc::c_int {
        use std::os::fd::AsRawFd;
        let mut value: nix::libc::c_int = -1;
        let mut len = std::mem::size_of::<nix::libc::c_int>() as nix::libc::socklen_t;
        // SAFETY: a valid socket, an int and its size.
        let done = unsafe {
            nix::libc::getsockopt(
                listener.as_raw_fd(),
                nix::libc::IPPROTO_TCP,
                nix::libc::TCP_DEFER_ACCEPT,
                (&mut value as *mut nix::libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(done, 0);
        value
    }

    #[test]
    fn accepting_is_deferred_unless_turned_off() {
        let addr = "127.0.0.1:0".parse().unwrap();
        assert!(defer_seconds(&bind(addr, 16, true).unwrap()) > 0);
        assert_eq!(defer_seconds(&bind(addr, 16, false).unwrap()), 0);
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
