//! Keeping this replica's caches in step with the store: the key cache and
//! the model snapshot are refreshed when a change is published here or
//! heard from another replica (`listener`), and swept on timers (known keys,
//! budget periods, per-model budget windows). Runs on the control plane.

pub mod listener;

use crate::auth::{KeyCache, KNOWN_KEYS_RELOAD};
use crate::control::{ControlCtx, ControlError, ControlPlane};
use crate::models::Models;
use crate::store::{Change, SpendChanges, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// The caches this replica keeps of what the store holds.
#[derive(Clone)]
pub struct Caches {
    /// The key cache the data plane reads.
    pub keys: Arc<KeyCache>,
    /// The served model set.
    pub models: Arc<Models>,
}

impl Caches {
    /// A control-plane job's view of the store and these caches.
    pub fn on(&self, control: Arc<ControlCtx>) -> Arc<SyncCtx> {
        Arc::new(SyncCtx {
            control,
            keys: self.keys.clone(),
            models: self.models.clone(),
        })
    }

    /// Starts the sweeps on the control plane: budget periods, per-model
    /// budget windows and the set of known keys.
    pub fn start_sweeps(&self, control: &ControlPlane) -> Result<(), ControlError> {
        let caches = self.clone();
        control.spawn(move |ctx| budget_resets(caches.on(ctx)))?;
        let caches = self.clone();
        control.spawn(move |ctx| model_budget_windows(caches.on(ctx)))?;
        let caches = self.clone();
        control.spawn(move |ctx| known_keys_reloads(caches.on(ctx)))
    }
}

/// What a control-plane job that changes stored state uses: the store, and
/// the caches it refreshes.
pub struct SyncCtx {
    control: Arc<ControlCtx>,
    /// The key cache the data plane reads; filled and invalidated here.
    pub keys: Arc<KeyCache>,
    /// The served model set; its snapshot is swapped here.
    pub models: Arc<Models>,
}

impl SyncCtx {
    /// Persistence.
    pub fn store(&self) -> &dyn Store {
        self.control.store()
    }

    /// Brings this replica's copy of what `change` names up to date: the
    /// key cache, or the model snapshot.
    pub async fn refresh(&self, change: &Change) -> Result<(), StoreError> {
        match change {
            Change::Model(id) => self.models.refresh(self.store(), id).await,
            other => self.keys.refresh(self.store(), other).await,
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
        self.refresh_each(changes).await;
        self.announce(changes).await;
    }

    /// After a spend write: refreshes here only what this replica's cache
    /// cannot have counted (rows of an earlier budget period), and announces
    /// every change to the others. A key whose spend grew is not read back:
    /// the writer's `KeyCache::mark_flushed` already moved that spend to
    /// durable, and reading each key, its team and its user again cost
    /// three queries per distinct key of every batch.
    pub async fn publish_spend(&self, spend: &SpendChanges) {
        self.refresh_each(&spend.refresh).await;
        if !spend.announce.is_empty() {
            self.announce(&spend.announce).await;
        }
    }

    async fn refresh_each(&self, changes: &[Change]) {
        let mut seen = std::collections::HashSet::new();
        for change in changes {
            if !seen.insert(change.payload()) {
                continue;
            }
            if let Err(e) = self.refresh(change).await {
                tracing::warn!(error = %e, "cache refresh failed; serving the cached copy until the next change");
            }
        }
    }

    async fn announce(&self, changes: &[Change]) {
        if let Err(e) = self.store().announce(changes).await {
            tracing::warn!(error = %e, "could not announce changes to other replicas");
        }
    }
}

/// Reads the set of known keys again every [`KNOWN_KEYS_RELOAD`] (the first
/// read is start-up's), so keys written by a writer that does not announce
/// them become known and deleted ones are dropped.
async fn known_keys_reloads(ctx: Arc<SyncCtx>) {
    let mut tick = tokio::time::interval(KNOWN_KEYS_RELOAD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match ctx.keys.reload_known(ctx.store()).await {
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
/// of cached keys, teams and users that are due: their per-model spend goes back to zero.
/// Keys no replica has cached are not in use; theirs start when they are
/// next read.
async fn model_budget_windows(ctx: Arc<SyncCtx>) {
    let mut tick = tokio::time::interval(MODEL_WINDOW_SWEEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut changes = Vec::new();
        for (kind, id, model, start) in ctx.keys.due_model_windows(chrono::Utc::now()) {
            match ctx
                .store()
                .start_model_window(kind, &id, &model, &start)
                .await
            {
                Ok(true) => changes.push(kind.change(&id)),
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
async fn budget_resets(ctx: Arc<SyncCtx>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let default = ctx.keys.end_users().defaults().proxy_wide();
        match ctx
            .store()
            .reset_due_budgets(chrono::Utc::now(), default)
            .await
        {
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
