//! Maps keyed by integers that are unique already (HTTP/2 stream ids, upstream server keys):
//! one multiplication (Fibonacci hashing) spreads such keys, where the default SipHash costs
//! far more on every lookup of a hot path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

#[derive(Default)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(SPREAD);
        }
    }

    fn write_u32(&mut self, key: u32) {
        self.write_u64(u64::from(key));
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key.wrapping_mul(SPREAD);
    }
}

/// A `HashMap` with [`IntHasher`].
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;
