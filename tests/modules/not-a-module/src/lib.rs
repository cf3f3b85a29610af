//! A plain shared library: loading it as a module must fail with a clear message.

#[no_mangle]
pub extern "C" fn not_a_module() -> i32 {
    42
}
