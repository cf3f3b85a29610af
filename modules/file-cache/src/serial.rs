//! An entry as bytes, for the stores outside memory (disk files, Redis values): a magic line,
//! a JSON header line (the key, headers, times, the body's length and CRC-32) and the body.
//! Read back only if the key, length and checksum match, so a corrupt or misplaced value is
//! refused, never served.

use osprey_sdk::abi_stable::std_types::{RArc, RVec};

use crate::entry::Entry;

pub const MAGIC: &[u8] = b"OSPREY-FILE-CACHE 1\n";
/// A header line longer than this is not an entry's.
pub const MAX_HEAD: u64 = 1 << 20;

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Head {
    pub key: String,
    headers: Vec<(String, String)>,
    stored_ms: u64,
    fresh_until_ms: u64,
    pub len: u64,
    crc: u32,
}

/// The bytes of `e` stored under `key`.
pub fn encode(key: &str, e: &Entry) -> Vec<u8> {
    let head = Head {
        key: key.to_owned(),
        headers: e.headers.clone(),
        stored_ms: e.stored_ms,
        fresh_until_ms: e.fresh_until_ms,
        len: e.body.len() as u64,
        crc: crc32fast::hash(&e.body),
    };
    let mut out = MAGIC.to_vec();
    serde_json::to_writer(&mut out, &head).expect("an entry's header serializes");
    out.push(b'\n');
    out.extend_from_slice(&e.body);
    out
}

/// The entry in `data`, which must have been stored under `key`.
pub fn parse(data: &[u8], key: &str) -> Result<Entry, String> {
    let rest = data.strip_prefix(MAGIC).ok_or("not a cache entry")?;
    let nl = rest
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header line")?;
    let head: Head = serde_json::from_slice(&rest[..nl]).map_err(|e| format!("bad header: {e}"))?;
    let body = &rest[nl + 1..];
    if head.key != key {
        return Err("stored for another key".into());
    }
    if body.len() as u64 != head.len {
        return Err(format!(
            "body is {} bytes, header says {}",
            body.len(),
            head.len
        ));
    }
    if crc32fast::hash(body) != head.crc {
        return Err("checksum mismatch".into());
    }
    Ok(Entry {
        headers: head.headers,
        body: RArc::new(RVec::from(body.to_vec())),
        stored_ms: head.stored_ms,
        fresh_until_ms: head.fresh_until_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_does_not_match() {
        let e = Entry {
            headers: vec![("ETag".into(), "\"1\"".into())],
            body: RArc::new(RVec::from(b"body".to_vec())),
            stored_ms: 5,
            fresh_until_ms: 9,
        };
        let data = encode("k", &e);
        let back = parse(&data, "k").unwrap();
        assert_eq!(
            (
                back.headers,
                back.body.as_slice(),
                back.stored_ms,
                back.fresh_until_ms
            ),
            (e.headers.clone(), &b"body"[..], 5, 9)
        );
        assert_eq!(parse(&data, "other").unwrap_err(), "stored for another key");
        let mut flipped = data.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(parse(&flipped, "k").unwrap_err(), "checksum mismatch");
        assert!(parse(&data[..data.len() - 1], "k").is_err());
        assert!(parse(b"garbage", "k").is_err());
    }
}
