//! The process's allocator: mimalloc, asked the way the standard library asks `malloc`.
//!
//! The `mimalloc` crate passes every request to `mi_malloc_aligned`, which for a block over
//! 1 KiB whose size is not a power of two takes mimalloc's over-allocating path (some 200
//! instructions, and the alignment's worth of bytes more) even when the alignment asked is
//! the one every block has anyway. Requests the plain calls satisfy go to them: that is the
//! boxed state of a waiting request (a connection's step, a worker hop), every request on
//! the worker pool.
//!
//! Transparent huge pages are turned off for the process ([`small_pages`]).

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as ffi;

/// The alignment every block of `mi_malloc` has: its sizes are whole words (a 24-byte
/// block may be only 8-aligned).
const PLAIN_ALIGN: usize = std::mem::size_of::<usize>();

pub struct Allocator;

/// Whether `mi_malloc`'s own alignment is enough (the standard library's test before it
/// calls `malloc`).
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            ffi::mi_malloc(layout.size()).cast()
        } else {
            ffi::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            ffi::mi_zalloc(layout.size()).cast()
        } else {
            ffi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        ffi::mi_free(ptr.cast::<c_void>());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(layout.align(), new_size) {
            ffi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
        } else {
            ffi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
        }
    }
}

/// Turn transparent huge pages off for the process (as mimalloc does itself when
/// `MIMALLOC_ALLOW_THP=0`; setting that variable either way leaves the choice to mimalloc).
/// mimalloc asks for them (`MADV_HUGEPAGE`) on its arenas, so where the kernel grants them on
/// request (`madvise`, a common default) the heap grew by 2 MiB at a time: 10,000 idle
/// keep-alive connections, which take about 1.6 MB, grew it by 4.2 (`osprey-bench --only
/// idle`), and a server with no connection sat at 15 MiB (12 now: what was faulted in before
/// `main` stays; 8 with `MIMALLOC_ALLOW_THP=0`). Huge pages save TLB misses on large heaps;
/// the server's is small and reused.
pub fn small_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // SAFETY: a plain system call with integer arguments; it sets a flag of the process
    // (kept across fork and exec) that the kernel reads when it faults memory in.
    unsafe { nix::libc::prctl(nix::libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size and alignment comes back aligned, plain or not, and survives a realloc.
    #[test]
    fn blocks_have_the_alignment_asked() {
        let a = Allocator;
        for size in [1, 7, 8, 15, 16, 24, 100, 1000, 1032, 1500, 5000, 70_000] {
            for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
                let layout = Layout::from_size_align(size, align).unwrap();
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    p.write_bytes(0xab, size);
                    let q = a.realloc(p, layout, size * 3);
                    assert_eq!(q as usize % align, 0, "realloc {size} align {align}");
                    assert_eq!(*q.add(size - 1), 0xab);
                    a.dealloc(q, Layout::from_size_align(size * 3, align).unwrap());
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
