//! Parsed documents kept for the next request. A document the handler serves from a memory
//! cache comes as shared bytes; while the cache holds the same bytes, their parse is reused.
//! An entry holds the bytes it was parsed from, so their address cannot be reused for others
//! while it lives: a changed file comes as other bytes at another address, and is parsed again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use osprey_sdk::abi_stable::std_types::{RArc, RVec};

use crate::page::{parts, Part};

/// Documents larger than this are parsed on each request (an entry keeps its bytes alive).
pub const MAX_DOC: usize = 64 * 1024;
/// Entries kept; when full, the map starts again empty.
const MAX_ENTRIES: usize = 256;

/// A document and its parts.
pub struct Layout {
    pub doc: RArc<RVec<u8>>,
    pub parts: Vec<Part>,
}

/// The parsed documents of one filter, by path.
#[derive(Default)]
pub struct Layouts(Mutex<HashMap<String, Arc<Layout>>>);

impl Layouts {
    /// The parts of `doc`, served at `path`: kept ones if `doc` is the same bytes as last time.
    pub fn get(&self, path: &str, doc: &RArc<RVec<u8>>) -> Arc<Layout> {
        let same = |l: &Arc<Layout>| std::ptr::eq::<RVec<u8>>(&*l.doc, &**doc);
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(layout) = map.get(path).filter(|l| same(l)) {
            return layout.clone();
        }
        let layout = Arc::new(Layout {
            doc: doc.clone(),
            parts: parts(doc),
        });
        if map.len() >= MAX_ENTRIES && !map.contains_key(path) {
            map.clear();
        }
        map.insert(path.to_owned(), layout.clone());
        layout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_bytes_are_parsed_once_and_other_bytes_again() {
        let layouts = Layouts::default();
        let v1 = RArc::new(RVec::from(b"a<!--#echo var=\"x\"-->".to_vec()));
        let first = layouts.get("/p.shtml", &v1);
        assert!(Arc::ptr_eq(&first, &layouts.get("/p.shtml", &v1)));
        // The file changed: the cache holds new bytes (even if equal), parsed again.
        let v2 = RArc::new(RVec::from(b"b".to_vec()));
        let second = layouts.get("/p.shtml", &v2);
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(matches!(second.parts[..], [Part::Text(ref r)] if *r == (0..1)));
    }
}
