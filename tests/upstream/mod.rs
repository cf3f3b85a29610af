//! A small HTTP/1.1 upstream server for the proxy tests (std threads on 127.0.0.1), which a
//! test can kill, restart, stall or make unhealthy while requests flow.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How the upstream answers requests other than `/health`.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Normal = 0,
    /// Read the request, never answer.
    Stall = 1,
    /// Read the request, then close without answering.
    Close = 2,
}

pub struct State {
    pub name: String,
    mode: AtomicU8,
    pub health_ok: AtomicBool,
    /// Requests (other than `/health`) received.
    pub hits: AtomicUsize,
    pub health_hits: AtomicUsize,
    /// Connections accepted.
    pub accepted: AtomicUsize,
    /// Bumped by `kill`: loops of older generations stop.
    generation: AtomicUsize,
    conns: Mutex<Vec<TcpStream>>,
    /// The last request head received (for `/echo`-style checks).
    pub last_head: Mutex<String>,
    /// When not 0: an idle kept-alive connection is closed after this many milliseconds and a
    /// random fraction of one more (a short keep-alive timeout), and one request in three that
    /// comes on a kept-alive connection is dropped unread with it (the timeout fired just as it
    /// came: the client sees a reset, and cannot know whether it was processed).
    pub idle_close_ms: AtomicUsize,
    /// Connections closed by that timeout, and requests dropped with their connection.
    pub idle_closed: AtomicUsize,
    pub dropped: AtomicUsize,
    /// The bodies of the POST requests received.
    pub posted: Mutex<Vec<Vec<u8>>>,
}

pub struct Upstream {
    pub ip: std::net::IpAddr,
    pub port: u16,
    pub state: Arc<State>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl Upstream {
    pub fn start(name: &str) -> Upstream {
        Upstream::start_on(name, "127.0.0.1:0")
    }

    /// Listening on `addr` (`ip:port`; port 0 picks one).
    pub fn start_on(name: &str, addr: &str) -> Upstream {
        let listener = TcpListener::bind(addr).unwrap();
        let ip = listener.local_addr().unwrap().ip();
        let port = listener.local_addr().unwrap().port();
        let up = Upstream {
            ip,
            port,
            state: Arc::new(State {
                name: name.to_owned(),
                mode: AtomicU8::new(0),
                health_ok: AtomicBool::new(true),
                hits: AtomicUsize::new(0),
                health_hits: AtomicUsize::new(0),
                accepted: AtomicUsize::new(0),
                generation: AtomicUsize::new(0),
                conns: Mutex::new(Vec::new()),
                last_head: Mutex::new(String::new()),
                idle_close_ms: AtomicUsize::new(0),
                idle_closed: AtomicUsize::new(0),
                dropped: AtomicUsize::new(0),
                posted: Mutex::new(Vec::new()),
            }),
            accept: Mutex::new(None),
        };
        up.serve(listener);
        up
    }

    pub fn address(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    pub fn hits(&self) -> usize {
        self.state.hits.load(Ordering::SeqCst)
    }

    pub fn set_mode(&self, mode: Mode) {
        self.state.mode.store(mode as u8, Ordering::SeqCst);
    }

    pub fn set_healthy(&self, ok: bool) {
        self.state.health_ok.store(ok, Ordering::SeqCst);
    }

    fn serve(&self, listener: TcpListener) {
        listener.set_nonblocking(true).unwrap();
        let state = self.state.clone();
        let generation = state.generation.load(Ordering::SeqCst);
        let handle = std::thread::spawn(move || {
            while state.generation.load(Ordering::SeqCst) == generation {
                match listener.accept() {
                    Ok((s, _)) => {
                        s.set_nonblocking(false).unwrap();
                        state.accepted.fetch_add(1, Ordering::SeqCst);
                        state.conns.lock().unwrap().push(s.try_clone().unwrap());
                        let state = state.clone();
                        std::thread::spawn(move || {
                            let own = s.try_clone().unwrap();
                            let _ = serve_conn(s, &state, generation);
                            // `conns` holds a clone: close for real.
                            let _ = own.shutdown(Shutdown::Both);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        *self.accept.lock().unwrap() = Some(handle);
    }

    /// Stop listening and cut every open connection (as a crashed server would).
    pub fn kill(&self) {
        self.state.generation.fetch_add(1, Ordering::SeqCst);
        if let Some(h) = self.accept.lock().unwrap().take() {
            h.join().unwrap();
        }
        for c in self.state.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Listen again on the same port.
    pub fn restart(&self) {
        let listener = TcpListener::bind((self.ip, self.port)).unwrap();
        self.serve(listener);
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.kill();
    }
}

fn serve_conn(s: TcpStream, state: &State, generation: usize) -> std::io::Result<()> {
    let mut reader = BufReader::new(s.try_clone()?);
    let mut out = s;
    let mut random = random_seed();
    for served in 0usize.. {
        let idle_close = state.idle_close_ms.load(Ordering::SeqCst) as u64;
        if served > 0 && idle_close > 0 && reader.buffer().is_empty() {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            let wait = Duration::from_micros(idle_close * 1000 + random % 1000);
            reader.get_ref().set_read_timeout(Some(wait))?;
            if reader.fill_buf().is_err() {
                state.idle_closed.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
            if random.is_multiple_of(3) {
                state.dropped.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
            reader.get_ref().set_read_timeout(None)?;
        }
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let request_line = head.lines().next().unwrap_or("").to_owned();
        let mut parts = request_line.split(' ');
        let (method, target) = (
            parts.next().unwrap_or(""),
            parts.next().unwrap_or("").to_owned(),
        );
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let chunked = head
            .to_ascii_lowercase()
            .contains("\r\ntransfer-encoding: chunked\r\n");
        if target == "/early" {
            // Refuse the body before reading it, then read and drop it (a lingering close).
            out.write_all(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 8\r\n\r\ntoo big\n")?;
            out.flush()?;
            state.hits.fetch_add(1, Ordering::SeqCst);
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
            return Ok(());
        }
        if target == "/sink" {
            // Any size: counted and hashed (FNV-1a), never held.
            let (mut n, mut hash) = (0usize, 0xcbf2_9ce4_8422_2325u64);
            read_body(&mut reader, len, chunked, |piece| {
                n += piece.len();
                for &b in piece {
                    hash = (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
                }
            })?;
            *state.last_head.lock().unwrap() = head.clone();
            let text = format!("bytes={n} fnv={hash:016x}");
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}",
                text.len()
            )?;
            continue;
        }
        let mut body = Vec::new();
        read_body(&mut reader, len, chunked, |piece| {
            body.extend_from_slice(piece)
        })?;
        if target == "/health" {
            state.health_hits.fetch_add(1, Ordering::SeqCst);
            let ok = state.health_ok.load(Ordering::SeqCst);
            let text = if ok { "ok" } else { "sick" };
            let status = if ok {
                "200 OK"
            } else {
                "500 Internal Server Error"
            };
            write!(
                out,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{text}",
                text.len()
            )?;
            continue;
        }
        state.hits.fetch_add(1, Ordering::SeqCst);
        *state.last_head.lock().unwrap() = head.clone();
        if method == "POST" {
            state.posted.lock().unwrap().push(body.clone());
        }
        match state.mode.load(Ordering::SeqCst) {
            1 => {
                while state.generation.load(Ordering::SeqCst) == generation {
                    std::thread::sleep(Duration::from_millis(20));
                }
                return Ok(());
            }
            2 => return Ok(()),
            _ => {}
        }
        let name = &state.name;
        let path = target.split('?').next().unwrap_or("");
        match path {
            "/chunked" => {
                out.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Upstream: ")?;
                write!(out, "{name}\r\n\r\n5\r\nhello\r\n")?;
                out.flush()?;
                std::thread::sleep(Duration::from_millis(30));
                out.write_all(b"1;ext=1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n")?;
            }
            "/close" => {
                write!(
                    out,
                    "HTTP/1.1 200 OK\r\nConnection: close\r\nX-Upstream: {name}\r\n\r\nuntil "
                )?;
                out.flush()?;
                std::thread::sleep(Duration::from_millis(30));
                out.write_all(b"close")?;
                return Ok(());
            }
            "/big" => {
                let n = 1 << 20;
                write!(out, "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n")?;
                let block: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
                for piece in block.chunks(64 * 1024) {
                    out.write_all(piece)?;
                }
            }
            p if p.ends_with("/echo") => {
                let mut text = head.clone().into_bytes();
                text.extend_from_slice(b"BODY:");
                text.extend_from_slice(&body);
                write!(
                    out,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                    text.len()
                )?;
                out.write_all(&text)?;
            }
            "/ws" => {
                // Switch protocols, then echo upper-cased bytes until the peer closes.
                if !head.to_ascii_lowercase().contains("\r\nupgrade: test\r\n")
                    || !head
                        .to_ascii_lowercase()
                        .contains("\r\nconnection: upgrade\r\n")
                {
                    out.write_all(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n")?;
                    continue;
                }
                out.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\nX-Accept: yes\r\n\r\nhello\n")?;
                let mut buf = [0u8; 4096];
                loop {
                    let n = reader.read(&mut buf)?;
                    if n == 0 {
                        return Ok(());
                    }
                    out.write_all(&buf[..n].to_ascii_uppercase())?;
                }
            }
            "/bad-framing" => {
                out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")?;
            }
            "/bad-chunk" => {
                out.write_all(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
                )?;
            }
            "/error" => {
                out.write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy",
                )?;
            }
            "/sleep" => {
                std::thread::sleep(Duration::from_millis(1500));
                let text = format!("{name} slept");
                write!(
                    out,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}",
                    text.len()
                )?;
            }
            _ => {
                let text = format!("{name} {method} {target}");
                // One write, so that a kill never cuts a response in half.
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Upstream: {name}\r\nConnection: x-secret\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\nVia: 1.0 origin\r\nServer: origin/1.0\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\n\r\n{}",
                    text.len(),
                    if method == "HEAD" { "" } else { text.as_str() }
                );
                out.write_all(response.as_bytes())?;
            }
        }
        out.flush()?;
    }
    Ok(())
}

/// A seed for the connection's xorshift (different per connection).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::Instant::now()) | 1
}

/// Read a request body of `len` bytes, or a chunked one, handing it over piece by piece.
fn read_body(
    reader: &mut BufReader<TcpStream>,
    len: usize,
    chunked: bool,
    mut each: impl FnMut(&[u8]),
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut copy = |reader: &mut BufReader<TcpStream>, mut left: usize| {
        while left > 0 {
            let n = reader.read(&mut buf[..left.min(64 * 1024)])?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            each(&buf[..n]);
            left -= n;
        }
        Ok::<(), std::io::Error>(())
    };
    if !chunked {
        return copy(reader, len);
    }
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let size = line.trim_end().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size.trim(), 16)
            .map_err(|_| std::io::Error::other(format!("bad chunk size {line:?}")))?;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 || line == "\r\n" {
                    return Ok(());
                }
            }
        }
        copy(reader, size)?;
        let mut crlf = [0u8; 2];
        reader.read_exact(&mut crlf)?;
    }
}
