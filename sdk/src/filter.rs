//! Filters: steps around a route's handler (caches, compression, image transforms).

use std::panic::{catch_unwind, AssertUnwindSafe};

use abi_stable::{
    sabi_trait,
    sabi_trait::TD_Opaque,
    std_types::{RBox, RStr, RString, RVec},
    StableAbi,
};
use async_ffi::LocalFfiFuture;

pub use crate::wants::Wants;

/// Set by a filter in `request_headers` (any value): the handler's answer is read for its
/// body only ([`Request::body_only`]), e.g. an SSI page whose body the filter replaces and
/// whose validators it drops. Not a header name (no handler sees it); the core ignores it on
/// a route whose filter keys a cache, as the handler's answer could be stored and served.
pub const BODY_ONLY: &str = ":body-only";
use crate::{
    handler::panic_message, handler::Mode, host, request::Request, response::HeaderPair,
    response::Response,
};

/// What a filter's `before` step decided.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Go on to the next filter and then the handler.
    Continue,
    /// The filter filled the response (e.g. a cache hit): skip the handler and later filters;
    /// the `after` steps of earlier filters still run.
    Respond,
    /// Another request is producing what this one needs (e.g. a cache fill in flight): the
    /// core awaits [`Filter::wait`] for at most half a second, then calls `before` again.
    /// The filter must eventually answer `Continue` or `Respond` (the core gives up waiting
    /// after a minute and continues).
    Wait,
}

/// A future a filter hands the core to wait on; see [`Step::Wait`].
pub type WaitFuture = LocalFfiFuture<()>;

/// What a module implements to wrap a route's handler. Filters run in the order the route
/// lists them before the handler, and in reverse order after it.
pub trait Filter: Send + Sync + 'static {
    /// The steps this filter takes part in, asked once when its route is built: the core
    /// makes no call the filter does not want (each is a call across the module boundary on
    /// every request), and a filter that wants none is left out of the request path. The
    /// default, [`Wants::ALL`], calls every step.
    fn wants(&self) -> Wants {
        Wants::ALL
    }

    /// Add this filter's variant to the cache key (e.g. `|gzip` when the client accepts it), so
    /// caches further down the chain keep variants apart.
    fn cache_key(&self, _req: &Request<'_>, _key: &mut String) {}

    /// Before the handler: may answer from a cache.
    fn before(&self, _req: &Request<'_>, _key: &str, _resp: &mut Response) -> Step {
        Step::Continue
    }

    /// After `before` answered `Continue`: request headers the handler should see in place
    /// of the client's (e.g. `If-None-Match` when a cache revalidates its entry). Each pair
    /// replaces every request header of that name; an empty value removes it.
    /// A filter that replaces the whole body (SSI) may add [`BODY_ONLY`] to say so.
    fn request_headers(&self, _req: &Request<'_>, _key: &str, _set: &mut RVec<HeaderPair>) {}

    /// After `before` answered `Wait`: a future that completes when it is worth asking again.
    /// It is polled on the connection's network thread and must not block.
    fn wait(&self, _key: &str) -> WaitFuture {
        LocalFfiFuture::new(async {})
    }

    /// `before` let this request go on, but `after` will not run for it: the handler declined
    /// (routing moved on), the worker pool was full, or the connection went away. Release
    /// what `before` reserved (e.g. a cache fill other requests wait for).
    fn cancel(&self, _key: &str) {}

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
    /// See [`Filter::cache_key`].
    fn cache_key(&self, req: &Request<'_>, key: &mut RString);
    /// See [`Filter::before`].
    fn before(&self, req: &Request<'_>, key: RStr<'_>, resp: &mut Response) -> Step;
    /// See [`Filter::before_mode`].
    fn before_mode(&self, req: &Request<'_>, key: RStr<'_>) -> Mode;
    /// See [`Filter::after_mode`].
    fn after_mode(&self, req: &Request<'_>, resp: &Response) -> Mode;
    /// See [`Filter::after`].
    fn after(&self, req: &Request<'_>, key: RStr<'_>, resp: &mut Response);
    /// See [`Filter::request_headers`].
    fn request_headers(&self, req: &Request<'_>, key: RStr<'_>, set: &mut RVec<HeaderPair>);

    /// See [`Filter::wait`].
    fn wait(&self, key: RStr<'_>) -> WaitFuture;

    /// See [`Filter::cancel`].
    #[sabi(last_prefix_field)]
    fn cancel(&self, key: RStr<'_>);

    /// See [`Filter::wants`]. After the last prefix field, with a default body: the vtable
    /// entry is optional, and a missing one answers every step, as before it existed. (A
    /// module built with it loads in an older server, which never asks; abi_stable's load
    /// check refuses the other way round.)
    fn wants(&self) -> Wants {
        Wants::ALL
    }
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
    fn wants(&self) -> Wants {
        // Asked once, at load: a panic here means "as before", every step.
        catch_unwind(AssertUnwindSafe(|| self.0.wants())).unwrap_or(Wants::ALL)
    }

    fn cache_key(&self, req: &Request<'_>, key: &mut RString) {
        // The key's buffer was allocated by the core: turned into a `String` here it would be
        // copied, and copied again on the way back. A buffer kept per thread costs one copy.
        thread_local!(static KEY: std::cell::Cell<String> = const { std::cell::Cell::new(String::new()) });
        let mut k = KEY.take();
        k.clear();
        k.push_str(key);
        self.guard("cache_key", req, (), || self.0.cache_key(req, &mut k));
        match k.strip_prefix(key.as_str()) {
            Some(added) => key.push_str(added),
            None => {
                key.clear();
                key.push_str(&k);
            }
        }
        KEY.set(k);
    }

    fn before(&self, req: &Request<'_>, key: RStr<'_>, resp: &mut Response) -> Step {
        self.guard("before", req, Step::Continue, || {
            self.0.before(req, key.as_str(), resp)
        })
    }

    fn request_headers(&self, req: &Request<'_>, key: RStr<'_>, set: &mut RVec<HeaderPair>) {
        self.guard("request_headers", req, (), || {
            self.0.request_headers(req, key.as_str(), set)
        })
    }

    fn wait(&self, key: RStr<'_>) -> WaitFuture {
        catch_unwind(AssertUnwindSafe(|| self.0.wait(key.as_str()))).unwrap_or_else(|panic| {
            host::error(&format!(
                "filter panicked in wait: {}",
                panic_message(&panic)
            ));
            LocalFfiFuture::new(async {})
        })
    }

    fn cancel(&self, key: RStr<'_>) {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.0.cancel(key.as_str()))) {
            host::error(&format!(
                "filter panicked in cancel: {}",
                panic_message(&panic)
            ));
        }
    }

    fn before_mode(&self, req: &Request<'_>, key: RStr<'_>) -> Mode {
        self.guard("before_mode", req, Mode::Inline, || {
            self.0.before_mode(req, key.as_str())
        })
    }

    fn after_mode(&self, req: &Request<'_>, resp: &Response) -> Mode {
        self.guard("after_mode", req, Mode::Inline, || {
            self.0.after_mode(req, resp)
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRequest;

    struct Keyed;
    impl Filter for Keyed {
        fn cache_key(&self, _req: &Request<'_>, key: &mut String) {
            key.push_str("|v");
        }
    }

    #[test]
    fn a_filters_part_of_the_key_is_appended() {
        TestRequest::get("/x").with_view(|req| {
            let mut key = RString::from("h/x");
            filter_box(Keyed).cache_key(req, &mut key);
            assert_eq!(key, "h/x|v");
        });
    }
}
