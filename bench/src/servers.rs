//! Starting Osprey and nginx with equivalent configurations: one worker, access logs off,
//! sendfile on, pinned to one CPU.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Kind {
    Osprey,
    Nginx,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Osprey => "osprey",
            Kind::Nginx => "nginx",
        }
    }
}

/// A server under test.
pub struct Running {
    pub kind: Kind,
    pub port: u16,
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
    pub cpu: usize,
}

impl Setup {
    pub fn start(&self, kind: Kind, port: u16) -> Result<Running, String> {
        let child = match kind {
            Kind::Osprey => self.start_osprey(port)?,
            Kind::Nginx => self.start_nginx(port)?,
        };
        let mut running = Running { kind, port, child };
        wait_listening(&mut running)?;
        Ok(running)
    }

    fn start_osprey(&self, port: u16) -> Result<Child, String> {
        let config = format!(
            r#"{{
  "load": [{{"so": "benchmark"}}, {{"so": "static"}}],
  "listen": [{{"interface": "127.0.0.1:{port}", "backlog": 65535, "deferred": true}}],
  "workers": 1,
  "logging": {{"log_level": "warn"}},
  "limits": {{"max_connections": 65536, "max_requests_per_connection": 100000000}},
  "routing": [
    {{"prefix": "/benchmark-inprocess", "handler": "benchmark-inprocess"}},
    {{"prefix": "/benchmark-inworker", "handler": "benchmark-inworker"}},
    {{"handler": "sendfile", "dir": "{}", "memcache": true}}
  ]
}}"#,
            self.www.display()
        );
        let path = self.work.join("osprey.json");
        std::fs::write(&path, config).map_err(|e| e.to_string())?;
        Command::new("taskset")
            .arg("-c")
            .arg(self.cpu.to_string())
            .arg(&self.osprey)
            .arg("-c")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file(&self.work, "osprey.log")?))
            .spawn()
            .map_err(|e| format!("cannot start osprey: {e}"))
    }

    fn start_nginx(&self, port: u16) -> Result<Child, String> {
        let dir = self.work.join("nginx");
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
    server {{
        listen 127.0.0.1:{port} backlog=65535 reuseport deferred;
        root {www};
        location = /benchmark-inprocess {{ default_type text/html; return 200 '<p>Hello, world!</p>'; }}
        location = /benchmark-inworker {{ default_type text/html; return 200 '<p>Hello, world!</p>'; }}
    }}
}}
"#,
            dir = dir.display(),
            www = self.www.display()
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, config).map_err(|e| e.to_string())?;
        Command::new("taskset")
            .arg("-c")
            .arg(self.cpu.to_string())
            .arg(nginx_binary()?)
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file(&self.work, "nginx.log")?))
            .spawn()
            .map_err(|e| format!("cannot start nginx: {e}"))
    }
}

fn nginx_binary() -> Result<PathBuf, String> {
    for p in ["/usr/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(p).exists() {
            return Ok(PathBuf::from(p));
        }
    }
    Err("nginx is not installed (apt-get install nginx)".into())
}

fn log_file(dir: &Path, name: &str) -> Result<std::fs::File, String> {
    std::fs::File::create(dir.join(name)).map_err(|e| e.to_string())
}

fn wait_listening(r: &mut Running) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = r.child.try_wait() {
            return Err(format!(
                "{} exited at start ({status}); see its log in the work dir",
                r.kind.name()
            ));
        }
        if TcpStream::connect(("127.0.0.1", r.port)).is_ok() {
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
