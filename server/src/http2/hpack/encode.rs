//! The response header encoder: `:status` from the static table when it is there, names by
//! their static index, values as plain literals without indexing (§6.2.2). It never adds to
//! the dynamic table, so the peer's table size never matters.

use super::static_table::name_index;
use super::write_int;

#[derive(Default)]
pub struct Encoder;

impl Encoder {
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
            Some(i) => self.indexed_name(out, i, value),
            None => {
                out.push(0);
                write_int(out, name.len(), 7, 0);
                out.extend_from_slice(name);
                write_int(out, value.len(), 7, 0);
                out.extend_from_slice(value);
            }
        }
    }

    /// A field whose name is the static table's entry `index` (the fields the core sets).
    pub fn indexed_name(&mut self, out: &mut Vec<u8>, index: usize, value: &[u8]) {
        write_int(out, index, 4, 0);
        write_int(out, value.len(), 7, 0);
        out.extend_from_slice(value);
    }

    /// A field whose name is written in lowercase as it is copied.
    pub fn field_lowercasing(&mut self, out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        if !name.iter().any(u8::is_ascii_uppercase) {
            return self.field(out, name, value);
        }
        let lower = name.to_ascii_lowercase();
        self.field(out, &lower, value)
    }
}
