//! Request ids (nginx's `$request_id`): 128 bits from the kernel's CSPRNG as 32 hex digits,
//! so unique across threads and restarts and not guessable; or the `X-Request-Id` a trusted
//! proxy in front of the server sent. The `request_id` configuration section says whether
//! responses carry the id and whether handlers (and so upstreams) see it.

use std::cell::RefCell;
use std::net::IpAddr;

use serde::Deserialize;

use crate::http::parse::Head;

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
    /// The id of a request from `remote` (`ip:port`) that sent `sent` in `X-Request-Id`.
    pub fn assign(&self, remote: &str, sent: Option<&[u8]>) -> RequestId {
        let mut id = RequestId::random();
        if let Some(v) = sent.filter(|v| acceptable(v)) {
            if !self.trusted.is_empty() && self.trusts(remote) {
                id.len = v.len() as u8;
                id.bytes[..v.len()].copy_from_slice(v);
            }
        }
        id.forward = self.forward;
        id
    }

    /// The id of a parsed request.
    pub fn for_request(&self, remote: &str, buf: &[u8], head: &Head) -> RequestId {
        let sent = head
            .headers
            .iter()
            .find(|(n, _)| n.str(buf).eq_ignore_ascii_case(HEADER))
            .map(|(_, v)| v.get(buf));
        self.assign(remote, sent)
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

/// One request's id.
#[derive(Clone, Copy)]
pub struct RequestId {
    bytes: [u8; MAX_LEN],
    len: u8,
    /// Handlers see it in `X-Request-Id` (the `forward` key).
    pub forward: bool,
}

impl RequestId {
    /// A fresh id: 16 random bytes as 32 lower-case hex digits.
    pub fn random() -> RequestId {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut id = RequestId {
            bytes: [0; MAX_LEN],
            len: 32,
            forward: false,
        };
        let mut raw = [0u8; 16];
        random_bytes(&mut raw);
        for (i, b) in raw.iter().enumerate() {
            id.bytes[2 * i] = HEX[(b >> 4) as usize];
            id.bytes[2 * i + 1] = HEX[(b & 15) as usize];
        }
        id
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored (hex digits, or a value `acceptable` let through).
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
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
fn random_bytes(out: &mut [u8; 16]) {
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

    #[test]
    fn random_ids_are_32_hex_digits_and_differ() {
        let ids: std::collections::HashSet<String> = (0..1000)
            .map(|_| RequestId::random().as_str().to_owned())
            .collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids
            .iter()
            .all(|i| i.len() == 32 && i.bytes().all(|c| c.is_ascii_hexdigit())));
    }

    #[test]
    fn trusted_proxies_keep_their_id() {
        let cfg = RequestIdConfig {
            trusted: vec!["10.0.0.0/8".into(), "::1".into()],
            ..Default::default()
        };
        let ids = cfg.check().unwrap();
        assert_eq!(
            ids.assign("10.1.2.3:5000", Some(b"abc-1")).as_str(),
            "abc-1"
        );
        assert_eq!(ids.assign("[::1]:5000", Some(b"abc-1")).as_str(), "abc-1");
        assert_eq!(
            ids.assign("[::ffff:10.0.0.7]:1", Some(b"abc-1")).as_str(),
            "abc-1"
        );
        // Untrusted clients, and unsafe or overlong values, get a fresh id.
        assert_eq!(
            ids.assign("11.0.0.1:5000", Some(b"abc-1")).as_str().len(),
            32
        );
        assert_ne!(ids.assign("10.0.0.1:1", Some(b"a b")).as_str(), "a b");
        assert_eq!(
            ids.assign("10.0.0.1:1", Some(&[b'a'; 65])).as_str().len(),
            32
        );
        let none = RequestIdConfig::default().check().unwrap();
        assert_eq!(none.assign("10.0.0.1:1", Some(b"abc")).as_str().len(), 32);
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
