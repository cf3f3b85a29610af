//! The stock modules (`modules/*`), built next to the server binary. A route naming one of
//! their handler or filter types, or a `modules.<name>` section naming one of them, loads the
//! library without a `load` entry, as NXWEB's built-in handlers need none.

/// One stock library (`load` name) and what it provides.
pub struct Stock {
    /// The bare `load` name, resolved next to the binary.
    pub library: &'static str,
    /// The module's own name (`modules.<name>`).
    pub module: &'static str,
    pub handlers: &'static [&'static str],
    pub filters: &'static [&'static str],
}

/// Kept in step with each module's `HANDLERS` and `FILTERS` (tests/modules.rs loads each type
/// through this table).
pub const STOCK: &[Stock] = &[
    Stock {
        library: "static",
        module: "static",
        handlers: &["sendfile", "static"],
        filters: &[],
    },
    Stock {
        library: "proxy",
        module: "proxy",
        handlers: &["http_proxy"],
        filters: &[],
    },
    Stock {
        library: "benchmark",
        module: "benchmark",
        handlers: &[
            "benchmark-inprocess",
            "benchmark-inworker",
            "benchmark_inprocess",
            "benchmark_inworker",
        ],
        filters: &[],
    },
    Stock {
        library: "hello",
        module: "hello",
        handlers: &["hello"],
        filters: &[],
    },
    Stock {
        library: "status",
        module: "status",
        handlers: &["status"],
        filters: &[],
    },
    Stock {
        library: "gzip",
        module: "gzip",
        handlers: &[],
        filters: &["gzip"],
    },
    Stock {
        library: "file_cache",
        module: "file_cache",
        handlers: &[],
        filters: &["file_cache"],
    },
    Stock {
        library: "image",
        module: "image",
        handlers: &[],
        filters: &["image"],
    },
    Stock {
        library: "ssi",
        module: "ssi",
        handlers: &[],
        filters: &["ssi"],
    },
    Stock {
        library: "templates",
        module: "templates",
        handlers: &[],
        filters: &["templates"],
    },
    Stock {
        library: "filters",
        module: "filters",
        handlers: &["host_redirect"],
        filters: &["cors", "headers", "userid"],
    },
];

/// The stock library that provides handler (`filter` false) or filter type `kind`.
pub fn providing(kind: &str, filter: bool) -> Option<&'static Stock> {
    STOCK.iter().find(|s| {
        let types = if filter { s.filters } else { s.handlers };
        types.contains(&kind)
    })
}

/// The stock library of the module named `name`.
pub fn named(name: &str) -> Option<&'static Stock> {
    STOCK.iter().find(|s| s.module == name)
}
