//! One HTTP/2 connection (RFC 9113): the preface, the SETTINGS exchange, and every frame the
//! client sends, checked and applied to the connection's state (`core`). A read fills a buffer
//! and every complete frame in it is handled; a request whose head is complete becomes a
//! stream future (`stream::handle`), run inside the connection's task. Everything the streams
//! and the session write goes into one output buffer, written when nothing more is ready, so
//! the frames of many streams leave in one write.

//!
//! This file: the connection's loop and the control frames; `session/streams.rs`: the frames
//! that open streams and carry their bodies; `session/io.rs`: the loop's read and write.

mod io;
mod streams;

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

use super::core::{Core, StreamIo};
use super::flood::Flood;
use super::frame::{self, *};
use super::hpack::Decoder;
use super::request::Request;
use super::stream;
use crate::config::Limits;
use crate::dispatch::Peer;
use crate::server::Shared;
use io::{io_step, Step};

/// Our SETTINGS_HEADER_TABLE_SIZE (the default).
const HEADER_TABLE: usize = 4096;
/// Bytes of a request body dropped after its response before the stream is reset.
const DRAIN_BYTES: usize = 1024 * 1024;
/// Room kept free in the read buffer.
const READ_ROOM: usize = 32 * 1024;

/// A header block waiting for its CONTINUATION frames.
struct Pending {
    id: u32,
    flags: u8,
    block: Vec<u8>,
}

/// The connection's state besides what the streams share.
struct Session {
    core: Rc<RefCell<Core>>,
    decoder: Decoder,
    pseudo: Vec<u8>,
    preface_done: bool,
    settings_seen: bool,
    /// The highest stream id the client opened.
    last_id: u32,
    /// GOAWAY sent: streams past `last_id` are not served.
    going_away: bool,
    pending: Option<Pending>,
    max_frame: usize,
    max_streams: usize,
    initial_window: i64,
    max_list: usize,
    /// The limits on a request head.
    limits: Limits,
    /// Requests ready for a stream future.
    ready: Vec<(StreamIo, Request)>,
}

/// Serve an HTTP/2 connection until the client or the server ends it.
pub async fn run<T>(
    mut io: T,
    peer: Arc<Peer>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let cfg = &shared.config.http2;
    let core = Rc::new(RefCell::new(Core::new(
        cfg.max_send_buffer_size.max(64 * 1024),
        Flood::new(cfg.max_control_frames),
    )));
    let mut s = Session {
        core: core.clone(),
        decoder: Decoder::new(HEADER_TABLE),
        pseudo: Vec::new(),
        preface_done: false,
        settings_seen: false,
        last_id: 0,
        going_away: false,
        pending: None,
        max_frame: cfg.max_frame_size as usize,
        max_streams: cfg.max_concurrent_streams as usize,
        initial_window: cfg.initial_window_size as i64,
        max_list: cfg.max_header_list_size as usize,
        limits: shared.config.limits.clone(),
        ready: Vec::new(),
    };
    {
        let mut c = core.borrow_mut();
        frame::put_settings(
            &mut c.out,
            &[
                (0x3, cfg.max_concurrent_streams),
                (0x4, cfg.initial_window_size),
                (0x5, cfg.max_frame_size),
                (0x6, cfg.max_header_list_size),
            ],
        );
        let more = cfg.initial_connection_window_size as i64 - c.recv_window;
        if more > 0 {
            c.release_connection(more as usize);
        }
    }
    let mut rbuf: Vec<u8> = Vec::with_capacity(READ_ROOM);
    let mut running = FuturesUnordered::new();
    let max_requests = shared.config.limits.max_requests_per_connection;
    let mut served = 0u64;
    let mut last_active = Instant::now();
    let preface_deadline = Instant::now() + shared.timeouts.header;
    let mut failed = false;
    // Written bytes a TLS stream may still hold: flushed before the next read.
    let mut unflushed = false;
    loop {
        let mut ready = std::mem::take(&mut s.ready);
        for (io, req) in ready.drain(..) {
            served += 1;
            // Answered at once, or boxed straight from the call: the future is moved once.
            if let Some((io, rest)) = stream::begin(io, req, &peer, &shared) {
                running.push(Box::pin(stream::handle(
                    io,
                    rest,
                    peer.clone(),
                    shared.clone(),
                )));
            }
            if served >= max_requests && !s.going_away {
                s.go_away(Reason::NoError);
            }
        }
        s.ready = ready;
        let idle = running.is_empty();
        if s.going_away && idle && core.borrow().streams.is_empty() {
            break;
        }
        let deadline = if s.settings_seen {
            last_active + shared.timeouts.keepalive
        } else {
            preface_deadline
        };
        tokio::select! {
            biased;
            Some(()) = running.next(), if !idle => {
                // Every other stream that is done too, before the connection writes.
                while let Some(Some(())) = running.next().now_or_never() {}
                last_active = Instant::now();
            }
            step = poll_fn(|cx| io_step(cx, &mut io, &mut rbuf, &core, &mut unflushed)) => match step {
                Ok(Step::Read(0)) | Err(_) => break,
                Ok(Step::Read(_)) => {
                    if let Err(reason) = s.process(&mut rbuf) {
                        tracing::debug!(peer = %peer.remote, "HTTP/2 connection error {reason:?}");
                        s.go_away(reason);
                        failed = true;
                        break;
                    }
                }
                Ok(Step::Wrote) => core.borrow_mut().drained(),
            },
            _ = stop.changed(), if !s.going_away => s.go_away(Reason::NoError),
            // Idle: a GOAWAY, and if streams still drain request bodies a keep-alive later,
            // the end.
            _ = tokio::time::sleep_until(deadline), if idle => {
                if !s.settings_seen || s.going_away {
                    break;
                }
                s.go_away(Reason::NoError);
                last_active = Instant::now();
            }
        }
    }
    // The last frames (a GOAWAY), then the streams still running fail fast.
    let out = {
        let mut c = core.borrow_mut();
        c.closed = true;
        c.wake_all();
        c.output().take_rest()
    };
    let _ = tokio::time::timeout(shared.timeouts.write, async {
        io.write_all(&out).await?;
        if failed {
            io.shutdown().await?;
        }
        io.flush().await
    })
    .await;
    while running.next().await.is_some() {}
}

impl Session {
    /// A GOAWAY: with NO_ERROR, the streams the client opened are still answered.
    fn go_away(&mut self, reason: Reason) {
        if self.going_away && reason == Reason::NoError {
            return;
        }
        self.going_away = true;
        frame::put_goaway(&mut self.core.borrow_mut().out, self.last_id, reason);
    }

    /// Handle every complete frame in `rbuf`.
    fn process(&mut self, rbuf: &mut Vec<u8>) -> Result<(), Reason> {
        let mut at = 0;
        if !self.preface_done {
            if rbuf.len() < PREFACE.len() {
                return if PREFACE.starts_with(rbuf) {
                    Ok(())
                } else {
                    Err(Reason::Protocol)
                };
            }
            if &rbuf[..PREFACE.len()] != PREFACE {
                return Err(Reason::Protocol);
            }
            self.preface_done = true;
            at = PREFACE.len();
        }
        while rbuf.len() - at >= HEADER_LEN {
            let head = Head::parse(rbuf[at..at + HEADER_LEN].try_into().unwrap());
            if head.len > self.max_frame {
                return Err(Reason::FrameSize);
            }
            let end = at + HEADER_LEN + head.len;
            if rbuf.len() < end {
                break;
            }
            self.frame(head, &rbuf[at + HEADER_LEN..end])?;
            at = end;
        }
        rbuf.drain(..at);
        Ok(())
    }

    fn frame(&mut self, head: Head, payload: &[u8]) -> Result<(), Reason> {
        if !self
            .core
            .borrow_mut()
            .flood
            .received(head.kind, head.flags, head.len)
        {
            tracing::info!("HTTP/2 control-frame flood: closing");
            return Err(Reason::EnhanceYourCalm);
        }
        if let Some(p) = &self.pending {
            if head.kind != CONTINUATION || head.stream != p.id {
                return Err(Reason::Protocol);
            }
        }
        if head.kind > CONTINUATION {
            // Unknown frame types are ignored (§4.1).
            return Ok(());
        }
        head.check()?;
        if !self.settings_seen && head.kind != SETTINGS {
            return Err(Reason::Protocol);
        }
        match head.kind {
            SETTINGS => self.settings(head, payload),
            PING => {
                if head.flags & ACK == 0 {
                    frame::put_ping_ack(&mut self.core.borrow_mut().out, payload);
                }
                Ok(())
            }
            GOAWAY => {
                // The client leaves: what it opened is still answered.
                self.going_away = true;
                Ok(())
            }
            WINDOW_UPDATE => self.window_update(head, payload),
            RST_STREAM => self.rst_stream(head),
            PRIORITY => {
                self.priority(head.stream, payload);
                Ok(())
            }
            HEADERS => self.headers(head, payload),
            CONTINUATION => self.continuation(head, payload),
            DATA => self.data(head, payload),
            // PUSH_PROMISE: a client cannot push (§8.4).
            _ => Err(Reason::Protocol),
        }
    }

    fn settings(&mut self, head: Head, payload: &[u8]) -> Result<(), Reason> {
        self.settings_seen = true;
        if head.flags & ACK != 0 {
            return Ok(());
        }
        let mut core = self.core.borrow_mut();
        for s in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                0x1 => core.encoder.set_max(value as usize),
                0x2 if value > 1 => return Err(Reason::Protocol),
                0x4 => {
                    if value as i64 > MAX_WINDOW {
                        return Err(Reason::FlowControl);
                    }
                    let delta = value as i64 - core.peer_initial_window;
                    core.peer_initial_window = value as i64;
                    for slot in core.streams.values_mut() {
                        slot.send_window += delta;
                        if slot.send_window > MAX_WINDOW {
                            return Err(Reason::FlowControl);
                        }
                        slot.wake();
                    }
                }
                0x5 => {
                    if !(DEFAULT_MAX_FRAME..=0xff_ffff).contains(&value) {
                        return Err(Reason::Protocol);
                    }
                    core.peer_max_frame = value as usize;
                }
                _ => {}
            }
        }
        frame::put_head(&mut core.out, 0, SETTINGS, ACK, 0);
        Ok(())
    }

    fn window_update(&mut self, head: Head, payload: &[u8]) -> Result<(), Reason> {
        let inc = u32::from_be_bytes(payload.try_into().unwrap()) & 0x7fff_ffff;
        let mut core = self.core.borrow_mut();
        if head.stream == 0 {
            if inc == 0 {
                return Err(Reason::Protocol);
            }
            core.send_window += inc as i64;
            if core.send_window > MAX_WINDOW {
                return Err(Reason::FlowControl);
            }
            core.wake_all();
            return Ok(());
        }
        if self.is_idle(head.stream) {
            return Err(Reason::Protocol);
        }
        let Some(slot) = core.streams.get_mut(&head.stream) else {
            return Ok(());
        };
        if inc == 0 {
            core.reset(head.stream, Reason::Protocol);
            return Ok(());
        }
        slot.send_window += inc as i64;
        if slot.send_window > MAX_WINDOW {
            core.reset(head.stream, Reason::FlowControl);
            return Ok(());
        }
        slot.wake();
        Ok(())
    }

    fn rst_stream(&mut self, head: Head) -> Result<(), Reason> {
        if self.is_idle(head.stream) {
            return Err(Reason::Protocol);
        }
        let mut core = self.core.borrow_mut();
        if let Some(slot) = core.streams.get_mut(&head.stream) {
            slot.reset = true;
        }
        core.close(head.stream);
        Ok(())
    }

    /// PRIORITY is not acted on; a stream that depends on itself is a stream error (§5.3.1).
    fn priority(&mut self, id: u32, payload: &[u8]) {
        let dep = u32::from_be_bytes(payload[..4].try_into().unwrap()) & 0x7fff_ffff;
        if dep == id {
            self.core.borrow_mut().reset(id, Reason::Protocol);
        }
    }

    /// A stream id the client has not opened yet.
    fn is_idle(&self, id: u32) -> bool {
        id > self.last_id
    }
}
