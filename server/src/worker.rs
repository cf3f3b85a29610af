//! The bounded blocking pool for `worker` handlers and heavy filter steps. A full pool answers
//! 503 rather than queueing without bound.
//!
//! Jobs go to a fixed set of threads through one queue; a thread is woken only when the queue
//! was empty (a working thread wakes the next while jobs wait), and never while another woken
//! thread has yet to start: short jobs are then drained by the threads already running
//! instead of waking every thread in turn. Results come back to the
//! network thread that asked in batches: it is woken once for every result that arrived since
//! it last looked, not once per job, since each cross-thread wake costs a system call and a
//! context switch.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Poll, Waker};

use tokio::sync::Notify;

/// Threads of a pool started on demand (by a test, or before `start`).
const DEFAULT_THREADS: usize = 8;

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
    /// Run `job` on the pool's threads; its result comes back to this thread. `None`: the
    /// job panicked (a bug in core code: module panics are caught in the module).
    pub fn run<R: Send + 'static>(
        self,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> impl Future<Output = Option<R>> {
        let slot = Arc::new(Slot::<R>::default());
        let (filled, inbox) = (slot.clone(), Inbox::local());
        submit(Box::new(move || {
            let result = catch_unwind(AssertUnwindSafe(job)).ok();
            // The place is free before the waiting request goes on.
            drop(self);
            filled.fill(result);
            match inbox {
                Some(inbox) => inbox.deliver(filled),
                None => filled.wake(),
            }
        }));
        std::future::poll_fn(move |cx| slot.poll(cx.waker()))
    }
}

/// Where a job's result waits for the future that asked.
struct Slot<R> {
    state: Mutex<SlotState<R>>,
}

struct SlotState<R> {
    /// Set when the job ended: `Some(None)` if it panicked.
    result: Option<Option<R>>,
    waker: Option<Waker>,
}

impl<R> Default for Slot<R> {
    fn default() -> Self {
        Slot {
            state: Mutex::new(SlotState {
                result: None,
                waker: None,
            }),
        }
    }
}

impl<R> Slot<R> {
    fn fill(&self, result: Option<R>) {
        self.state.lock().unwrap().result = Some(result);
    }

    fn poll(&self, waker: &Waker) -> Poll<Option<R>> {
        let mut state = self.state.lock().unwrap();
        match state.result.take() {
            Some(result) => Poll::Ready(result),
            None => {
                match &state.waker {
                    Some(w) if w.will_wake(waker) => {}
                    _ => state.waker = Some(waker.clone()),
                }
                Poll::Pending
            }
        }
    }
}

/// A filled slot whose future is to be woken.
trait Filled: Send + Sync {
    fn wake(&self);
}

impl<R: Send> Filled for Slot<R> {
    fn wake(&self) {
        let waker = self.state.lock().unwrap().waker.take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A network thread's mailbox of finished jobs.
pub struct Inbox {
    done: Mutex<Vec<Arc<dyn Filled>>>,
    /// Set when the network thread has been told to look; cleared when it looks.
    told: AtomicBool,
    notify: Notify,
}

thread_local! {
    static INBOX: std::cell::RefCell<Option<Arc<Inbox>>> = const { std::cell::RefCell::new(None) };
}

impl Inbox {
    fn local() -> Option<Arc<Inbox>> {
        INBOX.with(|i| i.borrow().clone())
    }

    /// From a pool thread: queue `slot`, and tell the network thread if it was not told yet.
    fn deliver(&self, slot: Arc<dyn Filled>) {
        self.done.lock().unwrap().push(slot);
        if !self.told.swap(true, Ordering::AcqRel) {
            self.notify.notify_one();
        }
    }
}

/// Receive this network thread's finished jobs; runs as a task on each network thread for
/// its whole life (jobs from a thread without one wake their future directly).
pub async fn serve_inbox() {
    let inbox = Arc::new(Inbox {
        done: Mutex::new(Vec::new()),
        told: AtomicBool::new(false),
        notify: Notify::new(),
    });
    INBOX.with(|i| *i.borrow_mut() = Some(inbox.clone()));
    let mut batch = Vec::new();
    loop {
        inbox.notify.notified().await;
        // Cleared before looking: a job that finds it set knows its slot will be seen.
        inbox.told.store(false, Ordering::Release);
        std::mem::swap(&mut batch, &mut *inbox.done.lock().unwrap());
        batch.drain(..).for_each(|slot| slot.wake());
    }
}

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    /// Jobs a network thread asked for in this turn of its event loop.
    static OUTBOX: std::cell::RefCell<Vec<Job>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Queue `job`. On a network thread, the jobs of one turn of the event loop go to the pool
/// together, after the turn's other ready tasks: a pool thread is woken once for all of them
/// instead of preempting the network thread for each.
fn submit(job: Job) {
    if tokio::runtime::Handle::try_current().is_err() {
        return threads().submit(vec![job]);
    }
    let first = OUTBOX.with(|o| {
        let mut o = o.borrow_mut();
        o.push(job);
        o.len() == 1
    });
    if first {
        // Runs after the tasks already queued in this turn.
        tokio::task::spawn_local(async {
            let jobs = OUTBOX.with(|o| std::mem::take(&mut *o.borrow_mut()));
            threads().submit(jobs);
        });
    }
}

/// The process's pool threads and their queue.
struct Threads {
    queue: Mutex<Queue>,
    ready: Condvar,
}

struct Queue {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
    /// Of those, threads woken that have not taken the lock since.
    woken: usize,
}

impl Queue {
    /// Whether to wake a thread for waiting jobs: one is idle, and none is already on its way.
    fn wake_one(&mut self) -> bool {
        let wake = self.idle > self.woken;
        if wake {
            self.woken += 1;
        }
        wake
    }
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
        for i in 0..count.max(1) {
            std::thread::Builder::new()
                .name(format!("osprey-worker-{i}"))
                .spawn(work)
                .expect("a worker pool thread");
        }
        Threads {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                idle: 0,
                woken: 0,
            }),
            ready: Condvar::new(),
        }
    })
}

impl Threads {
    fn submit(&self, jobs: Vec<Job>) {
        let mut q = self.queue.lock().unwrap();
        let was_empty = q.jobs.is_empty();
        q.jobs.extend(jobs);
        // A thread is already on its way when jobs were waiting.
        if was_empty && q.wake_one() {
            self.ready.notify_one();
        }
    }
}

/// A pool thread: take jobs, waking another thread while more wait.
fn work() {
    let threads = loop {
        // The statics are set just after the threads start.
        match THREADS.get() {
            Some(t) => break t,
            None => std::thread::yield_now(),
        }
    };
    loop {
        let job = {
            let mut q = threads.queue.lock().unwrap();
            loop {
                if let Some(job) = q.jobs.pop_front() {
                    if !q.jobs.is_empty() && q.wake_one() {
                        threads.ready.notify_one();
                    }
                    break job;
                }
                q.idle += 1;
                q = threads.ready.wait(q).unwrap();
                q.idle -= 1;
                // Woken (or spuriously awake: either way, one fewer on its way).
                q.woken = q.woken.saturating_sub(1);
            }
        };
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn local_runtime() -> tokio::runtime::LocalRuntime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build_local(tokio::runtime::LocalOptions::default())
            .unwrap()
    }

    /// Run `job` with a place in `pool`.
    async fn run<R: Send + 'static>(
        pool: &WorkerPool,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        pool.reserve().expect("a place").run(job).await
    }

    #[test]
    fn results_come_back_batched_to_the_asking_thread() {
        local_runtime().block_on(async {
            tokio::task::spawn_local(serve_inbox());
            tokio::task::yield_now().await;
            let pool = WorkerPool::new(1000);
            let jobs: Vec<_> = (0..200u64)
                .map(|i| pool.reserve().unwrap().run(move || i * 2))
                .collect();
            let mut sum = 0;
            for job in jobs {
                sum += job.await.unwrap();
            }
            assert_eq!(sum, (0..200u64).map(|i| i * 2).sum::<u64>());
            assert_eq!(pool.in_flight.load(Ordering::SeqCst), 0);
        });
    }

    /// Jobs that block run side by side: each woken thread wakes the next while jobs wait.
    #[test]
    fn blocking_jobs_run_on_several_threads_at_once() {
        local_runtime().block_on(async {
            let pool = WorkerPool::new(100);
            // The threads start awake; once idle, only wakes bring them to the jobs.
            run(&pool, || ()).await;
            std::thread::sleep(Duration::from_millis(100));
            let started = Arc::new(AtomicUsize::new(0));
            let jobs: Vec<_> = (0..4)
                .map(|_| {
                    let started = started.clone();
                    pool.reserve().unwrap().run(move || {
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
                assert_eq!(job.await, Some(true), "the jobs ran one after another");
            }
        });
    }

    #[test]
    fn a_full_pool_has_no_place_and_a_panic_is_a_failure() {
        local_runtime().block_on(async {
            let pool = WorkerPool::new(1);
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let blocked = pool.reserve().unwrap().run(move || rx.recv().unwrap());
            assert!(pool.reserve().is_none());
            tx.send(()).unwrap();
            blocked.await.unwrap();
            assert_eq!(run(&pool, || panic!("core bug")).await, None::<()>);
            assert_eq!(run(&pool, || 7).await, Some(7));
        });
    }

    #[test]
    fn a_job_whose_waiter_left_still_frees_its_place() {
        local_runtime().block_on(async {
            let pool = WorkerPool::new(1);
            drop(
                pool.reserve()
                    .unwrap()
                    .run(|| std::thread::sleep(Duration::from_millis(50))),
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
