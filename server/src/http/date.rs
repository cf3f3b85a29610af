//! The `Date` header value, formatted at most once a second per thread.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

struct Cached {
    second: u64,
    text: [u8; 29],
}

thread_local! {
    static DATE: RefCell<Cached> = const { RefCell::new(Cached { second: 0, text: [b' '; 29] }) };
}

/// Run `f` with the current IMF-fixdate (e.g. `Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn with_date<R>(f: impl FnOnce(&[u8]) -> R) -> R {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.second != second {
            let text = httpdate::fmt_http_date(now);
            cached.text.copy_from_slice(&text.as_bytes()[..29]);
            cached.second = second;
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
}
