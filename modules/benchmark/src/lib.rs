//! `benchmark`: the fixed answer used by load tests, inline (`benchmark-inprocess`) or on the
//! worker pool (`benchmark-inworker`); NXWEB's `benchmark_inprocess` and `benchmark_inworker`
//! are the same handlers. The body is built once and shared, so answering costs no allocation.

use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::{
    handler_box, parse_config, ConfigError, Handler, HandlerBox, Mode, Module, Outcome,
};
use osprey_sdk::{Request, Response};

/// The server's allocator (mimalloc) for this module's per-request strings and lists: the C
/// library's costs several times more.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;

const BODY: &[u8] = b"<p>Hello, world!</p>";

struct BenchmarkModule;

impl Module for BenchmarkModule {
    const NAME: &'static str = "benchmark";
    // NXWEB's names (underscores) too.
    const HANDLERS: &'static [&'static str] = &[
        "benchmark-inprocess",
        "benchmark-inworker",
        "benchmark_inprocess",
        "benchmark_inworker",
    ];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(BenchmarkModule)
    }

    fn new_handler(&self, type_name: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        let _: osprey_sdk::serde_json::Value = parse_config(route)?;
        let mode = match type_name {
            "benchmark-inworker" | "benchmark_inworker" => Mode::Worker,
            _ => Mode::Inline,
        };
        Ok(handler_box(Benchmark {
            mode,
            body: RArc::new(RVec::from(BODY)),
        }))
    }
}

struct Benchmark {
    mode: Mode,
    body: RArc<RVec<u8>>,
}

impl Handler for Benchmark {
    fn handle(&self, _req: &Request<'_>, resp: &mut Response) -> Outcome {
        resp.content_type("text/html")
            .body_shared(self.body.clone());
        Outcome::Done
    }

    fn mode(&self) -> Mode {
        self.mode
    }
}

osprey_sdk::export_module!(BenchmarkModule);

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::testing::{self, TestRequest};
    use osprey_sdk::Body;

    #[test]
    fn answers_the_shared_body_in_the_asked_mode() {
        let module: BenchmarkModule = testing::module("null").unwrap();
        for (kind, mode) in [
            ("benchmark-inprocess", Mode::Inline),
            ("benchmark-inworker", Mode::Worker),
        ] {
            let h = testing::handler(&module, kind, "{}").unwrap();
            assert_eq!(h.mode(), mode);
            let resp = testing::call(&h, &TestRequest::get("/b"));
            assert_eq!(resp.body, BODY);
            assert_eq!(resp.header("content-type"), Some("text/html"));
            // Shared, not copied per request.
            assert!(matches!(resp.response.body, Body::Shared(_)));
        }
    }
}
