//! Request coalescing: while one request (the leader) fetches a key from the origin, other
//! requests for that key wait (`Step::Wait`) instead of going to the origin too. The leader's
//! `after` completes the fill and wakes them; they then find the fresh entry. A fill that
//! never completes (the leader's handler declined, or its connection died) is taken over
//! after `lock_timeout`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::entry::Entry;

pub struct Fill {
    started: Instant,
    /// The stale entry being revalidated, if any: a 304 refreshes this one.
    pub stale: Option<Arc<Entry>>,
    state: Mutex<(bool, Vec<Waker>)>,
}

impl Fill {
    fn finish(&self) {
        let wakers = {
            let mut s = self.state.lock().unwrap();
            s.0 = true;
            std::mem::take(&mut s.1)
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// What a request that missed should do.
pub enum Role {
    /// Fetch from the origin.
    Lead,
    /// Wait for the request that is already fetching.
    Wait,
}

#[derive(Default)]
pub struct InFlight {
    fills: Mutex<HashMap<String, Arc<Fill>>>,
}

impl InFlight {
    /// Join the fill of `key` in flight, or start one.
    pub fn join(&self, key: &str, stale: Option<Arc<Entry>>, lock_timeout: Duration) -> Role {
        let mut fills = self.fills.lock().unwrap();
        if let Some(f) = fills.get(key) {
            if f.started.elapsed() < lock_timeout {
                return Role::Wait;
            }
            // The leader is gone or far too slow: this request takes over.
            f.finish();
        }
        let fill = Arc::new(Fill {
            started: Instant::now(),
            stale,
            state: Mutex::new((false, Vec::new())),
        });
        fills.insert(key.to_owned(), fill);
        Role::Lead
    }

    /// The fill of `key` in flight, if any.
    pub fn get(&self, key: &str) -> Option<Arc<Fill>> {
        self.fills.lock().unwrap().get(key).cloned()
    }

    /// End the fill of `key`: waiters wake when the returned guard drops, i.e. after the
    /// leader has stored what it got.
    pub fn take(&self, key: &str) -> Option<Done> {
        self.fills.lock().unwrap().remove(key).map(Done)
    }

    /// Completes when the fill of `key` ends (at once if none is in flight).
    pub fn wait(&self, key: &str) -> WaitFill {
        WaitFill(self.get(key))
    }
}

/// Wakes a fill's waiters when dropped.
pub struct Done(pub Arc<Fill>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.finish();
    }
}

pub struct WaitFill(Option<Arc<Fill>>);

impl Future for WaitFill {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(fill) = &self.0 else {
            return Poll::Ready(());
        };
        let mut s = fill.state.lock().unwrap();
        if s.0 {
            return Poll::Ready(());
        }
        if !s.1.iter().any(|w| w.will_wake(cx.waker())) {
            s.1.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
