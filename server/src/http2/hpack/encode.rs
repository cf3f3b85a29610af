//! The response header encoder: `:status` from the static table when it is there, names by
//! their static index, values as plain literals (§6.2). A few fields whose values repeat from
//! response to response (`server`, `content-type`, ...) are added to the dynamic table and then
//! sent as one byte; the table mirrors the client's, within its SETTINGS_HEADER_TABLE_SIZE.
//! `date` is not indexed: a new value each second would fill the table with stale ones.

use super::static_table::{name_index, SERVER, STATIC};
use super::table::Table;
use super::write_int;

/// The most of the client's table we use (its default size).
const MAX_TABLE: usize = 4096;
/// Static table entries.
const STATIC_LEN: usize = STATIC.len();
/// Longer values are not indexed.
const MAX_INDEXED_VALUE: usize = 128;

pub struct Encoder {
    table: Table,
    /// Size updates to signal at the start of the next block (§4.2): the smallest since the
    /// last block, then the current one.
    update: Option<(usize, usize)>,
    /// By static name index: 1 + the sequence number (`Table::by_seq`) of the entry last added
    /// with that name, 0 for none. A name's value seldom changes, so one compare usually finds
    /// it instead of a scan of the table.
    last_added: [usize; STATIC_LEN + 1],
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder {
            table: Table::new(MAX_TABLE),
            update: None,
            last_added: [0; STATIC_LEN + 1],
        }
    }
}

/// Static name indexes of the fields worth indexing: accept-ranges, cache-control,
/// content-encoding, content-type, server, vary.
fn indexed(name_index: usize) -> bool {
    matches!(name_index, 18 | 24 | 26 | 31 | SERVER | 59)
}

impl Encoder {
    /// The client's SETTINGS_HEADER_TABLE_SIZE.
    pub fn set_max(&mut self, max: usize) {
        let max = max.min(MAX_TABLE);
        if max == self.table.max() && self.update.is_none() {
            return;
        }
        self.table.set_max(max);
        let smallest = self.update.map_or(max, |(s, _)| s.min(max));
        self.update = Some((smallest, max));
    }

    /// Start a header block.
    pub fn begin(&mut self, out: &mut Vec<u8>) {
        if let Some((smallest, last)) = self.update.take() {
            if smallest != last {
                write_int(out, smallest, 5, 0x20);
            }
            write_int(out, last, 5, 0x20);
        }
    }

    /// `:status` (§8.3.2 of RFC 9113).
    pub fn status(&mut self, out: &mut Vec<u8>, status: u16) {
        let index = match status {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => 0,
        };
        if index != 0 {
            out.push(0x80 | index);
            return;
        }
        // Literal without indexing, the name `:status` (index 8).
        out.push(0x08);
        let mut digits = itoa::Buffer::new();
        let text = digits.format(status);
        write_int(out, text.len(), 7, 0);
        out.extend_from_slice(text.as_bytes());
    }

    /// A field; the name must be lowercase already.
    pub fn field(&mut self, out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        match name_index(name) {
            Some(i) => self.static_name(out, i, value),
            None => {
                out.push(0);
                write_int(out, name.len(), 7, 0);
                out.extend_from_slice(name);
                write_int(out, value.len(), 7, 0);
                out.extend_from_slice(value);
            }
        }
    }

    /// A field whose name is the static table's entry `i`: indexed when it is worth it.
    pub fn static_name(&mut self, out: &mut Vec<u8>, i: usize, value: &[u8]) {
        if indexed(i) && value.len() <= MAX_INDEXED_VALUE {
            self.indexing(out, i, STATIC[i - 1].0, value)
        } else {
            self.indexed_name(out, i, value)
        }
    }

    /// A field whose name is the static table's entry `index` (the fields the core sets).
    pub fn indexed_name(&mut self, out: &mut Vec<u8>, index: usize, value: &[u8]) {
        write_int(out, index, 4, 0);
        write_int(out, value.len(), 7, 0);
        out.extend_from_slice(value);
    }

    /// A field worth indexing (name index `i`): one byte once it is in the table.
    pub fn indexing(&mut self, out: &mut Vec<u8>, i: usize, name: &[u8], value: &[u8]) {
        if let Some(at) = self.find(i, name, value) {
            write_int(out, at, 7, 0x80);
            return;
        }
        write_int(out, i, 6, 0x40);
        write_int(out, value.len(), 7, 0);
        out.extend_from_slice(value);
        let seq = self.table.next_seq();
        self.table.insert(name, value);
        // (Not added when larger than the whole table.)
        if self.table.next_seq() != seq {
            self.last_added[i] = seq + 1;
        }
    }

    /// The dynamic table's index of `name` (static name index `i`) with `value`: the entry
    /// last added with that name, else a scan.
    fn find(&self, i: usize, name: &[u8], value: &[u8]) -> Option<usize> {
        let last = self.last_added[i].checked_sub(1);
        match last.and_then(|seq| self.table.by_seq(seq)) {
            Some((at, v)) if v == value => Some(at),
            _ => self.table.find(name, value),
        }
    }

    /// A field whose name is written in lowercase as it is copied.
    pub fn field_lowercasing(&mut self, out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        // Lowercased on the stack in one pass, without looking for uppercase first: handlers
        // write `Content-Type`, `ETag`, ... on every answer.
        let mut buf = [0u8; 64];
        if let Some(lower) = buf.get_mut(..name.len()) {
            lowercase_into(lower, name);
            return self.field(out, lower, value);
        }
        self.field(out, &name.to_ascii_lowercase(), value)
    }

    #[cfg(test)]
    pub fn table_size(&self) -> usize {
        self.table.size()
    }
}

/// `src` with its ASCII capitals lowered, into `dst` (as long): eight bytes at a time, the
/// last word overlapping the one before (lowering twice changes nothing), so a name of 8 to
/// 16 bytes is two words, not a loop per byte.
fn lowercase_into(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n < 8 {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_ascii_lowercase();
        }
        return;
    }
    let lower = |at: usize, dst: &mut [u8]| {
        let word = u64::from_le_bytes(src[at..at + 8].try_into().unwrap());
        dst[at..at + 8].copy_from_slice(&lower_word(word).to_le_bytes());
    };
    for at in (0..n - 8).step_by(8) {
        lower(at, dst);
    }
    lower(n - 8, dst);
}

/// Each byte of `w` in `A..=Z` gets its 0x20 bit: a byte below 0x80 plus 0x80 - b'A' reaches
/// 0x80 from `A` on, plus 0x80 - b'Z' - 1 from past `Z` on, and no sum carries into the next
/// byte.
fn lower_word(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = ONES * 0x80;
    let low = w & !HIGHS;
    let from_a = low + ONES * u64::from(0x80 - b'A');
    let past_z = low + ONES * u64::from(0x80 - b'Z' - 1);
    let upper = from_a & !past_z & !w & HIGHS;
    w | (upper >> 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte value at every place of names of every length up to 40: the same as
    /// `to_ascii_lowercase`.
    #[test]
    fn names_are_lowered_as_ascii_lowercase_does() {
        for len in 0..=40 {
            for b in 0..=255u8 {
                for at in 0..len {
                    let mut name: Vec<u8> = (0..len).map(|i| b"Ab-Z@[`z"[i % 8]).collect();
                    name[at] = b;
                    let mut lower = vec![0; len];
                    lowercase_into(&mut lower, &name);
                    assert_eq!(lower, name.to_ascii_lowercase(), "{name:?}");
                }
            }
        }
    }
}
