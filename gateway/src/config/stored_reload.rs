//! LiteLLM's stored cache settings read again while serving, as LiteLLM
//! polls them: every `proxy_config_reload_interval_seconds` (30 s by
//! default) the stored rows are read and, when they changed since the
//! last read, the cache they build over the file's settings
//! ([`StoredBasis::apply`]) is put in force ([`CacheSlot::replace`]) if
//! its settings differ from those in force. A `LiteLLM_CacheConfig` row
//! that disappeared leaves the cache as it is (LiteLLM's rule); rows that
//! cannot be applied (another Redis, a type refused) are logged and the
//! cache in force kept. It runs on the control plane, never on the request
//! path.

use super::stored::StoredBasis;
use crate::cache::CacheSlot;
use crate::control::ControlCtx;
use crate::store::settings::StoredSettings;
use std::sync::Arc;
use std::time::Duration;

/// Longest one read of the stored settings may take.
const READ_DEADLINE: Duration = Duration::from_secs(10);

/// What the poller needs: the file's side of the settings, the rows the
/// start-up read, and `STORE_MODEL_IN_DB`.
pub struct StoredReload {
    /// What applying the stored settings reads of the file's config.
    pub basis: StoredBasis,
    /// The stored rows applied at start-up.
    pub seen: StoredSettings,
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
            // The rows are saved one by one: a read between two saves is
            // applied as it stands, and the next read applies the rest.
            if stored.cache.is_none() || stored == self.seen {
                continue;
            }
            self.seen = stored.clone();
            match self.basis.apply(&stored, self.store_model_in_db_env.as_deref()) {
                Ok((applied, change)) => {
                    for note in &applied.notes {
                        tracing::info!("{note}");
                    }
                    for warning in &applied.warnings {
                        tracing::warn!("{warning}");
                    }
                    let Some(cache) = change else { continue };
                    let now = slot.load().as_ref().map(|c| c.settings().clone());
                    if now.as_ref() != cache.as_ref().map(|c| c.settings()) {
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
