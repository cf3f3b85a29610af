//! The connection state machine: `conn::serve` on an in-memory transport that hands the input
//! over in fuzzer-chosen pieces. Heads, bodies, pipelining, keep-alive, errors and the
//! responses to them all run as on a socket (with no routes, every request is answered by the
//! core: 404, or the protocol error's status). Every byte written must be a response.
#![no_main]

use std::cell::RefCell;
use std::io;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use osprey::config::Config;
use osprey::conn::io::{FilePart, Io};
use osprey::dispatch::Peer;
use osprey::modules::Registry;
use osprey::server::Shared;

/// Input delivered in pieces, output collected.
struct Memory<'a> {
    input: &'a [u8],
    pos: usize,
    sizes: &'a [u8],
    reads: usize,
    output: &'a RefCell<Vec<u8>>,
}

impl Io for Memory<'_> {
    fn poll_readable(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn try_read(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let size = usize::from(self.sizes[self.reads % self.sizes.len()]) * 8 + 1;
        self.reads += 1;
        let n = size.min(self.input.len() - self.pos);
        buf.extend_from_slice(&self.input[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }

    async fn write_all(&mut self, bufs: &[&[u8]], _idle: Duration) -> io::Result<()> {
        let mut output = self.output.borrow_mut();
        for b in bufs {
            output.extend_from_slice(b);
        }
        Ok(())
    }

    async fn send_file(&mut self, _head: &[u8], _: FilePart<'_>, _: Duration) -> io::Result<()> {
        unreachable!("no route serves files")
    }

    async fn close(&mut self) {}
}

struct World {
    shared: Arc<Shared>,
    runtime: tokio::runtime::Runtime,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let text = r#"{"workers": 1, "limits": {"max_header_bytes": 1024, "max_body_bytes": 4096,
                       "max_requests_per_connection": 50}}"#;
        let config = Config::parse("fuzz.json", text).expect("the fuzz configuration is valid");
        // Kept for the life of the process, as the server does.
        let registry: &'static Registry =
            Box::leak(Box::new(Registry::load(&config, &[]).expect("no modules to load")));
        let shared = Arc::new(Shared::new(config, registry).expect("routes build"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        World { shared, runtime }
    })
}

/// Every byte written is a sequence of complete responses.
fn check_responses(mut out: &[u8]) {
    while !out.is_empty() {
        assert!(
            out.starts_with(b"HTTP/1.1 ") || out.starts_with(b"HTTP/1.0 "),
            "{:?}",
            String::from_utf8_lossy(out)
        );
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        let head = match resp.parse(out).expect("a well-formed response head") {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => panic!("a truncated response head"),
        };
        let status = resp.code.expect("a status");
        let length = resp
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .map(|h| {
                std::str::from_utf8(h.value)
                    .unwrap()
                    .parse::<usize>()
                    .unwrap()
            });
        // HEAD answers carry a length but no body: tell them apart by what follows.
        let body = match length {
            Some(n)
                if out.len() >= head + n
                    && (out.len() == head + n || out[head + n..].starts_with(b"HTTP/1.")) =>
            {
                n
            }
            Some(_) => 0,
            None => panic!("core responses have a length (status {status})"),
        };
        out = &out[head + body..];
    }
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 2 {
        return;
    }
    let (sizes, data) = input.split_at(2);
    let world = world();
    let output = RefCell::new(Vec::new());
    let io = Memory {
        input: data,
        pos: 0,
        sizes,
        reads: 0,
        output: &output,
    };
    let peer = Arc::new(Peer {
        remote: "127.0.0.1:1".into(),
        secure: false,
        http2: false,
    });
    let mut conn = osprey::conn::Conn::new(io, peer, world.shared.clone());
    world.runtime.block_on(conn.serve());
    check_responses(&output.borrow());
});
