//! Deadlines and the stop signal for connections waiting on their peer, without a timer or a
//! channel registration per wait.
//!
//! A keep-alive connection waits once per request. With a tokio timer and a watch receiver in
//! a `select!`, every wait armed and disarmed a timer (a lock on the time driver each way) and
//! joined and left the watch's waiter list. Here each network thread keeps one table of
//! deadlines: a connection owns a slot, arming it is two stores, and a sweep every [`TICK`]
//! wakes the slots whose deadline has passed. A stop wakes every slot waiting between requests.
//! Deadlines are therefore up to one tick late, never early.
//!
//! A plain connection still waiting between requests after [`QUIET_SWEEPS`] sweeps in a row
//! (quiet for two seconds) is woken to park: its task ends and the socket waits in
//! `net::park`, which holds a few words for it instead of a task and an event-loop
//! registration.

use std::cell::RefCell;
use std::task::Waker;
use std::time::{Duration, Instant};

/// How often expired waits are looked for.
pub const TICK: Duration = Duration::from_millis(50);

/// Sweeps a connection is seen quiet between requests before it parks: two seconds. Parking
/// sooner made a client that reads a large answer slowly, or asks every few hundred
/// milliseconds, park and come back (four `epoll_ctl` and a new task) on every request.
pub const QUIET_SWEEPS: u8 = 40;

struct Slot {
    /// Milliseconds since the table's epoch; `u64::MAX` while not waiting.
    deadline: u64,
    waker: Option<Waker>,
    /// Waiting between requests: a stop ends the wait.
    idle: bool,
    expired: bool,
    /// Between requests, the connection can park (see [`Ended::Park`]).
    parkable: bool,
    /// Sweeps that saw it waiting between requests: at [`QUIET_SWEEPS`], the next one parks it.
    quiet: u8,
    /// Woken to park.
    park: bool,
}

struct Table {
    epoch: Instant,
    /// Milliseconds since `epoch` at the last sweep: arming a wait reads no clock.
    swept: u64,
    slots: Vec<Slot>,
    free: Vec<u32>,
    stopping: bool,
    /// The thread can park connections (`net::park::start`).
    parking: bool,
}

impl Table {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

thread_local! {
    static TABLE: RefCell<Table> = RefCell::new(Table {
        epoch: Instant::now(),
        swept: 0,
        slots: Vec::new(),
        free: Vec::new(),
        stopping: false,
        parking: false,
    });
}

/// Why a wait ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The deadline passed.
    TimedOut,
    /// The server is stopping and the connection was between requests.
    Stopping,
    /// The connection has been quiet between requests for two seconds: park it.
    Park,
}

/// What a connection waits for, to [`Deadline::arm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// The rest of a request.
    Request,
    /// The next request (a stop ends the wait).
    Idle,
    /// The next request, on a connection that can park when quiet.
    IdleParkable,
    /// The next request after the first answer, on a connection that can park: it parks at
    /// the next sweep (most such clients stay quiet; one that sends again parks only when
    /// quiet, see [`QUIET_SWEEPS`]). Not after an answer its client had to be waited for
    /// (a large one): that client is still reading it, and may ask again as soon as it has.
    IdleFirst,
}

/// A connection's slot in its thread's table. Not `Send`: it belongs to the thread.
pub struct Deadline {
    slot: u32,
    _thread: std::marker::PhantomData<*const ()>,
}

impl Deadline {
    pub fn new() -> Deadline {
        let slot = TABLE.with(|t| {
            let mut t = t.borrow_mut();
            let fresh = Slot {
                deadline: u64::MAX,
                waker: None,
                idle: false,
                expired: false,
                parkable: false,
                quiet: 0,
                park: false,
            };
            match t.free.pop() {
                Some(i) => {
                    t.slots[i as usize] = fresh;
                    i
                }
                None => {
                    t.slots.push(fresh);
                    (t.slots.len() - 1) as u32
                }
            }
        });
        Deadline {
            slot,
            _thread: std::marker::PhantomData,
        }
    }

    /// Start a wait for what `waiting` says that ends `timeout` from now.
    pub fn arm(&self, timeout: Duration, waiting: Waiting) {
        TABLE.with(|t| {
            let mut t = t.borrow_mut();
            // The last sweep's time is at most about a tick old: one tick more keeps the
            // deadline from coming early.
            let deadline = t.swept.saturating_add((timeout + TICK).as_millis() as u64);
            let s = &mut t.slots[self.slot as usize];
            s.deadline = deadline;
            s.idle = waiting != Waiting::Request;
            s.parkable = matches!(waiting, Waiting::IdleParkable | Waiting::IdleFirst);
            s.expired = false;
            s.quiet = if waiting == Waiting::IdleFirst {
                QUIET_SWEEPS
            } else {
                0
            };
            s.park = false;
        });
    }

    /// When the armed wait ends, in [`clock`] milliseconds.
    pub fn due(&self) -> u64 {
        TABLE.with(|t| t.borrow().slots[self.slot as usize].deadline)
    }

    /// Whether the wait is over, else remember `waker` for the sweep.
    pub fn check(&self, waker: &Waker) -> Option<Ended> {
        TABLE.with(|t| {
            let mut t = t.borrow_mut();
            let stopping = t.stopping;
            let s = &mut t.slots[self.slot as usize];
            if s.expired {
                return Some(Ended::TimedOut);
            }
            if stopping && s.idle {
                return Some(Ended::Stopping);
            }
            if s.park {
                return Some(Ended::Park);
            }
            match &s.waker {
                Some(w) if w.will_wake(waker) => {}
                _ => s.waker = Some(waker.clone()),
            }
            None
        })
    }

    /// The wait is over (the connection has work): the sweep leaves the slot alone.
    pub fn disarm(&self) {
        TABLE.with(|t| {
            let s = &mut t.borrow_mut().slots[self.slot as usize];
            s.deadline = u64::MAX;
            s.expired = false;
            s.quiet = 0;
            s.park = false;
        });
    }
}

impl Default for Deadline {
    fn default() -> Self {
        Deadline::new()
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // During thread teardown the table may already be gone; the slot goes with it.
        let _ = TABLE.try_with(|t| {
            let mut t = t.borrow_mut();
            let s = &mut t.slots[self.slot as usize];
            s.deadline = u64::MAX;
            s.waker = None;
            t.free.push(self.slot);
        });
    }
}

thread_local! {
    /// The server's stop channel, for what waits on it with `select!` (HTTP/2 connections).
    static STOP_SIGNAL: RefCell<Option<tokio::sync::watch::Receiver<bool>>> =
        const { RefCell::new(None) };
}

/// Give this thread the server's stop channel (see [`stop_signal`]).
pub fn set_stop_signal(rx: tokio::sync::watch::Receiver<bool>) {
    STOP_SIGNAL.with(|s| *s.borrow_mut() = Some(rx));
}

/// The server's stop channel as this thread knows it (HTTP/2 connections end gracefully when
/// it changes). A thread that was given none gets one that never changes.
pub fn stop_signal() -> tokio::sync::watch::Receiver<bool> {
    STOP_SIGNAL.with(|s| {
        s.borrow_mut()
            .get_or_insert_with(|| {
                let (tx, rx) = tokio::sync::watch::channel(false);
                std::mem::forget(tx);
                rx
            })
            .clone()
    })
}

/// Quiet connections of this thread may park from now on (its lot is ready).
pub fn allow_parking() {
    TABLE.with(|t| t.borrow_mut().parking = true);
}

/// Milliseconds since this thread's epoch at the last sweep (the time [`Deadline::due`] is in).
pub fn clock() -> u64 {
    TABLE.with(|t| t.borrow().swept)
}

/// Whether this thread's server is stopping (requests in flight finish without keep-alive).
pub fn stopping() -> bool {
    TABLE.with(|t| t.borrow().stopping)
}

/// Stop this thread: every connection waiting between requests ends its wait.
pub fn stop() {
    let wakers: Vec<Waker> = TABLE.with(|t| {
        let mut t = t.borrow_mut();
        t.stopping = true;
        t.slots
            .iter_mut()
            .filter(|s| s.idle && s.deadline != u64::MAX)
            .filter_map(|s| s.waker.take())
            .collect()
    });
    // Woken outside the borrow: a waker may run code that touches the table.
    wakers.into_iter().for_each(Waker::wake);
}

/// Wake the waits whose deadline has passed and the quiet ones that can park, close the
/// parked connections whose timeout passed, refresh the thread's `Date` and close its surplus
/// idle upstream connections; runs every
/// [`TICK`] on each network thread.
pub async fn sweep() {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut due = Vec::new();
    loop {
        tick.tick().await;
        crate::http::date::refresh();
        // A thread that never sleeps sees its worker-pool results here at the latest.
        crate::worker::look_at_inbox();
        TABLE.with(|t| {
            let mut t = t.borrow_mut();
            let now = t.now();
            t.swept = now;
            let parking = t.parking;
            for s in t.slots.iter_mut() {
                if s.deadline <= now && !s.expired {
                    s.expired = true;
                    if let Some(w) = s.waker.take() {
                        due.push(w);
                    }
                } else if parking && s.parkable && s.deadline != u64::MAX && !s.expired && !s.park {
                    if s.quiet < QUIET_SWEEPS {
                        s.quiet += 1;
                    } else if let Some(w) = s.waker.take() {
                        s.park = true;
                        due.push(w);
                    }
                }
            }
        });
        due.drain(..).for_each(Waker::wake);
        // The lot's timeouts here too: one timer re-armed per tick (each re-arm of a tokio
        // timer that is the next due writes the event loop's eventfd, an extra turn).
        crate::net::park::expire();
        crate::upstream::trim_idle_connections();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_deadline_fires_after_its_time_and_not_before() {
        let runtime = crate::server::plain_runtime();
        runtime.block_on(deadline_fires());
    }

    async fn deadline_fires() {
        let sweeper = tokio::task::spawn_local(sweep());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let d = Deadline::new();
        tokio::time::sleep(Duration::from_millis(20)).await;
        d.arm(Duration::from_millis(100), Waiting::Request);
        assert_eq!(d.check(&waker), None);
        tokio::time::sleep(Duration::from_millis(90)).await;
        assert_eq!(d.check(&waker), None, "fired early");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(d.check(&waker), Some(Ended::TimedOut));
        d.disarm();
        assert_eq!(d.check(&waker), None);
        sweeper.abort();
    }

    #[test]
    fn a_quiet_wait_between_requests_is_woken_to_park_if_it_can() {
        let runtime = crate::server::plain_runtime();
        runtime.block_on(quiet_waits_park());
    }

    async fn quiet_waits_park() {
        allow_parking();
        let sweeper = tokio::task::spawn_local(sweep());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let parks = Deadline::new();
        let idle = Deadline::new();
        let request = Deadline::new();
        parks.arm(Duration::from_secs(60), Waiting::IdleParkable);
        idle.arm(Duration::from_secs(60), Waiting::Idle);
        request.arm(Duration::from_secs(60), Waiting::Request);
        for d in [&parks, &idle, &request] {
            assert_eq!(d.check(&waker), None);
        }
        tokio::time::sleep(TICK * (u32::from(QUIET_SWEEPS) + 3)).await;
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "only the parkable wait");
        assert_eq!(parks.check(&waker), Some(Ended::Park));
        assert_eq!(idle.check(&waker), None);
        assert_eq!(request.check(&waker), None);
        // A new wait starts quiet again.
        parks.arm(Duration::from_secs(60), Waiting::IdleParkable);
        assert_eq!(parks.check(&waker), None);
        sweeper.abort();
    }

    /// After its first answer a connection parks at the next sweep, not two seconds later.
    #[test]
    fn a_wait_after_the_first_answer_parks_at_the_next_sweep() {
        let runtime = crate::server::plain_runtime();
        runtime.block_on(async {
            allow_parking();
            let sweeper = tokio::task::spawn_local(sweep());
            let count = Arc::new(Count(AtomicUsize::new(0)));
            let waker = Waker::from(count.clone());
            let first = Deadline::new();
            let later = Deadline::new();
            first.arm(Duration::from_secs(60), Waiting::IdleFirst);
            later.arm(Duration::from_secs(60), Waiting::IdleParkable);
            assert_eq!(first.check(&waker), None);
            assert_eq!(later.check(&waker), None);
            tokio::time::sleep(TICK * 4).await;
            assert_eq!(first.check(&waker), Some(Ended::Park));
            assert_eq!(later.check(&waker), None, "quiet for less than two seconds");
            sweeper.abort();
        });
    }

    #[test]
    fn stop_ends_idle_waits_only() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let idle = Deadline::new();
        let busy = Deadline::new();
        idle.arm(Duration::from_secs(60), Waiting::Idle);
        busy.arm(Duration::from_secs(60), Waiting::Request);
        assert_eq!(idle.check(&waker), None);
        assert_eq!(busy.check(&waker), None);
        stop();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(idle.check(&waker), Some(Ended::Stopping));
        assert_eq!(busy.check(&waker), None);
        assert!(stopping());
    }

    #[test]
    fn slots_are_reused() {
        let a = Deadline::new();
        let slot = a.slot;
        drop(a);
        assert_eq!(Deadline::new().slot, slot);
    }
}
