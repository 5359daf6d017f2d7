//! Which key created each file and batch (`/v1/files`, `/v1/batches`), so
//! only that key reaches it: a lock-free map per process in front of the
//! store (`LiteLLM_ManagedFileTable`, `LiteLLM_ManagedObjectTable` with
//! Postgres, memory otherwise). A new object is written to the map at once
//! and to the store before its creation is answered (as LiteLLM does), so a
//! sibling replica asked for it next reads it through the store; a store
//! slower than [`STORE_TIMEOUT`] does not hold the answer longer (the write
//! goes on). An id this replica has not seen is read through the store once
//! (another replica created it). Charging a
//! completed batch is claimed in the store, so the fleet charges it once;
//! so is each poll of an open batch by the poller (`due`), and a batch's
//! budget hold counts in the store until the batch is charged or final.

use crate::control::ControlPlane;
use crate::store::{ManagedKind, ManagedObject};
use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Longest a read-through or claim waits for the store.
const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// Most objects kept in the map; past it, lookups read through the store.
const MAX_CACHED: usize = 100_000;

/// Most ids a list is filtered by.
pub const MAX_LISTED: usize = 10_000;

/// Why the store could not answer.
#[derive(Debug, thiserror::Error)]
#[error("the store did not answer: {0}")]
pub struct ManagedError(pub String);

/// The files and batches created through this gateway.
pub struct Managed {
    objects: papaya::HashMap<String, Arc<ManagedObject>>,
    control: ControlPlane,
    /// Whether a core of this process runs the batch poller.
    poller: AtomicBool,
    /// Batches with a hold recorded here and not yet in the store.
    unwritten: Arc<papaya::HashMap<String, Arc<ManagedObject>>>,
}

impl Managed {
    /// An empty map in front of the store `control` owns.
    pub fn new(control: ControlPlane) -> Managed {
        Managed {
            objects: papaya::HashMap::new(),
            control,
            poller: AtomicBool::new(false),
            unwritten: Arc::new(papaya::HashMap::new()),
        }
    }

    /// Records a new object: here at once, then in the store, waiting for
    /// the write at most [`STORE_TIMEOUT`] (it goes on past that).
    pub async fn record(&self, object: ManagedObject) {
        let object = Arc::new(object);
        let objects = self.objects.pin();
        if objects.len() < MAX_CACHED {
            objects.insert(object.id.clone(), object.clone());
        }
        if object.hold > 0.0 {
            self.unwritten
                .pin()
                .insert(object.id.clone(), object.clone());
        }
        let unwritten = self.unwritten.clone();
        let (written, wait) = oneshot::channel();
        let id = object.id.clone();
        let queued = self.control.spawn(move |ctx| async move {
            if let Err(e) = ctx.store().insert_managed(&object).await {
                tracing::error!(
                    id = %object.id,
                    kind = object.kind.as_str(),
                    error = %e,
                    "could not record a managed file or batch"
                );
            }
            unwritten.pin().remove(&object.id);
            let _ = written.send(());
        });
        if let Err(e) = queued {
            tracing::error!(error = %e, "could not queue the record of a managed file or batch");
            return;
        }
        if monoio::time::timeout(STORE_TIMEOUT, wait).await.is_err() {
            tracing::warn!(
                %id,
                "the store took longer than {STORE_TIMEOUT:?} to record a managed file or batch; answering before it"
            );
        }
    }

    /// The object with provider id `id`, if this gateway created it.
    pub async fn lookup(&self, id: &str) -> Result<Option<Arc<ManagedObject>>, ManagedError> {
        if let Some(found) = self.objects.pin().get(id) {
            return Ok(Some(found.clone()));
        }
        let owned = id.to_string();
        let found = self
            .control
            .call(STORE_TIMEOUT, move |ctx| async move {
                ctx.store().get_managed(&owned).await
            })
            .await
            .map_err(|e| ManagedError(e.to_string()))?
            .map_err(|e| ManagedError(e.to_string()))?;
        Ok(found.map(|object| {
            let object = Arc::new(object);
            let objects = self.objects.pin();
            if objects.len() < MAX_CACHED {
                objects.insert(object.id.clone(), object.clone());
            }
            object
        }))
    }

    /// Ids of the objects of `kind` that `key` created (at most
    /// [`MAX_LISTED`]): the store's, and this replica's not yet written.
    pub async fn ids_of(&self, key: &str, kind: ManagedKind) -> Result<Vec<String>, ManagedError> {
        let owned = key.to_string();
        let mut ids = self
            .control
            .call(STORE_TIMEOUT, move |ctx| async move {
                ctx.store().managed_ids(&owned, kind, MAX_LISTED).await
            })
            .await
            .map_err(|e| ManagedError(e.to_string()))?
            .map_err(|e| ManagedError(e.to_string()))?;
        for object in self.objects.pin().values() {
            if ids.len() >= MAX_LISTED {
                break;
            }
            if object.kind == kind && object.key == key && !ids.contains(&object.id) {
                ids.push(object.id.clone());
            }
        }
        Ok(ids)
    }

    /// Claims the charge of `batch`: true for the one call in the fleet
    /// that gets it.
    pub async fn claim_charge(&self, batch: &Arc<ManagedObject>) -> Result<bool, ManagedError> {
        let batch = batch.clone();
        self.control
            .call(STORE_TIMEOUT, move |ctx| async move {
                ctx.store().claim_batch_charge(&batch).await
            })
            .await
            .map_err(|e| ManagedError(e.to_string()))?
            .map_err(|e| ManagedError(e.to_string()))
    }

    /// True for the first caller in this process: the one core that runs
    /// the batch poller.
    pub fn take_poller(&self) -> bool {
        !self.poller.swap(true, Ordering::AcqRel)
    }

    /// Claims up to `limit` batches due for a poll now (created at or
    /// after `oldest`), each for this caller alone until `next`.
    pub async fn due(
        &self,
        next: DateTime<Utc>,
        oldest: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<ManagedObject>, ManagedError> {
        self.control
            .call(STORE_TIMEOUT, move |ctx| async move {
                ctx.store()
                    .due_batches(Utc::now(), next, oldest, limit)
                    .await
            })
            .await
            .map_err(|e| ManagedError(e.to_string()))?
            .map_err(|e| ManagedError(e.to_string()))
    }

    /// Records a poll of batch `id` without waiting: its upstream
    /// `status`; `last` (a final status) ends its polls and its hold.
    pub fn polled(&self, id: &str, status: &str, last: bool) {
        let (id, status) = (id.to_string(), status.to_string());
        let queued = self.control.spawn(move |ctx| async move {
            if let Err(e) = ctx.store().batch_polled(&id, &status, last).await {
                tracing::error!(batch = %id, error = %e, "could not record a batch's poll");
            }
        });
        if let Err(e) = queued {
            tracing::error!(error = %e, "could not queue the record of a batch's poll");
        }
    }

    /// USD held by `key`'s open batches: the store's, and those this
    /// replica recorded that are not written yet, each once (a batch
    /// another replica created a moment ago may be missing).
    pub async fn held_by(&self, key: &str) -> Result<f64, ManagedError> {
        // Read before the store: an object written after this read is in
        // it, one written before is in the store's answer (written before
        // the store read began), so none is missed; by id, none counts twice.
        let pending: Vec<(String, f64)> = self
            .unwritten
            .pin()
            .values()
            .filter(|o| o.key == key)
            .map(|o| (o.id.clone(), o.hold))
            .collect();
        let owned = key.to_string();
        let stored = self
            .control
            .call(STORE_TIMEOUT, move |ctx| async move {
                ctx.store().batch_holds(&owned).await
            })
            .await
            .map_err(|e| ManagedError(e.to_string()))?
            .map_err(|e| ManagedError(e.to_string()))?;
        Ok(held_once(&stored, &pending))
    }
}

/// The USD held by the store's open batches and by the objects recorded
/// here and not yet written (read before the store), each batch once.
fn held_once(stored: &[(String, f64)], pending: &[(String, f64)]) -> f64 {
    let stored_sum: f64 = stored.iter().map(|(_, h)| h).sum();
    let unwritten: f64 = pending
        .iter()
        .filter(|(id, _)| !stored.iter().any(|(s, _)| s == id))
        .map(|(_, h)| h)
        .sum();
    stored_sum + unwritten
}

#[cfg(test)]
mod tests {
    use super::held_once;

    #[test]
    fn a_batch_written_between_the_two_reads_counts_once() {
        let pending = [("batch_a".to_string(), 0.018)];
        // Its row landed before the store read: in both, counted once.
        let stored = [
            ("batch_a".to_string(), 0.018),
            ("batch_b".to_string(), 0.02),
        ];
        assert!((held_once(&stored, &pending) - 0.038).abs() < 1e-12);
        // Its row landed after: only in the pending list, still counted.
        let stored = [("batch_b".to_string(), 0.02)];
        assert!((held_once(&stored, &pending) - 0.038).abs() < 1e-12);
    }
}
