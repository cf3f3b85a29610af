//! A budget of HTTP/2 control frames (PING, SETTINGS, WINDOW_UPDATE, PRIORITY, RST_STREAM,
//! frames of unknown types, empty DATA frames) a client may send without asking for anything.
//! h2 answers such frames itself and never tires of them; this transport wrapper reads the
//! frame headers as the bytes pass, before h2 sees them. Each request (a HEADERS frame) starts
//! the count again, and each DATA frame the server sends earns one frame back (a client reading
//! a large response answers with WINDOW_UPDATEs). Past the budget the connection stops reading
//! and [`Flood::tripped`] wakes the connection loop, which closes with GOAWAY
//! ENHANCE_YOUR_CALM.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

const PREFACE_LEN: usize = 24;
const HEADER_LEN: usize = 9;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const END_STREAM: u8 = 0x1;

/// The budget shared by the transport and the connection loop.
pub struct Flood {
    /// Frames still allowed; `None`: no limit.
    left: Cell<Option<u32>>,
    budget: u32,
    tripped: Notify,
}

impl Flood {
    /// `budget` 0: no limit.
    pub fn new(budget: u32) -> Rc<Flood> {
        Rc::new(Flood {
            left: Cell::new((budget > 0).then_some(budget)),
            budget,
            tripped: Notify::new(),
        })
    }

    /// Resolves once the client spent its budget.
    pub async fn tripped(&self) {
        self.tripped.notified().await
    }

    fn is_spent(&self) -> bool {
        self.left.get() == Some(0)
    }

    /// A frame the client sent.
    fn received(&self, kind: u8, flags: u8, len: u32) {
        let Some(left) = self.left.get() else { return };
        let control = match kind {
            HEADERS => {
                self.left.set(Some(self.budget));
                return;
            }
            DATA => len == 0 && flags & END_STREAM == 0,
            // CONTINUATION is bounded by h2's header list limit; GOAWAY ends the connection.
            0x9 | 0x7 => false,
            _ => true,
        };
        if control && left > 0 {
            self.left.set(Some(left - 1));
            if left == 1 {
                self.tripped.notify_one();
            }
        }
    }

    /// A frame the server sent.
    fn sent(&self, kind: u8) {
        if let (DATA, Some(left)) = (kind, self.left.get()) {
            if left > 0 {
                self.left.set(Some(left.saturating_add(1).min(self.budget)));
            }
        }
    }
}

/// Finds frame headers in a byte stream.
struct Frames {
    /// Bytes of the client preface still to skip.
    preface: usize,
    header: [u8; HEADER_LEN],
    have: usize,
    /// Payload bytes still to skip.
    payload: usize,
}

impl Frames {
    fn new(preface: usize) -> Frames {
        Frames {
            preface,
            header: [0; HEADER_LEN],
            have: 0,
            payload: 0,
        }
    }

    /// Feed bytes; `frame(type, flags, length)` for each frame header completed.
    fn feed(&mut self, mut bytes: &[u8], mut frame: impl FnMut(u8, u8, u32)) {
        while !bytes.is_empty() {
            let n = if self.preface > 0 {
                let n = self.preface.min(bytes.len());
                self.preface -= n;
                n
            } else if self.payload > 0 {
                let n = self.payload.min(bytes.len());
                self.payload -= n;
                n
            } else {
                let n = (HEADER_LEN - self.have).min(bytes.len());
                self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
                self.have += n;
                if self.have == HEADER_LEN {
                    self.have = 0;
                    let h = &self.header;
                    let len = u32::from_be_bytes([0, h[0], h[1], h[2]]);
                    self.payload = len as usize;
                    frame(h[3], h[4], len);
                }
                n
            };
            bytes = &bytes[n..];
        }
    }
}

/// The transport h2 reads from and writes to, counting frames both ways.
pub struct Counted<T> {
    inner: T,
    flood: Rc<Flood>,
    read: Frames,
    written: Frames,
}

impl<T> Counted<T> {
    pub fn new(inner: T, flood: Rc<Flood>) -> Counted<T> {
        Counted {
            inner,
            flood,
            read: Frames::new(PREFACE_LEN),
            written: Frames::new(0),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.flood.is_spent() {
            // Nothing more is read; the connection loop closes the connection.
            return Poll::Pending;
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let flood = &this.flood;
        this.read.feed(&buf.filled()[before..], |kind, flags, len| {
            flood.received(kind, flags, len)
        });
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            let flood = &this.flood;
            this.written.feed(&buf[..n], |kind, _, _| flood.sent(kind));
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(mut n)) = polled {
            let flood = &this.flood;
            for b in bufs {
                let take = n.min(b.len());
                this.written.feed(&b[..take], |kind, _, _| flood.sent(kind));
                n -= take;
            }
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = (payload.len() as u32).to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 1];
        f.extend_from_slice(payload);
        f
    }

    fn feed_all(flood: &Flood, frames: &mut Frames, bytes: &[u8]) {
        // Byte by byte: headers split across reads are found too.
        for b in bytes {
            frames.feed(std::slice::from_ref(b), |k, f, l| flood.received(k, f, l));
        }
    }

    #[test]
    fn control_frames_spend_the_budget_and_requests_renew_it() {
        let flood = Flood::new(3);
        let mut frames = Frames::new(PREFACE_LEN);
        let mut bytes = vec![b'P'; PREFACE_LEN];
        bytes.extend(frame(0x4, 0, &[]));
        bytes.extend(frame(0x6, 0, &[0; 8]));
        bytes.extend(frame(HEADERS, 0x4, &[0; 20]));
        bytes.extend(frame(0x8, 0, &[0, 0, 0, 1]));
        bytes.extend(frame(DATA, END_STREAM, &[]));
        feed_all(&flood, &mut frames, &bytes);
        assert_eq!(flood.left.get(), Some(2));
        feed_all(&flood, &mut frames, &frame(DATA, 0, &[]));
        feed_all(&flood, &mut frames, &frame(0x2, 0, &[0; 5]));
        assert!(flood.is_spent());
    }

    #[test]
    fn data_sent_earns_frames_back_and_zero_means_no_limit() {
        let flood = Flood::new(2);
        flood.received(0x6, 0, 8);
        flood.sent(DATA);
        flood.sent(DATA);
        assert_eq!(flood.left.get(), Some(2));
        let unlimited = Flood::new(0);
        for _ in 0..100 {
            unlimited.received(0x6, 0, 8);
        }
        assert!(!unlimited.is_spent());
    }
}
