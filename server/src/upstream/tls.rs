//! TLS to upstream servers (`backends.<name>.tls`): a rustls client (ring provider) that
//! verifies the server against the system's roots or a configured CA, sends SNI, offers ALPN
//! `http/1.1`, and can present a client certificate.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use tokio::net::TcpStream;

use super::config::TlsConfig;
use super::conn::Conn;

/// A backend's TLS client, built (and its files read) when the configuration is checked.
#[derive(Clone)]
pub struct TlsClient {
    connector: tokio_rustls::TlsConnector,
    /// `server_name` from the configuration, for every server of the backend.
    name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsClient")
    }
}

/// Built from the same settings: the configurations compare equal (a reload keeps it).
impl PartialEq for TlsClient {
    fn eq(&self, _: &TlsClient) -> bool {
        true
    }
}

/// Where Linux distributions keep the system's CA bundle (as OpenSSL looks for it).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

impl TlsClient {
    /// Build it; the error names the key at fault.
    pub fn new(tls: &TlsConfig) -> Result<TlsClient, (&'static str, String)> {
        let (key, bundle) = match &tls.ca {
            Some(ca) => ("ca", ca.clone()),
            None => (
                "tls",
                std::env::var("SSL_CERT_FILE")
                    .ok()
                    .or_else(|| {
                        SYSTEM_BUNDLES
                            .iter()
                            .find(|p| std::path::Path::new(p).exists())
                            .map(|p| p.to_string())
                    })
                    .ok_or_else(|| ("tls", "no system CA bundle found: set tls.ca".to_owned()))?,
            ),
        };
        let mut roots = RootCertStore::empty();
        let certs = read_certs(&bundle).map_err(|m| (key, m))?;
        let (_, ignored) = roots.add_parsable_certificates(certs);
        if roots.is_empty() {
            return Err((
                key,
                format!("{bundle}: no usable CA certificate ({ignored} ignored)"),
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ("tls", e.to_string()))?
            .with_root_certificates(roots);
        let mut config = match (&tls.cert, &tls.key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert).map_err(|m| ("cert", m))?;
                let der = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| ("key", format!("key file {key}: {e}")))?;
                builder
                    .with_client_auth_cert(chain, der)
                    .map_err(|e| ("cert", format!("client certificate {cert}: {e}")))?
            }
            _ => return Err(("cert", "tls.cert and tls.key go together".into())),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = match &tls.server_name {
            None => None,
            Some(n) => Some(
                ServerName::try_from(n.clone())
                    .map_err(|_| ("server_name", format!("`{n}` is not a valid server name")))?,
            ),
        };
        Ok(TlsClient {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            name,
        })
    }

    /// The handshake with a server configured as `address` (`host:port`; the host is the
    /// name checked, unless `server_name` is set).
    pub async fn connect(&self, tcp: TcpStream, address: &str) -> std::io::Result<Conn> {
        let name = match &self.name {
            Some(n) => n.clone(),
            None => {
                let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                ServerName::try_from(host.to_owned()).map_err(|_| {
                    std::io::Error::other(format!("`{host}` is not a valid server name"))
                })?
            }
        };
        let tls = self.connector.connect(name, tcp).await?;
        Ok(Conn::Tls(Box::new(tls)))
    }
}

fn read_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("certificate file {path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "certificate file {path}: no PEM CERTIFICATE section"
        ));
    }
    Ok(certs)
}
