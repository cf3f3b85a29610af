//! Parsed documents kept for the next request. A document the handler serves from a memory
//! cache comes as shared bytes; while the cache holds the same bytes, their parse is reused.
//! An entry holds the bytes it was parsed from, so their address cannot be reused for others
//! while it lives: a changed file comes as other bytes at another address, and is parsed again.
//! A document served as a file range is known by the file's identity on disk (device, inode,
//! size, modification time: one `fstat`) and the range: while they are the same, neither its
//! read nor its parse is repeated.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};

use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::FileRange;

use crate::page::{parts, Part};

/// Documents larger than this are parsed on each request (an entry keeps its bytes alive).
pub const MAX_DOC: usize = 64 * 1024;
/// Entries kept; when full, the map starts again empty.
const MAX_ENTRIES: usize = 256;

/// A file range as it is on disk: device, inode, size, modification time (s, ns), the range.
type FileId = [i64; 7];

/// A document and its parts.
pub struct Layout {
    pub doc: RArc<RVec<u8>>,
    pub parts: Vec<Part>,
    /// The file range it was read from.
    file: Option<FileId>,
}

/// The parsed documents of one filter, by path.
#[derive(Default)]
pub struct Layouts(Mutex<HashMap<String, Arc<Layout>>>);

impl Layouts {
    /// The parts of `doc`, served at `path`: kept ones if `doc` is the same bytes as last time.
    pub fn get(&self, path: &str, doc: &RArc<RVec<u8>>) -> Arc<Layout> {
        let same = |l: &Layout| std::ptr::eq::<RVec<u8>>(&*l.doc, &**doc);
        self.find(path, same).unwrap_or_else(|| {
            self.keep(
                path,
                Layout {
                    doc: doc.clone(),
                    parts: parts(doc, path),
                    file: None,
                },
            )
        })
    }

    /// The document in `range` (at most [`MAX_DOC`] bytes) and its parts, served at `path`:
    /// kept ones if the file and range are the same as last time, else read and parsed.
    pub fn get_file(&self, path: &str, range: &FileRange) -> std::io::Result<Arc<Layout>> {
        // SAFETY: the descriptor stays open while `range.file` lives; this never closes it.
        let file = unsafe { std::fs::File::from_raw_fd(range.file.as_raw_fd()) };
        let m = std::mem::ManuallyDrop::new(file).metadata()?;
        let id = [
            m.dev() as i64,
            m.ino() as i64,
            m.size() as i64,
            m.mtime(),
            m.mtime_nsec(),
            range.offset as i64,
            range.len as i64,
        ];
        if let Some(layout) = self.find(path, |l| l.file == Some(id)) {
            return Ok(layout);
        }
        let mut doc = vec![0; range.len as usize];
        range.file.read_exact_at(&mut doc, range.offset)?;
        let parts = parts(&doc, path);
        Ok(self.keep(
            path,
            Layout {
                doc: RArc::new(doc.into()),
                parts,
                file: Some(id),
            },
        ))
    }

    fn find(&self, path: &str, same: impl Fn(&Layout) -> bool) -> Option<Arc<Layout>> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(path).filter(|l| same(l)).cloned()
    }

    fn keep(&self, path: &str, layout: Layout) -> Arc<Layout> {
        let layout = Arc::new(layout);
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
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
    use osprey_sdk::OpenFile;

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

    #[test]
    fn the_same_file_is_read_and_parsed_once_and_a_changed_one_again() {
        let path = std::env::temp_dir().join(format!("ssi-layout-{}", std::process::id()));
        let range = |text: &[u8]| {
            std::fs::write(&path, text).unwrap();
            FileRange {
                file: RArc::new(OpenFile::new(std::fs::File::open(&path).unwrap())),
                offset: 0,
                len: text.len() as u64,
            }
        };
        let layouts = Layouts::default();
        let r1 = range(b"a<!--#echo var=\"x\"-->");
        let first = layouts.get_file("/p.shtml", &r1).unwrap();
        assert_eq!(&first.doc[..], b"a<!--#echo var=\"x\"-->");
        // Another descriptor of the same file (as after a cache's reopening): still kept.
        let again = RArc::new(OpenFile::new(std::fs::File::open(&path).unwrap()));
        let r1b = FileRange { file: again, ..r1 };
        assert!(Arc::ptr_eq(
            &first,
            &layouts.get_file("/p.shtml", &r1b).unwrap()
        ));
        // Rewritten: read and parsed again.
        let r2 = range(b"bc");
        let second = layouts.get_file("/p.shtml", &r2).unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(&second.doc[..], b"bc");
        std::fs::remove_file(&path).unwrap();
    }
}
