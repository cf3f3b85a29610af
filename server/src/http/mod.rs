//! HTTP/1.x wire format: parsing requests, decoding chunked bodies, encoding responses.

pub mod body_buf;
pub mod chunked;
pub mod date;
pub mod diagnose;
pub mod encode;
pub mod header_check;
pub mod parse;
pub mod status;

/// A protocol error: answered with `status`, `reason` in the body, then the connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpError {
    pub status: u16,
    pub reason: &'static str,
}

impl HttpError {
    pub const fn new(status: u16, reason: &'static str) -> Self {
        HttpError { status, reason }
    }
}

/// Where `byte` first is in `hay`. The spans of a request head are short, and scanning a few
/// dozen bytes costs less than a `memchr` call (its set-up is tens of instructions).
pub fn find_byte(byte: u8, hay: &[u8]) -> Option<usize> {
    if hay.len() < 64 {
        hay.iter().position(|&b| b == byte)
    } else {
        memchr::memchr(byte, hay)
    }
}

/// Bad request with a reason.
pub const fn bad(reason: &'static str) -> HttpError {
    HttpError::new(400, reason)
}

#[cfg(test)]
mod tests {
    #[test]
    fn find_byte_in_short_and_long_spans() {
        for len in [0, 1, 63, 64, 300] {
            let mut hay = vec![b'a'; len];
            assert_eq!(super::find_byte(b'?', &hay), None);
            if len > 0 {
                hay[len - 1] = b'?';
                assert_eq!(super::find_byte(b'?', &hay), Some(len - 1));
            }
        }
    }
}
