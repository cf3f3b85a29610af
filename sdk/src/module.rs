//! The root module every library exports, and the [`Module`] trait it is generated from.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use abi_stable::{
    library::RootModule,
    package_version_strings,
    prefix_type::PrefixTypeTrait,
    sabi_types::VersionStrings,
    std_types::{RResult, RStr, RVec},
    StableAbi,
};

use crate::{
    config::ConfigError,
    filter::FilterBox,
    handler::{panic_message, HandlerBox},
    host::{self, HostRef},
};

/// A point in the server's life, announced to every module.
#[repr(C, u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Configuration is loaded and listeners are bound; no request has been served.
    ServerStart,
    /// The server is stopping; no more requests will arrive.
    ServerStop,
    /// Network thread `n` starts (runs on that thread).
    ThreadStart(u32),
    /// Network thread `n` stops (runs on that thread).
    ThreadStop(u32),
}

/// The table a module library exports (through [`export_module!`](crate::export_module)).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = ModuleRef)))]
#[sabi(missing_field(panic))]
pub struct ModuleRoot {
    /// The module's name ([`Module::NAME`]).
    pub name: extern "C" fn() -> RStr<'static>,
    /// The handler types it provides ([`Module::HANDLERS`]).
    pub handler_types: extern "C" fn() -> RVec<RStr<'static>>,
    /// The filter types it provides ([`Module::FILTERS`]).
    pub filter_types: extern "C" fn() -> RVec<RStr<'static>>,
    /// Give the module the host's services and its `modules.<name>` section (`null` if none).
    pub init: extern "C" fn(host: HostRef, config: RStr<'_>) -> RResult<(), ConfigError>,
    /// Build a handler from its route's JSON ([`Module::new_handler`]).
    pub new_handler:
        extern "C" fn(type_name: RStr<'_>, config: RStr<'_>) -> RResult<HandlerBox, ConfigError>,
    /// Build a filter from its JSON ([`Module::new_filter`]).
    pub new_filter:
        extern "C" fn(type_name: RStr<'_>, config: RStr<'_>) -> RResult<FilterBox, ConfigError>,
    /// Announce a point in the server's life ([`Module::lifecycle`]).
    #[sabi(last_prefix_field)]
    pub lifecycle: extern "C" fn(event: Lifecycle),
}

impl RootModule for ModuleRef {
    abi_stable::declare_root_module_statics! {ModuleRef}
    const BASE_NAME: &'static str = "osprey_module";
    const NAME: &'static str = "osprey_module";
    // While the SDK is 0.x, every minor version is an ABI break: the loader refuses a module
    // built against another minor version.
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// What a module author implements: the module's name, the handler and filter types it
/// provides, and optional lifecycle hooks.
pub trait Module: Sized + Send + Sync + 'static {
    /// The name used in `modules.<NAME>` and in log lines.
    const NAME: &'static str;
    /// Handler type names, as routes name them in `"handler"`.
    const HANDLERS: &'static [&'static str] = &[];
    /// Filter type names, as routes name them in `"filters": [{"type": ...}]`.
    const FILTERS: &'static [&'static str] = &[];

    /// Build the module from its `modules.<NAME>` configuration (`null` when absent).
    fn new(config: &str) -> Result<Self, ConfigError>;

    /// Build a handler of type `type_name` from its route's JSON object.
    fn new_handler(&self, type_name: &str, _route: &str) -> Result<HandlerBox, ConfigError> {
        Err(ConfigError::new(format!("no handler type `{type_name}`")))
    }

    /// Build a filter of type `type_name` from its JSON object in the route's `filters`.
    fn new_filter(&self, type_name: &str, _config: &str) -> Result<FilterBox, ConfigError> {
        Err(ConfigError::new(format!("no filter type `{type_name}`")))
    }

    /// Called at each point of the server's life.
    fn lifecycle(&self, _event: Lifecycle) {}
}

/// Links a [`Module`] type to the static that holds its one instance. Implemented by
/// [`export_module!`](crate::export_module); not for direct use.
#[doc(hidden)]
pub trait Exported: Module {
    fn slot() -> &'static OnceLock<Self>;
}

fn instance<M: Exported>() -> Result<&'static M, ConfigError> {
    M::slot()
        .get()
        .ok_or_else(|| ConfigError::new(format!("module `{}` used before init", M::NAME)))
}

/// Run module code, turning a panic into a configuration error.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, ConfigError>) -> RResult<T, ConfigError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.into(),
        Err(panic) => RResult::RErr(ConfigError::new(format!(
            "{what} panicked: {}",
            panic_message(&panic)
        ))),
    }
}

extern "C" fn name<M: Exported>() -> RStr<'static> {
    RStr::from_str(M::NAME)
}

extern "C" fn handler_types<M: Exported>() -> RVec<RStr<'static>> {
    M::HANDLERS.iter().map(|s| RStr::from_str(s)).collect()
}

extern "C" fn filter_types<M: Exported>() -> RVec<RStr<'static>> {
    M::FILTERS.iter().map(|s| RStr::from_str(s)).collect()
}

extern "C" fn init<M: Exported>(host: HostRef, config: RStr<'_>) -> RResult<(), ConfigError> {
    host::install(host, M::NAME);
    guarded("module init", || {
        if M::slot().get().is_none() {
            let module = M::new(config.as_str())?;
            let _ = M::slot().set(module);
        }
        Ok(())
    })
}

extern "C" fn new_handler<M: Exported>(
    type_name: RStr<'_>,
    config: RStr<'_>,
) -> RResult<HandlerBox, ConfigError> {
    guarded("new_handler", || {
        instance::<M>()?.new_handler(type_name.as_str(), config.as_str())
    })
}

extern "C" fn new_filter<M: Exported>(
    type_name: RStr<'_>,
    config: RStr<'_>,
) -> RResult<FilterBox, ConfigError> {
    guarded("new_filter", || {
        instance::<M>()?.new_filter(type_name.as_str(), config.as_str())
    })
}

extern "C" fn lifecycle<M: Exported>(event: Lifecycle) {
    let _ = guarded("lifecycle hook", || {
        instance::<M>()?.lifecycle(event);
        Ok(())
    });
}

/// The root module for `M`; called once by the generated loader.
#[doc(hidden)]
pub fn root_module<M: Exported>() -> ModuleRef {
    ModuleRoot {
        name: name::<M>,
        handler_types: handler_types::<M>,
        filter_types: filter_types::<M>,
        init: init::<M>,
        new_handler: new_handler::<M>,
        new_filter: new_filter::<M>,
        lifecycle: lifecycle::<M>,
    }
    .leak_into_prefix()
}

/// Export a [`Module`] type as this library's root module. Use it once per library crate
/// (`crate-type = ["cdylib"]`).
///
/// It refuses to compile when the crate is built with `panic = "abort"`: the SDK turns a panic
/// in a handler into a 500 by unwinding to the module boundary, and under `abort` one
/// panicking request would kill the whole server instead.
///
/// ```ignore
/// osprey_sdk::export_module!(HelloModule);
/// ```
#[macro_export]
macro_rules! export_module {
    ($module:ty) => {
        // Expanded in the module's crate, so this sees the module's own profile.
        #[cfg(panic = "abort")]
        ::core::compile_error!(
            "osprey module built with panic = \"abort\": a panic in one request would kill the \
             whole server. Set `panic = \"unwind\"` in the [profile.*] sections of the module's \
             workspace (the SDK catches panics at the boundary and answers 500)."
        );

        const _: () = {
            static SLOT: ::std::sync::OnceLock<$module> = ::std::sync::OnceLock::new();
            impl $crate::module::Exported for $module {
                fn slot() -> &'static ::std::sync::OnceLock<Self> {
                    &SLOT
                }
            }
        };

        /// The header abi_stable's loader looks up (`abi_stable::library::ROOT_MODULE_LOADER_NAME`).
        #[no_mangle]
        #[allow(non_upper_case_globals)]
        pub static _1as_0lib_1header_0root_bmodule_bloader: $crate::__private::LibHeader = {
            extern "C" fn constructor() -> $crate::__private::RootModuleResult {
                $crate::__private::call_root_module_loader($crate::module::root_module::<$module>)
            }
            // SAFETY: the header describes `ModuleRef`, which `root_module` returns.
            unsafe {
                $crate::__private::LibHeader::from_constructor::<$crate::ModuleRef>(
                    constructor,
                    $crate::__private::CheckTypeLayout::Yes,
                )
            }
        };
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn export_symbol_matches_abi_stable() {
        assert_eq!(
            abi_stable::library::ROOT_MODULE_LOADER_NAME,
            "_1as_0lib_1header_0root_bmodule_bloader"
        );
    }
}
