//! The path endings that turn processing on, asked about for every request of the route
//! (each included fragment too): those up to 8 bytes are compared as one masked word with the
//! path's last 8 bytes, not with a `memcmp` call each.

pub struct Endings {
    /// (the ending in the low bytes of a big-endian word, the mask of those bytes, its length)
    short: Vec<(u64, u64, usize)>,
    long: Vec<String>,
}

impl Endings {
    pub fn new(endings: &[String]) -> Endings {
        let (short, long): (Vec<&String>, Vec<&String>) =
            endings.iter().partition(|e| e.len() <= 8);
        Endings {
            short: short
                .into_iter()
                .map(|e| {
                    let mask = u64::MAX.checked_shr(64 - 8 * e.len() as u32).unwrap_or(0);
                    (word(e.as_bytes()), mask, e.len())
                })
                .collect(),
            long: long.into_iter().cloned().collect(),
        }
    }

    /// Whether `path` ends with one of the endings.
    pub fn end(&self, path: &str) -> bool {
        let bytes = path.as_bytes();
        let tail = match bytes.len() {
            n if n >= 8 => u64::from_be_bytes(bytes[n - 8..].try_into().unwrap_or_default()),
            _ => word(bytes),
        };
        self.short
            .iter()
            .any(|&(ending, mask, len)| tail & mask == ending && bytes.len() >= len)
            || self.long.iter().any(|e| path.ends_with(e.as_str()))
    }
}

/// Up to 8 bytes as the low bytes of a big-endian word.
fn word(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |w, &b| (w << 8) | b as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_answers_as_ends_with() {
        let endings: Vec<String> = [".shtml", ".shtm", "x", "12345678", "a-much-longer.ending"]
            .map(String::from)
            .to_vec();
        let e = Endings::new(&endings);
        for path in [
            "",
            "/",
            "/p.shtml",
            "/p.shtm",
            "/p.html",
            ".shtml",
            "shtml",
            "/x",
            "x",
            "/y",
            "12345678",
            "/12345678",
            "2345678",
            "/a-much-longer.ending",
            "much-longer.ending",
            "/p.SHTML",
            "/p.shtml/",
            "/ü.shtml",
            "/p.shtmlx",
        ] {
            let expected = endings.iter().any(|end| path.ends_with(end.as_str()));
            assert_eq!(e.end(path), expected, "{path:?}");
        }
        assert!(!Endings::new(&[]).end("/p.shtml"));
        // An empty ending ends every path, as `ends_with` says.
        assert!(Endings::new(&[String::new()]).end(""));
    }
}
