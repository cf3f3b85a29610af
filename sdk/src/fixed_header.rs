//! Response headers fixed when a module is configured (`X-Frame-Options: DENY`, a CORS
//! `Access-Control-Allow-Methods`): checked once, kept as the line HTTP/1.1 writes, and
//! shared by reference with every answer. The core neither checks nor re-encodes them per
//! request. A header whose name only is fixed (`Access-Control-Allow-Origin: <the origin>`)
//! has its value checked per answer, not its name.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use abi_stable::{std_types::RStr, StableAbi};

use crate::fields::check_header;
use crate::response::HeaderPair;

/// A checked header and its encoded line. Only [`FixedHeader::new`] makes one, so a pair
/// that carries it (see [`HeaderPair::fixed_line`]) was checked.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct FixedHeader {
    /// `\r\nName: value`, as HTTP/1.1 heads are written (a line starts with its CRLF).
    line: RStr<'static>,
    /// Within `line`.
    name: RStr<'static>,
    /// Within `line`.
    value: RStr<'static>,
}

impl FixedHeader {
    /// Check `name: value` as a header a configuration asks to send
    /// ([`check_header`](crate::fields::check_header)); `Err` says what is wrong. Each
    /// distinct header is kept once for the life of the process, so reloads add nothing.
    /// For a name whose value is the answer's own, give an empty value and add it with
    /// [`Response::header_named`](crate::Response::header_named).
    pub fn new(name: &str, value: &str) -> Result<&'static FixedHeader, String> {
        check_header(name, value)?;
        static KEPT: Mutex<BTreeMap<(String, String), &'static FixedHeader>> =
            Mutex::new(BTreeMap::new());
        let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (name.to_owned(), value.to_owned());
        if let Some(&fixed) = kept.get(&key) {
            return Ok(fixed);
        }
        let line: &'static str = Box::leak(format!("\r\n{name}: {value}").into_boxed_str());
        let fixed: &'static FixedHeader = Box::leak(Box::new(FixedHeader {
            line: line.into(),
            name: line[2..2 + name.len()].into(),
            value: line[4 + name.len()..].into(),
        }));
        kept.insert(key, fixed);
        Ok(fixed)
    }

    /// The header name, as configured.
    pub fn name(&self) -> &'static str {
        self.name.as_str()
    }

    /// The header value.
    pub fn value(&self) -> &'static str {
        self.value.as_str()
    }

    /// `\r\nName: value`.
    pub fn line(&self) -> &'static [u8] {
        self.line.as_str().as_bytes()
    }

    /// The header as a response carries it: borrowed, no allocation.
    pub fn pair(&'static self) -> HeaderPair {
        HeaderPair {
            name: self.name().into(),
            value: self.value().into(),
            fixed: Some(self),
        }
    }
}

impl HeaderPair {
    /// The encoded line of a pair made by [`FixedHeader::pair`] whose name and value are
    /// still the fixed header's own (one changed since: `None`, and the core checks the pair
    /// as any other).
    #[inline]
    pub fn fixed_line(&self) -> Option<&'static [u8]> {
        let fixed = self.fixed?;
        (same(&self.name, fixed.name()) && same(&self.value, fixed.value())).then(|| fixed.line())
    }

    /// Whether the name is still its fixed header's own: checked when configured.
    #[inline]
    pub fn name_is_fixed(&self) -> bool {
        self.fixed
            .is_some_and(|fixed| same(&self.name, fixed.name()))
    }
}

/// The very same text (not only equal): a copy or an edit of a fixed text is not trusted.
#[inline]
fn same(a: &str, b: &str) -> bool {
    a.as_ptr() == b.as_ptr() && a.len() == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Response;

    #[test]
    fn checked_once_and_kept_once() {
        let a = FixedHeader::new("X-Frame-Options", "DENY").unwrap();
        assert!(std::ptr::eq(
            a,
            FixedHeader::new("X-Frame-Options", "DENY").unwrap()
        ));
        assert_eq!((a.name(), a.value()), ("X-Frame-Options", "DENY"));
        assert_eq!(a.line(), b"\r\nX-Frame-Options: DENY");
        assert!(FixedHeader::new("X-A", "a\r\nB: c").is_err());
        assert!(FixedHeader::new("Bad Name", "v").is_err());
        assert!(FixedHeader::new("Content-Length", "5").is_err());
    }

    #[test]
    fn a_changed_pair_loses_its_line() {
        let f = FixedHeader::new("X-Fixed", "1").unwrap();
        let mut pair = f.pair();
        assert_eq!(pair.fixed_line(), Some(&b"\r\nX-Fixed: 1"[..]));
        pair.value = "a\r\nInjected: 1".into();
        assert_eq!(pair.fixed_line(), None);
        let mut pair = f.pair();
        pair.name = "X-Other".into();
        assert_eq!(pair.fixed_line(), None);
        assert_eq!(HeaderPair::new("X-Fixed", "1").fixed_line(), None);
    }

    #[test]
    fn set_replaces_every_header_of_the_name() {
        let f = FixedHeader::new("Cache-Control", "max-age=60").unwrap();
        let mut r = Response::new();
        r.header("cache-control", "no-store").header("X-A", "1");
        r.set_fixed_header(f);
        assert_eq!(r.get_header("Cache-Control"), Some("max-age=60"));
        assert_eq!(r.headers.len(), 2);
        r.fixed_header(f);
        assert_eq!(r.headers.len(), 3);
        assert!(r
            .headers
            .iter()
            .all(|h| h.name != "X-A" || h.fixed.is_none()));
    }

    #[test]
    fn a_fixed_name_with_the_answers_value() {
        let origin = FixedHeader::new("Access-Control-Allow-Origin", "").unwrap();
        let mut r = Response::new();
        r.header("access-control-allow-origin", "*");
        r.set_header_named(origin, String::from("https://a.com"));
        assert_eq!(
            r.get_header("Access-Control-Allow-Origin"),
            Some("https://a.com")
        );
        assert_eq!(r.headers.len(), 1);
        let pair = &r.headers[0];
        assert!(pair.name_is_fixed() && pair.fixed_line().is_none());
        assert!(!HeaderPair::new(origin.name(), "x").name_is_fixed());
    }
}
