//! The `Date` header value, formatted at most once a second per thread. Network threads
//! refresh it from their once-a-tick sweep (`conn::wait`), so a response reads no clock.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

struct Cached {
    /// The second `text` shows; 0 until first formatted.
    second: u64,
    /// Kept fresh by `refresh` (else each use checks the clock).
    refreshed: bool,
    text: [u8; 29],
}

thread_local! {
    static DATE: RefCell<Cached> = const {
        RefCell::new(Cached { second: 0, refreshed: false, text: [b' '; 29] })
    };
}

/// Bring this thread's date up to the current second; from then on `with_date` trusts the
/// cache (the caller refreshes it at least a few times a second).
pub fn refresh() {
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        cached.refreshed = true;
        update(&mut cached);
    })
}

fn update(cached: &mut Cached) {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    if cached.second != second {
        let text = httpdate::fmt_http_date(now);
        cached.text.copy_from_slice(&text.as_bytes()[..29]);
        cached.second = second;
    }
}

/// Run `f` with the current IMF-fixdate (e.g. `Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn with_date<R>(f: impl FnOnce(&[u8]) -> R) -> R {
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if !cached.refreshed {
            update(&mut cached);
        }
        f(&cached.text)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn date_is_imf_fixdate() {
        let text = super::with_date(|d| String::from_utf8(d.to_vec()).unwrap());
        assert!(text.ends_with(" GMT"), "{text}");
        assert!(httpdate::parse_http_date(&text).is_ok());
    }

    #[test]
    fn a_refreshed_date_is_current() {
        super::refresh();
        let text = super::with_date(|d| String::from_utf8(d.to_vec()).unwrap());
        let shown = httpdate::parse_http_date(&text).unwrap();
        let age = std::time::SystemTime::now().duration_since(shown).unwrap();
        assert!(age < std::time::Duration::from_secs(2), "{text}");
    }
}
