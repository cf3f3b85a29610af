//! TLS listeners of the real binary: HTTPS with curl and a rustls client, ALPN, SNI choice,
//! session resumption, plain HTTP on a TLS port, files over TLS, and start-up errors.

mod common;
mod tlskit;

use std::io::Write;
use std::process::Command;

use common::{check_config, osprey_bin, Response, TempDir};
use tlskit::{client, first_pem, s_client, start_tls, tls_get, Cert};

const CONFIG: &str = r#"{
  "load": [{"so": "testkit"}, {"so": "benchmark"}],
  "routing": [
    {"prefix": "/echo", "handler": "echo"},
    {"prefix": "/secure-only", "handler": "text", "text": "secret", "secure_only": true},
    {"prefix": "/benchmark-inprocess", "handler": "benchmark-inprocess"},
  ]
}"#;

/// A TLS server with `config` and a new certificate for `localhost`, made in a new directory
/// `name`: the directory, the certificate, the server and its TLS port.
fn localhost_tls(name: &str, config: &str) -> (TempDir, Cert, common::Server, u16) {
    let dir = TempDir::new(name);
    let cert = Cert::new(&dir, "localhost", &["localhost"]);
    let (srv, port) = start_tls(config, &cert);
    (dir, cert, srv, port)
}

fn curl(args: &[&str]) -> (bool, String) {
    common::curl(args)
}

#[test]
fn https_with_curl_over_http11_and_h2() {
    let (_dir, cert, _srv, port) = localhost_tls("tls", CONFIG);
    let url = format!("https://localhost:{port}/echo?a=1");
    let resolve = format!("localhost:{port}:127.0.0.1");
    // Verified against the generated certificate, not just -k.
    let verified = |version| {
        let cacert = cert.cert_str();
        curl(&[
            "--resolve",
            &resolve,
            "--cacert",
            cacert,
            version,
            "-i",
            &url,
        ])
    };
    let (ok, out) = verified("--http1.1");
    assert!(ok, "{out}");
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.contains("x-secure: 1") || out.contains("X-Secure: 1"),
        "{out}"
    );
    assert!(out.contains("query.a=1"), "{out}");
    let (ok, out) = verified("--http2");
    assert!(ok, "{out}");
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    assert!(
        out.contains("x-http2: 1") && out.contains("x-secure: 1"),
        "{out}"
    );
    let (ok, out) = curl(&["-k", &format!("https://127.0.0.1:{port}/secure-only")]);
    assert!(ok && out == "secret", "{out}");
}

#[test]
fn secure_only_routes_stay_off_plain_listeners() {
    let (_dir, _cert, srv, _port) = localhost_tls("tls", CONFIG);
    assert_eq!(srv.get("/secure-only").status, 404);
}

#[test]
fn alpn_offers_h2_then_http11() {
    let (_dir, cert, _srv, port) = localhost_tls("tls", CONFIG);
    let out = s_client(port, &["-alpn", "h2,http/1.1"]);
    assert!(out.contains("ALPN protocol: h2"), "{out}");
    let out = s_client(port, &["-alpn", "http/1.1"]);
    assert!(out.contains("ALPN protocol: http/1.1"), "{out}");

    let no_h2 = CONFIG.replacen('{', r#"{"http2": {"enabled": false},"#, 1);
    let (_srv, port) = start_tls(&no_h2, &cert);
    let out = s_client(port, &["-alpn", "h2,http/1.1"]);
    assert!(out.contains("ALPN protocol: http/1.1"), "{out}");
}

#[test]
fn sni_chooses_the_certificate() {
    let dir = TempDir::new("sni");
    let default = Cert::new(&dir, "default", &["default.test"]);
    let a = Cert::new(&dir, "a", &["a.test"]);
    let wild = Cert::new(&dir, "wild", &["*.b.test"]);
    let config = format!(
        r#"{{
  "tls": {{"cert": "{}", "key": "{}",
    "certificates": [
      {{"server_names": ["a.test"], "cert": "{}", "key": "{}"}},
      {{"server_names": ["*.b.test"], "cert": "{}", "key": "{}"}}
    ]}},
  "load": [{{"so": "testkit"}}],
  "routing": [{{"prefix": "/echo", "handler": "echo"}}]
}}"#,
        default.cert_str(),
        default.key_str(),
        a.cert_str(),
        a.key_str(),
        wild.cert_str(),
        wild.key_str()
    );
    let port = common::free_port();
    let srv = common::Server::start_with(&config, &["-S", &format!("127.0.0.1:{port}")]);
    let served = |name: &str| first_pem(&s_client(port, &["-servername", name]));
    let pem = |c: &Cert| first_pem(&c.pem);
    assert_eq!(served("a.test"), pem(&a));
    assert_eq!(served("A.TEST"), pem(&a));
    assert_eq!(served("x.b.test"), pem(&wild));
    assert_eq!(served("other.test"), pem(&default));
    assert_eq!(
        first_pem(&s_client(port, &["-noservername"])),
        pem(&default)
    );
    // A client that verifies gets through with the chosen certificate.
    let resp = tls_get(port, "x.b.test", &wild.der, "/echo");
    assert_eq!(resp.status, 200, "{}", srv.log_text());
    assert!(resp.text().contains("host=x.b.test"), "{}", resp.text());
}

#[test]
fn sessions_resume_with_tls13_and_tls12() {
    let (dir, _cert, _srv, port) = localhost_tls("resume", CONFIG);
    for version in ["-tls1_3", "-tls1_2"] {
        let sess = dir.path().join(format!("sess{version}.pem"));
        let sess = sess.to_str().unwrap();
        let first = s_client(port, &[version, "-sess_out", sess]);
        assert!(first.contains("New, TLSv1."), "{first}");
        let again = s_client(port, &[version, "-sess_in", sess]);
        assert!(again.contains("Reused, TLSv1."), "{version}: {again}");
    }
}

#[test]
fn resumption_can_be_turned_off() {
    let config = CONFIG.replacen(
        '{',
        r#"{"tls": {"session_cache": 0, "session_tickets": false},"#,
        1,
    );
    let (dir, _cert, _srv, port) = localhost_tls("noresume", &config);
    let sess = dir.path().join("sess.pem");
    let sess = sess.to_str().unwrap();
    let first = s_client(port, &["-tls1_2", "-sess_out", sess]);
    assert!(
        first.contains("New, TLSv1.2") && !first.contains("TLS session ticket:"),
        "{first}"
    );
    // With nothing to resume openssl may write no session file at all.
    if std::path::Path::new(sess).exists() {
        let again = s_client(port, &["-tls1_2", "-sess_in", sess]);
        assert!(again.contains("New, TLSv1.2"), "{again}");
    }
}

#[test]
fn tls13_only_refuses_tls12() {
    let config = CONFIG.replacen('{', r#"{"tls": {"min_version": "1.3"},"#, 1);
    let (_dir, _cert, _srv, port) = localhost_tls("v13", &config);
    assert!(s_client(port, &["-tls1_3"]).contains("New, TLSv1.3"));
    let out = s_client(port, &["-tls1_2"]);
    assert!(!out.contains("New, TLSv1.2"), "{out}");
}

#[test]
fn plain_http_on_a_tls_port_is_answered_400_and_closed() {
    let (_dir, _cert, srv, port) = localhost_tls("plain", CONFIG);
    // Send `bytes` on a new connection: what comes back before the server closes it, promptly.
    let until_closed = |bytes: &[u8]| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        s.write_all(bytes).unwrap();
        let started = std::time::Instant::now();
        let raw = common::read_to_close(&mut s);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(4),
            "the server did not close"
        );
        raw
    };
    let raw = until_closed(b"GET /echo HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let resp = Response::parse(raw.as_bytes());
    assert_eq!(resp.status, 400, "{raw}");
    assert!(
        resp.text()
            .contains("plain HTTP request was sent to an HTTPS port"),
        "{raw}"
    );
    // Binary garbage: closed without an answer, promptly.
    let raw = until_closed(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5]);
    assert!(!raw.contains("HTTP/1.1 200"));
    // The server still serves.
    assert_eq!(srv.get("/echo").status, 200);
}

#[test]
fn pipelined_requests_and_large_bodies_over_tls() {
    let (_dir, cert, _srv, port) = localhost_tls("pipe", CONFIG);
    let mut s = client(port, "localhost", &cert.der, &[b"http/1.1"]);
    // Three requests in separate TLS records of one flight: the later ones wait decrypted
    // inside rustls while the first is answered.
    let body = "x".repeat(200_000);
    let post = format!(
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(b"GET /echo?n=1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    s.write_all(b"GET /echo?n=2 HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    s.write_all(post.as_bytes()).unwrap();
    s.write_all(b"GET /echo?n=3 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    s.flush().unwrap();
    let raw = tlskit::read_all(&mut s);
    let all = Response::parse_all(&raw);
    assert_eq!(
        all.len(),
        4,
        "{}",
        String::from_utf8_lossy(&raw[..raw.len().min(2000)])
    );
    assert!(all[0].text().contains("query.n=1"));
    assert!(all[1].text().contains("query.n=2"));
    assert!(all[2].text().contains(&format!("body={body}")));
    assert!(all[3].text().contains("query.n=3"));
}

#[test]
fn files_over_tls_arrive_whole() {
    let dir = TempDir::new("file");
    let cert = Cert::new(&dir, "localhost", &["localhost"]);
    // 3 MB of varied bytes: many 64 KiB chunks and a partial last one.
    let data: Vec<u8> = (0..3_000_123u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let file = dir.write("big.bin", &data);
    let config = format!(
        r#"{{"load": [{{"so": "testkit"}}], "routing": [{{"prefix": "/big", "handler": "file", "path": "{}"}}]}}"#,
        file.display()
    );
    let (_srv, port) = start_tls(&config, &cert);
    let resp = tls_get(port, "localhost", &cert.der, "/big");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-length"), Some("3000123"));
    assert!(resp.body == data, "file body differs");
    // And over HTTP/2.
    let out = dir.path().join("h2.bin");
    let (ok, _) = curl(&[
        "-k",
        "--http2",
        "-o",
        out.to_str().unwrap(),
        &format!("https://127.0.0.1:{port}/big"),
    ]);
    assert!(ok);
    assert!(
        std::fs::read(&out).unwrap() == data,
        "file body over h2 differs"
    );
}

#[test]
fn bad_certificates_stop_start_up_with_a_clear_message() {
    let dir = TempDir::new("bad");
    let cert = Cert::new(&dir, "good", &["localhost"]);
    let other = Cert::new(&dir, "other", &["localhost"]);
    let garbage = dir.write("garbage.pem", "this is not PEM\n");
    let listen = ["-S", "127.0.0.1:1"];
    let with = |c: &str, k: &str| {
        let mut args = listen.to_vec();
        args.extend(["--cert", c, "--key", k]);
        check_config(CONFIG, &args)
    };
    let (ok, out) = with(cert.cert_str(), cert.key_str());
    assert!(ok, "{out}");
    let (ok, out) = with("/no/such/cert.pem", cert.key_str());
    assert!(!ok && out.contains("/no/such/cert.pem"), "{out}");
    let (ok, out) = with(garbage.to_str().unwrap(), cert.key_str());
    assert!(
        !ok && out.contains("garbage.pem") && out.contains("PEM"),
        "{out}"
    );
    let (ok, out) = with(cert.cert_str(), garbage.to_str().unwrap());
    assert!(
        !ok && out.contains("key file") && out.contains("garbage.pem"),
        "{out}"
    );
    let (ok, out) = with(cert.cert_str(), other.key_str());
    assert!(!ok && out.contains("do not match"), "{out}");
    // The real start fails the same way, without serving.
    let out = Command::new(osprey_bin())
        .arg("-c")
        .arg(dir.write("c.json", CONFIG))
        .args([
            "-S",
            "127.0.0.1:1",
            "--cert",
            "/no/such.pem",
            "--key",
            "/no/such.key",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such.pem"));
}

#[test]
fn tls_configuration_errors_are_located() {
    let (ok, out) = check_config(
        r#"{"listen": [{"interface": "127.0.0.1:1", "secure": true}]}"#,
        &[],
    );
    assert!(!ok && out.contains("needs `cert` and `key`"), "{out}");
    let (ok, out) = check_config(
        r#"{"listen": [{"interface": "127.0.0.1:1", "cert": "a.pem", "key": "a.key"}]}"#,
        &[],
    );
    assert!(!ok && out.contains("without `\"secure\": true`"), "{out}");
    let (ok, out) = check_config("{\n\"tls\": {\n\"cert\": \"a.pem\"}}", &[]);
    assert!(
        !ok && out.contains(":3") && out.contains("without `key`"),
        "{out}"
    );
    let (ok, out) = check_config("{\"tls\": {\"min_version\": \"1.1\"}}", &[]);
    assert!(!ok && out.contains("min_version"), "{out}");
    let (ok, out) = check_config(CONFIG, &["-S", "127.0.0.1:1"]);
    assert!(!ok && out.contains("no certificate"), "{out}");
}

#[test]
fn certificates_are_read_again_on_reload() {
    let dir = TempDir::new("renew");
    let old = Cert::new(&dir, "old", &["renew.test"]);
    let new = Cert::new(&dir, "new", &["renew.test"]);
    let live_cert = dir.write("live.crt", std::fs::read(&old.cert).unwrap());
    let live_key = dir.write("live.key", std::fs::read(&old.key).unwrap());
    let config = format!(
        r#"{{"tls": {{"cert": "{}", "key": "{}"}}, "load": [{{"so": "testkit"}}],
            "routing": [{{"prefix": "/echo", "handler": "echo"}}]}}"#,
        live_cert.display(),
        live_key.display()
    );
    let port = common::free_port();
    let srv = common::Server::start_with(&config, &["-S", &format!("127.0.0.1:{port}")]);
    let served = || first_pem(&s_client(port, &["-servername", "renew.test"]));
    assert_eq!(served(), first_pem(&old.pem));
    // Renew the certificate in place, as certbot does, and reload.
    std::fs::copy(&new.cert, &live_cert).unwrap();
    std::fs::copy(&new.key, &live_key).unwrap();
    common::signal(&srv.child, "HUP");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while served() != first_pem(&new.pem) {
        assert!(
            std::time::Instant::now() < deadline,
            "the renewed certificate was not served:\n{}",
            srv.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
