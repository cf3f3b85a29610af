//! Which steps a filter takes part in ([`crate::Filter::wants`]): read once when its route is
//! built, so the core skips, request after request, the calls a filter has no use for.

use std::ops::BitOr;

use abi_stable::StableAbi;

/// A set of filter steps. Combine with `|`: `Wants::BEFORE | Wants::AFTER`.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wants(u16);

impl Wants {
    /// No step: the filter stays out of the request path (e.g. configured to do nothing).
    pub const NONE: Wants = Wants(0);
    /// The filter's steps read the cache key (`host|scheme|uri` and the variants): the core
    /// builds it only when some filter of the route wants it, and passes `""` otherwise.
    pub const KEY: Wants = Wants(1);
    /// `cache_key`: the filter adds a variant (called only while a key is built).
    pub const CACHE_KEY: Wants = Wants(1 << 1);
    /// `before_mode` (without it, `before` runs inline).
    pub const BEFORE_MODE: Wants = Wants(1 << 2);
    /// `before` (and `wait` after a `Wait`); without it the request goes on (`Continue`).
    pub const BEFORE: Wants = Wants(1 << 3);
    /// `request_headers`, after `before` let the request go on.
    pub const REQUEST_HEADERS: Wants = Wants(1 << 4);
    /// `cancel`, when the run ends without this filter's `after`.
    pub const CANCEL: Wants = Wants(1 << 5);
    /// `after_mode` (without it, `after` runs inline).
    pub const AFTER_MODE: Wants = Wants(1 << 6);
    /// `after`.
    pub const AFTER: Wants = Wants(1 << 7);
    /// Every step: the default, and what a module built before `wants` existed gets.
    pub const ALL: Wants = Wants((1 << 8) - 1);
    /// `before` for `OPTIONS` requests only (a CORS preflight): every other request goes on
    /// (`Continue`) without the call. [`BEFORE`](Wants::BEFORE) takes precedence. (Read by
    /// the servers of this SDK version on; an older one never calls such a `before`.)
    pub const BEFORE_OPTIONS: Wants = Wants(1 << 8);

    /// Whether every step of `other` is in this set.
    pub const fn contains(self, other: Wants) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no step is wanted.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// This set with `other`'s steps added.
    pub const fn with(self, other: Wants) -> Wants {
        Wants(self.0 | other.0)
    }

    /// This set without `other`'s steps.
    pub const fn without(self, other: Wants) -> Wants {
        Wants(self.0 & !other.0)
    }

    /// The steps the core will call: a mode is asked only for a step that runs, and
    /// `cache_key` only while a key is built.
    pub const fn effective(self) -> Wants {
        let mut w = self;
        if w.contains(Wants::BEFORE) {
            w = w.without(Wants::BEFORE_OPTIONS);
        } else if !w.contains(Wants::BEFORE_OPTIONS) {
            w = w.without(Wants::BEFORE_MODE);
        }
        if !w.contains(Wants::AFTER) {
            w = w.without(Wants::AFTER_MODE);
        }
        w
    }
}

impl BitOr for Wants {
    type Output = Wants;
    fn bitor(self, other: Wants) -> Wants {
        self.with(other)
    }
}

#[cfg(test)]
mod tests {
    use super::Wants;

    #[test]
    fn a_mode_counts_only_with_its_step() {
        let w = Wants::BEFORE_MODE | Wants::AFTER | Wants::AFTER_MODE;
        assert_eq!(w.effective(), Wants::AFTER | Wants::AFTER_MODE);
        assert!(Wants::ALL.contains(Wants::KEY | Wants::CANCEL));
        assert!(!Wants::AFTER.contains(Wants::BEFORE));
        assert!(Wants::NONE.effective().is_empty());
        assert_eq!(Wants::ALL.effective(), Wants::ALL);
        let preflight = Wants::BEFORE_OPTIONS | Wants::BEFORE_MODE;
        assert_eq!(preflight.effective(), preflight);
        assert_eq!(
            (preflight | Wants::BEFORE).effective(),
            Wants::BEFORE | Wants::BEFORE_MODE
        );
    }
}
