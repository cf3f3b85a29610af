//! A response as frames in the connection's output: HEADERS (with CONTINUATION past the
//! client's frame size), and DATA within that size. The windows are taken before (see
//! `core::StreamIo::reserve`).

use std::io;
use std::ops::Range;

use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::{FileRange, Response};

use super::core::Core;
use super::frame::{self, CONTINUATION, DATA, END_HEADERS, END_STREAM, HEADERS, HEADER_LEN};
use super::hpack;
use super::output::MIN_REF;
use crate::http::encode::core_managed;
use crate::sender::Held;

/// Headers the core sets itself (as on HTTP/1.1), and the other connection-specific ones
/// HTTP/2 forbids (RFC 9113 §8.2.2); by length first, as most names match none.
fn skipped(name: &str) -> bool {
    let forbidden = match name.len() {
        2 => "te",
        7 => "upgrade",
        16 => "proxy-connection",
        _ => return core_managed(name),
    };
    name.eq_ignore_ascii_case(forbidden)
}

/// The response's HEADERS: status, date, server (unless the handler set one), content-length
/// when known, the handler's fields. `end`: no DATA follows.
pub fn head(core: &mut Core, id: u32, resp: &Response, length: Option<u64>, end: bool) {
    let Core {
        out,
        encoder: enc,
        peer_max_frame,
        ..
    } = core;
    let at = out.len();
    frame::put_head(out, 0, HEADERS, 0, id);
    enc.begin(out);
    enc.status(out, resp.status);
    crate::http::date::with_date(|date| enc.indexed_name(out, hpack::DATE, date));
    let mut has_server = false;
    for h in resp.headers.iter() {
        // The common names straight to their static index, else checked and lowercased.
        if let Some(i) = hpack::written_index(h.name.as_bytes()) {
            has_server |= i == hpack::SERVER;
            enc.static_name(out, i, h.value.as_bytes());
            continue;
        }
        if skipped(&h.name) {
            continue;
        }
        has_server |= h.name.eq_ignore_ascii_case("server");
        enc.field_lowercasing(out, h.name.as_bytes(), h.value.as_bytes());
    }
    if !has_server {
        enc.indexing(out, hpack::SERVER, b"server", b"osprey");
    }
    if let Some(n) = length {
        let mut digits = itoa::Buffer::new();
        enc.indexed_name(out, hpack::CONTENT_LENGTH, digits.format(n).as_bytes());
    }
    let end_flag = if end { END_STREAM } else { 0 };
    let block = out.len() - at - HEADER_LEN;
    if block <= *peer_max_frame {
        frame::set_len(out, at, block);
        out[at + 4] = end_flag | END_HEADERS;
        return;
    }
    // Too large for one frame: the rest of the block follows in CONTINUATION frames.
    let rest = out.split_off(at + HEADER_LEN + *peer_max_frame);
    frame::set_len(out, at, *peer_max_frame);
    out[at + 4] = end_flag;
    let mut chunks = rest.chunks(*peer_max_frame).peekable();
    while let Some(chunk) = chunks.next() {
        let flags = if chunks.peek().is_none() {
            END_HEADERS
        } else {
            0
        };
        frame::put_head(out, chunk.len(), CONTINUATION, flags, id);
        out.extend_from_slice(chunk);
    }
}

/// `data` as DATA frames; `end`: END_STREAM on the last (an empty frame when `data` is).
pub fn data(core: &mut Core, id: u32, data: &[u8], end: bool) {
    let max = core.peer_max_frame;
    if data.is_empty() {
        frame::put_head(&mut core.out, 0, DATA, if end { END_STREAM } else { 0 }, id);
        return;
    }
    let mut chunks = data.chunks(max).peekable();
    while let Some(chunk) = chunks.next() {
        let last = end && chunks.peek().is_none();
        frame::put_head(
            &mut core.out,
            chunk.len(),
            DATA,
            if last { END_STREAM } else { 0 },
            id,
        );
        core.out.extend_from_slice(chunk);
        core.flood.sent_data();
    }
}

/// `range` of `bytes` as DATA frames, `end`: END_STREAM on the last. Frames of [`MIN_REF`]
/// bytes or more are not copied: the output holds the bytes by reference (an owned body cut
/// into several frames is shared first, one allocation, so each frame can hold it).
pub fn data_held(core: &mut Core, id: u32, bytes: Held, range: Range<usize>, end: bool) {
    let max = core.peer_max_frame;
    if range.len() < MIN_REF {
        return data(core, id, &bytes.as_slice()[range], end);
    }
    let mut bytes = Some(bytes);
    let mut at = range.start;
    while at < range.end {
        let n = (range.end - at).min(max);
        let last = at + n == range.end;
        frame::put_head(
            &mut core.out,
            n,
            DATA,
            if end && last { END_STREAM } else { 0 },
            id,
        );
        let b = bytes.take().expect("held until the last frame");
        let piece = if last {
            b
        } else {
            let shared = share(b);
            bytes = Some(Held::Shared(shared.clone()));
            Held::Shared(shared)
        };
        core.output().push(piece, at..at + n);
        core.flood.sent_data();
        at += n;
    }
}

/// Bytes several frames can hold.
fn share(bytes: Held) -> RArc<RVec<u8>> {
    match bytes {
        Held::Shared(shared) => shared,
        Held::Owned(owned) => RArc::new(owned),
    }
}

/// `len` bytes of `range` from `offset` read straight into DATA frames.
pub fn file_data(
    core: &mut Core,
    id: u32,
    range: &FileRange,
    mut offset: u64,
    len: usize,
    end: bool,
) -> io::Result<()> {
    let max = core.peer_max_frame;
    let mut left = len;
    while left > 0 {
        let n = left.min(max);
        left -= n;
        let flags = if end && left == 0 { END_STREAM } else { 0 };
        let at = core.out.len();
        frame::put_head(&mut core.out, n, DATA, flags, id);
        core.out.resize(at + HEADER_LEN + n, 0);
        if let Err(e) = range
            .file
            .read_exact_at(&mut core.out[at + HEADER_LEN..], offset)
        {
            core.out.truncate(at);
            return Err(e);
        }
        offset += n as u64;
        core.flood.sent_data();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::flood::Flood;
    use crate::http2::frame::Head;
    use crate::http2::hpack::Decoder;
    use osprey_sdk::abi_stable::std_types::RString;

    /// The frames in `out`: header and payload.
    fn frames(out: &[u8]) -> Vec<(Head, &[u8])> {
        let mut all = Vec::new();
        let mut at = 0;
        while at < out.len() {
            let head = Head::parse(out[at..at + HEADER_LEN].try_into().unwrap());
            let end = at + HEADER_LEN + head.len;
            all.push((head, &out[at + HEADER_LEN..end]));
            at = end;
        }
        all
    }

    #[test]
    fn connection_specific_and_core_fields_are_skipped() {
        for name in [
            "TE",
            "date",
            "Upgrade",
            "connection",
            "Keep-Alive",
            "content-length",
        ] {
            assert!(skipped(name), "{name}");
        }
        for name in ["proxy-connection", "Transfer-Encoding"] {
            assert!(skipped(name), "{name}");
        }
        for name in ["content-type", "x-date", "server", "tee"] {
            assert!(!skipped(name), "{name}");
        }
    }

    /// A name in any casing goes out in lowercase at its static index, indexed the same: the
    /// second answer's `content-type` is one byte from the dynamic table whatever its casing.
    /// None of the names found as written is one skipped.
    #[test]
    fn names_in_any_casing_go_out_lowercase_and_indexed() {
        let mut core = Core::new(1 << 20, Flood::new(0));
        let mut decoder = Decoder::new(4096);
        let mut lens = Vec::new();
        for (id, name) in [
            (1, "Content-Type"),
            (3, "CONTENT-TYPE"),
            (5, "content-type"),
        ] {
            let at = core.out.len();
            let mut resp = Response::default();
            resp.header(name, "text/html").header("ETag", "\"x\"");
            head(&mut core, id, &resp, None, true);
            let block = &core.out[at + HEADER_LEN..];
            // The first answer added content-type (62), then server (62, content-type 63).
            lens.push(block.len());
            assert_eq!(block.contains(&(0x80 | 63)), id > 1, "{name}");
            let mut fields = Vec::new();
            decoder
                .decode(block, |n, v| fields.push((n.to_vec(), v.to_vec())))
                .unwrap();
            assert!(fields.contains(&(b"content-type".to_vec(), b"text/html".to_vec())));
            assert!(fields.contains(&(b"etag".to_vec(), b"\"x\"".to_vec())));
        }
        assert!(lens[1] == lens[2] && lens[0] > lens[1] + "text/html".len());
        for (name, _) in hpack::STATIC {
            let name = std::str::from_utf8(name).unwrap();
            if hpack::written_index(name.as_bytes()).is_some() {
                assert!(!skipped(name), "{name}");
            }
        }
    }

    #[test]
    fn a_head_past_the_frame_size_continues_in_continuation_frames() {
        let mut core = Core::new(1 << 20, Flood::new(0));
        let mut resp = Response::default();
        let big = "v".repeat(40_000);
        resp.header("X-Big", RString::from(big));
        head(&mut core, 5, &resp, Some(3), false);
        let frames = frames(&core.out);
        let kinds: Vec<_> = frames.iter().map(|(h, _)| (h.kind, h.flags)).collect();
        assert_eq!(
            kinds,
            [(HEADERS, 0), (CONTINUATION, 0), (CONTINUATION, END_HEADERS)]
        );
        let block: Vec<u8> = frames.iter().flat_map(|(_, p)| p.to_vec()).collect();
        let mut fields = Vec::new();
        Decoder::new(4096)
            .decode(&block, |n, v| fields.push((n.to_vec(), v.len())))
            .unwrap();
        assert_eq!(fields[0], (b":status".to_vec(), 3));
        assert!(fields.contains(&(b"x-big".to_vec(), 40_000)));
        assert!(fields.contains(&(b"content-length".to_vec(), 1)));
    }

    /// Bodies held by reference: the same frames as copied ones, the payload the body's; a
    /// small one is copied.
    #[test]
    fn held_bodies_are_cut_at_the_frame_size_by_reference() {
        let body: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let shared = || Held::Shared(RArc::new(RVec::from(body.clone())));
        for held in [Held::Owned(RVec::from(body.clone())), shared()] {
            let mut core = Core::new(1 << 20, Flood::new(0));
            data_held(&mut core, 1, held, 100..40_000, true);
            assert_eq!(core.refs.len(), 39_900);
            let out = core.output().take_rest();
            let frames = frames(&out);
            let sizes: Vec<_> = frames.iter().map(|(h, _)| (h.len, h.flags)).collect();
            assert_eq!(sizes, [(16_384, 0), (16_384, 0), (7_132, END_STREAM)]);
            let sent: Vec<u8> = frames.iter().flat_map(|(_, p)| p.to_vec()).collect();
            assert_eq!(sent, body[100..]);
        }
        let mut core = Core::new(1 << 20, Flood::new(0));
        data_held(&mut core, 1, shared(), 0..MIN_REF - 1, false);
        assert_eq!(core.refs.len(), 0);
        assert_eq!(frames(&core.out)[0].1, &body[..MIN_REF - 1]);
    }

    #[test]
    fn data_is_cut_at_the_frame_size_and_ends_the_stream_once() {
        let mut core = Core::new(1 << 20, Flood::new(0));
        data(&mut core, 1, &[7; 40_000], true);
        let frames = frames(&core.out);
        let sizes: Vec<_> = frames.iter().map(|(h, _)| (h.len, h.flags)).collect();
        assert_eq!(sizes, [(16_384, 0), (16_384, 0), (7_232, END_STREAM)]);
    }
}
