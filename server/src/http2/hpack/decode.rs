//! The header block decoder (RFC 7541 §6): each field is handed to a callback as slices, of the
//! block itself or of a scratch buffer that Huffman strings are decoded into.

use super::table::Table;
use super::{huffman, read_int, DecodeError};

pub struct Decoder {
    table: Table,
    /// Our SETTINGS_HEADER_TABLE_SIZE: the most a size update may ask for.
    limit: usize,
    scratch: Vec<u8>,
    /// The last Huffman-coded value of a literal without indexing, coded and decoded. Such a
    /// value is not in the table, so a client sends it whole every time: nghttp2 (h2load,
    /// curl) sends each request's `:path` so, the same path request after request.
    /// Decoding is a function of the coded bytes alone: equal bytes, equal path.
    memo_coded: Vec<u8>,
    memo_plain: Vec<u8>,
}

/// Longer values are decoded every time (a memo would copy more than it saves).
const MEMO_MAX: usize = 128;

/// Where a string is: in the block, or in the scratch buffer (after Huffman decoding).
#[derive(Clone, Copy)]
enum Str {
    Block(usize, usize),
    Scratch(usize, usize),
    /// A name from the tables.
    Index(usize),
}

impl Decoder {
    pub fn new(limit: usize) -> Decoder {
        Decoder {
            table: Table::new(limit),
            limit,
            scratch: Vec::new(),
            memo_coded: Vec::new(),
            memo_plain: Vec::new(),
        }
    }

    /// Decode a complete header block, calling `field(name, value)` for each field in order.
    pub fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), DecodeError> {
        self.decode_checked(block, |name, value, _| {
            field(name, value);
            false
        })
    }

    /// [`decode`](Decoder::decode) for a caller that checks each field's bytes: `field(name,
    /// value, checked)` says whether they pass, and `checked` is true for a field that passed
    /// before — one from the static table, or from the dynamic table added when it passed. A
    /// client sends most of a request's fields so (`user-agent`, `:authority`, ...): their
    /// bytes are checked once per connection, not once per request.
    pub fn decode_checked(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8], bool) -> bool,
    ) -> Result<(), DecodeError> {
        let mut pos = 0;
        let mut fields_seen = false;
        while pos < block.len() {
            let b = block[pos];
            self.scratch.clear();
            if b & 0x80 != 0 {
                // §6.1 indexed field.
                let index = read_int(block, &mut pos, 7)?;
                let (name, value, checked) =
                    self.table.get_checked(index).ok_or(DecodeError::Index)?;
                field(name, value, checked);
                fields_seen = true;
            } else if b & 0xe0 == 0x20 {
                // §6.3 dynamic table size update: only before the first field (§4.2).
                let size = read_int(block, &mut pos, 5)?;
                if fields_seen || size > self.limit {
                    return Err(DecodeError::SizeUpdate);
                }
                self.table.set_max(size);
            } else {
                // §6.2 literals: with incremental indexing (01), without (0000), never (0001).
                let (prefix, indexing) = if b & 0x40 != 0 { (6, true) } else { (4, false) };
                let index = read_int(block, &mut pos, prefix)?;
                let name = if index == 0 {
                    self.string(block, &mut pos, false)?
                } else {
                    self.table.get(index).ok_or(DecodeError::Index)?;
                    Str::Index(index)
                };
                let value = self.string(block, &mut pos, !indexing)?;
                let (n, v) = (self.resolve(block, name), self.resolve(block, value));
                let passed = field(n, v, false);
                if indexing {
                    let (n, v) = (n.to_vec(), v.to_vec());
                    self.table.insert_checked(&n, &v, passed);
                }
                fields_seen = true;
            }
        }
        Ok(())
    }

    /// A string literal (§5.2); `memo`: a value sent without indexing (see `memo_coded`).
    fn string(&mut self, block: &[u8], pos: &mut usize, memo: bool) -> Result<Str, DecodeError> {
        let huffman = *block.get(*pos).ok_or(DecodeError::Truncated)? & 0x80 != 0;
        let len = read_int(block, pos, 7)?;
        let start = *pos;
        if len > block.len() - start {
            return Err(DecodeError::StringLength);
        }
        *pos += len;
        if !huffman {
            return Ok(Str::Block(start, start + len));
        }
        let from = self.scratch.len();
        let coded = &block[start..start + len];
        if !memo || len > MEMO_MAX {
            huffman::decode(coded, &mut self.scratch)?;
        } else if coded == self.memo_coded {
            self.scratch.extend_from_slice(&self.memo_plain);
        } else {
            huffman::decode(coded, &mut self.scratch)?;
            self.memo_coded.clear();
            self.memo_coded.extend_from_slice(coded);
            self.memo_plain.clear();
            self.memo_plain.extend_from_slice(&self.scratch[from..]);
        }
        Ok(Str::Scratch(from, self.scratch.len()))
    }

    fn resolve<'a>(&'a self, block: &'a [u8], s: Str) -> &'a [u8] {
        match s {
            Str::Block(a, b) => &block[a..b],
            Str::Scratch(a, b) => &self.scratch[a..b],
            Str::Index(i) => self.table.get(i).map_or(&[][..], |(name, _)| name),
        }
    }

    #[cfg(test)]
    pub fn table_size(&self) -> usize {
        self.table.size()
    }
}
