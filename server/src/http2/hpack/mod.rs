//! HPACK (RFC 7541): the request decoder and the response encoder. Written here rather than
//! taken from a crate: `hpack` (0.3, unmaintained since 2016) and its fork `fluke-hpack` call
//! back with a `Cow` per field that is an allocation for every Huffman-coded string (clients
//! Huffman-code nearly all of them), and their encoders return a new `Vec` per block; this
//! decoder calls back with slices of the block or of one reused scratch buffer, and the
//! encoder writes into the connection's output buffer.

mod decode;
mod encode;
mod huffman;
mod huffman_codes;
mod static_table;
mod table;

pub use decode::Decoder;
pub use encode::Encoder;
#[cfg(test)]
pub use static_table::STATIC;
pub use static_table::{written_index, CONTENT_LENGTH, DATE, SERVER};

/// A decoding error: a connection error COMPRESSION_ERROR (RFC 9113 §4.3).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum DecodeError {
    /// The block ended inside a representation.
    Truncated,
    /// An integer past the limit.
    Integer,
    /// A string longer than the block allows.
    StringLength,
    Huffman,
    /// Index 0, or an index past both tables.
    Index,
    /// A dynamic table size update after a field, or above the limit.
    SizeUpdate,
}

/// Integers (indexes, lengths, sizes) beyond this are refused: no field can be that large.
const MAX_INT: u64 = 1 << 24;

/// Decode an integer with an `n`-bit prefix (§5.1) from `buf[*pos..]`.
fn read_int(buf: &[u8], pos: &mut usize, n: u8) -> Result<usize, DecodeError> {
    let mask = (1u16 << n) as u8 - 1;
    let first = *buf.get(*pos).ok_or(DecodeError::Truncated)? & mask;
    *pos += 1;
    if first < mask {
        return Ok(first as usize);
    }
    let (mut value, mut shift) = (mask as u64, 0u32);
    loop {
        let b = *buf.get(*pos).ok_or(DecodeError::Truncated)?;
        *pos += 1;
        value += ((b & 0x7f) as u64) << shift;
        if value > MAX_INT {
            return Err(DecodeError::Integer);
        }
        if b & 0x80 == 0 {
            return Ok(value as usize);
        }
        shift += 7;
    }
}

/// Encode `value` with an `n`-bit prefix, the prefix's other bits `flags`. Inlined: nearly
/// every integer of a response block is one byte, or two (a static name index past 14 in
/// a 4-bit prefix: `content-length`, `etag`, `last-modified`), and a call cost more than
/// the bytes.
#[inline]
fn write_int(out: &mut Vec<u8>, value: usize, n: u8, flags: u8) {
    let mask = (1usize << n) - 1;
    if value < mask {
        out.push(flags | value as u8);
    } else if value - mask < 0x80 {
        out.extend_from_slice(&[flags | mask as u8, (value - mask) as u8]);
    } else {
        write_long_int(out, value, mask, flags);
    }
}

/// [`write_int`] past its prefix.
#[inline(never)]
fn write_long_int(out: &mut Vec<u8>, value: usize, mask: usize, flags: u8) {
    out.push(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests;
