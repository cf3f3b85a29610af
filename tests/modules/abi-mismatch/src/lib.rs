//! Exports a root module named like the SDK's but with another layout, as a module built
//! against a changed SDK would.
#![allow(non_local_definitions)]

use abi_stable::{
    export_root_module, library::RootModule, package_version_strings, prefix_type::PrefixTypeTrait,
    sabi_types::VersionStrings, std_types::RStr, StableAbi,
};

#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = ModuleRef)))]
#[sabi(missing_field(panic))]
pub struct ModuleRoot {
    pub name: extern "C" fn() -> RStr<'static>,
    #[sabi(last_prefix_field)]
    pub changed: extern "C" fn(u64) -> u64,
}

impl RootModule for ModuleRef {
    abi_stable::declare_root_module_statics! {ModuleRef}
    const BASE_NAME: &'static str = "osprey_module";
    const NAME: &'static str = "osprey_module";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

extern "C" fn name() -> RStr<'static> {
    RStr::from_str("mismatch")
}

extern "C" fn changed(x: u64) -> u64 {
    x
}

#[export_root_module]
pub fn root() -> ModuleRef {
    ModuleRoot { name, changed }.leak_into_prefix()
}
