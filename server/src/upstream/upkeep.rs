//! The upstreams' background work — active health checks, re-resolving server names — on one
//! thread (`osprey-upstream`) with its own current-thread runtime, so none of it runs on a
//! network thread (name lookups go to that runtime's blocking pool).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use tokio::sync::mpsc;

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Run `job` on the upkeep thread (started with the first job).
pub fn spawn(job: impl Future<Output = ()> + Send + 'static) {
    static JOBS: Mutex<Option<mpsc::UnboundedSender<Job>>> = Mutex::new(None);
    let mut jobs = JOBS.lock().unwrap();
    if jobs.is_none() {
        *jobs = start();
    }
    if let Some(tx) = jobs.as_ref() {
        let _ = tx.send(Box::pin(job));
    }
}

fn start() -> Option<mpsc::UnboundedSender<Job>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("osprey-upstream".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(
                        "health checks and re-resolution disabled: cannot start their runtime: {e}"
                    );
                    return;
                }
            };
            runtime.block_on(async move {
                while let Some(job) = rx.recv().await {
                    tokio::spawn(job);
                }
            });
        });
    match spawned {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::error!(
                "health checks and re-resolution disabled: cannot start their thread: {e}"
            );
            None
        }
    }
}
