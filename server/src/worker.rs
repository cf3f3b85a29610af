//! The bounded blocking pool for `worker` handlers and heavy filter steps. A full pool answers
//! 503 rather than queueing without bound.
//!
//! Jobs go to a fixed set of threads through one queue. Both directions are batched, since
//! each cross-thread wake costs a system call and a context switch:
//! - the jobs a network thread asks for in one turn of its event loop go to the queue
//!   together, and a pool thread is woken only when none is awake (running or on its way):
//!   the awake thread drains the queue, so a burst of short jobs costs one wake, not one per
//!   job or per thread. A job that blocks must not hold the others back: while jobs wait, the
//!   asking network thread looks again every millisecond and wakes one more thread each time
//!   it finds that none was taken meanwhile (a pool shared by blocking jobs fills up within a
//!   few ms; a pool that is merely slower than the requests is not woken further);
//! - results come back to the network thread that asked in batches: it is woken once for
//!   every result that arrived since it last looked, and only if it sleeps (or is about to):
//!   a busy network thread looks at its inbox itself before it sleeps ([`before_park`]), so a
//!   result that arrives while it works costs no system call on either side (a cross-thread
//!   wake is a write to the runtime's eventfd and an extra return from `epoll_wait`).
//!
//! A job, the value it works on and its result share one allocation ([`Task`]), queued to
//! the pool and then handed back to the asking thread's inbox; the value is worked on where
//! it lies, and the task's state is an atomic phase rather than a lock.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Poll, Waker};
use std::time::Duration;

use tokio::sync::Notify;

/// Threads of a pool started on demand (by a test, or before `start`).
const DEFAULT_THREADS: usize = 8;

/// How often a network thread whose jobs wait looks whether the pool is stuck.
const WATCH_EVERY: Duration = Duration::from_millis(1);

/// The bound of a configuration's pool (the threads are the process's).
pub struct WorkerPool {
    /// Jobs queued or running; a job's place is given back when it ends, even if nobody
    /// waits for it any more.
    in_flight: Arc<AtomicUsize>,
    queue: usize,
}

impl WorkerPool {
    pub fn new(queue: usize) -> Self {
        WorkerPool {
            in_flight: Arc::new(AtomicUsize::new(0)),
            queue: queue.max(1),
        }
    }

    /// A place for one job, or `None` when the pool is full (answer 503).
    pub fn reserve(&self) -> Option<Place> {
        let place = Place {
            in_flight: self.in_flight.clone(),
        };
        (self.in_flight.fetch_add(1, Ordering::AcqRel) < self.queue).then_some(place)
    }
}

/// A reserved place in the pool: given back when its job ends (or if it never runs).
pub struct Place {
    in_flight: Arc<AtomicUsize>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Place {
    /// Run `job` on `value` on the pool's threads; the value and the job's result come back
    /// to this thread. The value stays in place in the task while the job works on it (a
    /// request's exchange is not moved for each step of the hop). `None`: the job panicked
    /// and took the value (a bug in core code: module panics are caught in the module).
    pub fn run<V, R, F>(self, value: V, job: F) -> impl Future<Output = Option<(V, R)>>
    where
        V: Send + 'static,
        R: Send + 'static,
        F: FnOnce(&mut V) -> R + Send + 'static,
    {
        let task = Arc::new(Task {
            phase: AtomicU8::new(QUEUED),
            work: UnsafeCell::new(Some((job, self))),
            value: UnsafeCell::new(Some(value)),
            result: UnsafeCell::new(None),
            waker: Mutex::new(None),
            inbox: UnsafeCell::new(Inbox::local()),
        });
        submit(task.clone());
        std::future::poll_fn(move |cx| task.poll(cx.waker()))
    }
}

/// [`Task::phase`]: queued, then taken by a pool thread, then done (the value and result
/// are the waiting future's).
const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;

/// A job with the value it works on, then the result, and the future waiting for them.
///
/// The cells are owned by one side at a time, as `phase` says: the pool thread that took the
/// task until it is `DONE`, the waiting future after (it looks only once it saw `DONE`).
struct Task<V, F, R> {
    phase: AtomicU8,
    /// Taken by the pool thread that runs it.
    work: UnsafeCell<Option<(F, Place)>>,
    /// `None` once given back, or if the job panicked.
    value: UnsafeCell<Option<V>>,
    result: UnsafeCell<Option<R>>,
    waker: Mutex<Option<Waker>>,
    /// The asking network thread's inbox (none off a network thread: the waker is woken
    /// directly); taken by the pool thread.
    inbox: UnsafeCell<Option<Arc<Inbox>>>,
}

// SAFETY: the cells are used by one thread at a time (see `Task`), and what they hold is Send.
unsafe impl<V: Send, F: Send, R: Send> Send for Task<V, F, R> {}
unsafe impl<V: Send, F: Send, R: Send> Sync for Task<V, F, R> {}

impl<V, F, R> Task<V, F, R> {
    fn poll(&self, waker: &Waker) -> Poll<Option<(V, R)>> {
        if self.phase.load(Ordering::Acquire) != DONE {
            {
                let mut w = self.waker.lock().unwrap();
                match &*w {
                    Some(w) if w.will_wake(waker) => {}
                    _ => *w = Some(waker.clone()),
                }
            }
            // Looked again: the job may have ended before the waker was in place.
            if self.phase.load(Ordering::Acquire) != DONE {
                return Poll::Pending;
            }
        }
        // SAFETY: done: the pool thread is finished with the cells; only this future (the
        // task's one waiter) looks at them now.
        let (value, result) = unsafe { ((*self.value.get()).take(), (*self.result.get()).take()) };
        Poll::Ready(value.zip(result))
    }
}

/// A queued task as the pool and the inbox see it.
trait Job: Send + Sync {
    /// Run the job (on a pool thread) and hand the result back.
    fn run(self: Arc<Self>);
    /// Wake the future waiting for the result (on the asking thread).
    fn wake(&self);
}

impl<V, F, R> Job for Task<V, F, R>
where
    V: Send + 'static,
    F: FnOnce(&mut V) -> R + Send + 'static,
    R: Send + 'static,
{
    fn run(self: Arc<Self>) {
        if self.phase.swap(RUNNING, Ordering::AcqRel) != QUEUED {
            return;
        }
        // SAFETY: running: this thread owns the cells until it stores `DONE`.
        let (work, value) = unsafe { (&mut *self.work.get(), &mut *self.value.get()) };
        let Some((job, place)) = work.take() else {
            return;
        };
        let Some(v) = value.as_mut() else { return };
        match catch_unwind(AssertUnwindSafe(|| job(v))) {
            // SAFETY: as above.
            Ok(result) => unsafe { *self.result.get() = Some(result) },
            // The value may be half changed: nobody gets it.
            Err(_) => *value = None,
        }
        // The place is free before the waiting request goes on.
        drop(place);
        // SAFETY: as above.
        let inbox = unsafe { (*self.inbox.get()).take() };
        self.phase.store(DONE, Ordering::Release);
        match inbox {
            Some(inbox) => inbox.deliver(self),
            None => self.wake(),
        }
    }

    fn wake(&self) {
        let waker = self.waker.lock().unwrap().take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A network thread's mailbox of finished jobs.
pub struct Inbox {
    done: Mutex<Vec<Arc<dyn Job>>>,
    /// [`EMPTY`], [`PENDING`] or [`NOTIFIED`]: whether results wait, and whether the task
    /// that serves them was told (once per batch, by whichever side sees them first).
    state: AtomicU8,
    /// The network thread sleeps or is about to (set by [`before_park`], cleared by
    /// [`after_unpark`]); always set on a thread whose runtime has no such hooks (tests),
    /// which is then woken for every batch.
    asleep: AtomicBool,
    notify: Notify,
}

/// [`Inbox::state`]: no result waits since the network thread last looked.
const EMPTY: u8 = 0;
/// Results wait and the serving task has not been told.
const PENDING: u8 = 1;
/// The serving task was told and will look.
const NOTIFIED: u8 = 2;

thread_local! {
    static INBOX: std::cell::RefCell<Option<Arc<Inbox>>> = const { std::cell::RefCell::new(None) };
}

impl Inbox {
    fn local() -> Option<Arc<Inbox>> {
        INBOX.with(|i| i.borrow().clone())
    }

    /// From a pool thread: queue `task`; the first of a batch wakes the network thread if it
    /// sleeps (awake, it looks before it sleeps: see [`before_park`]).
    fn deliver(&self, task: Arc<dyn Job>) {
        self.done.lock().unwrap().push(task);
        // SeqCst with `before_park`'s store of `asleep` and load of `state`: either the
        // network thread sees this batch before it sleeps, or this sees it asleep.
        let first = (self.state)
            .compare_exchange(EMPTY, PENDING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if first && self.asleep.load(Ordering::SeqCst) {
            #[cfg(test)]
            tests::POOL_TOLD.fetch_add(1, Ordering::SeqCst);
            self.tell();
        }
    }

    /// Tell the serving task once for the results pending (from either thread).
    fn tell(&self) {
        let told = (self.state)
            .compare_exchange(PENDING, NOTIFIED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if told {
            self.notify.notify_one();
        }
    }

    /// On the network thread: tell its own serving task if results wait (a local wake: no
    /// system call).
    fn look(&self) {
        if self.state.load(Ordering::SeqCst) == PENDING {
            self.tell();
        }
    }
}

/// The network thread's runtime is about to sleep: from now on a result wakes it, and results
/// that came while it worked are served first (the runtime does not sleep then). Installed
/// with [`after_unpark`] as the runtime's park hooks (`server.rs`).
pub fn before_park() {
    INBOX.with(|i| {
        if let Some(inbox) = &*i.borrow() {
            inbox.asleep.store(true, Ordering::SeqCst);
            inbox.look();
        }
    })
}

/// The network thread's runtime is awake: results no longer wake it (it looks itself).
pub fn after_unpark() {
    INBOX.with(|i| {
        if let Some(inbox) = &*i.borrow() {
            inbox.asleep.store(false, Ordering::SeqCst);
        }
    })
}

/// Serve the results that arrived while this network thread worked without sleeping: a
/// thread kept busy never reaches [`before_park`], so it looks on each job it asks for, each
/// time a connection it serves wakes (`conn::Conn::drive`), and on each sweep of its
/// deadlines (`conn::wait`, every 50 ms).
pub fn look_at_inbox() {
    INBOX.with(|i| {
        if let Some(inbox) = &*i.borrow() {
            inbox.look();
        }
    })
}

/// Receive this network thread's finished jobs; runs as a task on each network thread for
/// its whole life (jobs from a thread without one wake their future directly).
pub async fn serve_inbox() {
    let inbox = Arc::new(Inbox {
        done: Mutex::new(Vec::new()),
        state: AtomicU8::new(EMPTY),
        // Until the runtime's park hooks say otherwise.
        asleep: AtomicBool::new(true),
        notify: Notify::new(),
    });
    INBOX.with(|i| *i.borrow_mut() = Some(inbox.clone()));
    let mut batch = Vec::new();
    loop {
        inbox.notify.notified().await;
        // Cleared before looking: a job that finds it set knows its task will be seen.
        inbox.state.store(EMPTY, Ordering::SeqCst);
        std::mem::swap(&mut batch, &mut *inbox.done.lock().unwrap());
        batch.drain(..).for_each(|task| task.wake());
    }
}

/// Jobs a network thread asked for in this turn of its event loop, and the task that sends
/// them to the pool.
#[derive(Default)]
struct Outbox {
    jobs: Vec<Arc<dyn Job>>,
    /// The sending task's waker; `None` until this thread has one ([`serve_outbox`]).
    sender: Option<Waker>,
}

thread_local! {
    static OUTBOX: std::cell::RefCell<Outbox> = std::cell::RefCell::new(Outbox::default());
}

/// Queue `job`. On a network thread, the jobs of one turn of the event loop go to the pool
/// together, after the turn's other ready tasks: a pool thread is woken once for all of them
/// instead of preempting the network thread for each.
fn submit(job: Arc<dyn Job>) {
    if tokio::runtime::Handle::try_current().is_err() {
        return threads().submit_one(job);
    }
    look_at_inbox();
    let (first, sender) = OUTBOX.with(|o| {
        let mut o = o.borrow_mut();
        o.jobs.push(job);
        (o.jobs.len() == 1, o.sender.clone())
    });
    if first {
        match sender {
            // Runs after the tasks already queued in this turn.
            Some(sender) => sender.wake(),
            None => drop(tokio::task::spawn_local(serve_outbox())),
        }
    }
}

/// Send this network thread's jobs to the pool at the end of each turn, and while some wait,
/// look every [`WATCH_EVERY`] whether the pool is stuck (see [`Threads::help`]). The timer is
/// set when jobs start to wait, not for each batch (setting a tokio timer sooner than the
/// next one wakes the event loop through its eventfd). Started by the thread's first job;
/// lives as long as its runtime.
async fn serve_outbox() {
    /// Forgets the waker when the runtime drops the task (a test's runtime, say).
    struct Registered;
    impl Drop for Registered {
        fn drop(&mut self) {
            OUTBOX.with(|o| o.borrow_mut().sender = None);
        }
    }
    let _registered = Registered;
    let mut batch = Vec::new();
    let watch = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(watch);
    // Jobs taken from the queue at the last look, while watching.
    let mut watching: Option<u64> = None;
    loop {
        let sent = std::future::poll_fn(|cx| {
            OUTBOX.with(|o| {
                let mut o = o.borrow_mut();
                if o.jobs.is_empty() {
                    if !o.sender.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        o.sender = Some(cx.waker().clone());
                    }
                    Poll::Pending
                } else {
                    std::mem::swap(&mut batch, &mut o.jobs);
                    Poll::Ready(())
                }
            })
        });
        tokio::select! {
            biased;
            () = sent => {
                let taken = threads().submit(&mut batch);
                if watching.is_none() {
                    watching = Some(taken);
                    watch.as_mut().reset(tokio::time::Instant::now() + WATCH_EVERY);
                }
            }
            () = &mut watch, if watching.is_some() => {
                watching = watching.and_then(|seen| threads().help(seen));
                if watching.is_some() {
                    watch.as_mut().reset(tokio::time::Instant::now() + WATCH_EVERY);
                }
            }
        }
    }
}

/// The process's pool threads and their queue.
struct Threads {
    queue: Mutex<Queue>,
    ready: Condvar,
    count: usize,
}

struct Queue {
    jobs: VecDeque<Arc<dyn Job>>,
    /// Threads waiting for a job (the others run jobs or are starting).
    idle: usize,
    /// Of those, threads woken that have not taken the lock since.
    woken: usize,
    /// Jobs taken from the queue so far: whether the pool gets on with its jobs.
    taken: u64,
    /// Wakes so far (the tests count them).
    wakes: u64,
}

static THREADS: OnceLock<Threads> = OnceLock::new();

/// Start the pool's threads (once; later calls keep the first count).
pub fn start(count: usize) {
    let _ = threads_with(count);
}

fn threads() -> &'static Threads {
    threads_with(DEFAULT_THREADS)
}

fn threads_with(count: usize) -> &'static Threads {
    THREADS.get_or_init(|| {
        let count = count.max(1);
        for i in 0..count {
            std::thread::Builder::new()
                .name(format!("osprey-worker-{i}"))
                .spawn(work)
                .expect("a worker pool thread");
        }
        Threads {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                // A starting thread looks at the queue before its first wait.
                idle: 0,
                woken: 0,
                taken: 0,
                wakes: 0,
            }),
            ready: Condvar::new(),
            count,
        }
    })
}

impl Threads {
    /// Queue a network thread's batch (emptying `jobs`, whose buffer is kept for the next
    /// turn); wake a thread only if none is awake to drain the queue. Gives the jobs taken so
    /// far (for [`Threads::help`]).
    fn submit(&self, jobs: &mut Vec<Arc<dyn Job>>) -> u64 {
        let mut q = self.queue.lock().unwrap();
        q.jobs.extend(jobs.drain(..));
        let awake = self.count - q.idle + q.woken;
        if awake == 0 {
            self.wake_one(&mut q);
        }
        q.taken
    }

    /// Queue one job from a thread without an event loop (nobody will watch it): wake a
    /// thread unless one is already on its way.
    fn submit_one(&self, job: Arc<dyn Job>) {
        let mut q = self.queue.lock().unwrap();
        q.jobs.push_back(job);
        if q.woken == 0 {
            self.wake_one(&mut q);
        }
    }

    /// A while after `seen` jobs had been taken: if jobs wait and none was taken since, the
    /// awake threads are blocked in theirs: wake one more (unless one is on its way). Jobs
    /// that wait while the pool takes them are left to it: on a busy core the woken thread
    /// may just not have run yet, and waking more would only add switches. Gives the jobs
    /// taken by now while jobs wait (to look again later).
    fn help(&self, seen: u64) -> Option<u64> {
        let mut q = self.queue.lock().unwrap();
        if q.jobs.is_empty() {
            return None;
        }
        if stuck(q.taken, seen, q.woken) {
            self.wake_one(&mut q);
        }
        Some(q.taken)
    }

    fn wake_one(&self, q: &mut Queue) {
        if q.idle > q.woken {
            q.woken += 1;
            q.wakes += 1;
            self.ready.notify_one();
        }
    }
}

/// With jobs waiting: whether the pool is stuck — no job taken since `seen` and no woken
/// thread on its way.
fn stuck(taken: u64, seen: u64, woken: usize) -> bool {
    taken == seen && woken == 0
}

/// A pool thread: take jobs one at a time while there are any, then wait.
fn work() {
    let threads = loop {
        // The statics are set just after the threads start.
        match THREADS.get() {
            Some(t) => break t,
            None => std::thread::yield_now(),
        }
    };
    let mut q = threads.queue.lock().unwrap();
    loop {
        while let Some(job) = q.jobs.pop_front() {
            q.taken += 1;
            drop(q);
            job.run();
            q = threads.queue.lock().unwrap();
        }
        q.idle += 1;
        q = threads.ready.wait(q).unwrap();
        q.idle -= 1;
        // Woken (or spuriously awake: either way, one fewer on its way).
        q.woken = q.woken.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The pool is the process's: tests that count its wakes or need its threads free run
    /// one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wakes() -> u64 {
        threads().queue.lock().unwrap().wakes
    }

    /// Inbox batches a pool thread told about (the network thread slept).
    pub(super) static POOL_TOLD: AtomicUsize = AtomicUsize::new(0);

    /// A network thread's runtime, as the server builds it.
    fn local_runtime() -> tokio::runtime::LocalRuntime {
        crate::server::network_runtime().unwrap()
    }

    // A runtime without the park hooks: every batch wakes it.
    use crate::server::plain_runtime;

    /// Run `test` on `runtime` as on a network thread, which serves its inbox (one such test
    /// at a time).
    fn on_network_thread<F: Future>(runtime: tokio::runtime::LocalRuntime, test: F) -> F::Output {
        let _serial = serial();
        runtime.block_on(async {
            tokio::task::spawn_local(serve_inbox());
            tokio::task::yield_now().await;
            test.await
        })
    }

    /// A result that arrives while the network thread works is seen without a wake from the
    /// pool (no system call on either side); one that arrives while it sleeps wakes it.
    #[test]
    fn a_busy_network_thread_is_woken_for_no_result_and_a_sleeping_one_is() {
        on_network_thread(local_runtime(), async {
            let pool = WorkerPool::new(100);
            // Asleep until the runtime first sleeps and wakes (the hooks say when).
            tokio::time::sleep(Duration::from_millis(1)).await;
            let (go, ran) = (
                Arc::new(AtomicBool::new(false)),
                Arc::new(AtomicBool::new(false)),
            );
            let (started, done) = (go.clone(), ran.clone());
            let before = POOL_TOLD.load(Ordering::SeqCst);
            // The job ends only once the thread is busy (it may sleep while the job is sent).
            let job = pool.reserve().unwrap().run((), move |_| {
                while !started.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
                done.store(true, Ordering::SeqCst);
                7
            });
            let job = tokio::task::spawn_local(job);
            tokio::task::yield_now().await;
            // Busy until the result is in the inbox: the thread does not sleep meanwhile.
            go.store(true, Ordering::SeqCst);
            while !ran.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(job.await.unwrap(), Some(((), 7)));
            assert_eq!(
                POOL_TOLD.load(Ordering::SeqCst),
                before,
                "a busy thread was woken"
            );
            // Now the thread sleeps while the job runs: the result wakes it.
            let slow = pool.reserve().unwrap().run((), |_| {
                std::thread::sleep(Duration::from_millis(50));
                8
            });
            assert_eq!(slow.await, Some(((), 8)));
            assert_eq!(POOL_TOLD.load(Ordering::SeqCst), before + 1);
        });
    }

    #[test]
    fn results_come_back_to_a_runtime_without_park_hooks() {
        on_network_thread(plain_runtime(), async {
            let pool = WorkerPool::new(100);
            for i in 0..20u64 {
                let job = pool.reserve().unwrap().run(i, |i| *i + 1);
                assert_eq!(job.await, Some((i, i + 1)));
            }
        });
    }

    /// Run `job` with a place in `pool`.
    async fn run<R: Send + 'static>(
        pool: &WorkerPool,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        let ran = pool.reserve().expect("a place").run((), |_| job()).await;
        ran.map(|((), r)| r)
    }

    #[test]
    fn results_come_back_batched_to_the_asking_thread() {
        on_network_thread(local_runtime(), async {
            let pool = WorkerPool::new(1000);
            let jobs: Vec<_> = (0..200u64)
                .map(|i| pool.reserve().unwrap().run(i, |i| *i * 2))
                .collect();
            let mut sum = 0;
            for job in jobs {
                let (i, doubled) = job.await.unwrap();
                assert_eq!(doubled, i * 2);
                sum += doubled;
            }
            assert_eq!(sum, (0..200u64).map(|i| i * 2).sum::<u64>());
            assert_eq!(pool.in_flight.load(Ordering::SeqCst), 0);
        });
    }

    /// Jobs that block run side by side: each woken thread wakes the next while jobs wait.
    #[test]
    fn blocking_jobs_run_on_several_threads_at_once() {
        let _serial = serial();
        local_runtime().block_on(async {
            let pool = WorkerPool::new(100);
            // The threads start awake; once idle, only wakes bring them to the jobs.
            run(&pool, || ()).await;
            std::thread::sleep(Duration::from_millis(100));
            let started = Arc::new(AtomicUsize::new(0));
            let jobs: Vec<_> = (0..4)
                .map(|_| {
                    let started = started.clone();
                    pool.reserve().unwrap().run((), move |_| {
                        started.fetch_add(1, Ordering::SeqCst);
                        // Ends once all four run at the same time (or gives up).
                        let deadline = std::time::Instant::now() + Duration::from_secs(5);
                        while started.load(Ordering::SeqCst) < 4 {
                            if std::time::Instant::now() > deadline {
                                return false;
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        true
                    })
                })
                .collect();
            for job in jobs {
                assert_eq!(
                    job.await,
                    Some(((), true)),
                    "the jobs ran one after another"
                );
            }
        });
    }

    /// The wakes of pool threads while `count` jobs `job(i)`, sent at once, run on a fresh pool
    /// whose threads all started and wait.
    async fn wakes_for_jobs(count: u64, job: fn(u64) -> u64) -> u64 {
        let pool = WorkerPool::new(1000);
        run(&pool, || ()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = wakes();
        let jobs: Vec<_> = (0..count)
            .map(|i| pool.reserve().unwrap().run(i, move |i| job(*i)))
            .collect();
        for job in jobs {
            job.await.unwrap();
        }
        wakes() - before
    }

    /// One thread drains a burst of short jobs: the pool threads do not wake each other in
    /// turn (each wake is a system call and, on a busy core, a context switch).
    #[test]
    fn a_burst_of_short_jobs_wakes_one_thread() {
        on_network_thread(local_runtime(), async {
            let woken = wakes_for_jobs(200, |i| i).await;
            // One wake, and a helper if the burst outlasted a watch period on a busy machine.
            assert!((1..=3).contains(&woken), "{woken} wakes for one burst");
        });
    }

    /// Jobs that wait for longer than a watch period while one thread takes them in turn
    /// wake no helper: the pool is slow, not stuck.
    #[test]
    fn jobs_that_wait_while_the_pool_takes_them_wake_no_helper() {
        on_network_thread(local_runtime(), async {
            // 60 jobs of 300 µs: some 18 ms for one thread, the queue never empty meanwhile.
            let woken = wakes_for_jobs(60, |i| {
                std::thread::sleep(Duration::from_micros(300));
                i
            })
            .await;
            // One wake; a helper only if the machine held the thread back for a whole period.
            assert!(
                (1..=3).contains(&woken),
                "{woken} wakes for jobs that progressed"
            );
        });
    }

    #[test]
    fn the_pool_is_stuck_when_no_job_was_taken_and_nobody_is_on_the_way() {
        assert!(stuck(5, 5, 0));
        assert!(!stuck(6, 5, 0), "a job was taken meanwhile");
        assert!(!stuck(5, 5, 1), "a woken thread has not run yet");
    }

    #[test]
    fn a_full_pool_has_no_place_and_a_panic_is_a_failure() {
        let _serial = serial();
        local_runtime().block_on(async {
            let pool = WorkerPool::new(1);
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let blocked = pool.reserve().unwrap().run(rx, |rx| rx.recv().unwrap());
            assert!(pool.reserve().is_none());
            tx.send(()).unwrap();
            blocked.await.unwrap();
            assert_eq!(run(&pool, || panic!("core bug")).await, None::<()>);
            assert_eq!(run(&pool, || 7).await, Some(7));
        });
    }

    #[test]
    fn a_job_whose_waiter_left_still_frees_its_place() {
        let _serial = serial();
        local_runtime().block_on(async {
            let pool = WorkerPool::new(1);
            drop(
                pool.reserve()
                    .unwrap()
                    .run((), |_| std::thread::sleep(Duration::from_millis(50))),
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(
                run(&pool, || 1).await,
                Some(1),
                "the dropped job kept its place"
            );
        });
    }
}
