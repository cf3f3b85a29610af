//! h2spec "hpack": header blocks the decoder must refuse (RFC 7541), a connection error of type
//! COMPRESSION_ERROR (RFC 9113 §4.3).

use crate::http2_frames::*;
use crate::Case;

pub fn hpack_cases() -> Vec<Case> {
    vec![
        (
            "hpack/2.3.3/1 an indexed field with an index past the tables",
            |c| refused(c, &integer(0x80, 7, 70), false),
        ),
        (
            "hpack/2.3.3/2 a literal whose name index is past the tables",
            |c| {
                let mut rep = integer(0x40, 6, 70);
                rep.extend(string(b"test"));
                refused(c, &rep, false)
            },
        ),
        (
            "hpack/4.2/1 a table size update at the end of a block",
            |c| refused(c, &[0x20], false),
        ),
        ("hpack/5.2/1 Huffman padding longer than 7 bits", |c| {
            // "a" (00011) with eleven bits of padding.
            refused(c, &literal(&[0x82, 0x1f, 0xff]), false)
        }),
        ("hpack/5.2/2 Huffman padding of zeros", |c| {
            // "a" (00011) padded with 000.
            refused(c, &literal(&[0x81, 0x18]), false)
        }),
        ("hpack/5.2/3 a Huffman string containing EOS", |c| {
            refused(c, &literal(&[0x84, 0xff, 0xff, 0xff, 0xff]), false)
        }),
        ("hpack/6.1/1 an indexed field with index 0", |c| {
            refused(c, &[0x80], false)
        }),
        (
            "hpack/6.3/1 a table size update above SETTINGS_HEADER_TABLE_SIZE",
            |c| {
                // The server's table size is its default, 4096, unless it said otherwise.
                let size = c.server_setting(HEADER_TABLE_SIZE).unwrap_or(4096) as usize;
                refused(c, &integer(0x20, 5, size + 1), true)
            },
        ),
    ]
}

/// A literal field without indexing, name "x-test", whose value is `value` as given (its
/// length byte included).
fn literal(value: &[u8]) -> Vec<u8> {
    let mut rep = vec![0x00];
    rep.extend(string(b"x-test"));
    rep.extend_from_slice(value);
    rep
}

/// A GET with `rep` after its fields (or before them, `first`): a connection error
/// COMPRESSION_ERROR.
fn refused(c: &mut Conn, rep: &[u8], first: bool) -> Check {
    let fields = c.block(&c.request("GET"));
    let block = if first {
        [rep, &fields].concat()
    } else {
        [&fields, rep].concat()
    };
    c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
    c.connection_error(&[COMPRESSION_ERROR])
}
