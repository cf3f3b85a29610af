//! The buffers response heads are read into, reused on each network thread: a fresh 8 KiB
//! allocation for every proxied request cost ~490 instructions (a medium size for mimalloc),
//! a reused buffer a few dozen.

use std::cell::RefCell;

/// What one read of a response head may take (nginx's `proxy_buffer_size`: one page, 4 or
/// 8 KiB); a head that does not fit grows its buffer, which is then not reused.
pub const SIZE: usize = 8 * 1024;

/// Buffers kept per thread: one for each request waiting for its head at once, up to this
/// (1 MiB).
const KEEP: usize = 128;

thread_local! {
    static FREE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer of `SIZE` bytes.
pub fn take() -> Vec<u8> {
    FREE.with(|free| free.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(SIZE))
}

/// Give a buffer back for the next head (one that grew is dropped).
pub fn give(mut buf: Vec<u8>) {
    if buf.capacity() != SIZE {
        return;
    }
    buf.clear();
    FREE.with(|free| {
        let mut free = free.borrow_mut();
        if free.len() < KEEP {
            free.push(buf);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_empty_unless_they_grew() {
        let mut a = take();
        a.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        let at = a.as_ptr();
        give(a);
        let b = take();
        assert_eq!((b.as_ptr(), b.len(), b.capacity()), (at, 0, SIZE));
        let mut grown = b;
        grown.reserve(SIZE * 2);
        give(grown);
        assert_eq!(take().capacity(), SIZE, "a grown buffer is not kept");
    }
}
