//! The dynamic table (RFC 7541 §2.3.2, §4): newest entry first, evicted from the oldest; an
//! entry's size is its name and value lengths plus 32.

use std::collections::VecDeque;

use super::static_table::STATIC;

pub struct Table {
    /// Name and value in one allocation, with the name's length, and whether the decoder's
    /// caller passed the field's bytes when it was added (see `Decoder::decode_checked`).
    entries: VecDeque<(Box<[u8]>, usize, bool)>,
    size: usize,
    max: usize,
    /// Entries added so far: the sequence number of the next (see `by_seq`).
    added: usize,
}

impl Table {
    pub fn new(max: usize) -> Table {
        Table {
            entries: VecDeque::new(),
            size: 0,
            max,
            added: 0,
        }
    }

    /// A field by its index in both tables (1-based; the static table first).
    pub fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        if index == 0 {
            return None;
        }
        if index <= STATIC.len() {
            return Some(STATIC[index - 1]);
        }
        let (both, name, _) = self.entries.get(index - STATIC.len() - 1)?;
        Some(both.split_at(*name))
    }

    /// [`get`](Table::get), and whether the field's bytes passed its caller's checks when it
    /// was added (the static table's all do).
    pub fn get_checked(&self, index: usize) -> Option<(&[u8], &[u8], bool)> {
        if index == 0 {
            return None;
        }
        if index <= STATIC.len() {
            let (name, value) = STATIC[index - 1];
            return Some((name, value, true));
        }
        let (both, name, checked) = self.entries.get(index - STATIC.len() - 1)?;
        let (name, value) = both.split_at(*name);
        Some((name, value, *checked))
    }

    /// The index of an entry of the dynamic table with this name and value.
    pub fn find(&self, name: &[u8], value: &[u8]) -> Option<usize> {
        let len = name.len() + value.len();
        self.entries
            .iter()
            .position(|(both, n, _)| {
                *n == name.len() && both.len() == len && &both[..*n] == name && &both[*n..] == value
            })
            .map(|at| STATIC.len() + 1 + at)
    }

    /// The sequence number the entry added next gets.
    pub fn next_seq(&self) -> usize {
        self.added
    }

    /// The index and value of the entry added as number `seq`, while it is in the table
    /// (entries are evicted oldest first, so it is there while fewer than the table's length
    /// have been added since).
    pub fn by_seq(&self, seq: usize) -> Option<(usize, &[u8])> {
        let at = self.added.checked_sub(seq + 1)?;
        let (both, name, _) = self.entries.get(at)?;
        Some((STATIC.len() + 1 + at, &both[*name..]))
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn set_max(&mut self, max: usize) {
        self.max = max;
        self.evict(0);
    }

    /// Add a field, evicting old ones to make room (one larger than the table empties it).
    pub fn insert(&mut self, name: &[u8], value: &[u8]) {
        self.insert_checked(name, value, false);
    }

    /// Add a field whose bytes passed the decoder's caller's checks (`checked`) or not.
    pub fn insert_checked(&mut self, name: &[u8], value: &[u8], checked: bool) {
        let size = name.len() + value.len() + 32;
        self.evict(size);
        if size > self.max {
            return;
        }
        let mut both = Vec::with_capacity(name.len() + value.len());
        both.extend_from_slice(name);
        both.extend_from_slice(value);
        self.entries
            .push_front((both.into_boxed_slice(), name.len(), checked));
        self.size += size;
        self.added += 1;
    }

    /// Evict until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some((both, _, _)) = self.entries.pop_back() else {
                break;
            };
            self.size -= both.len() + 32;
        }
    }

    #[cfg(test)]
    pub fn size(&self) -> usize {
        self.size
    }
}
