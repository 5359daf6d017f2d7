//! The control plane: one thread with a tokio current-thread runtime that owns
//! every database connection. The data plane reaches it through bounded
//! channels and never blocks on it: request/reply for reads and management
//! calls, fire-and-forget for spend rows and alerts.

pub mod alerts;
pub mod cooldowns;
pub mod health;
pub mod http_once;
pub mod listener;
mod spool;
mod writer;

pub use listener::ListenConfig;
pub use spool::SpoolConfig;

use crate::auth::{KeyCache, KNOWN_KEYS_RELOAD};
use crate::models::Models;
use crate::store::{Change, SpendLogRow, Store, StoreError};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// What a control-plane job may use.
pub struct ControlCtx {
    /// Persistence.
    pub store: Arc<dyn Store>,
    /// The key cache the data plane reads; the control plane fills and
    /// invalidates it.
    pub keys: Arc<KeyCache>,
    /// The served model set; the control plane swaps its snapshot.
    pub models: Arc<Models>,
}

impl ControlCtx {
    /// Brings this replica's copy of what `change` names up to date: the
    /// key cache, or the model snapshot.
    pub async fn refresh(&self, change: &Change) -> Result<(), StoreError> {
        match change {
            Change::Model(id) => self.models.refresh(self.store.as_ref(), id).await,
            other => self.keys.refresh(self.store.as_ref(), other).await,
        }
    }

    /// Applies changes to this replica's caches, once per distinct change,
    /// and announces them to the others. The Postgres store has already
    /// announced them (NOTIFY in the transaction that made them; its
    /// `announce` is a no-op) and this replica's listener skips its own
    /// notifications, so each cache is refreshed exactly once.
    pub async fn publish(&self, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        let mut seen = std::collections::HashSet::new();
        for change in changes {
            if !seen.insert(change.payload()) {
                continue;
            }
            if let Err(e) = self.refresh(change).await {
                tracing::warn!(error = %e, "cache refresh failed; serving the cached copy until the next change");
            }
        }
        if let Err(e) = self.store.announce(changes).await {
            tracing::warn!(error = %e, "could not announce changes to other replicas");
        }
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

/// How long [`ControlPlane::drain`] waits for the writer at shutdown.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Capacity of the job queue.
const JOB_QUEUE: usize = 4096;
/// Capacity of the spend queue, in batches (each core sends one batch per
/// flush, not one message per row, so the control thread wakes rarely).
const SPEND_QUEUE: usize = 4096;

/// Handle to the control plane; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct ControlPlane {
    jobs: mpsc::Sender<Job>,
    spend: mpsc::Sender<writer::WriterMsg>,
}

impl ControlPlane {
    /// Starts the control thread around `store`, the key cache and the
    /// model set; with `listen` (a Postgres store), it also listens for
    /// other replicas' changes; with `limiter`, it serves the Redis rate
    /// limiter's calls; with `cooldowns`, it shares cooldowns through Redis.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        store: Arc<dyn Store>,
        keys: Arc<KeyCache>,
        models: Arc<Models>,
        spool: SpoolConfig,
        listen: Option<ListenConfig>,
        limiter: Option<crate::limits::remote::RemoteRunner>,
        cooldowns: Option<cooldowns::CooldownRunner>,
    ) -> std::io::Result<ControlPlane> {
        let (jobs, mut job_rx) = mpsc::channel::<Job>(JOB_QUEUE);
        let (spend, spend_rx) = mpsc::channel::<writer::WriterMsg>(SPEND_QUEUE);
        let ctx = Arc::new(ControlCtx {
            store,
            keys,
            models,
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("gateway-control".into())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::spawn(writer::run(ctx.clone(), spend_rx, spool));
                    tokio::spawn(budget_resets(ctx.clone()));
                    tokio::spawn(model_budget_windows(ctx.clone()));
                    tokio::spawn(known_keys_reloads(ctx.clone()));
                    if let Some(limiter) = limiter {
                        tokio::spawn(limiter.run());
                    }
                    if let Some(cooldowns) = cooldowns {
                        tokio::spawn(cooldowns.run(ctx.models.clone()));
                    }
                    if let Some(listen) = listen {
                        tokio::spawn(listener::run(ctx.clone(), listen));
                    }
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
        Ok(ControlPlane { jobs, spend })
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
    /// result nobody needs (alerts). Fails at once when the queue is full.
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

    /// Hands a batch of spend rows to the writer without waiting. Returns the
    /// rows when the queue is full so the caller keeps them for later.
    pub fn record(&self, rows: Vec<SpendLogRow>) -> Result<(), Vec<SpendLogRow>> {
        self.spend
            .try_send(writer::WriterMsg::Rows(rows))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(m) | mpsc::error::TrySendError::Closed(m) => {
                    m.into_rows()
                }
            })
    }

    /// Writes (or spools) every row handed over so far, waiting up to
    /// [`DRAIN_TIMEOUT`]; called once at shutdown, from outside any runtime.
    pub fn drain(&self) -> bool {
        let timeout = DRAIN_TIMEOUT;
        let (done, wait) = std::sync::mpsc::channel();
        if self
            .spend
            .blocking_send(writer::WriterMsg::Drain(done))
            .is_err()
        {
            return false;
        }
        wait.recv_timeout(timeout).is_ok()
    }
}

/// Reads the set of known keys again every [`KNOWN_KEYS_RELOAD`] (the first
/// read is start-up's), so keys written by a writer that does not announce
/// them become known and deleted ones are dropped.
async fn known_keys_reloads(ctx: Arc<ControlCtx>) {
    let mut tick = tokio::time::interval(KNOWN_KEYS_RELOAD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match ctx.keys.reload_known(ctx.store.as_ref()).await {
            Ok(count) => tracing::debug!(count, "known keys reloaded"),
            Err(e) => {
                tracing::warn!(error = %e, "could not reload the known keys; keeping the current set")
            }
        }
    }
}

/// How often the per-model budget windows of cached keys are checked.
const MODEL_WINDOW_SWEEP: Duration = Duration::from_secs(1);

/// Starts the per-model budget windows (`model_max_budget.{model}.time_period`)
/// of cached keys that are due: their per-model spend goes back to zero.
/// Keys no replica has cached are not in use; theirs start when they are
/// next read.
async fn model_budget_windows(ctx: Arc<ControlCtx>) {
    let mut tick = tokio::time::interval(MODEL_WINDOW_SWEEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut changes = Vec::new();
        for (token, model, start) in ctx.keys.due_model_windows(chrono::Utc::now()) {
            match ctx.store.start_model_window(&token, &model, &start).await {
                Ok(true) => changes.push(Change::Key(token)),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "model budget window sweep failed");
                    break;
                }
            }
        }
        if !changes.is_empty() {
            tracing::info!(count = changes.len(), "model budget windows started");
            // A window recorded without a change elsewhere still refreshes
            // this replica's copy, so the key is not due again.
            changes.dedup();
            ctx.publish(&changes).await;
        }
    }
}

/// Zeroes budgets whose period ended, every second.
async fn budget_resets(ctx: Arc<ControlCtx>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        match ctx.store.reset_due_budgets(chrono::Utc::now()).await {
            Ok(changes) => {
                if !changes.is_empty() {
                    tracing::info!(count = changes.len(), "budget period ended: spend reset");
                }
                ctx.publish(&changes).await;
            }
            Err(e) => tracing::warn!(error = %e, "budget reset sweep failed"),
        }
    }
}
