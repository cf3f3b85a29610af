//! The frames of a stream's request: HEADERS and CONTINUATION (a new request, or trailers),
//! and DATA within the windows (RFC 9113 §5.1, §6.1, §6.2, §6.10, §8.1).

use super::{Pending, Session, DRAIN_BYTES};
use crate::http2::core::{Slot, StreamIo};
use crate::http2::frame::{self, *};
use crate::http2::request::{self, Builder};

impl Session {
    pub(super) fn headers(&mut self, head: Head, payload: &[u8]) -> Result<(), Reason> {
        if head.stream.is_multiple_of(2) {
            return Err(Reason::Protocol);
        }
        let mut block = frame::unpad(head.flags, payload)?;
        if head.flags & PRIORITY_FLAG != 0 {
            if block.len() < 5 {
                return Err(Reason::FrameSize);
            }
            let dep = u32::from_be_bytes(block[..4].try_into().unwrap()) & 0x7fff_ffff;
            if dep == head.stream {
                return Err(Reason::Protocol);
            }
            block = &block[5..];
        }
        if head.flags & END_HEADERS == 0 {
            self.pending = Some(Pending {
                id: head.stream,
                flags: head.flags,
                block: block.to_vec(),
            });
            return Ok(());
        }
        self.block(head.stream, head.flags, block)
    }

    pub(super) fn continuation(&mut self, head: Head, payload: &[u8]) -> Result<(), Reason> {
        let Some(pending) = &mut self.pending else {
            return Err(Reason::Protocol);
        };
        pending.block.extend_from_slice(payload);
        // A block this large is over the header list limit whatever it decodes to.
        if pending.block.len() > 2 * self.max_list + 64 * 1024 {
            return Err(Reason::EnhanceYourCalm);
        }
        if head.flags & END_HEADERS == 0 {
            return Ok(());
        }
        let p = self.pending.take().unwrap();
        self.block(p.id, p.flags, &p.block)
    }

    /// A complete header block: a new request, or a trailer block.
    fn block(&mut self, id: u32, flags: u8, block: &[u8]) -> Result<(), Reason> {
        let end_stream = flags & END_STREAM != 0;
        if !self.is_idle(id) {
            return self.trailers(id, end_stream, block);
        }
        self.last_id = id;
        let mut builder = Builder::new(&mut self.pseudo, self.max_list, &self.limits);
        self.decoder
            .decode_checked(block, |n, v, checked| builder.field_checked(n, v, checked))
            .map_err(|_| Reason::Compression)?;
        let mut core = self.core.borrow_mut();
        if self.going_away {
            core.remember(id, true);
            return Ok(());
        }
        if core.streams.len() >= self.max_streams {
            frame::put_rst(&mut core.out, id, Reason::Refused);
            core.remember(id, true);
            return Ok(());
        }
        let req = match builder.finish() {
            Ok(req) if !(end_stream && req.content_length.is_some_and(|n| n > 0)) => req,
            _ => {
                frame::put_rst(&mut core.out, id, Reason::Protocol);
                core.remember(id, true);
                return Ok(());
            }
        };
        let mut slot = Slot::new(
            core.peer_initial_window,
            self.initial_window,
            req.content_length,
        );
        slot.remote_done = end_stream;
        core.streams.insert(id, slot);
        let io = StreamIo {
            id,
            core: self.core.clone(),
            done: false,
        };
        self.ready.push((io, req));
        Ok(())
    }

    /// A header block on a stream already opened: trailers end its body (§8.1).
    fn trailers(&mut self, id: u32, end_stream: bool, block: &[u8]) -> Result<(), Reason> {
        let mut bad = false;
        self.decoder
            .decode(block, |n, _| bad |= request::check_trailer(n).is_err())
            .map_err(|_| Reason::Compression)?;
        let mut core = self.core.borrow_mut();
        let Some(slot) = core.streams.get_mut(&id) else {
            return Err(match core.was_closed(id) {
                Some(_) => Reason::StreamClosed,
                None => Reason::Protocol,
            });
        };
        if slot.remote_done {
            core.reset(id, Reason::StreamClosed);
            return Ok(());
        }
        if bad || !end_stream || slot.content_length.is_some_and(|n| n != slot.received) {
            core.reset(id, Reason::Protocol);
            return Ok(());
        }
        slot.remote_done = true;
        slot.wake();
        if slot.local_done {
            core.close(id);
        }
        Ok(())
    }

    pub(super) fn data(&mut self, head: Head, payload: &[u8]) -> Result<(), Reason> {
        let id = head.stream;
        let len = payload.len();
        let mut core = self.core.borrow_mut();
        core.recv_window -= len as i64;
        if core.recv_window < 0 {
            return Err(Reason::FlowControl);
        }
        let Some(slot) = core.streams.get_mut(&id) else {
            if self.is_idle(id) {
                return Err(Reason::Protocol);
            }
            return match core.was_closed(id) {
                // Sent before the client saw our RST_STREAM: dropped.
                Some(true) => {
                    core.release_connection(len);
                    Ok(())
                }
                _ => Err(Reason::StreamClosed),
            };
        };
        if slot.remote_done {
            core.release_connection(len);
            core.reset(id, Reason::StreamClosed);
            return Ok(());
        }
        slot.recv_window -= len as i64;
        if slot.recv_window < 0 {
            core.release_connection(len);
            core.reset(id, Reason::FlowControl);
            return Ok(());
        }
        let data = frame::unpad(head.flags, payload)?;
        let end = head.flags & END_STREAM != 0;
        slot.received += data.len() as u64;
        if let Some(n) = slot.content_length {
            if slot.received > n || (end && slot.received != n) {
                core.release_connection(len);
                core.reset(id, Reason::Protocol);
                return Ok(());
            }
        }
        if slot.local_done {
            // The response is sent: what still comes is dropped, up to a bound.
            slot.drained += len;
            let drained = slot.drained;
            if end {
                core.close(id);
                core.release_connection(len);
            } else if drained > DRAIN_BYTES {
                core.release_connection(len);
                core.reset(id, Reason::NoError);
            } else {
                core.release(id, len);
            }
            return Ok(());
        }
        // Padding counts against the windows but is never taken by the stream.
        let padding = len - data.len();
        if !data.is_empty() {
            slot.pieces.push_back(data.to_vec());
        }
        if end {
            slot.remote_done = true;
        }
        slot.wake();
        core.release(id, padding);
        Ok(())
    }
}
