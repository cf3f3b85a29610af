//! Test harness: start the real `osprey` binary on a free loopback port with a configuration,
//! and talk to it with raw sockets and curl.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod cached_route;

/// The server binary cargo built for these tests.
pub fn osprey_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_osprey"))
}

/// Where cargo put the module libraries (next to the binary).
pub fn lib_dir() -> PathBuf {
    osprey_bin().parent().unwrap().to_path_buf()
}

/// A built module library, e.g. `module_lib("hello")`.
pub fn module_lib(name: &str) -> PathBuf {
    let file = format!("libosprey_{}.so", name.replace('-', "_"));
    // The newest of the two copies cargo keeps (see the loader's resolve_library).
    [lib_dir(), lib_dir().join("deps")]
        .iter()
        .map(|d| d.join(&file))
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max_by_key(|(m, _)| *m)
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("module library {file} not built in {}", lib_dir().display()))
}

/// A free TCP port on 127.0.0.1, never the same twice in this test process (tests run in
/// parallel threads, and a port freed here could otherwise be handed to two servers).
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if GIVEN
            .lock()
            .unwrap()
            .get_or_insert_with(HashSet::new)
            .insert(port)
        {
            return port;
        }
    }
}

/// A listening socket on 127.0.0.1 whose port [`free_port`] gave: a test's own backend (or a
/// port it keeps taken) never lands on a port handed to another test's server, and no later
/// [`free_port`] hands its port out again once it is closed (a "dead" backend stays dead).
pub fn listener() -> TcpListener {
    loop {
        if let Ok(l) = TcpListener::bind(("127.0.0.1", free_port())) {
            return l;
        }
    }
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "osprey-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running server, stopped (SIGTERM, then SIGKILL) on drop.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub dir: TempDir,
    pub log: PathBuf,
}

impl Server {
    /// Start with a configuration (JSON text; its `listen` is replaced by a free port).
    pub fn start(config: &str) -> Server {
        Self::start_with(config, &[])
    }

    /// Start with a configuration and extra command-line arguments.
    pub fn start_with(config: &str, args: &[&str]) -> Server {
        Self::start_custom(config, &[], 2, args)
    }

    /// Start with `workers` network threads, run through `wrapper` (a command and its
    /// arguments that ends by executing the server, e.g. `["prlimit", "--nofile=64"]`).
    pub fn start_custom(config: &str, wrapper: &[&str], workers: usize, args: &[&str]) -> Server {
        // A free port can be taken by someone else (another process, or a client's
        // ephemeral port) before the server binds it: then it says so, and another is tried.
        for _ in 0..5 {
            let mut server = Self::spawn(config, wrapper, workers, args);
            if server.wait_ready(!args.contains(&"-l")) {
                return server;
            }
        }
        panic!("osprey found no free port in five tries");
    }

    fn spawn(config: &str, wrapper: &[&str], workers: usize, args: &[&str]) -> Server {
        let dir = TempDir::new("srv");
        let conf = dir.write("osprey.json", config);
        let port = free_port();
        let log = dir.path().join("error.log");
        let mut cmd = match wrapper.split_first() {
            Some((program, wrapper_args)) => {
                let mut cmd = Command::new(program);
                cmd.args(wrapper_args).arg(osprey_bin());
                cmd
            }
            None => Command::new(osprey_bin()),
        };
        cmd.arg("-c")
            .arg(&conf)
            .arg("-H")
            .arg(format!("127.0.0.1:{port}"));
        if !args.contains(&"-L") {
            cmd.arg("-L").arg("debug");
        }
        cmd.arg("--workers")
            .arg(workers.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = cmd.spawn().expect("osprey starts");
        Server {
            child,
            port,
            dir,
            log,
        }
    }

    /// Wait until the server listens on its port: `true`, or `false` when it exited because
    /// the port was taken. `log_here`: its log is ours to read (no `-l`).
    fn wait_ready(&mut self, log_here: bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = self.log_text();
                if log.contains("Address already in use") {
                    return false;
                }
                panic!("osprey exited early ({status}):\n{log}");
            }
            // Its own line first: the port might otherwise be answered by whoever took it
            // meanwhile (this server then fails to bind and exits).
            let ours = format!("listening on {}", self.addr());
            let bound = !log_here || self.log_text().contains(&ours);
            if bound && TcpStream::connect(self.addr()).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("osprey did not start listening:\n{}", self.log_text());
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A new raw connection with a read timeout.
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Send raw bytes on a new connection and read until the server closes it.
    pub fn raw(&self, request: &[u8]) -> String {
        let mut s = self.connect();
        s.write_all(request).unwrap();
        let (out, error) = read_until_close(&mut s);
        if out.is_empty() {
            // How the connection ended, and the log once a dying server has written it all.
            eprintln!("the connection ended with {error:?} and no answer");
            std::thread::sleep(Duration::from_millis(200));
        }
        self.explain_if_empty(&out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// An answer that is nothing at all fails the test further on: show the server's log.
    pub fn explain_if_empty(&self, answer: &[u8]) {
        if answer.is_empty() {
            eprintln!("no answer from the server; its log:\n{}", self.log_text());
        }
    }

    /// One GET on a new connection (with `Connection: close`).
    pub fn get(&self, path: &str) -> Response {
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        Response::parse(self.raw(req.as_bytes()).as_bytes())
    }

    /// Stop with SIGTERM and wait; returns the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        signal(&self.child, "TERM");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            signal(&self.child, "TERM");
            std::thread::sleep(Duration::from_millis(50));
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // A failing test shows what the server said (its log goes with the temporary dir).
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(80).collect();
            eprintln!("--- server log (last {} lines) ---", tail.len());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// Send a signal by name (`TERM`, `HUP`, ...) to a child.
pub fn signal(child: &Child, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status();
}

/// Read until the peer closes (or the read timeout passes).
pub fn read_to_close(s: &mut TcpStream) -> String {
    String::from_utf8_lossy(&read_until_close(s).0).into_owned()
}

/// Read until the peer closes: the bytes, and the error that ended the reading if not a close.
pub fn read_until_close(s: &mut TcpStream) -> (Vec<u8>, Option<std::io::Error>) {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, None),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (out, Some(e)),
        }
    }
}

/// A parsed HTTP/1.x response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub version: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// Parse one response from the start of `raw` (body by Content-Length, chunked, or to the end).
    pub fn parse(raw: &[u8]) -> Response {
        Self::parse_one(raw, false).0
    }

    /// Parse one response; returns it and the bytes it used. `head_request`: no body follows.
    pub fn parse_one(raw: &[u8], head_request: bool) -> (Response, usize) {
        let end = find(raw, b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(raw)));
        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap();
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap().to_owned();
        let status = parts.next().unwrap().parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap();
                (n.trim().to_owned(), v.trim().to_owned())
            })
            .collect();
        let mut resp = Response {
            status,
            version,
            headers,
            body: Vec::new(),
        };
        let mut pos = end + 4;
        if head_request || status == 304 || status == 204 || status < 200 {
            return (resp, pos);
        }
        if let Some(len) = resp.header("content-length") {
            let len: usize = len.parse().unwrap();
            resp.body = raw[pos..pos + len].to_vec();
            pos += len;
        } else if resp
            .header("transfer-encoding")
            .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
        {
            loop {
                let line_end = pos + find(&raw[pos..], b"\r\n").unwrap();
                let size = usize::from_str_radix(
                    std::str::from_utf8(&raw[pos..line_end])
                        .unwrap()
                        .split(';')
                        .next()
                        .unwrap()
                        .trim(),
                    16,
                )
                .unwrap();
                pos = line_end + 2;
                if size == 0 {
                    pos += 2;
                    break;
                }
                resp.body.extend_from_slice(&raw[pos..pos + size]);
                pos += size + 2;
            }
        } else {
            resp.body = raw[pos..].to_vec();
            pos = raw.len();
        }
        (resp, pos)
    }

    /// Parse every response in `raw`, in order.
    pub fn parse_all(raw: &[u8]) -> Vec<Response> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < raw.len() {
            let (r, used) = Self::parse_one(&raw[pos..], false);
            out.push(r);
            pos += used;
        }
        out
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Run `osprey -t -c path` (plus `args`): (success, stderr then stdout).
pub fn check_file(path: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(osprey_bin())
        .arg("-t")
        .arg("-c")
        .arg(path)
        .args(args)
        .output()
        .expect("osprey runs");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (out.status.success(), text)
}

/// `check_file` on configuration text, written to a temporary `c.json`.
pub fn check_config(config: &str, args: &[&str]) -> (bool, String) {
    let dir = TempDir::new("check");
    check_file(&dir.write("c.json", config), args)
}

/// Wait until something listens on loopback `port`, at most `within` (a server started by
/// hand, not through [`Server`]).
pub fn wait_for_port(port: u16, within: Duration) {
    let deadline = Instant::now() + within;
    while TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run curl with arguments; returns (exit ok, stdout).
pub fn curl(args: &[&str]) -> (bool, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl is installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A chunked `POST` of `path` with `chunks` chunks of 400 `x` each, and its last chunk.
pub fn chunked_post(path: &str, chunks: usize) -> Vec<u8> {
    let mut wire = format!("POST {path} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        .into_bytes();
    for _ in 0..chunks {
        wire.extend_from_slice(b"190\r\n");
        wire.extend_from_slice(&[b'x'; 400]);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    wire
}

/// `VmHWM` (peak) or `VmRSS` (now) of a process, in bytes.
pub fn memory(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    let kb: u64 = line[key.len() + 1..]
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

/// Reset a process's peak RSS (`VmHWM`) to its current RSS.
pub fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}
