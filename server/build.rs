//! The allocator functions of `src/main.rs` go into the binary's dynamic symbol table, where
//! modules using `osprey_sdk::alloc::HostAlloc` find them.
fn main() {
    for name in [
        "osprey_alloc",
        "osprey_alloc_zeroed",
        "osprey_dealloc",
        "osprey_realloc",
    ] {
        println!("cargo:rustc-link-arg-bin=osprey=-Wl,--export-dynamic-symbol={name}");
    }
}
