//! Helpers of the TLS and HTTP/2 tests: certificates made with rcgen, a server with a `-S`
//! listener, a small rustls client, and openssl s_client.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{free_port, Response, Server, TempDir};

/// A self-signed certificate for some names, written as PEM files.
pub struct Cert {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub pem: String,
    pub der: Vec<u8>,
}

impl Cert {
    pub fn new(dir: &TempDir, tag: &str, names: &[&str]) -> Cert {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let made = rcgen::generate_simple_self_signed(names).unwrap();
        let pem = made.cert.pem();
        Cert {
            cert: dir.write(&format!("{tag}.crt"), &pem),
            key: dir.write(&format!("{tag}.key"), made.signing_key.serialize_pem()),
            der: made.cert.der().to_vec(),
            pem,
        }
    }

    pub fn cert_str(&self) -> &str {
        self.cert.to_str().unwrap()
    }

    pub fn key_str(&self) -> &str {
        self.key.to_str().unwrap()
    }
}

/// A server with a plain listener (`srv.port`) and a TLS listener (returned port) using `cert`.
pub fn start_tls(config: &str, cert: &Cert) -> (Server, u16) {
    let tls_port = free_port();
    let interface = format!("127.0.0.1:{tls_port}");
    let srv = Server::start_with(
        config,
        &[
            "-S",
            &interface,
            "--cert",
            cert.cert_str(),
            "--key",
            cert.key_str(),
        ],
    );
    (srv, tls_port)
}

/// A TLS client connection that trusts `der` (for `name`), offering `alpn`.
pub fn client(
    port: u16,
    name: &str,
    der: &[u8],
    alpn: &[&[u8]],
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(der.to_vec()))
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let server_name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), server_name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// Read from a TLS stream until it closes (close_notify or EOF) or times out.
pub fn read_all<S: Read>(s: &mut S) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    out
}

/// `GET path` for host `name` over HTTP/1.1 on TLS (the server's certificate verified against
/// `der` for `name`), the connection closing after: the response.
pub fn tls_get(port: u16, name: &str, der: &[u8], path: &str) -> Response {
    let mut s = client(port, name, der, &[b"http/1.1"]);
    let request = format!("GET {path} HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).unwrap();
    s.flush().unwrap();
    Response::parse(&read_all(&mut s))
}

/// Run `openssl s_client` against the port with extra arguments; returns its output. The
/// input stays open for a moment so that TLS 1.3 session tickets arrive before it quits.
pub fn s_client(port: u16, args: &[&str]) -> String {
    let mut child = Command::new("openssl")
        .arg("s_client")
        .arg("-connect")
        .arg(format!("127.0.0.1:{port}"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl is installed");
    let mut stdin = child.stdin.take().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let _ = stdin.write_all(b"Q\n");
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The first certificate in PEM text, without whitespace (to compare certificates).
pub fn first_pem(text: &str) -> String {
    let start = text
        .find("-----BEGIN CERTIFICATE-----")
        .expect("a certificate in the output");
    let end = start + text[start..].find("-----END CERTIFICATE-----").unwrap();
    text[start..end].split_whitespace().collect()
}
