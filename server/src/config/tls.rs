//! The configuration of TLS (`tls`, and `cert` / `key` / `certificates` on a listener) and of
//! HTTP/2 (`http2`).

use serde::Deserialize;

use super::ListenConfig;

/// Certificates and TLS settings. The top-level `tls` section is the default of every secure
/// listener that names no certificate of its own (and of `-S` without `--cert`/`--key`).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain of the default certificate.
    pub cert: Option<String>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the default certificate.
    pub key: Option<String>,
    /// More certificates, chosen by the SNI name the client asks for.
    pub certificates: Vec<CertConfig>,
    /// Oldest protocol version accepted: `"1.2"` or `"1.3"`.
    pub min_version: String,
    /// Sessions kept in the server-side resumption cache (0: no cache).
    pub session_cache: usize,
    /// Issue stateless session tickets (RFC 5077 / TLS 1.3 tickets).
    pub session_tickets: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            cert: None,
            key: None,
            certificates: Vec::new(),
            min_version: "1.2".into(),
            session_cache: 10_240,
            session_tickets: true,
        }
    }
}

/// One certificate for a set of names (`"example.com"`, `"*.example.com"`).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct CertConfig {
    pub server_names: Vec<String>,
    pub cert: String,
    pub key: String,
}

impl TlsConfig {
    /// The settings of one secure listener: its own certificates when it names any, the
    /// top-level ones otherwise.
    pub fn for_listener(&self, listen: &ListenConfig) -> TlsConfig {
        let mut tls = self.clone();
        if listen.cert.is_some() || listen.key.is_some() || listen.certificates.is_some() {
            tls.cert = listen.cert.clone();
            tls.key = listen.key.clone();
            tls.certificates = listen.certificates.clone().unwrap_or_default();
        }
        tls
    }

    /// Whether any certificate is configured.
    pub fn has_certificate(&self) -> bool {
        self.cert.is_some() || !self.certificates.is_empty()
    }

    /// Shape checks that need no file access; the files are read when the server builds its
    /// TLS configuration (see `net::tls::build`).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        match (&self.cert, &self.key) {
            (Some(_), None) => return Err(("cert", "`cert` is given without `key`".into())),
            (None, Some(_)) => return Err(("key", "`key` is given without `cert`".into())),
            _ => {}
        }
        if self.min_version != "1.2" && self.min_version != "1.3" {
            return Err((
                "min_version",
                format!("`{}`: use \"1.2\" or \"1.3\"", self.min_version),
            ));
        }
        for (i, c) in self.certificates.iter().enumerate() {
            if c.server_names.is_empty() {
                return Err((
                    "server_names",
                    format!("certificates[{i}]: server_names is empty"),
                ));
            }
        }
        Ok(())
    }
}

/// HTTP/2 (over TLS by ALPN `h2`, and cleartext with prior knowledge).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct Http2Config {
    /// Offer `h2` in ALPN and accept the h2c preface on plain listeners.
    pub enabled: bool,
    /// Streams a client may have open at once on a connection.
    pub max_concurrent_streams: u32,
    /// Flow-control window of each stream for request bodies (bytes).
    pub initial_window_size: u32,
    /// Flow-control window of the whole connection (bytes).
    pub initial_connection_window_size: u32,
    /// Largest frame payload the server accepts (16384 ..= 16777215).
    pub max_frame_size: u32,
    /// Largest decoded request header list (bytes).
    pub max_header_list_size: u32,
    /// Response bytes buffered per stream before waiting for the client's window.
    pub max_send_buffer_size: usize,
    /// Control frames (PING, SETTINGS, WINDOW_UPDATE, ...) a client may send in a row without
    /// a request before the connection is closed (GOAWAY ENHANCE_YOUR_CALM); 0: no limit.
    pub max_control_frames: u32,
}

impl Default for Http2Config {
    fn default() -> Self {
        Http2Config {
            enabled: true,
            max_concurrent_streams: 128,
            initial_window_size: 256 * 1024,
            initial_connection_window_size: 1024 * 1024,
            max_frame_size: 16_384,
            max_header_list_size: 64 * 1024,
            max_send_buffer_size: 256 * 1024,
            max_control_frames: 10_000,
        }
    }
}

impl Http2Config {
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        const MAX_WINDOW: u32 = (1 << 31) - 1;
        if self.max_concurrent_streams == 0 {
            return Err(("max_concurrent_streams", "must be at least 1".into()));
        }
        if self.initial_window_size > MAX_WINDOW {
            return Err((
                "initial_window_size",
                format!("must be at most {MAX_WINDOW}"),
            ));
        }
        if !(65_535..=MAX_WINDOW).contains(&self.initial_connection_window_size) {
            return Err((
                "initial_connection_window_size",
                format!("must be between 65535 and {MAX_WINDOW}"),
            ));
        }
        if !(16_384..=16_777_215).contains(&self.max_frame_size) {
            return Err((
                "max_frame_size",
                "must be between 16384 and 16777215".into(),
            ));
        }
        if self.max_send_buffer_size == 0 {
            return Err(("max_send_buffer_size", "must be at least 1".into()));
        }
        Ok(())
    }
}

/// A listener's TLS keys: certificates only with `"secure": true`, and a secure listener needs
/// one (its own or the `tls` section's).
pub fn check_listener(tls: &TlsConfig, l: &ListenConfig) -> Result<(), (&'static str, String)> {
    let own = l.cert.is_some() || l.key.is_some() || l.certificates.is_some();
    if own && !l.secure {
        return Err((
            "cert",
            "certificates on a listener without `\"secure\": true`".into(),
        ));
    }
    if l.secure {
        let tls = tls.for_listener(l);
        tls.check()?;
        if !tls.has_certificate() {
            return Err((
                "secure",
                "a secure listener needs `cert` and `key` (here or in `tls`)".into(),
            ));
        }
    }
    Ok(())
}
