//! A request body read into memory. Small bodies live on the heap; a large one gets a memory
//! mapping of its own: growing it moves no bytes (mremap), so the peak is the body's size, not
//! the old and the new buffer of a copying reallocation, and dropping it gives the memory
//! straight back to the system (an allocator may keep freed memory resident).

use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::ops::Deref;
use std::ptr::NonNull;

use nix::sys::mman::{mmap_anonymous, mremap, munmap, MRemapFlags, MapFlags, ProtFlags};

use super::HttpError;

/// Bodies up to this size stay on the heap.
const HEAP_MAX: usize = 64 * 1024;
const PAGE: usize = 4096;

const NO_MEMORY: HttpError = HttpError::new(503, "no memory for the request body");

#[derive(Default)]
pub struct BodyBuf {
    heap: Vec<u8>,
    mapped: Option<Mapping>,
}

struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: the mapping is owned by this value alone, like a `Vec`'s allocation.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl BodyBuf {
    /// Room for a body of declared length `len`. A mapping only reserves address space
    /// (MAP_NORESERVE): pages are committed as bytes arrive, so a length declared and never
    /// sent costs nothing.
    pub fn with_capacity(len: u64) -> Result<BodyBuf, HttpError> {
        let len = usize::try_from(len).map_err(|_| NO_MEMORY)?;
        if len <= HEAP_MAX {
            return Ok(BodyBuf {
                heap: Vec::with_capacity(len),
                mapped: None,
            });
        }
        Ok(BodyBuf {
            heap: Vec::new(),
            mapped: Some(Mapping::new(len)?),
        })
    }

    pub fn len(&self) -> usize {
        self.mapped.as_ref().map_or(self.heap.len(), |m| m.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Append `data`: 503 when the system has no memory for it.
    pub fn extend(&mut self, data: &[u8]) -> Result<(), HttpError> {
        if self.mapped.is_none() && self.heap.len() + data.len() > HEAP_MAX {
            let mut m = Mapping::new(self.heap.len() + data.len())?;
            m.push(&self.heap)?;
            self.heap = Vec::new();
            self.mapped = Some(m);
        }
        match &mut self.mapped {
            Some(m) => m.push(data),
            None => {
                self.heap.extend_from_slice(data);
                Ok(())
            }
        }
    }
}

impl Deref for BodyBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.mapped {
            // SAFETY: `len` bytes from `ptr` are mapped and written.
            Some(m) => unsafe { std::slice::from_raw_parts(m.ptr.as_ptr(), m.len) },
            None => &self.heap,
        }
    }
}

impl std::fmt::Debug for BodyBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BodyBuf({} bytes)", self.len())
    }
}

impl Mapping {
    fn new(cap: usize) -> Result<Mapping, HttpError> {
        let cap = round_up(cap)?;
        let size = NonZeroUsize::new(cap).ok_or(NO_MEMORY)?;
        let flags = MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE;
        let prot = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
        // SAFETY: a fresh anonymous mapping, aliased by nothing.
        let ptr = unsafe { mmap_anonymous(None, size, prot, flags) }.map_err(|_| NO_MEMORY)?;
        Ok(Mapping {
            ptr: ptr.cast(),
            len: 0,
            cap,
        })
    }

    fn push(&mut self, data: &[u8]) -> Result<(), HttpError> {
        let need = self.len.checked_add(data.len()).ok_or(NO_MEMORY)?;
        if need > self.cap {
            let cap = round_up(need.max(self.cap.saturating_mul(2)))?;
            let old: NonNull<c_void> = self.ptr.cast();
            // SAFETY: `old`/`self.cap` is this mapping; it may move, and nothing borrows it.
            let moved = unsafe { mremap(old, self.cap, cap, MRemapFlags::MREMAP_MAYMOVE, None) }
                .map_err(|_| NO_MEMORY)?;
            self.ptr = moved.cast();
            self.cap = cap;
        }
        // SAFETY: `need <= cap` bytes are mapped; `data` cannot overlap a mapping we own.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.ptr.as_ptr().add(self.len),
                data.len(),
            );
        }
        self.len = need;
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and no slice of it outlives `self`.
        let _ = unsafe { munmap(self.ptr.cast(), self.cap) };
    }
}

fn round_up(n: usize) -> Result<usize, HttpError> {
    n.max(1).checked_next_multiple_of(PAGE).ok_or(NO_MEMORY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_from_the_heap_into_a_mapping_keeping_every_byte() {
        let mut b = BodyBuf::default();
        let block: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let mut expected = Vec::new();
        for _ in 0..100 {
            b.extend(&block).unwrap();
            expected.extend_from_slice(&block);
        }
        assert!(b.mapped.is_some());
        assert_eq!(&b[..], &expected[..]);
    }

    #[test]
    fn a_declared_length_is_mapped_at_once_and_not_regrown() {
        let mut b = BodyBuf::with_capacity(1 << 20).unwrap();
        let cap = b.mapped.as_ref().unwrap().cap;
        b.extend(&vec![7; 1 << 20]).unwrap();
        assert_eq!(b.mapped.as_ref().unwrap().cap, cap);
        assert_eq!(b.len(), 1 << 20);
        assert!(b.iter().all(|&x| x == 7));
    }

    #[test]
    fn small_bodies_stay_on_the_heap() {
        let mut b = BodyBuf::with_capacity(10).unwrap();
        b.extend(b"hello").unwrap();
        assert!(b.mapped.is_none());
        assert_eq!(&b[..], b"hello");
    }
}
