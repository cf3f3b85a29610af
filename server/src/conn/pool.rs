//! Per-thread pools of read buffers and responses: a connection borrows them while a request
//! is in flight and gives them back, so an idle keep-alive connection holds no buffer.

use std::cell::RefCell;

use osprey_sdk::Response;

use crate::http::parse::Head;

/// Capacity of a fresh read buffer: a typical request head fits.
const BUFFER_SIZE: usize = 8 * 1024;
/// Larger buffers are freed rather than pooled.
const MAX_POOLED_CAPACITY: usize = 64 * 1024;
const MAX_POOLED: usize = 256;

thread_local! {
    static BUFFERS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static RESPONSES: RefCell<Vec<Response>> = const { RefCell::new(Vec::new()) };
    // Boxed: a request carries its head as a `Box`, and pooling keeps the allocation.
    #[allow(clippy::vec_box)]
    static HEADS: RefCell<Vec<Box<Head>>> = const { RefCell::new(Vec::new()) };
}

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
    RESPONSES.with(|p| p.borrow_mut().pop()).unwrap_or_default()
}

pub fn give_response(mut resp: Response) {
    resp.clear();
    if resp.headers.capacity() > 64 {
        return;
    }
    RESPONSES.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < MAX_POOLED {
            p.push(resp);
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
