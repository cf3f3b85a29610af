//! Request field rules of RFC 9113 on values and on Host (the rest of §8.2/§8.3 is in
//! `request.rs`, which calls these).

use crate::http::{bad, HttpError};

/// §8.2.1: a field value must not start or end with whitespace (SP or HTAB).
pub fn check_value(value: &[u8]) -> Result<(), HttpError> {
    let ws = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
    if ws(value.first()) || ws(value.last()) {
        return Err(bad("field value with leading or trailing whitespace"));
    }
    Ok(())
}

/// §8.3.1: a Host field beside `:authority` must name the same authority (compared without
/// case, and without the scheme's default port).
pub fn check_host<'a>(
    host: &'a [u8],
    authority: &'a str,
    scheme: Option<&str>,
) -> Result<(), HttpError> {
    let default_port: &[u8] = match scheme {
        Some("https") => b":443",
        _ => b":80",
    };
    let bare = |a: &'a [u8]| a.strip_suffix(default_port).unwrap_or(a);
    if !bare(host).eq_ignore_ascii_case(bare(authority.as_bytes())) {
        return Err(bad("Host differs from :authority"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_may_not_start_or_end_with_whitespace() {
        assert!(check_value(b"").is_ok());
        assert!(check_value(b"a b\tc").is_ok());
        for bad in [&b" a"[..], b"a ", b"\ta", b"a\t", b" "] {
            assert!(check_value(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn host_must_match_the_authority() {
        assert!(check_host(b"example.com", "Example.COM", Some("http")).is_ok());
        assert!(check_host(b"example.com:80", "example.com", Some("http")).is_ok());
        assert!(check_host(b"example.com", "example.com:443", Some("https")).is_ok());
        assert!(check_host(b"example.com:8080", "example.com:8080", None).is_ok());
        assert!(check_host(b"example.com:443", "example.com", Some("http")).is_err());
        assert!(check_host(b"other.example", "example.com", Some("http")).is_err());
        assert!(check_host(b"example.com:8080", "example.com", Some("http")).is_err());
    }
}
