//! Server counters for the status handler. Each network thread owns its own block of counters
//! (one writer, relaxed loads and stores: no lock and no shared cache line on the hot path); a
//! snapshot sums the blocks. Module counters (`host::Counter`) are global relaxed atomics.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use osprey_sdk::abi_stable::std_types::{RString, RVec, Tuple2};
use osprey_sdk::host::Stats;

/// Module names that can be counted (more are loaded but not counted).
pub const MAX_MODULES: usize = 64;
/// Counters modules can register.
pub const MAX_COUNTERS: usize = 256;

/// One network thread's counters. Only that thread writes them.
struct ThreadStats {
    accepted: AtomicU64,
    requests: AtomicU64,
    reading: AtomicU64,
    writing: AtomicU64,
    idle: AtomicU64,
    modules: [AtomicU64; MAX_MODULES],
}

impl ThreadStats {
    fn bump(&self, counter: &AtomicU64, delta: i64) {
        counter.store(counter.load(Relaxed).wrapping_add(delta as u64), Relaxed);
    }
}

struct Global {
    started: Instant,
    threads: Mutex<Vec<&'static ThreadStats>>,
    module_names: Mutex<Vec<String>>,
    counter_names: Mutex<Vec<String>>,
    counters: [AtomicU64; MAX_COUNTERS],
    reloads: AtomicU64,
}

fn global() -> &'static Global {
    static G: OnceLock<Global> = OnceLock::new();
    G.get_or_init(|| Global {
        started: Instant::now(),
        threads: Mutex::new(Vec::new()),
        module_names: Mutex::new(Vec::new()),
        counter_names: Mutex::new(Vec::new()),
        counters: std::array::from_fn(|_| AtomicU64::new(0)),
        reloads: AtomicU64::new(0),
    })
}

thread_local! {
    static LOCAL: &'static ThreadStats = {
        let block: &'static ThreadStats = Box::leak(Box::new(ThreadStats {
            accepted: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            reading: AtomicU64::new(0),
            writing: AtomicU64::new(0),
            idle: AtomicU64::new(0),
            modules: std::array::from_fn(|_| AtomicU64::new(0)),
        }));
        global().threads.lock().unwrap().push(block);
        block
    };
}

/// Start the uptime clock.
pub fn init() {
    let _ = global();
}

/// The slot counting requests answered by module `name` (`usize::MAX`: not counted).
pub fn module_slot(name: &str) -> usize {
    let mut names = global().module_names.lock().unwrap();
    if let Some(i) = names.iter().position(|n| n == name) {
        return i;
    }
    if names.len() >= MAX_MODULES {
        return usize::MAX;
    }
    names.push(name.to_owned());
    names.len() - 1
}

/// A request was answered by a route whose handler belongs to module `slot`.
pub fn count_module(slot: usize) {
    if slot < MAX_MODULES {
        LOCAL.with(|t| t.bump(&t.modules[slot], 1));
    }
}

/// A request was answered (see `dispatch::finished`).
pub fn count_request() {
    LOCAL.with(|t| t.bump(&t.requests, 1));
}

pub fn count_reload() {
    global().reloads.fetch_add(1, Relaxed);
}

/// What a connection is doing, for the reading / writing / idle gauges.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Activity {
    Idle,
    Reading,
    Writing,
}

/// One connection's part: its state in the gauges from accept to drop, and how many requests
/// it has been served (for the per-connection limit). Packed in four bytes, as it lives in
/// every idle connection's task.
pub struct ConnStats {
    /// Bits 0..30: requests served (saturating); bits 30..32: the `Activity`.
    packed: Cell<u32>,
}

const SERVED_MASK: u32 = (1 << 30) - 1;

fn state_bits(state: Activity) -> u32 {
    (match state {
        Activity::Idle => 0,
        Activity::Reading => 1,
        Activity::Writing => 2,
    }) << 30
}

impl ConnStats {
    /// A connection was accepted (it starts idle: nothing received yet).
    pub fn accepted() -> ConnStats {
        LOCAL.with(|t| {
            t.bump(&t.accepted, 1);
            t.bump(&t.idle, 1);
        });
        ConnStats {
            packed: Cell::new(state_bits(Activity::Idle)),
        }
    }

    fn state(&self) -> Activity {
        match self.packed.get() >> 30 {
            0 => Activity::Idle,
            1 => Activity::Reading,
            _ => Activity::Writing,
        }
    }

    pub fn set(&self, state: Activity) {
        let old = self.state();
        if old != state {
            self.packed
                .set(self.packed.get() & SERVED_MASK | state_bits(state));
            LOCAL.with(|t| {
                t.bump(gauge(t, old), -1);
                t.bump(gauge(t, state), 1);
            });
        }
    }

    /// Requests this connection has been served (at most 2^30 - 1).
    pub fn served(&self) -> u32 {
        self.packed.get() & SERVED_MASK
    }

    /// One more request served; returns the new count.
    pub fn count_served(&self) -> u32 {
        let served = (self.served() + 1).min(SERVED_MASK);
        self.packed.set(self.packed.get() & !SERVED_MASK | served);
        served
    }
}

impl Drop for ConnStats {
    fn drop(&mut self) {
        LOCAL.with(|t| t.bump(gauge(t, self.state()), -1));
    }
}

fn gauge(t: &ThreadStats, state: Activity) -> &AtomicU64 {
    match state {
        Activity::Idle => &t.idle,
        Activity::Reading => &t.reading,
        Activity::Writing => &t.writing,
    }
}

/// The id of a module counter (`u32::MAX` when the table is full).
pub fn counter(name: &str) -> u32 {
    let mut names = global().counter_names.lock().unwrap();
    if let Some(i) = names.iter().position(|n| n == name) {
        return i as u32;
    }
    if names.len() >= MAX_COUNTERS {
        return u32::MAX;
    }
    names.push(name.to_owned());
    (names.len() - 1) as u32
}

pub fn counter_add(id: u32, delta: u64) {
    if let Some(c) = global().counters.get(id as usize) {
        c.fetch_add(delta, Relaxed);
    }
}

/// Sum every thread's counters.
pub fn snapshot() -> Stats {
    let g = global();
    let mut s = Stats {
        uptime_secs: g.started.elapsed().as_secs(),
        reloads: g.reloads.load(Relaxed),
        ..Stats::default()
    };
    let mut modules = [0u64; MAX_MODULES];
    for t in g.threads.lock().unwrap().iter() {
        s.accepted += t.accepted.load(Relaxed);
        s.requests += t.requests.load(Relaxed);
        s.reading = s.reading.wrapping_add(t.reading.load(Relaxed));
        s.writing = s.writing.wrapping_add(t.writing.load(Relaxed));
        s.idle = s.idle.wrapping_add(t.idle.load(Relaxed));
        for (sum, m) in modules.iter_mut().zip(&t.modules) {
            *sum += m.load(Relaxed);
        }
    }
    s.active = s.reading.wrapping_add(s.writing).wrapping_add(s.idle);
    let names = g.module_names.lock().unwrap();
    s.modules = names
        .iter()
        .zip(modules)
        .map(|(n, v)| Tuple2(RString::from(n.as_str()), v))
        .collect::<RVec<_>>();
    let names = g.counter_names.lock().unwrap();
    s.counters = names
        .iter()
        .zip(&g.counters)
        .map(|(n, v)| Tuple2(RString::from(n.as_str()), v.load(Relaxed)))
        .collect::<RVec<_>>();
    s
}

#[cfg(test)]
mod conn_stats_tests {
    use super::*;

    #[test]
    fn state_and_served_count_share_four_bytes() {
        assert_eq!(std::mem::size_of::<ConnStats>(), 4);
        let c = ConnStats::accepted();
        assert_eq!((c.state(), c.served()), (Activity::Idle, 0));
        c.set(Activity::Writing);
        assert_eq!(c.count_served(), 1);
        assert_eq!(c.count_served(), 2);
        assert_eq!((c.state(), c.served()), (Activity::Writing, 2));
        c.set(Activity::Reading);
        assert_eq!((c.state(), c.served()), (Activity::Reading, 2));
        c.packed.set(c.packed.get() | SERVED_MASK);
        assert_eq!(c.count_served(), SERVED_MASK, "saturates");
        assert_eq!(c.state(), Activity::Reading);
    }
}
