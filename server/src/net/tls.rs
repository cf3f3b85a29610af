//! TLS configuration (rustls with the ring provider): certificates read from PEM files, one
//! rustls `ServerConfig` per secure listener, the certificate chosen by SNI, session
//! resumption by cache and tickets, ALPN `h2` / `http/1.1`.
//!
//! Reload: [`build`] reads every certificate file again and returns fresh configurations. It
//! is called by `Shared::new`, so a reload that builds a new `Shared` from the re-read
//! configuration picks up renewed certificates for the connections it accepts; connections
//! already open keep the configuration they started with.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::{
    ClientHello, NoServerSessionStorage, ResolvesServerCert, ServerSessionMemoryCache,
};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{Config, TlsConfig};

/// The TLS configuration of each listener of a configuration, by index in `Config::listen`
/// (`None` for plain listeners).
#[derive(Default)]
pub struct TlsSet {
    listeners: Vec<Option<Arc<ServerConfig>>>,
}

impl TlsSet {
    /// The configuration of listener `index` of `Config::listen`, if it is secure.
    pub fn get(&self, index: usize) -> Option<Arc<ServerConfig>> {
        self.listeners.get(index).cloned().flatten()
    }
}

/// Build the TLS configuration of every secure listener, reading certificates and keys from
/// their files. Errors name the listener and the file. Cheap enough to call on every reload.
pub fn build(config: &Config) -> Result<TlsSet, String> {
    let mut listeners = Vec::with_capacity(config.listen.len());
    for l in &config.listen {
        if !l.secure {
            listeners.push(None);
            continue;
        }
        let tls = config.tls.for_listener(l);
        let server = server_config(&tls, config.http2.enabled)
            .map_err(|e| format!("{}: listener {}: {e}", config.file, l.interface))?;
        listeners.push(Some(server));
    }
    Ok(TlsSet { listeners })
}

/// A rustls server configuration: TLS 1.3 and 1.2 (or 1.3 only), the provider's safe cipher
/// suites, no client authentication, no early data.
pub fn server_config(tls: &TlsConfig, http2: bool) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver = SniResolver::load(&provider, tls)?;
    let versions: &[&rustls::SupportedProtocolVersion] = if tls.min_version == "1.3" {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let mut server = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS settings: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    server.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    server.session_storage = if tls.session_cache > 0 {
        ServerSessionMemoryCache::new(tls.session_cache)
    } else {
        Arc::new(NoServerSessionStorage {})
    };
    if tls.session_tickets {
        server.ticketer =
            rustls::crypto::ring::Ticketer::new().map_err(|e| format!("session tickets: {e}"))?;
    }
    Ok(Arc::new(server))
}

/// Chooses the certificate by the SNI name: exact names first, then `*.suffix` wildcards
/// (one label), else the default (`cert`/`key`, or the first of `certificates`).
#[derive(Debug)]
struct SniResolver {
    exact: HashMap<String, Arc<CertifiedKey>>,
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
}

impl SniResolver {
    fn load(provider: &CryptoProvider, tls: &TlsConfig) -> Result<SniResolver, String> {
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        let mut default = match (&tls.cert, &tls.key) {
            (Some(cert), Some(key)) => Some(load_certified_key(provider, cert, key)?),
            _ => None,
        };
        for c in &tls.certificates {
            let key = load_certified_key(provider, &c.cert, &c.key)?;
            for name in &c.server_names {
                let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
                match name.strip_prefix("*.") {
                    Some(suffix) => wildcard.insert(suffix.to_owned(), key.clone()),
                    None => exact.insert(name, key.clone()),
                };
            }
            default.get_or_insert(key);
        }
        let default =
            default.ok_or("no certificate configured (`cert` and `key`, or `certificates`)")?;
        Ok(SniResolver {
            exact,
            wildcard,
            default,
        })
    }

    fn choose(&self, name: Option<&str>) -> Arc<CertifiedKey> {
        let Some(name) = name else {
            return self.default.clone();
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(key) = self.exact.get(&name) {
            return key.clone();
        }
        if let Some((_, suffix)) = name.split_once('.') {
            if let Some(key) = self.wildcard.get(suffix) {
                return key.clone();
            }
        }
        self.default.clone()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.choose(hello.server_name()))
    }
}

/// Read a PEM certificate chain and its private key, and check that they belong together.
fn load_certified_key(
    provider: &CryptoProvider,
    cert: &str,
    key: &str,
) -> Result<Arc<CertifiedKey>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("certificate file {cert}: {}", pem_error(e)))?;
    if chain.is_empty() {
        return Err(format!(
            "certificate file {cert}: no PEM CERTIFICATE section found"
        ));
    }
    let der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("key file {key}: {}", pem_error(e)))?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| format!("key file {key}: unusable private key: {e}"))?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(e) => {
            return Err(format!(
                "certificate {cert} and key {key} do not match: {e}"
            ))
        }
    }
    Ok(Arc::new(certified))
}

fn pem_error(e: rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error;
    match e {
        Error::Io(e) => e.to_string(),
        Error::NoItemsFound => "no PEM section of the expected kind found".into(),
        other => format!("not valid PEM: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tag: u8) -> Arc<CertifiedKey> {
        struct Dummy(u8);
        impl std::fmt::Debug for Dummy {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "Dummy({})", self.0)
            }
        }
        impl rustls::sign::SigningKey for Dummy {
            fn choose_scheme(
                &self,
                _: &[rustls::SignatureScheme],
            ) -> Option<Box<dyn rustls::sign::Signer>> {
                None
            }
            fn algorithm(&self) -> rustls::SignatureAlgorithm {
                rustls::SignatureAlgorithm::ED25519
            }
        }
        Arc::new(CertifiedKey::new(
            vec![CertificateDer::from(vec![tag])],
            Arc::new(Dummy(tag)),
        ))
    }

    #[test]
    fn sni_prefers_exact_then_wildcard_then_default() {
        let r = SniResolver {
            exact: [("a.example".to_owned(), key(1))].into(),
            wildcard: [("example".to_owned(), key(2))].into(),
            default: key(3),
        };
        let tag = |name| r.choose(name).cert[0].as_ref()[0];
        assert_eq!(tag(Some("a.example")), 1);
        assert_eq!(tag(Some("A.Example.")), 1);
        assert_eq!(tag(Some("b.example")), 2);
        assert_eq!(tag(Some("x.b.example")), 3);
        assert_eq!(tag(Some("other.org")), 3);
        assert_eq!(tag(None), 3);
    }
}
