//! Starting Osprey, nginx and h2o with equivalent configurations (one worker, access logs
//! off, sendfile on, pinned to one CPU), and the upstream the proxy scenario goes through.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Osprey,
    Nginx,
    H2o,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Osprey => "osprey",
            Kind::Nginx => "nginx",
            Kind::H2o => "h2o",
        }
    }
}

/// The hello answer of every server (and of the proxy's upstream).
pub const HELLO: &str = "<p>Hello, world!</p>";

/// A server under test.
pub struct Running {
    pub kind: Kind,
    /// HTTP/1.1 in cleartext.
    pub port: u16,
    /// h2c with prior knowledge (nginx needs a port of its own for it).
    pub h2c_port: u16,
    /// TLS: HTTP/1.1 or h2 by ALPN.
    pub tls_port: u16,
    child: Child,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where things are for one benchmark run.
pub struct Setup {
    pub osprey: PathBuf,
    pub work: PathBuf,
    pub www: PathBuf,
    /// A self-signed certificate and its key (PEM), for every TLS listener.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The proxy scenario's upstream (an nginx answering hello).
    pub upstream_port: u16,
    pub cpu: usize,
}

/// Whether h2o is installed (the second peer is optional).
pub fn h2o_installed() -> bool {
    h2o_binary().is_some()
}

impl Setup {
    pub fn start(&self, kind: Kind) -> Result<Running, String> {
        let (port, tls_port) = (free_port(), free_port());
        let h2c_port = if kind == Kind::Nginx {
            free_port()
        } else {
            port
        };
        let (program, args) = match kind {
            Kind::Osprey => self.osprey_command(port, tls_port)?,
            Kind::Nginx => self.nginx_command(port, h2c_port, tls_port)?,
            Kind::H2o => self.h2o_command(port, tls_port)?,
        };
        let child = Command::new("taskset")
            .arg("-c")
            .arg(self.cpu.to_string())
            .arg(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file(
                &self.work,
                &format!("{}.log", kind.name()),
            )?))
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", kind.name()))?;
        let mut running = Running {
            kind,
            port,
            h2c_port,
            tls_port,
            child,
        };
        for p in [port, h2c_port, tls_port] {
            wait_listening(&mut running, p)?;
        }
        Ok(running)
    }

    fn osprey_command(&self, port: u16, tls: u16) -> Result<(PathBuf, Vec<String>), String> {
        let config = format!(
            r#"{{
  "load": [{{"so": "benchmark"}}, {{"so": "static"}}, {{"so": "proxy"}}],
  "listen": [
    {{"interface": "127.0.0.1:{port}", "backlog": 65535, "deferred": true}},
    {{"interface": "127.0.0.1:{tls}", "backlog": 65535, "secure": true, "cert": "{cert}", "key": "{key}"}}
  ],
  "workers": 1,
  "logging": {{"log_level": "warn"}},
  "limits": {{"max_connections": 65536, "max_requests_per_connection": 100000000}},
  "backends": {{"up": {{"connect": "127.0.0.1:{upstream}", "keepalive": 64}}}},
  "routing": [
    {{"prefix": "/benchmark-inprocess", "handler": "benchmark-inprocess"}},
    {{"prefix": "/benchmark-inworker", "handler": "benchmark-inworker"}},
    {{"prefix": "/proxy", "handler": "http_proxy", "backend": "up"}},
    {{"handler": "sendfile", "dir": "{www}", "memcache": true}}
  ]
}}"#,
            cert = self.cert.display(),
            key = self.key.display(),
            upstream = self.upstream_port,
            www = self.www.display()
        );
        let path = self.work.join("osprey.json");
        std::fs::write(&path, config).map_err(|e| e.to_string())?;
        Ok((
            self.osprey.clone(),
            vec!["-c".into(), path.display().to_string()],
        ))
    }

    fn nginx_command(
        &self,
        port: u16,
        h2c: u16,
        tls: u16,
    ) -> Result<(PathBuf, Vec<String>), String> {
        let listen = format!(
            "listen 127.0.0.1:{port} backlog=65535 reuseport deferred;
        listen 127.0.0.1:{h2c} http2 backlog=65535 reuseport deferred;
        listen 127.0.0.1:{tls} ssl http2 backlog=65535 reuseport deferred;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        location = /benchmark-inprocess {{ default_type text/html; return 200 '{HELLO}'; }}
        location = /benchmark-inworker {{ default_type text/html; return 200 '{HELLO}'; }}
        location /proxy {{
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}",
            cert = self.cert.display(),
            key = self.key.display(),
        );
        let upstream = format!(
            "upstream up {{ server 127.0.0.1:{}; keepalive 64; }}",
            self.upstream_port
        );
        let dir = self.nginx_config("nginx", &upstream, &listen)?;
        nginx_command(&dir)
    }

    fn h2o_command(&self, port: u16, tls: u16) -> Result<(PathBuf, Vec<String>), String> {
        let dir = self.work.join("h2o");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("hello.html"), HELLO).map_err(|e| e.to_string())?;
        // h2o's cheapest answer is a file (it has no `return`); its file handler keeps open
        // files cached, as nginx's open_file_cache and Osprey's memcache do.
        let config = format!(
            "num-threads: 1
user: {user}
max-connections: 65536
pid-file: {dir}/h2o.pid
error-log: {dir}/error.log
file.send-compressed: OFF
http1-request-timeout: 60
http2-idle-timeout: 60
listen:
  host: 127.0.0.1
  port: {port}
listen:
  host: 127.0.0.1
  port: {tls}
  ssl:
    certificate-file: {cert}
    key-file: {key}
    ocsp-update-interval: 0
hosts:
  default:
    paths:
      /benchmark-inprocess:
        file.file: {dir}/hello.html
      /proxy:
        proxy.reverse.url: http://127.0.0.1:{upstream}/proxy
      /:
        file.dir: {www}
",
            user = current_user(),
            dir = dir.display(),
            cert = self.cert.display(),
            key = self.key.display(),
            upstream = self.upstream_port,
            www = self.www.display(),
        );
        let path = dir.join("h2o.conf");
        std::fs::write(&path, config).map_err(|e| e.to_string())?;
        let binary = h2o_binary().ok_or("h2o is not installed (apt-get install h2o)")?;
        Ok((binary, vec!["-c".into(), path.display().to_string()]))
    }

    /// The proxy scenario's upstream: nginx answering hello on every path, pinned to `cpu`
    /// (the load generator's), the same for all three proxies.
    pub fn start_upstream(&self, cpu: usize) -> Result<Child, String> {
        let listen = format!(
            "listen 127.0.0.1:{} backlog=65535 reuseport;
        location / {{ default_type text/html; return 200 '{HELLO}'; }}",
            self.upstream_port
        );
        let dir = self.nginx_config("upstream", "", &listen)?;
        let (program, args) = nginx_command(&dir)?;
        let mut child = Command::new("taskset")
            .arg("-c")
            .arg(cpu.to_string())
            .arg(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file(&self.work, "upstream.log")?))
            .spawn()
            .map_err(|e| format!("cannot start the upstream nginx: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(("127.0.0.1", self.upstream_port)).is_err() {
            if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
                let _ = child.kill();
                return Err("the upstream nginx did not start; see upstream.log".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(child)
    }

    /// Write an nginx configuration in its own directory; returns the directory.
    fn nginx_config(&self, name: &str, http: &str, server: &str) -> Result<PathBuf, String> {
        let dir = self.work.join(name);
        std::fs::create_dir_all(dir.join("logs")).map_err(|e| e.to_string())?;
        let config = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 70000;
pid {dir}/nginx.pid;
error_log {dir}/logs/error.log warn;
events {{ worker_connections 65536; multi_accept on; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 100000000;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 60s;
    types {{ text/html html; text/plain txt; application/octet-stream bin; }}
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    {http}
    server {{
        root {www};
        {server}
    }}
}}
"#,
            dir = dir.display(),
            www = self.www.display()
        );
        std::fs::write(dir.join("nginx.conf"), config).map_err(|e| e.to_string())?;
        Ok(dir)
    }
}

fn nginx_command(dir: &Path) -> Result<(PathBuf, Vec<String>), String> {
    let binary = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or("nginx is not installed (apt-get install nginx)")?;
    let conf = dir.join("nginx.conf").display().to_string();
    Ok((
        binary,
        vec!["-c".into(), conf, "-p".into(), dir.display().to_string()],
    ))
}

fn h2o_binary() -> Option<PathBuf> {
    ["/usr/bin/h2o", "/usr/sbin/h2o", "/usr/local/bin/h2o"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// h2o switches to this user when started as root (it refuses to stay root otherwise).
fn current_user() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map_or_else(|| "nobody".into(), |u| u.name)
}

/// A self-signed certificate for 127.0.0.1 and localhost, made with the openssl tool.
pub fn make_certificate(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .map_err(|e| format!("cannot run openssl (apt-get install openssl): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok((cert, key))
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(18080)
}

fn log_file(dir: &Path, name: &str) -> Result<std::fs::File, String> {
    std::fs::File::create(dir.join(name)).map_err(|e| e.to_string())
}

fn wait_listening(r: &mut Running, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = r.child.try_wait() {
            return Err(format!(
                "{} exited at start ({status}); see its log in the work dir",
                r.kind.name()
            ));
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("{} did not start listening", r.kind.name()))
}

/// CPU time (user + system, every thread, living or exited) of a process in microseconds.
pub fn cpu_us(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    ticks * 1_000_000 / hz
}

/// Resident memory of a process in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}
