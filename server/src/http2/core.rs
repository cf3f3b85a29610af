//! The state a connection and its streams share (one task, so an `Rc<RefCell<_>>`): the
//! output buffer every frame is written into, the send windows, and each open stream's slot —
//! request body pieces received, the waker of the stream's future. The session fills it from
//! the frames it reads; a stream's future ([`StreamIo`]) takes its body from it and writes its
//! response into it.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::flood::Flood;
use super::frame::{self, Reason};
use super::hpack::Encoder;
use super::output::{Output, Refs};
use crate::http::HttpError;
use crate::int_hash::IntMap;

/// The open streams by id.
pub type Streams = IntMap<u32, Slot>;

/// An open (or half-closed) stream.
pub struct Slot {
    /// Our send window for it (may go negative after a SETTINGS change).
    pub send_window: i64,
    /// Our receive window for it, as the client sees it.
    pub recv_window: i64,
    /// Request body pieces not yet taken.
    pub pieces: VecDeque<Vec<u8>>,
    /// The client ended its side (END_STREAM).
    pub remote_done: bool,
    /// The response is complete (END_STREAM sent): what still arrives is dropped.
    pub local_done: bool,
    /// The client reset the stream, or it failed: its future stops.
    pub reset: bool,
    /// The declared content-length, and the DATA bytes received (§8.1.1).
    pub content_length: Option<u64>,
    pub received: u64,
    /// Bytes dropped after the response (bounded, then the stream is reset).
    pub drained: usize,
    /// The stream's future, waiting for body data or window.
    pub waker: Option<Waker>,
}

impl Slot {
    pub fn new(send_window: i64, recv_window: i64, content_length: Option<u64>) -> Slot {
        Slot {
            send_window,
            recv_window,
            pieces: VecDeque::new(),
            remote_done: false,
            local_done: false,
            reset: false,
            content_length,
            received: 0,
            drained: 0,
            waker: None,
        }
    }

    pub fn wake(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

pub struct Core {
    /// Frames to write, and how much of them is written.
    pub out: Vec<u8>,
    pub written: usize,
    /// Response bodies that go between the frames of `out`, by reference (`output.rs`).
    pub refs: Refs,
    /// Stream futures waiting for `out` to drain.
    pub out_waiters: Vec<Waker>,
    /// Past this, stream futures wait for the output to drain.
    pub out_limit: usize,
    pub encoder: Encoder,
    pub streams: Streams,
    /// The client's SETTINGS_MAX_FRAME_SIZE and SETTINGS_INITIAL_WINDOW_SIZE.
    pub peer_max_frame: usize,
    pub peer_initial_window: i64,
    /// The connection's send window.
    pub send_window: i64,
    /// The connection is gone: stream futures fail fast.
    pub closed: bool,
    /// Our receive window for the connection, as the client sees it.
    pub recv_window: i64,
    /// Recently closed streams (and whether we reset them), to tell a frame on a closed stream
    /// from one on an idle id, and one the client may still send after our RST_STREAM.
    pub recently_closed: VecDeque<(u32, bool)>,
    pub flood: Flood,
}

const RECENTLY_CLOSED: usize = 256;

impl Core {
    pub fn new(out_limit: usize, flood: Flood) -> Core {
        Core {
            out: Vec::with_capacity(16 * 1024),
            written: 0,
            refs: Refs::default(),
            out_waiters: Vec::new(),
            out_limit,
            encoder: Encoder::default(),
            streams: Streams::default(),
            peer_max_frame: frame::DEFAULT_MAX_FRAME as usize,
            peer_initial_window: frame::DEFAULT_WINDOW as i64,
            send_window: frame::DEFAULT_WINDOW as i64,
            closed: false,
            recv_window: frame::DEFAULT_WINDOW as i64,
            recently_closed: VecDeque::new(),
            flood,
        }
    }

    /// The output: `out` and the bodies held beside it.
    pub fn output(&mut self) -> Output<'_> {
        Output {
            buf: &mut self.out,
            written: &mut self.written,
            refs: &mut self.refs,
        }
    }

    /// Bytes in the output, written or not (the buffer is emptied once all of it is written).
    pub fn out_len(&self) -> usize {
        self.out.len() + self.refs.len()
    }

    /// Forget a stream; body bytes it never took go back to the connection's window.
    pub fn close(&mut self, id: u32) {
        if let Some(mut slot) = self.streams.remove(&id) {
            slot.wake();
            let unread = drop_pieces(&mut slot);
            self.release_connection(unread);
            self.remember(id, false);
        }
    }

    /// Remember a closed stream.
    pub fn remember(&mut self, id: u32, reset: bool) {
        if self.recently_closed.len() == RECENTLY_CLOSED {
            self.recently_closed.pop_front();
        }
        self.recently_closed.push_back((id, reset));
    }

    /// Whether `id` was closed recently, and whether by our reset.
    pub fn was_closed(&self, id: u32) -> Option<bool> {
        self.recently_closed
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, reset)| *reset)
    }

    /// Reset a stream with `reason` (a stream error, or the server giving up on it).
    pub fn reset(&mut self, id: u32, reason: Reason) {
        frame::put_rst(&mut self.out, id, reason);
        if let Some(slot) = self.streams.get_mut(&id) {
            slot.reset = true;
        }
        self.close(id);
        if let Some(last) = self.recently_closed.back_mut() {
            if last.0 == id {
                last.1 = true;
            }
        }
    }

    pub fn release_connection(&mut self, n: usize) {
        if n > 0 {
            self.recv_window += n as i64;
            frame::put_window_update(&mut self.out, 0, n as u32);
        }
    }

    /// Give `n` bytes of window back to the client, for the connection and (while it still
    /// sends) the stream.
    pub fn release(&mut self, id: u32, n: usize) {
        if n == 0 {
            return;
        }
        self.release_connection(n);
        if let Some(slot) = self.streams.get_mut(&id) {
            if !slot.remote_done {
                slot.recv_window += n as i64;
                frame::put_window_update(&mut self.out, id, n as u32);
            }
        }
    }

    /// The output drained: waiting streams go on.
    pub fn drained(&mut self) {
        for w in self.out_waiters.drain(..) {
            w.wake();
        }
    }

    /// Wake every stream waiting (the connection window grew, or the connection is gone).
    pub fn wake_all(&mut self) {
        for slot in self.streams.values_mut() {
            slot.wake();
        }
        self.drained();
    }
}

/// A stream's future's handle on its stream.
pub struct StreamIo {
    pub id: u32,
    pub core: Rc<RefCell<Core>>,
    /// END_STREAM sent (or the stream reset): nothing more to do when dropped.
    pub done: bool,
}

impl StreamIo {
    /// No body comes (END_STREAM came with the head, or no more pieces will).
    pub fn is_end_stream(&self) -> bool {
        let core = self.core.borrow();
        core.streams
            .get(&self.id)
            .is_none_or(|s| s.remote_done && s.pieces.is_empty())
    }

    /// The next piece of the request body; `None` at its end.
    pub async fn data(&self, timeout: Duration) -> Result<Option<Vec<u8>>, HttpError> {
        let next = std::future::poll_fn(|cx| {
            let mut core = self.core.borrow_mut();
            let closed = core.closed;
            let Some(slot) = core.streams.get_mut(&self.id) else {
                return Poll::Ready(Err(HttpError::new(400, "request body stream failed")));
            };
            if let Some(piece) = slot.pieces.pop_front() {
                return Poll::Ready(Ok(Some(piece)));
            }
            if slot.remote_done {
                return Poll::Ready(Ok(None));
            }
            if slot.reset || closed {
                return Poll::Ready(Err(HttpError::new(400, "request body stream failed")));
            }
            slot.waker = Some(cx.waker().clone());
            Poll::Pending
        });
        match tokio::time::timeout(timeout, next).await {
            Ok(r) => r,
            Err(_) => Err(HttpError::new(408, "timed out reading the request body")),
        }
    }

    /// `n` body bytes were taken: the client may send as many more.
    pub fn release(&self, n: usize) {
        self.core.borrow_mut().release(self.id, n);
    }

    /// Wait until up to `want` bytes may be sent as DATA (at least one, unless `want` is 0):
    /// how many, taken from the windows.
    pub async fn reserve(&self, want: usize, timeout: Duration) -> io::Result<usize> {
        // Nearly always the room is there: no timer is set for that.
        if let Reserve::Ready(r) = self.try_reserve(want) {
            return r;
        }
        let wait = std::future::poll_fn(|cx| self.poll_reserve(cx, want));
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "write timed out"))?
    }

    fn poll_reserve(&self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<usize>> {
        match self.try_reserve(want) {
            Reserve::Ready(r) => Poll::Ready(r),
            Reserve::Output => {
                self.core.borrow_mut().out_waiters.push(cx.waker().clone());
                Poll::Pending
            }
            Reserve::Window => {
                if let Some(slot) = self.core.borrow_mut().streams.get_mut(&self.id) {
                    slot.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    /// Take all of `want` bytes of the windows at once, or nothing (`false`: the output is
    /// full, a window too small, the stream or connection gone): the answer of a stream
    /// served without a future (`stream::begin`) goes whole, or through the future.
    pub fn take_all(&self, want: usize) -> bool {
        let mut core = self.core.borrow_mut();
        if core.closed || core.out_len() >= core.out_limit {
            return false;
        }
        let conn_window = core.send_window;
        let want = want as i64;
        match core.streams.get_mut(&self.id) {
            Some(slot) if !slot.reset && want <= slot.send_window.min(conn_window) => {
                slot.send_window -= want;
                core.send_window -= want;
                true
            }
            _ => false,
        }
    }

    /// Take up to `want` bytes of the windows, or say what to wait for.
    fn try_reserve(&self, want: usize) -> Reserve {
        let mut core = self.core.borrow_mut();
        if core.closed {
            return Reserve::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
        }
        if core.out_len() >= core.out_limit {
            return Reserve::Output;
        }
        let conn_window = core.send_window;
        let Some(slot) = core.streams.get_mut(&self.id) else {
            return Reserve::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        };
        if slot.reset {
            return Reserve::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        if want == 0 {
            return Reserve::Ready(Ok(0));
        }
        let n = (want as i64).min(slot.send_window).min(conn_window);
        if n <= 0 {
            return Reserve::Window;
        }
        slot.send_window -= n;
        core.send_window -= n;
        Reserve::Ready(Ok(n as usize))
    }
}

/// What a reservation found.
enum Reserve {
    Ready(io::Result<usize>),
    /// The output is full: wait for it to drain.
    Output,
    /// No window: wait for a WINDOW_UPDATE (or SETTINGS).
    Window,
}

impl Drop for StreamIo {
    /// A stream whose response is complete stays until the client's side ends too (what
    /// it still sends is dropped); one that is not is reset.
    fn drop(&mut self) {
        let mut core = self.core.borrow_mut();
        if core.closed {
            return;
        }
        let Some(slot) = core.streams.get_mut(&self.id) else {
            return;
        };
        if !self.done {
            core.reset(self.id, Reason::Internal);
        } else if slot.remote_done {
            core.close(self.id);
        } else {
            slot.local_done = true;
            let unread = drop_pieces(slot);
            core.release_connection(unread);
        }
    }
}

/// Drop the unread body pieces: their length.
fn drop_pieces(slot: &mut Slot) -> usize {
    slot.pieces.drain(..).map(|p| p.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reservation takes what the windows allow at once, else waits for a WINDOW_UPDATE
    /// (or the output to drain), and times out.
    #[test]
    fn a_reservation_takes_the_room_there_is_or_waits_for_more() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let core = Rc::new(RefCell::new(Core::new(1024, Flood::new(0))));
            core.borrow_mut()
                .streams
                .insert(1, Slot::new(100, 100, None));
            let stream = StreamIo {
                id: 1,
                core: core.clone(),
                done: true,
            };
            let short = Duration::from_millis(50);
            assert_eq!(stream.reserve(60, short).await.unwrap(), 60);
            assert_eq!(stream.reserve(60, short).await.unwrap(), 40);
            let err = stream.reserve(1, short).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::TimedOut);
            let grow = async {
                tokio::task::yield_now().await;
                let mut c = core.borrow_mut();
                let slot = c.streams.get_mut(&1).unwrap();
                slot.send_window += 5;
                slot.wake();
            };
            let (got, ()) = tokio::join!(stream.reserve(10, Duration::from_secs(5)), grow);
            assert_eq!(got.unwrap(), 5);
            // A full output: the stream waits for it to drain, whatever its window.
            core.borrow_mut().streams.get_mut(&1).unwrap().send_window = 100;
            core.borrow_mut().out.resize(1024, 0);
            let drain = async {
                tokio::task::yield_now().await;
                let mut c = core.borrow_mut();
                c.out.clear();
                c.drained();
            };
            let (got, ()) = tokio::join!(stream.reserve(10, Duration::from_secs(5)), drain);
            assert_eq!(got.unwrap(), 10);
        });
    }
}
