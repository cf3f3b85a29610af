//! h2spec "generic": what any HTTP/2 server must accept and answer.

use crate::http2_frames::*;
use crate::Case;

pub fn generic_cases() -> Vec<Case> {
    vec![
        ("generic/1/1 sends a client connection preface", |c| {
            c.alive()
        }),
        ("generic/2/1 PRIORITY on an idle stream", |c| {
            c.priority(1, 0, false, 255);
            c.get(1);
            c.response(1)
        }),
        (
            "generic/2/2 WINDOW_UPDATE on a half-closed (remote) stream",
            |c| {
                c.get(1);
                c.window_update(1, 1);
                c.response(1)
            },
        ),
        (
            "generic/2/3 PRIORITY on a half-closed (remote) stream",
            |c| {
                c.get(1);
                c.priority(1, 0, false, 255);
                c.response(1)
            },
        ),
        (
            "generic/2/4 RST_STREAM on a half-closed (remote) stream",
            |c| {
                c.get(1);
                c.rst(1, CANCEL);
                c.alive()
            },
        ),
        ("generic/2/5 PRIORITY on a closed stream", |c| {
            c.get(1);
            c.stream_end(1)?;
            c.priority(1, 0, false, 255);
            c.alive()
        }),
        ("generic/3.1/1 a DATA frame", |c| {
            c.post(1, 4);
            c.send_frame(DATA, END_STREAM, 1, b"test");
            c.response(1)
        }),
        ("generic/3.1/2 several DATA frames", |c| {
            c.post(1, 8);
            c.send_frame(DATA, 0, 1, b"test");
            c.send_frame(DATA, END_STREAM, 1, b"test");
            c.response(1)
        }),
        ("generic/3.1/3 a DATA frame with padding", |c| {
            c.post(1, 4);
            c.send_frame(DATA, END_STREAM | PADDED, 1, &padded(b"test", 8));
            c.response(1)
        }),
        ("generic/3.2/1 a HEADERS frame", |c| {
            c.get(1);
            c.response(1)
        }),
        ("generic/3.2/2 a HEADERS frame with padding", |c| {
            let block = c.block(&c.request("GET"));
            let flags = END_HEADERS | END_STREAM | PADDED;
            c.send_frame(HEADERS, flags, 1, &padded(&block, 8));
            c.response(1)
        }),
        ("generic/3.2/3 a HEADERS frame with priority", |c| {
            let mut payload = priority_fields(0, false, 255);
            payload.extend(c.block(&c.request("GET")));
            let flags = END_HEADERS | END_STREAM | PRIORITY_FLAG;
            c.send_frame(HEADERS, flags, 1, &payload);
            c.response(1)
        }),
        ("generic/3.3/1 PRIORITY with weight 1", |c| {
            c.priority(1, 0, false, 0);
            c.get(1);
            c.response(1)
        }),
        ("generic/3.3/2 PRIORITY with weight 256", |c| {
            c.priority(1, 0, false, 255);
            c.get(1);
            c.response(1)
        }),
        ("generic/3.3/3 PRIORITY with a stream dependency", |c| {
            c.priority(3, 1, false, 255);
            c.get(1);
            c.response(1)
        }),
        ("generic/3.3/4 PRIORITY with the exclusive bit", |c| {
            c.priority(3, 1, true, 255);
            c.get(1);
            c.response(1)
        }),
        (
            "generic/3.3/5 PRIORITY for an idle stream, then HEADERS on a lower one",
            |c| {
                c.priority(3, 0, false, 255);
                c.get(1);
                c.response(1)
            },
        ),
        ("generic/3.4/1 RST_STREAM", |c| {
            c.post(1, 4);
            c.rst(1, CANCEL);
            c.alive()
        }),
        ("generic/3.5/1 SETTINGS", |c| {
            c.settings(&[(ENABLE_PUSH, 0)]);
            c.settings_ack()
        }),
        ("generic/3.7/1 PING", |c| c.alive()),
        ("generic/3.8/1 GOAWAY", |c| {
            c.goaway(0, NO_ERROR);
            let data = *b"h2goaway";
            c.send_frame(PING, 0, 0, &data);
            c.ping_ack_or_closed(data)
        }),
        ("generic/3.9/1 WINDOW_UPDATE on stream 0", |c| {
            c.window_update(0, 1);
            c.alive()
        }),
        ("generic/3.9/2 WINDOW_UPDATE on stream 1", |c| {
            c.get(1);
            c.window_update(1, 1);
            c.response(1)
        }),
        ("generic/3.10/1 CONTINUATION", |c| {
            let block = c.block(&c.request("GET"));
            let (first, rest) = block.split_at(block.len() / 2);
            c.send_frame(HEADERS, END_STREAM, 1, first);
            c.send_frame(CONTINUATION, END_HEADERS, 1, rest);
            c.response(1)
        }),
        ("generic/3.10/2 several CONTINUATION frames", |c| {
            let block = c.block(&c.request("GET"));
            let third = block.len() / 3;
            c.send_frame(HEADERS, END_STREAM, 1, &block[..third]);
            c.send_frame(CONTINUATION, 0, 1, &block[third..2 * third]);
            c.send_frame(CONTINUATION, END_HEADERS, 1, &block[2 * third..]);
            c.response(1)
        }),
        ("generic/4/1 GET", |c| {
            c.get(1);
            c.response(1)
        }),
        ("generic/4/2 HEAD", |c| {
            let block = c.block(&c.request("HEAD"));
            c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
            c.response(1)
        }),
        ("generic/4/3 POST", |c| {
            c.post(1, 4);
            c.send_frame(DATA, END_STREAM, 1, b"test");
            c.response(1)
        }),
        ("generic/4/4 POST with trailers", |c| {
            c.post(1, 4);
            c.send_frame(DATA, 0, 1, b"test");
            let trailers = c.block(&[("x-trailer".into(), "done".into())]);
            c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &trailers);
            c.response(1)
        }),
        ("generic/5/1 indexed header field", hpack_indexed),
        (
            "generic/5/2 literal with incremental indexing, indexed name",
            |c| hpack_indexed_name(c, 0x40, false),
        ),
        ("generic/5/3 same, Huffman-coded", |c| {
            hpack_indexed_name(c, 0x40, true)
        }),
        (
            "generic/5/4 literal with incremental indexing, new name",
            |c| hpack_new_name(c, 0x40, false),
        ),
        ("generic/5/5 same, Huffman-coded", |c| {
            hpack_new_name(c, 0x40, true)
        }),
        ("generic/5/6 literal without indexing, indexed name", |c| {
            hpack_indexed_name(c, 0x00, false)
        }),
        ("generic/5/7 same, Huffman-coded", |c| {
            hpack_indexed_name(c, 0x00, true)
        }),
        ("generic/5/8 literal without indexing, new name", |c| {
            hpack_new_name(c, 0x00, false)
        }),
        ("generic/5/9 same, Huffman-coded", |c| {
            hpack_new_name(c, 0x00, true)
        }),
        ("generic/5/10 literal never indexed, indexed name", |c| {
            hpack_indexed_name(c, 0x10, false)
        }),
        ("generic/5/11 same, Huffman-coded", |c| {
            hpack_indexed_name(c, 0x10, true)
        }),
        ("generic/5/12 literal never indexed, new name", |c| {
            hpack_new_name(c, 0x10, false)
        }),
        ("generic/5/13 same, Huffman-coded", |c| {
            hpack_new_name(c, 0x10, true)
        }),
        ("generic/5/14 a dynamic table size update", |c| {
            // A size update to 0 opens the block (RFC 7541 §4.2).
            let mut block = vec![0x20];
            block.extend(c.block(&c.request("GET")));
            c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
            c.response(1)
        }),
        ("generic/5/15 several dynamic table size updates", |c| {
            let mut block = vec![0x20];
            block.extend(integer(0x20, 5, 4096));
            block.extend(c.block(&c.request("GET")));
            c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
            c.response(1)
        }),
    ]
}

/// A GET whose `:method`, `:scheme` and `:path` are indexed fields (RFC 7541 §6.1: static
/// entries 2, 6 or 7, and 4).
fn hpack_indexed(c: &mut Conn) -> Check {
    let mut fields = c.request("GET");
    let scheme = if fields[1].1 == "https" { 0x87 } else { 0x86 };
    let mut block = vec![0x82, scheme, 0x84];
    fields.retain(|(n, _)| n == ":authority");
    block.extend(c.block(&fields));
    c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
    c.response(1)
}

/// A GET with `user-agent` (static name index 58) as a literal of type `first` (`0x40`:
/// incremental indexing, 6-bit index; `0x00`: without indexing and `0x10`: never indexed,
/// 4-bit index), its value plain or Huffman-coded.
fn hpack_indexed_name(c: &mut Conn, first: u8, huffman: bool) -> Check {
    let fields = c.request("GET");
    let mut block = c.block(&fields);
    let bits = if first == 0x40 { 6 } else { 4 };
    block.extend(integer(first, bits, 58));
    block.extend(value("h2-test", huffman));
    c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
    c.response(1)
}

/// A GET with a field whose name is new, as a literal of type `first`, plain or Huffman-coded.
fn hpack_new_name(c: &mut Conn, first: u8, huffman: bool) -> Check {
    let fields = c.request("GET");
    let mut block = c.block(&fields);
    block.push(first);
    block.extend(value("h2-test", huffman));
    block.extend(value("spec", huffman));
    c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
    c.response(1)
}

fn value(text: &str, huffman: bool) -> Vec<u8> {
    if huffman {
        huffman_string(text)
    } else {
        string(text.as_bytes())
    }
}
