//! The bounded blocking pool for `worker` handlers and heavy filter steps. A full pool answers
//! 503 rather than queueing without bound.

use std::sync::atomic::{AtomicUsize, Ordering};

pub struct WorkerPool {
    in_flight: AtomicUsize,
    queue: usize,
}

/// Why a job did not produce its result.
#[derive(Debug, PartialEq, Eq)]
pub enum PoolError {
    /// Too many jobs waiting: answer 503.
    Busy,
    /// The job panicked in core code.
    Failed,
}

impl WorkerPool {
    pub fn new(queue: usize) -> Self {
        WorkerPool {
            in_flight: AtomicUsize::new(0),
            queue: queue.max(1),
        }
    }

    /// Run `job` on the current runtime's blocking threads.
    pub async fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, PoolError> {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.queue {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(PoolError::Busy);
        }
        let result = tokio::task::spawn_blocking(job).await;
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        result.map_err(|_| PoolError::Failed)
    }
}
