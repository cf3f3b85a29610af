//! Filters: steps around a route's handler (caches, compression, image transforms).

use std::panic::{catch_unwind, AssertUnwindSafe};

use abi_stable::{
    sabi_trait,
    sabi_trait::TD_Opaque,
    std_types::{RBox, RStr, RString},
    StableAbi,
};

use crate::{handler::panic_message, handler::Mode, host, request::Request, response::Response};

/// What a filter's `before` step decided.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Go on to the next filter and then the handler.
    Continue,
    /// The filter filled the response (e.g. a cache hit): skip the handler and later filters;
    /// the `after` steps of earlier filters still run.
    Respond,
}

/// What a module implements to wrap a route's handler. Filters run in the order the route
/// lists them before the handler, and in reverse order after it.
pub trait Filter: Send + Sync + 'static {
    /// Add this filter's variant to the cache key (e.g. `|gzip` when the client accepts it), so
    /// caches further down the chain keep variants apart.
    fn cache_key(&self, _req: &Request<'_>, _key: &mut String) {}

    /// Before the handler: may answer from a cache.
    fn before(&self, _req: &Request<'_>, _key: &str, _resp: &mut Response) -> Step {
        Step::Continue
    }

    /// Where `before` must run for this request, asked just before it: `Inline` (the default)
    /// for quick work such as a memory-cache hit, `Worker` when `before` reads files or does
    /// CPU-heavy work (e.g. computing a thumbnail). Keep this cheap: it runs inline.
    fn before_mode(&self, _req: &Request<'_>, _key: &str) -> Mode {
        Mode::Inline
    }

    /// Where `after` must run for this response: `Worker` for heavy work such as compression.
    fn after_mode(&self, _req: &Request<'_>, _resp: &Response) -> Mode {
        Mode::Inline
    }

    /// After the handler (or a later filter's cache hit): transform the response.
    fn after(&self, _req: &Request<'_>, _key: &str, _resp: &mut Response) {}
}

/// The ABI-stable face of a [`Filter`]; see [`filter_box`].
#[sabi_trait]
pub trait FfiFilter: Send + Sync {
    fn cache_key(&self, req: &Request<'_>, key: &mut RString);
    fn before(&self, req: &Request<'_>, key: RStr<'_>, resp: &mut Response) -> Step;
    fn before_mode(&self, req: &Request<'_>, key: RStr<'_>) -> Mode;
    fn after_mode(&self, req: &Request<'_>, resp: &Response) -> Mode;

    #[sabi(last_prefix_field)]
    fn after(&self, req: &Request<'_>, key: RStr<'_>, resp: &mut Response);
}

/// A filter object that crosses the module boundary.
pub type FilterBox = FfiFilter_TO<'static, RBox<()>>;

/// Build a [`FilterBox`] from any [`Filter`].
pub fn filter_box(filter: impl Filter) -> FilterBox {
    FfiFilter_TO::from_value(Guarded(filter), TD_Opaque)
}

struct Guarded<F>(F);

impl<F: Filter> Guarded<F> {
    /// Run one step; a panic is logged and answered with `fallback`.
    fn guard<T>(&self, step: &str, req: &Request<'_>, fallback: T, f: impl FnOnce() -> T) -> T {
        catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
            host::error(&format!(
                "filter panicked in {step} on {} {}: {}",
                req.method,
                req.uri,
                panic_message(&panic)
            ));
            fallback
        })
    }
}

impl<F: Filter> FfiFilter for Guarded<F> {
    fn cache_key(&self, req: &Request<'_>, key: &mut RString) {
        self.guard("cache_key", req, (), || {
            let mut k = std::mem::take(key).into_string();
            self.0.cache_key(req, &mut k);
            *key = k.into();
        })
    }

    fn before(&self, req: &Request<'_>, key: RStr<'_>, resp: &mut Response) -> Step {
        self.guard("before", req, Step::Continue, || {
            self.0.before(req, key.as_str(), resp)
        })
    }

    fn before_mode(&self, req: &Request<'_>, key: RStr<'_>) -> Mode {
        self.guard("before_mode", req, Mode::Inline, || {
            self.0.before_mode(req, key.as_str())
        })
    }

    fn after_mode(&self, req: &Request<'_>, resp: &Response) -> Mode {
        self.guard("after_mode", req, Mode::Inline, || self.0.after_mode(req, resp))
    }

    fn after(&self, req: &Request<'_>, key: RStr<'_>, resp: &mut Response) {
        let failed = self.guard("after", req, true, || {
            self.0.after(req, key.as_str(), resp);
            false
        });
        if failed {
            *resp = Response::default();
            resp.status(500).text("Internal Server Error\n");
        }
    }
}
