//! `userid`'s new ids between its two steps: `request_headers` makes a visitor's id and
//! `after` must set the same one in the cookie, though a new id is random and other requests
//! may run on the thread in between (an asynchronous handler). Ids waiting for their `after`
//! are kept per thread by filter and request id; `after` takes its own out, so even requests
//! with the same id (a trusted proxy that repeats `X-Request-Id`) never share one.

use std::cell::RefCell;

/// An id as `userid` writes it: 32 lower-case hex digits.
pub type Id = [u8; 32];

/// A trusted proxy's request id is kept up to this length (the core's limit).
const MAX_REQUEST_ID: usize = 64;

/// Ids kept per thread at most: beyond, the oldest is dropped (its `after` makes a new id).
const CAPACITY: usize = 32;

struct Pending {
    /// The filter that made it (its address).
    filter: usize,
    request: [u8; MAX_REQUEST_ID],
    len: u8,
    id: Id,
}

impl Pending {
    fn is(&self, filter: usize, request: &str) -> bool {
        self.filter == filter && &self.request[..self.len as usize] == request.as_bytes()
    }
}

thread_local!(static PENDING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) });

/// Keep `id`, made by `filter` for the request `request`, for its `after`.
pub fn keep(filter: usize, request: &str, id: Id) {
    if request.len() > MAX_REQUEST_ID {
        return;
    }
    let mut entry = Pending {
        filter,
        request: [0; MAX_REQUEST_ID],
        len: request.len() as u8,
        id,
    };
    entry.request[..request.len()].copy_from_slice(request.as_bytes());
    PENDING.with_borrow_mut(|pending| {
        if pending.len() == CAPACITY {
            pending.remove(0);
        }
        pending.push(entry);
    });
}

/// The id `filter` kept for `request`, taken out (the oldest of several).
pub fn take(filter: usize, request: &str) -> Option<Id> {
    PENDING.with_borrow_mut(|pending| {
        let at = pending.iter().position(|p| p.is(filter, request))?;
        Some(pending.remove(at).id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kept_id_is_taken_once_in_order() {
        keep(1, "r", [b'a'; 32]);
        keep(1, "r", [b'b'; 32]);
        keep(2, "r", [b'c'; 32]);
        assert_eq!(take(1, "r"), Some([b'a'; 32]));
        assert_eq!(take(1, "r"), Some([b'b'; 32]));
        assert_eq!(take(1, "r"), None);
        assert_eq!(take(2, "r"), Some([b'c'; 32]));
    }

    #[test]
    fn the_oldest_goes_when_full() {
        for i in 0..=CAPACITY {
            keep(3, &i.to_string(), [b'x'; 32]);
        }
        assert_eq!(take(3, "0"), None);
        assert!(take(3, &CAPACITY.to_string()).is_some());
        PENDING.with_borrow_mut(Vec::clear);
    }
}
