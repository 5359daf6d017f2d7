//! The control plane: one thread with a tokio current-thread runtime, an
//! executor that owns the store. It knows no domain: each concern keeps its
//! background half in its own module (the spend writer in `spend::writer`,
//! alert delivery in `alerts`, cooldown sharing in `router::cooldowns`, the
//! change listener and cache sweeps in `sync`, health probes in `health`) and
//! runs it here with [`ControlPlane::spawn`]. The data plane reaches it
//! through a bounded queue and never blocks on it: [`ControlPlane::call`] for
//! request/reply, [`ControlPlane::spawn`] for fire-and-forget.
//!
//! Only the control thread touches the store: [`ControlPlane::start`] takes
//! the store, and afterwards it is reachable only through the [`ControlCtx`]
//! a job receives, which nothing outside this module can build.

use crate::store::Store;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// What a control-plane job may use: the store. Only [`ControlPlane::start`]
/// builds one, so code elsewhere cannot reach the store through it:
///
/// ```compile_fail
/// use std::sync::Arc;
/// let store: Arc<dyn gateway::store::Store> = Arc::new(gateway::store::MemoryStore::default());
/// let ctx = gateway::control::ControlCtx { store };
/// ```
pub struct ControlCtx {
    store: Arc<dyn Store>,
}

impl ControlCtx {
    /// Persistence; reachable only from a job on the control thread.
    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// A context over `store` for unit tests of code that runs as a job.
    #[cfg(test)]
    pub(crate) fn for_tests(store: Arc<dyn Store>) -> Arc<ControlCtx> {
        Arc::new(ControlCtx { store })
    }
}

type Job = Box<dyn FnOnce(Arc<ControlCtx>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Why a control-plane call did not complete.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The queue is full: the caller decides (fail closed or 503), never waits.
    #[error("control plane busy")]
    Busy,
    /// The control thread is gone.
    #[error("control plane stopped")]
    Stopped,
    /// The job ended without an answer (it panicked; the thread lives on).
    #[error("the control-plane job failed")]
    Failed,
    /// No answer within the deadline.
    #[error("control plane did not answer within {0:?}")]
    Timeout(Duration),
}

/// Capacity of the job queue.
const JOB_QUEUE: usize = 4096;

/// Handle to the control plane; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct ControlPlane {
    jobs: mpsc::Sender<Job>,
}

impl ControlPlane {
    /// Starts the control thread around `store`. Background services are
    /// started by their owners with [`ControlPlane::spawn`].
    pub fn start(store: Arc<dyn Store>) -> std::io::Result<ControlPlane> {
        let (jobs, mut job_rx) = mpsc::channel::<Job>(JOB_QUEUE);
        let ctx = Arc::new(ControlCtx { store });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("gateway-control".into())
            .spawn(move || {
                runtime.block_on(async move {
                    while let Some(job) = job_rx.recv().await {
                        // A panicking job drops its reply channel, so its
                        // caller gets an error; the thread lives on.
                        let job = crate::panic_guard::CatchPanic::new(job(ctx.clone()));
                        tokio::spawn(async move {
                            if let Err(panic) = job.await {
                                tracing::error!(panic = %panic, "a control-plane job panicked");
                            }
                        });
                    }
                });
            })?;
        Ok(ControlPlane { jobs })
    }

    /// Runs `f` on the control plane and waits for its result up to
    /// `timeout`. Fails at once when the queue is full.
    pub async fn call<T, F, Fut>(&self, timeout: Duration, f: F) -> Result<T, ControlError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<ControlCtx>) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.submit(Box::new(move |ctx| {
            Box::pin(async move {
                let _ = tx.send(f(ctx).await);
            })
        }))?;
        match monoio::time::timeout(timeout, rx).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(_)) => Err(ControlError::Failed),
            Err(_) => Err(ControlError::Timeout(timeout)),
        }
    }

    /// Runs `f` on the control plane without waiting for it, for work whose
    /// result nobody needs (alerts) and for background services that run
    /// until the process ends. Fails at once when the queue is full.
    pub fn spawn<F, Fut>(&self, f: F) -> Result<(), ControlError>
    where
        F: FnOnce(Arc<ControlCtx>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.submit(Box::new(move |ctx| Box::pin(f(ctx))))
    }

    fn submit(&self, job: Job) -> Result<(), ControlError> {
        self.jobs.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => ControlError::Busy,
            mpsc::error::TrySendError::Closed(_) => ControlError::Stopped,
        })
    }
}
