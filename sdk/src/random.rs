//! A fast random source for ids, sampling and jitter, and request ids.
//!
//! Each thread runs its own wyrand generator (a few nanoseconds a number, no lock), seeded once
//! from the operating system. It is not a cryptographic generator: for secrets (session keys,
//! CSRF tokens) use [`os_bytes`], which asks the OS every time.

use std::cell::Cell;

thread_local! {
    static STATE: Cell<u64> = Cell::new(os_seed());
}

fn os_seed() -> u64 {
    let mut seed = [0u8; 8];
    os_bytes(&mut seed);
    u64::from_ne_bytes(seed)
}

/// Fill `buf` from the operating system's generator (`getrandom(2)`): unpredictable, slower.
///
/// # Panics
/// When the OS has no random source at all (not the case on any supported system).
pub fn os_bytes(buf: &mut [u8]) {
    getrandom::getrandom(buf).expect("the operating system's random source failed");
}

/// A random `u64` from this thread's fast generator.
///
/// ```
/// let a = osprey_sdk::random::u64();
/// let b = osprey_sdk::random::u64();
/// assert_ne!(a, b);
/// ```
pub fn u64() -> u64 {
    STATE.with(|state| {
        // wyrand: one add and one 128-bit multiply per number.
        let s = state.get().wrapping_add(0xa076_1d64_78bd_642f);
        state.set(s);
        let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        (t as u64) ^ (t >> 64) as u64
    })
}

/// A random number in `0..n` (`n` must not be zero), without modulo bias.
///
/// ```
/// let die = osprey_sdk::random::below(6);
/// assert!(die < 6);
/// ```
pub fn below(n: u64) -> u64 {
    assert!(n > 0, "random::below(0)");
    // Lemire's multiply-and-reject.
    let zone = n.wrapping_neg() % n;
    loop {
        let m = u128::from(u64()) * u128::from(n);
        if (m as u64) >= zone {
            return (m >> 64) as u64;
        }
    }
}

/// Fill `buf` from this thread's fast generator.
pub fn fill(buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let n = u64().to_le_bytes();
        chunk.copy_from_slice(&n[..chunk.len()]);
    }
}

/// A request id: 128 random bits as 32 lower-case hex digits (the form nginx's `$request_id`
/// has). Copy, no allocation; [`RequestId::as_str`] gives the text.
///
/// ```
/// use osprey_sdk::random::RequestId;
///
/// let id = RequestId::new();
/// assert_eq!(id.as_str().len(), 32);
/// assert!(id.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
/// assert_ne!(id, RequestId::new());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId([u8; 32]);

impl RequestId {
    /// A fresh id from this thread's fast generator.
    pub fn new() -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0u8; 32];
        for (half, n) in text.chunks_mut(16).zip([u64(), u64()]) {
            for (i, digit) in half.iter_mut().enumerate() {
                *digit = HEX[(n >> (60 - 4 * i) & 0xf) as usize];
            }
        }
        RequestId(text)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        // SAFETY: only ASCII hex digits are ever stored.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }
}

impl Default for RequestId {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RequestId({})", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_hex_and_distinct() {
        let ids: HashSet<RequestId> = (0..10_000).map(|_| RequestId::new()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|id| id
            .as_str()
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))));
    }

    #[test]
    fn threads_get_different_seeds() {
        let here = u64();
        let there = std::thread::spawn(u64).join().unwrap();
        assert_ne!(here, there);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut seen = [false; 7];
        for _ in 0..1000 {
            seen[below(7) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(below(1), 0);
    }

    #[test]
    fn fill_covers_odd_lengths() {
        let mut buf = [0u8; 13];
        fill(&mut buf);
        assert!(buf[8..].iter().any(|&b| b != 0));
    }

    #[test]
    fn bits_are_balanced() {
        // A broken mixer shows up as a skewed bit count long before 64k draws.
        let ones: u32 = (0..1000).map(|_| u64().count_ones()).sum();
        assert!((30_000..34_000).contains(&ones), "{ones}");
    }
}
