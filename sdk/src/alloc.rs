//! The server's allocator for a module's own allocations (opt-in):
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;
//! ```
//!
//! A module otherwise allocates with the C library's `malloc`, which costs several times the
//! server's allocator (mimalloc) on the short-lived strings and lists of each request. The
//! server exports its allocator as C functions (`osprey_alloc`, ...); they are looked up once,
//! at the module's first allocation. Outside the server (a module's unit tests) they are not
//! there, and the system allocator is used instead: the choice is the same for every
//! allocation of the process, so memory is always freed by the allocator that gave it. Values
//! crossing the module boundary (abi_stable's `RVec`, `RString`, ...) carry their own
//! deallocator either way.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{c_char, c_void};
use std::sync::OnceLock;

/// The allocator of the server that loaded the module (else the system's).
pub struct HostAlloc;

type AllocFn = unsafe extern "C" fn(usize, usize) -> *mut u8;
type DeallocFn = unsafe extern "C" fn(*mut u8, usize, usize);
type ReallocFn = unsafe extern "C" fn(*mut u8, usize, usize, usize) -> *mut u8;

/// The server's allocation functions, as it exports them (`server/src/main.rs`).
#[derive(Clone, Copy)]
struct Exported {
    alloc: AllocFn,
    alloc_zeroed: AllocFn,
    dealloc: DeallocFn,
    realloc: ReallocFn,
}

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// `dlsym`'s handle for "the process's global symbols" (glibc's `RTLD_DEFAULT`).
const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

/// Whether [`HostAlloc`] hands out the server's memory (else the system allocator's).
pub fn from_host() -> bool {
    exported().is_some()
}

fn exported() -> Option<Exported> {
    static FOUND: OnceLock<Option<Exported>> = OnceLock::new();
    *FOUND.get_or_init(|| {
        // SAFETY: the names are C strings; a symbol found is the server's function of that
        // name, with the signature it exports it with. `dlsym` allocates, if at all, with the
        // C library's malloc, not with this allocator.
        unsafe {
            let find = |name: &[u8]| dlsym(RTLD_DEFAULT, name.as_ptr().cast());
            let f = [
                find(b"osprey_alloc\0"),
                find(b"osprey_alloc_zeroed\0"),
                find(b"osprey_dealloc\0"),
                find(b"osprey_realloc\0"),
            ];
            if f.iter().any(|p| p.is_null()) {
                return None;
            }
            Some(Exported {
                alloc: std::mem::transmute::<*mut c_void, AllocFn>(f[0]),
                alloc_zeroed: std::mem::transmute::<*mut c_void, AllocFn>(f[1]),
                dealloc: std::mem::transmute::<*mut c_void, DeallocFn>(f[2]),
                realloc: std::mem::transmute::<*mut c_void, ReallocFn>(f[3]),
            })
        }
    })
}

// SAFETY: forwards to the server's `GlobalAlloc` (or `System`), which upholds the contract;
// which of the two is fixed for the life of the process.
unsafe impl GlobalAlloc for HostAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match exported() {
            Some(e) => unsafe { (e.alloc)(layout.size(), layout.align()) },
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match exported() {
            Some(e) => unsafe { (e.alloc_zeroed)(layout.size(), layout.align()) },
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match exported() {
            Some(e) => unsafe { (e.dealloc)(ptr, layout.size(), layout.align()) },
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match exported() {
            Some(e) => unsafe { (e.realloc)(ptr, layout.size(), layout.align(), new_size) },
            None => unsafe { System.realloc(ptr, layout, new_size) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_server_the_system_allocator_is_used() {
        assert!(!from_host());
        let layout = Layout::from_size_align(100, 16).unwrap();
        // SAFETY: a valid layout; the block is written within its size and freed once.
        unsafe {
            let p = HostAlloc.alloc_zeroed(layout);
            assert!(!p.is_null() && (p as usize).is_multiple_of(16) && *p.add(99) == 0);
            let p = HostAlloc.realloc(p, layout, 200);
            p.add(199).write(1);
            HostAlloc.dealloc(p, Layout::from_size_align(200, 16).unwrap());
        }
    }
}
