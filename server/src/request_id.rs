//! Request ids (nginx's `$request_id`): 128 bits from the kernel's CSPRNG as 32 hex digits,
//! so unique across threads and restarts and not guessable; or the `X-Request-Id` a trusted
//! proxy in front of the server sent. The `request_id` configuration section says whether
//! responses carry the id and whether handlers (and so upstreams) see it.

use std::cell::RefCell;
use std::net::IpAddr;

use arrayvec::ArrayString;

use serde::Deserialize;

use crate::http::parse::{Head, Span};

/// The header the id travels in.
pub const HEADER: &str = "X-Request-Id";

/// A trusted proxy's id is kept up to this length.
const MAX_LEN: usize = 64;

/// The `request_id` section.
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct RequestIdConfig {
    /// Send `X-Request-Id` on every response.
    #[serde(default)]
    pub response: bool,
    /// Handlers see `X-Request-Id: <id>` in place of the client's (the proxy forwards it).
    #[serde(default)]
    pub forward: bool,
    /// Addresses (`10.0.0.1`) or networks (`10.0.0.0/8`) of proxies in front whose
    /// `X-Request-Id` is kept as the request's id.
    #[serde(default)]
    pub trusted: Vec<String>,
}

/// The section, checked: trusted networks parsed.
#[derive(Clone, Debug, Default)]
pub struct RequestIds {
    pub response: bool,
    pub forward: bool,
    trusted: Vec<(IpAddr, u8)>,
}

impl RequestIdConfig {
    /// Check the section; the error names the key.
    pub fn check(&self) -> Result<RequestIds, (&'static str, String)> {
        let trusted = self
            .trusted
            .iter()
            .map(|t| {
                parse_network(t).ok_or(("trusted", format!("not an address or network: {t:?}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(RequestIds {
            response: self.response,
            forward: self.forward,
            trusted,
        })
    }
}

impl RequestIds {
    /// The id of a parsed request from `remote` (`ip:port`): the `X-Request-Id` it sent if
    /// it comes from a trusted proxy and the value is acceptable, else a fresh one.
    pub fn for_request(&self, remote: &str, buf: &[u8], head: &Head) -> RequestId {
        // The header is looked at only when some proxy is trusted (the usual case costs nothing).
        let sent = (!self.trusted.is_empty())
            .then(|| {
                head.headers
                    .iter()
                    .find(|(n, v)| {
                        n.str(buf).eq_ignore_ascii_case(HEADER) && acceptable(v.get(buf))
                    })
                    .map(|&(_, v)| v)
            })
            .flatten()
            .filter(|_| self.trusts(remote));
        RequestId {
            kind: match sent {
                Some(span) => Kind::Sent(span),
                None => Kind::Random(hex(random_bytes())),
            },
            forward: self.forward,
        }
    }

    fn trusts(&self, remote: &str) -> bool {
        let ip = match remote.rsplit_once(':') {
            Some((ip, _)) => ip.trim_start_matches('[').trim_end_matches(']'),
            None => remote,
        };
        let Ok(ip) = ip.parse::<IpAddr>() else {
            return false;
        };
        self.trusted
            .iter()
            .any(|&(net, bits)| contains(net, bits, ip))
    }
}

/// One request's id: random bytes as hex, or where the trusted proxy's id is in the
/// request's buffer.
#[derive(Clone, Copy, Debug)]
pub struct RequestId {
    kind: Kind,
    /// Handlers see it in `X-Request-Id` (the `forward` key).
    pub forward: bool,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Written as hex once: requests with filters read it several times.
    Random(ArrayString<32>),
    Sent(Span),
    /// A request's id copied out of it, for its subrequests.
    Copied(ArrayString<MAX_LEN>),
}

impl RequestId {
    /// The id as text: 32 lower-case hex digits, or the trusted proxy's value in `buf` (the
    /// request's bytes; `-` if they are gone).
    pub fn text<'a>(&'a self, buf: &'a [u8]) -> &'a str {
        match &self.kind {
            Kind::Random(text) => text,
            // `acceptable` let only ASCII through.
            Kind::Sent(span) if buf.len() >= span.end as usize => span.str(buf),
            Kind::Sent(_) => "-",
            Kind::Copied(text) => text,
        }
    }

    /// The id a request's subrequests share (as nginx's do): its `text`, copied out of the
    /// request's bytes.
    pub fn copied(text: &str, forward: bool) -> RequestId {
        RequestId {
            kind: Kind::Copied(ArrayString::from(text).unwrap_or_default()),
            forward,
        }
    }
}

/// `raw` as 32 lower-case hex digits.
fn hex(raw: [u8; 16]) -> ArrayString<32> {
    // Both digits of a byte at once, from a table: half the work of a digit at a time.
    static PAIRS: [[u8; 2]; 256] = {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut table = [[0u8; 2]; 256];
        let mut b = 0;
        while b < 256 {
            table[b] = [HEX[b >> 4], HEX[b & 15]];
            b += 1;
        }
        table
    };
    let mut text = [0u8; 32];
    for (pair, b) in text.chunks_exact_mut(2).zip(raw) {
        pair.copy_from_slice(&PAIRS[b as usize]);
    }
    // SAFETY: hex digits are ASCII (validating 32 bytes per request is what this skips).
    let text = unsafe { std::str::from_utf8_unchecked(&text) };
    ArrayString::from(text).expect("32 digits fit")
}

/// A trusted proxy's id is kept if it is short and made of characters safe in logs and
/// headers (UUIDs, hex, base64).
fn acceptable(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= MAX_LEN
        && v.iter()
            .all(|&c| c.is_ascii_alphanumeric() || b"-_.:+/=@".contains(&c))
}

/// Random bytes from the kernel (`osprey_sdk::random::os_bytes`; the SDK's fast generator is
/// predictable, so not used for ids), fetched a few KiB at a time per thread: one `getrandom(2)`
/// call serves 256 ids.
fn random_bytes() -> [u8; 16] {
    let mut out = [0u8; 16];
    const BATCH: usize = 4096;
    thread_local! {
        static POOL: RefCell<(Box<[u8; BATCH]>, usize)> = RefCell::new((Box::new([0; BATCH]), BATCH));
    }
    POOL.with(|pool| {
        let (bytes, used) = &mut *pool.borrow_mut();
        let n = out.len();
        if *used + n > BATCH {
            osprey_sdk::random::os_bytes(&mut bytes[..]);
            *used = 0;
        }
        let taken = &mut bytes[*used..*used + n];
        out.copy_from_slice(taken);
        // Handed-out bytes are not kept.
        taken.fill(0);
        *used += n;
    });
    out
}

/// `10.0.0.0/8`, `::1`, `192.168.1.5`.
fn parse_network(text: &str) -> Option<(IpAddr, u8)> {
    let (ip, bits) = match text.split_once('/') {
        Some((ip, bits)) => (ip.parse::<IpAddr>().ok()?, bits.parse::<u8>().ok()?),
        None => {
            let ip = text.parse::<IpAddr>().ok()?;
            (ip, if ip.is_ipv4() { 32 } else { 128 })
        }
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

fn contains(net: IpAddr, bits: u8, ip: IpAddr) -> bool {
    // An IPv4 client on a dual-stack socket shows as ::ffff:a.b.c.d.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let mask = |len: u32| -> u128 {
        if bits == 0 {
            0
        } else {
            u128::MAX << (len - bits as u32)
        }
    };
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let m = mask(32) as u32;
            u32::from(n) & m == u32::from(a) & m
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let m = mask(128);
            u128::from(n) & m == u128::from(a) & m
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id given to a request from `remote` that sent `sent`.
    fn id_of(ids: &RequestIds, remote: &str, sent: Option<&str>) -> String {
        let header = sent.map_or(String::new(), |s| format!("X-Request-Id: {s}\r\n"));
        let buf = format!("GET / HTTP/1.1\r\nHost: a\r\n{header}\r\n").into_bytes();
        let limits = crate::config::Limits::default();
        let head = crate::http::parse::parse(&buf, &limits).unwrap().unwrap();
        let id = ids.for_request(remote, &buf, &head);
        id.text(&buf).to_owned()
    }

    fn is_fresh(id: &str) -> bool {
        id.len() == 32 && id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    }

    #[test]
    fn hex_writes_every_byte_as_two_lower_case_digits() {
        let raw: [u8; 16] = std::array::from_fn(|i| (i as u8) * 17);
        let expected: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(super::hex(raw).as_str(), expected);
        assert_eq!(super::hex([0xff; 16]).as_str(), "f".repeat(32));
    }

    #[test]
    fn random_ids_are_32_hex_digits_and_differ() {
        let ids = RequestIds::default();
        let seen: std::collections::HashSet<String> =
            (0..1000).map(|_| id_of(&ids, "1.2.3.4:5", None)).collect();
        assert_eq!(seen.len(), 1000);
        assert!(seen.iter().all(|i| is_fresh(i)));
    }

    #[test]
    fn subrequests_inherit_the_id_without_the_parents_bytes() {
        let ids = RequestIdConfig {
            trusted: vec!["10.0.0.0/8".into()],
            ..Default::default()
        }
        .check()
        .unwrap();
        let limits = crate::config::Limits::default();
        for header in ["X-Request-Id: proxy-id-1\r\n", ""] {
            let buf = format!("GET / HTTP/1.1\r\nHost: a\r\n{header}\r\n").into_bytes();
            let head = crate::http::parse::parse(&buf, &limits).unwrap().unwrap();
            let id = ids.for_request("10.1.2.3:4", &buf, &head);
            let shared = RequestId::copied(id.text(&buf), id.forward);
            // Read against a subrequest's own, different bytes.
            assert_eq!(shared.text(b"GET /frag HTTP/1.1\r\n\r\n"), id.text(&buf));
        }
    }

    #[test]
    fn trusted_proxies_keep_their_id() {
        let cfg = RequestIdConfig {
            trusted: vec!["10.0.0.0/8".into(), "::1".into()],
            ..Default::default()
        };
        let ids = cfg.check().unwrap();
        for remote in ["10.1.2.3:5000", "[::1]:5000", "[::ffff:10.0.0.7]:1"] {
            assert_eq!(id_of(&ids, remote, Some("abc-1")), "abc-1", "{remote}");
        }
        // Untrusted clients, and unsafe or overlong values, get a fresh id.
        assert!(is_fresh(&id_of(&ids, "11.0.0.1:5000", Some("abc-1"))));
        assert!(is_fresh(&id_of(&ids, "10.0.0.1:1", Some("a b"))));
        assert!(is_fresh(&id_of(&ids, "10.0.0.1:1", Some(&"a".repeat(65)))));
        let none = RequestIdConfig::default().check().unwrap();
        assert!(is_fresh(&id_of(&none, "10.0.0.1:1", Some("abc"))));
    }

    #[test]
    fn bad_networks_are_refused() {
        for bad in ["10.0.0.0/33", "nope", "::1/129", "10.0.0.0/"] {
            let cfg = RequestIdConfig {
                trusted: vec![bad.into()],
                ..Default::default()
            };
            assert!(cfg.check().is_err(), "{bad}");
        }
    }
}
