//! Per-thread pools of read buffers, response header vectors and request heads: a connection
//! borrows them while a request is in flight and gives them back, so an idle keep-alive
//! connection holds no buffer.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

use osprey_sdk::abi_stable::std_types::RVec;
use osprey_sdk::{Body, HeaderPair, Response};

use crate::http::parse::Head;

/// Capacity of a fresh read buffer: a typical request head fits.
const BUFFER_SIZE: usize = 8 * 1024;
/// Larger buffers are freed rather than pooled.
const MAX_POOLED_CAPACITY: usize = 64 * 1024;
const MAX_POOLED: usize = 256;

thread_local! {
    static BUFFERS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    // Only a response's header vector is worth keeping (its allocation); the response around
    // it is a few words, made anew.
    static HEADERS: RefCell<Vec<RVec<HeaderPair>>> = const { RefCell::new(Vec::new()) };
    // Boxed: a request carries its head as a `Box`, and pooling keeps the allocation.
    #[allow(clippy::vec_box)]
    static HEADS: RefCell<Vec<Box<Head>>> = const { RefCell::new(Vec::new()) };
}

/// A byte buffer from the thread's pool, given back when released or dropped. Released, it
/// holds no allocation; it takes one from the pool when it is next [`Buffer::ready`].
#[derive(Default)]
pub struct Buffer(Vec<u8>);

impl Buffer {
    /// Make sure the buffer has room (taking a pooled one if it was released).
    pub fn ready(&mut self) -> &mut Vec<u8> {
        if self.0.capacity() == 0 {
            self.0 = take_buffer();
        }
        &mut self.0
    }

    /// Give the allocation back to the pool now (the connection goes idle).
    pub fn release(&mut self) {
        give_buffer(std::mem::take(&mut self.0));
    }

    /// The bytes, leaving this buffer released (they travel with a request, or to HTTP/2).
    pub fn take_vec(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }

    /// Hold `bytes` (back from a request), releasing what was held.
    pub fn put_vec(&mut self, bytes: Vec<u8>) {
        give_buffer(std::mem::replace(&mut self.0, bytes));
    }

    /// The bytes as a buffer of their own (the pool gets them back when it is dropped).
    pub fn take(&mut self) -> Buffer {
        Buffer(self.take_vec())
    }
}

impl Deref for Buffer {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.release();
    }
}

/// An empty buffer of the pool's size, owned outright (an upstream's response head is read
/// into one); [`give_buffer`] returns it.
pub fn take_buffer() -> Vec<u8> {
    BUFFERS
        .with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(BUFFER_SIZE))
}

pub fn give_buffer(mut buf: Vec<u8>) {
    if buf.capacity() > MAX_POOLED_CAPACITY || buf.capacity() == 0 {
        return;
    }
    buf.clear();
    BUFFERS.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < MAX_POOLED {
            p.push(buf);
        }
    });
}

pub fn take_response() -> Response {
    Response {
        status: 200,
        headers: HEADERS.with(|p| p.borrow_mut().pop()).unwrap_or_default(),
        body: Body::Empty,
    }
}

pub fn give_response(mut resp: Response) {
    recycle_response(&mut resp);
}

/// Keep `resp`'s header vector, emptied, for a later response, leaving `resp` without one: an
/// answered request gives it back in place, without moving the exchange that holds `resp`.
pub fn recycle_response(resp: &mut Response) {
    let mut headers = std::mem::take(&mut resp.headers);
    if headers.capacity() == 0 || headers.capacity() > 64 {
        return;
    }
    headers.clear();
    HEADERS.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < MAX_POOLED {
            p.push(headers);
        }
    });
}

/// A request head to parse into (a head holds room for every header: a few KiB).
pub fn take_head() -> Box<Head> {
    HEADS.with(|p| p.borrow_mut().pop()).unwrap_or_default()
}

pub fn give_head(head: Box<Head>) {
    HEADS.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < MAX_POOLED {
            p.push(head);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_or_released_buffer_goes_back_to_the_pool() {
        let mut a = Buffer::default();
        assert_eq!(a.capacity(), 0, "a new buffer holds no allocation");
        a.ready().extend_from_slice(b"request");
        let first = a.as_ptr();
        drop(a);
        let mut b = Buffer::default();
        assert_eq!(
            b.ready().as_ptr(),
            first,
            "the dropped allocation is reused"
        );
        assert!(b.is_empty(), "a pooled buffer comes back empty");
        b.release();
        assert_eq!(b.capacity(), 0);
        let mut c = Buffer::default();
        assert_eq!(
            c.ready().as_ptr(),
            first,
            "the released allocation is reused"
        );
    }

    #[test]
    fn a_recycled_response_gives_its_header_vector_to_the_next_one() {
        let mut resp = take_response();
        resp.status = 404;
        resp.set_header("X-A", "1");
        resp.body = Body::Bytes(b"page".to_vec().into());
        let vector = resp.headers.as_ptr();
        recycle_response(&mut resp);
        assert!(resp.headers.is_empty() && resp.headers.capacity() == 0);
        let next = take_response();
        assert_eq!(next.headers.as_ptr(), vector, "the allocation is reused");
        assert!(next.headers.is_empty(), "and comes back empty");
        assert_eq!(next.status, 200);
        assert!(matches!(next.body, Body::Empty));
    }

    #[test]
    fn bytes_taken_out_travel_without_the_pool_and_come_back_with_put() {
        let mut a = Buffer::default();
        a.ready().extend_from_slice(b"head");
        let bytes = a.take_vec();
        assert_eq!(a.capacity(), 0);
        assert_eq!(bytes, b"head");
        a.put_vec(bytes);
        assert_eq!(&a[..], b"head");
    }
}
