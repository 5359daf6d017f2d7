//! LiteLLM's stored cache settings read again while serving, as LiteLLM
//! polls them: every `proxy_config_reload_interval_seconds` (30 s by
//! default) the `LiteLLM_CacheConfig` row is read and, when it changed
//! since the last read, the cache it builds over the file's settings
//! ([`StoredBasis::apply`]) is put in force ([`CacheSlot::replace`]). A row
//! that disappeared leaves the cache as it is (LiteLLM's rule); a row that
//! cannot be applied (another Redis, a type refused) is logged and the
//! cache in force kept. It runs on the control plane, never on the request
//! path.

use super::stored::StoredBasis;
use crate::cache::CacheSlot;
use crate::control::ControlCtx;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// Longest one read of the stored settings may take.
const READ_DEADLINE: Duration = Duration::from_secs(10);

/// What the poller needs: the file's side of the settings, the row the
/// start-up read (`None`: none), and `STORE_MODEL_IN_DB`.
pub struct StoredReload {
    /// What applying the stored settings reads of the file's config.
    pub basis: StoredBasis,
    /// The `LiteLLM_CacheConfig` row applied at start-up, if any.
    pub seen: Option<Map<String, Value>>,
    /// `STORE_MODEL_IN_DB`, as the process started with it.
    pub store_model_in_db_env: Option<String>,
}

impl StoredReload {
    /// Reads the row every interval for as long as the process runs,
    /// putting the cache of each changed row in `slot`.
    pub async fn run(mut self, ctx: Arc<ControlCtx>, slot: Arc<CacheSlot>) {
        let interval = self.basis.reload_interval().max(Duration::from_secs(1));
        let mut complained = false;
        loop {
            tokio::time::sleep(interval).await;
            let read = tokio::time::timeout(READ_DEADLINE, ctx.store().stored_settings()).await;
            let stored = match read {
                Ok(Ok(stored)) => {
                    complained = false;
                    stored
                }
                Ok(Err(e)) if !complained => {
                    tracing::warn!(error = %e, "cannot read LiteLLM_CacheConfig again; the cache in force is kept");
                    complained = true;
                    continue;
                }
                Err(_) if !complained => {
                    tracing::warn!("reading LiteLLM_CacheConfig again took over {READ_DEADLINE:?}; the cache in force is kept");
                    complained = true;
                    continue;
                }
                _ => continue,
            };
            if stored.cache.is_none() || stored.cache == self.seen {
                continue;
            }
            self.seen = stored.cache.clone();
            match self.basis.apply(&stored, self.store_model_in_db_env.as_deref()) {
                Ok((applied, change)) => {
                    for note in &applied.notes {
                        tracing::info!("{note}");
                    }
                    for warning in &applied.warnings {
                        tracing::warn!("{warning}");
                    }
                    if let Some(cache) = change {
                        slot.replace(cache);
                        tracing::info!("the response cache is rebuilt from the changed LiteLLM_CacheConfig row");
                    }
                }
                Err(e) => tracing::error!(
                    "the changed LiteLLM_CacheConfig row is not applied, the cache in force is kept: {e}"
                ),
            }
        }
    }
}
