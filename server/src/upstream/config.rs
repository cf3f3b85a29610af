//! The `backends` section: NXWEB's `{"name": {"connect": "host:port"}}`, extended with several
//! weighted servers, a balancing method, health checks, pooling and timeouts.

use std::net::{SocketAddr, ToSocketAddrs};

use serde::Deserialize;

/// One backend as written in the configuration.
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// NXWEB's single server, `host:port` (the same as one entry in `servers`).
    pub connect: Option<String>,
    #[serde(default)]
    pub servers: Vec<ServerConfig>,
    #[serde(default)]
    pub balance: Balance,
    pub health_check: Option<HealthCheckConfig>,
    /// Idle keep-alive connections kept per server and network thread (0: close after each
    /// request).
    #[serde(default = "default_keepalive")]
    pub keepalive: usize,
    /// Seconds an idle pooled connection is kept.
    #[serde(default = "default_keepalive_timeout")]
    pub keepalive_timeout: f64,
    /// Seconds to establish a connection (then 504).
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: f64,
    /// Seconds between two reads from the upstream (then 504, or a cut-off body).
    #[serde(default = "default_io_timeout")]
    pub read_timeout: f64,
    /// Seconds between two writes to the upstream.
    #[serde(default = "default_io_timeout")]
    pub send_timeout: f64,
    /// Further servers to try after a failed attempt (only where retrying is safe).
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Consecutive failures (connect errors, timeouts, bad responses; 5xx with `fail_on_5xx`)
    /// that eject a server.
    #[serde(default = "default_max_fails")]
    pub max_fails: u32,
    /// Seconds an ejected server gets no traffic.
    #[serde(default = "default_fail_timeout")]
    pub fail_timeout: f64,
    /// A 5xx response counts as a failure for passive ejection (off by default, as in nginx:
    /// a server that answers is working).
    #[serde(default)]
    pub fail_on_5xx: bool,
    /// Seconds between lookups of server names (IP addresses are never looked up); a failed
    /// connect looks the name up at once too.
    #[serde(default = "default_resolve_interval")]
    pub resolve_interval: f64,
    /// Speak TLS to the servers.
    pub tls: Option<TlsConfig>,
}

/// `backends.<name>.tls`.
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the CAs to trust; default: the system's.
    pub ca: Option<String>,
    /// The name sent as SNI and checked against the certificate; default: each server's host.
    pub server_name: Option<String>,
    /// A client certificate chain (PEM) and its key, to present when asked.
    pub cert: Option<String>,
    pub key: Option<String>,
}

#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// `host:port`; resolved when the configuration is read, then every `resolve_interval`.
    pub address: String,
    #[serde(default = "default_weight")]
    pub weight: u32,
}

#[derive(Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Smooth weighted round robin (nginx's).
    #[default]
    RoundRobin,
    /// Fewest requests in flight relative to weight.
    LeastConn,
    /// Weighted rendezvous hashing of the client address: a client stays on its server, and
    /// only the clients of a server that leaves move.
    IpHash,
}

/// Active checks: `GET path` every `interval` seconds.
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckConfig {
    #[serde(default = "default_path")]
    pub path: String,
    #[serde(default = "default_interval")]
    pub interval: f64,
    /// Seconds for the whole check (connect and response head).
    #[serde(default = "default_check_timeout")]
    pub timeout: f64,
    /// Consecutive failed checks that mark a server down.
    #[serde(default = "default_threshold")]
    pub fails: u32,
    /// Consecutive good checks that bring it back.
    #[serde(default = "default_threshold")]
    pub passes: u32,
}

fn default_keepalive() -> usize {
    16
}
fn default_keepalive_timeout() -> f64 {
    60.0
}
fn default_connect_timeout() -> f64 {
    5.0
}
fn default_io_timeout() -> f64 {
    60.0
}
fn default_retries() -> u32 {
    2
}
fn default_max_fails() -> u32 {
    1
}
fn default_fail_timeout() -> f64 {
    10.0
}
fn default_resolve_interval() -> f64 {
    30.0
}
fn default_weight() -> u32 {
    1
}
fn default_path() -> String {
    "/".into()
}
fn default_interval() -> f64 {
    5.0
}
fn default_check_timeout() -> f64 {
    2.0
}
fn default_threshold() -> u32 {
    2
}

/// A checked backend: every server resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendSpec {
    pub name: String,
    /// Each entry's addresses (a name may have several), name (as configured) and weight.
    pub servers: Vec<(Vec<SocketAddr>, String, u32)>,
    pub config: BackendConfig,
    pub tls: Option<super::tls::TlsClient>,
}

/// Check one backend; the error names the offending key (relative to the backend).
pub fn check(name: &str, b: &BackendConfig) -> Result<BackendSpec, (&'static str, String)> {
    let mut list: Vec<ServerConfig> = b.servers.clone();
    if let Some(c) = &b.connect {
        list.insert(
            0,
            ServerConfig {
                address: c.clone(),
                weight: 1,
            },
        );
    }
    if list.is_empty() {
        return Err((
            "servers",
            format!("backend `{name}` has no servers (set `connect` or `servers`)"),
        ));
    }
    let mut servers = Vec::with_capacity(list.len());
    for s in &list {
        if s.weight == 0 || s.weight > 1000 {
            return Err((
                "weight",
                format!("backend `{name}`: weight of {} must be 1..=1000", s.address),
            ));
        }
        let addrs =
            resolve(&s.address).map_err(|m| ("address", format!("backend `{name}`: {m}")))?;
        servers.push((addrs, s.address.clone(), s.weight));
    }
    for (key, v) in [
        ("keepalive_timeout", b.keepalive_timeout),
        ("connect_timeout", b.connect_timeout),
        ("read_timeout", b.read_timeout),
        ("send_timeout", b.send_timeout),
        ("fail_timeout", b.fail_timeout),
        ("resolve_interval", b.resolve_interval),
    ] {
        if !positive(v) {
            return Err((
                key,
                format!("backend `{name}`: {key} must be a positive number of seconds"),
            ));
        }
    }
    if b.max_fails == 0 {
        return Err((
            "max_fails",
            format!("backend `{name}`: max_fails must be at least 1"),
        ));
    }
    if let Some(h) = &b.health_check {
        if !h.path.starts_with('/') || h.path.bytes().any(|c| c <= b' ' || c == 0x7f) {
            return Err((
                "path",
                format!("backend `{name}`: health_check.path must be an origin-form path"),
            ));
        }
        if !positive(h.interval) || !positive(h.timeout) {
            return Err((
                "interval",
                format!("backend `{name}`: health_check interval and timeout must be positive"),
            ));
        }
        if h.fails == 0 || h.passes == 0 {
            return Err((
                "fails",
                format!("backend `{name}`: health_check fails and passes must be at least 1"),
            ));
        }
    }
    let tls = b
        .tls
        .as_ref()
        .map(super::tls::TlsClient::new)
        .transpose()
        .map_err(|(key, m)| (key, format!("backend `{name}`: tls: {m}")))?;
    Ok(BackendSpec {
        name: name.to_owned(),
        servers,
        config: b.clone(),
        tls,
    })
}

fn positive(seconds: f64) -> bool {
    seconds > 0.0 && seconds.is_finite()
}

/// Every address `address` resolves to, in the resolver's order, without repeats.
fn resolve(address: &str) -> Result<Vec<SocketAddr>, String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("server address `{address}` must be host:port"))?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("server address `{address}` must be host:port"));
    }
    let found = address
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve `{address}`: {e}"))?;
    let addrs = distinct(found);
    if addrs.is_empty() {
        return Err(format!("`{address}` resolves to no address"));
    }
    Ok(addrs)
}

/// The addresses in their order, each once.
pub fn distinct(found: impl Iterator<Item = SocketAddr>) -> Vec<SocketAddr> {
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for a in found {
        if !addrs.contains(&a) {
            addrs.push(a);
        }
    }
    addrs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> BackendConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn nxweb_connect_form() {
        let spec = check("b", &parse(r#"{"connect": "127.0.0.1:8777"}"#)).unwrap();
        assert_eq!(spec.servers.len(), 1);
        assert_eq!(spec.servers[0].0[0].port(), 8777);
        assert_eq!(spec.config.balance, Balance::RoundRobin);
    }

    #[test]
    fn rejects_bad_servers() {
        assert_eq!(check("b", &parse("{}")).unwrap_err().0, "servers");
        let bad = parse(r#"{"servers": [{"address": "nope"}]}"#);
        assert_eq!(check("b", &bad).unwrap_err().0, "address");
        let zero = parse(r#"{"servers": [{"address": "127.0.0.1:1", "weight": 0}]}"#);
        assert_eq!(check("b", &zero).unwrap_err().0, "weight");
        let t = parse(r#"{"connect": "127.0.0.1:1", "read_timeout": 0}"#);
        assert_eq!(check("b", &t).unwrap_err().0, "read_timeout");
    }
}
