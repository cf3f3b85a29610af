//! `userid`'s new ids between its two steps: `request_headers` makes a visitor's id and
//! `after` must set the same one in the cookie, though a new id is random and other requests
//! may run on the thread in between (an asynchronous handler). Ids waiting for their `after`
//! are kept per thread by filter and request id; `after` takes its own out, so even requests
//! with the same id (a trusted proxy that repeats `X-Request-Id`) never share one.
//!
//! A new visitor's `request_headers` keeps its id on the network thread that runs its `after`
//! (both steps are inline), so while every kept id is still here, an `after` that finds none
//! waiting knows its `request_headers` found the client's id ([`none_waiting`]): a returning
//! visitor costs no second cookie lookup. Once an id is dropped (too many waiting, or a
//! request id too long to keep) that no longer holds, and the thread's `after`s look again.

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

struct Kept {
    ids: Vec<Pending>,
    /// An id was not kept or was dropped: an `after` may find none though it made one.
    lost: bool,
}

thread_local!(static PENDING: RefCell<Kept> = const {
    RefCell::new(Kept { ids: Vec::new(), lost: false })
});

/// No id is waiting on this thread and none was ever lost: an `after` of a request whose
/// `request_headers` ran here made no id.
pub fn none_waiting() -> bool {
    PENDING.with_borrow(|kept| kept.ids.is_empty() && !kept.lost)
}

/// Keep `id`, made by `filter` for the request `request`, for its `after`.
pub fn keep(filter: usize, request: &str, id: Id) {
    if request.len() > MAX_REQUEST_ID {
        return PENDING.with_borrow_mut(|kept| kept.lost = true);
    }
    let mut entry = Pending {
        filter,
        request: [0; MAX_REQUEST_ID],
        len: request.len() as u8,
        id,
    };
    entry.request[..request.len()].copy_from_slice(request.as_bytes());
    PENDING.with_borrow_mut(|kept| {
        if kept.ids.len() == CAPACITY {
            kept.ids.remove(0);
            kept.lost = true;
        }
        kept.ids.push(entry);
    });
}

/// The id `filter` kept for `request`, taken out (the oldest of several).
pub fn take(filter: usize, request: &str) -> Option<Id> {
    PENDING.with_borrow_mut(|kept| {
        let at = kept.ids.iter().position(|p| p.is(filter, request))?;
        Some(kept.ids.remove(at).id)
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
    fn the_oldest_goes_when_full_and_then_afters_look_again() {
        for i in 0..=CAPACITY {
            keep(3, &i.to_string(), [b'x'; 32]);
        }
        assert_eq!(take(3, "0"), None);
        for i in 1..=CAPACITY {
            assert!(take(3, &i.to_string()).is_some());
        }
        assert!(!none_waiting(), "an id was dropped: its `after` must look");
        reset();
    }

    #[test]
    fn none_waits_once_every_kept_id_is_taken() {
        assert!(none_waiting());
        keep(4, "r", [b'a'; 32]);
        assert!(!none_waiting());
        assert!(take(4, "r").is_some());
        assert!(none_waiting());
    }

    #[test]
    fn an_id_not_kept_makes_afters_look() {
        keep(5, &"r".repeat(MAX_REQUEST_ID + 1), [b'a'; 32]);
        assert!(!none_waiting());
        reset();
    }

    /// This test thread's ids forgotten, as a new thread's.
    fn reset() {
        PENDING.with_borrow_mut(|kept| (kept.ids.clear(), kept.lost = false));
    }
}
