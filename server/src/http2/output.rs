//! The connection's output: frame bytes in one buffer (`Core::out`), and between them response
//! bodies held by reference — a body in memory (a cache's shared bytes, a handler's owned
//! ones) is not copied into the buffer but waits beside it, in order, and leaves in the same
//! vectored write (on TLS, rustls copies it once, into its record). Small bodies are copied:
//! below [`MIN_REF`] an I/O slice costs more than the copy.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::ops::Range;

use crate::sender::Held;

/// Bodies (or frames of them) shorter than this are copied into the buffer.
pub const MIN_REF: usize = 1024;
/// I/O slices per write: the rest goes in the next.
const MAX_SLICES: usize = 64;

/// A body's bytes that go after the buffer's first `at` bytes.
struct Piece {
    at: usize,
    bytes: Held,
    range: Range<usize>,
}

/// The bodies held by reference, in order, and how much of them is written.
#[derive(Default)]
pub struct Refs {
    pieces: VecDeque<Piece>,
    /// Bytes of the first piece written.
    done: usize,
    /// Bytes of all pieces not written yet.
    bytes: usize,
}

/// The output: the frame buffer, how much of it is written, the bodies held beside it.
pub struct Output<'a> {
    pub buf: &'a mut Vec<u8>,
    pub written: &'a mut usize,
    pub refs: &'a mut Refs,
}

impl Refs {
    /// Bytes held by reference, not written yet.
    pub fn len(&self) -> usize {
        self.bytes
    }
}

impl Output<'_> {
    /// `range` of `bytes` goes next, after what the buffer holds now.
    pub fn push(&mut self, bytes: Held, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        self.refs.bytes += range.len();
        self.refs.pieces.push_back(Piece {
            at: self.buf.len(),
            bytes,
            range,
        });
    }

    /// Bytes not written yet.
    pub fn queued(&self) -> usize {
        self.buf.len() - *self.written + self.refs.bytes
    }

    /// What is not written yet, in order (up to [`MAX_SLICES`] slices), for `f` to write: it
    /// says how many bytes went, and the output moves past them.
    pub fn write_with<R>(&mut self, f: impl FnOnce(&[IoSlice<'_>]) -> (usize, R)) -> R {
        if self.refs.pieces.is_empty() {
            // Frames only (small bodies copied): one slice, no array to fill.
            let (n, r) = f(&[IoSlice::new(&self.buf[*self.written..])]);
            self.advance(n);
            return r;
        }
        let (n, r) = {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let mut count = 0;
            let mut pos = *self.written;
            for (i, p) in self.refs.pieces.iter().enumerate() {
                if p.at > pos {
                    slices[count] = IoSlice::new(&self.buf[pos..p.at]);
                    count += 1;
                    pos = p.at;
                }
                if count == MAX_SLICES {
                    break;
                }
                let skip = if i == 0 { self.refs.done } else { 0 };
                slices[count] =
                    IoSlice::new(&p.bytes.as_slice()[p.range.start + skip..p.range.end]);
                count += 1;
                if count == MAX_SLICES {
                    break;
                }
            }
            if count < MAX_SLICES && pos < self.buf.len() {
                slices[count] = IoSlice::new(&self.buf[pos..]);
                count += 1;
            }
            f(&slices[..count])
        };
        self.advance(n);
        r
    }

    /// `n` bytes were written.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let next = self.refs.pieces.front().map_or(self.buf.len(), |p| p.at);
            if *self.written < next {
                let k = n.min(next - *self.written);
                *self.written += k;
                n -= k;
                continue;
            }
            let Some(p) = self.refs.pieces.front() else {
                break;
            };
            let k = n.min(p.range.len() - self.refs.done);
            self.refs.done += k;
            self.refs.bytes -= k;
            n -= k;
            if self.refs.done == p.range.len() {
                self.refs.pieces.pop_front();
                self.refs.done = 0;
            }
        }
        if *self.written == self.buf.len() && self.refs.pieces.is_empty() {
            self.buf.clear();
            *self.written = 0;
        }
    }

    /// Everything not written yet, in one buffer (the last write of a connection); the output
    /// is left empty.
    pub fn take_rest(&mut self) -> Vec<u8> {
        let mut rest = Vec::with_capacity(self.queued());
        self.write_with(|slices| {
            for s in slices {
                rest.extend_from_slice(s);
            }
            (rest.len(), ())
        });
        if self.queued() > 0 {
            // More than one write's slices.
            rest.extend(self.take_rest());
        }
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::abi_stable::std_types::{RArc, RVec};

    fn shared(bytes: &[u8]) -> Held {
        Held::Shared(RArc::new(RVec::from(bytes)))
    }

    /// Frame bytes and bodies interleaved: written in pieces of every size, the stream is the
    /// same, in order, and the output is empty (its buffer cleared) at the end.
    #[test]
    fn pieces_leave_in_order_whatever_each_write_takes() {
        for step in [1, 2, 3, 7, 64, 1000] {
            let (mut buf, mut written, mut refs) = (Vec::new(), 0, Refs::default());
            let mut out = Output {
                buf: &mut buf,
                written: &mut written,
                refs: &mut refs,
            };
            let mut expected = Vec::new();
            for i in 0..5u8 {
                let head = [b'h', i];
                out.buf.extend_from_slice(&head);
                expected.extend_from_slice(&head);
                let body: Vec<u8> = (0..20).map(|b| b + 20 * i).collect();
                // Two frames of one shared body, back to back; an empty range is nothing.
                let held = shared(&body);
                out.push(held, 0..12);
                out.push(shared(&body), 12..20);
                out.push(shared(&body), 5..5);
                expected.extend_from_slice(&body);
            }
            out.buf.extend_from_slice(b"tail");
            expected.extend_from_slice(b"tail");
            assert_eq!(out.queued(), expected.len());
            let mut sent = Vec::new();
            while out.queued() > 0 {
                out.write_with(|slices| {
                    let all: Vec<u8> = slices.iter().flat_map(|s| s.to_vec()).collect();
                    let n = all.len().min(step);
                    sent.extend_from_slice(&all[..n]);
                    (n, ())
                });
            }
            assert_eq!(sent, expected, "writes of {step}");
            assert!(buf.is_empty() && written == 0 && refs.pieces.is_empty());
        }
    }

    #[test]
    fn more_pieces_than_one_write_takes_are_written_in_turn() {
        let (mut buf, mut written, mut refs) = (Vec::new(), 0, Refs::default());
        let mut out = Output {
            buf: &mut buf,
            written: &mut written,
            refs: &mut refs,
        };
        let mut expected = Vec::new();
        for i in 0..100u8 {
            out.buf.push(i);
            out.push(shared(&[i, i]), 0..2);
            expected.extend_from_slice(&[i, i, i]);
        }
        let mut counts = Vec::new();
        let mut sent = Vec::new();
        while out.queued() > 0 {
            out.write_with(|slices| {
                counts.push(slices.len());
                let n: usize = slices.iter().map(|s| s.len()).sum();
                sent.extend(slices.iter().flat_map(|s| s.to_vec()));
                (n, ())
            });
        }
        assert_eq!(sent, expected);
        assert_eq!(counts, [64, 64, 64, 8]);
        let mut out = Output {
            buf: &mut buf,
            written: &mut written,
            refs: &mut refs,
        };
        for i in 0..100u8 {
            out.buf.push(i);
            out.push(shared(&[i, i]), 0..2);
        }
        assert_eq!(out.take_rest(), expected);
        assert_eq!(out.queued(), 0);
    }
}
