//! Default budgets of end users, as LiteLLM grafts them
//! (`get_end_user_object`, `resolve_default_end_user_budget`): an end user
//! whose row links no budget row of its own (or who has no row yet) is
//! held to its key's `end_user_budget_id` row, else to the proxy-wide
//! `litellm_settings.max_end_user_budget_id` row (a key's row that no
//! longer exists falls back to the proxy-wide one): that row's
//! `max_budget` against the end user's own spend, and its `rpm_limit`,
//! `tpm_limit` and `model_max_budget`.
//!
//! The rows are cached by id (read through once; re-read when `/budget/*`
//! announces a change and at every reload). The end users riding one are
//! cached by id ("riders"), one spend counter per end user whichever row
//! it rides (shared with its restricted entry when it has one), so the
//! spend the writer flushes is counted once. The riders are bounded: past
//! [`MAX_RIDERS`], idle ones (no request in flight, nothing unflushed)
//! are dropped and read again when next seen.

use super::end_users::EndUserEntry;
use crate::budget::fleet::Place;
use crate::budget::Budget;
use crate::keyed_hash::KeyedHash;
use crate::store::{BudgetRecord, EndUserBudget, EndUserRecord, Store, StoreError};
use std::sync::{Arc, OnceLock};

/// Riders kept before idle ones are dropped.
const MAX_RIDERS: usize = 200_000;

/// A default budget row as cached: `None` when the id names no row.
pub type DefaultRow = Option<Arc<EndUserBudget>>;

/// The default budget rows and the end users riding them.
#[derive(Default)]
pub struct DefaultBudgets {
    /// `litellm_settings.max_end_user_budget_id`, set at start-up.
    proxy_wide: OnceLock<String>,
    rows: papaya::HashMap<String, DefaultRow, KeyedHash>,
    riders: papaya::HashMap<String, Arc<EndUserEntry>, KeyedHash>,
}

impl DefaultBudgets {
    /// Sets the proxy-wide default (`max_end_user_budget_id`); once.
    pub fn set_proxy_wide(&self, budget_id: String) {
        let _ = self.proxy_wide.set(budget_id);
    }

    /// The proxy-wide default (`max_end_user_budget_id`), when set.
    pub fn proxy_wide(&self) -> Option<&str> {
        self.proxy_wide.get().map(String::as_str)
    }

    /// The ids a request through a key with `key_default` tries, in order.
    pub fn candidates<'a>(&'a self, key_default: Option<&'a str>) -> Vec<&'a str> {
        let proxy = self.proxy_wide.get().map(String::as_str);
        [key_default, proxy]
            .into_iter()
            .flatten()
            .filter(|id| !id.is_empty())
            .collect()
    }

    /// The cached row `budget_id`: `None` when not cached yet.
    pub fn cached(&self, budget_id: &str) -> Option<DefaultRow> {
        self.rows.pin().get(budget_id).cloned()
    }

    /// Reads row `budget_id` from `store` into the cache.
    pub async fn load(&self, store: &dyn Store, budget_id: &str) -> Result<DefaultRow, StoreError> {
        let ids = [budget_id.to_string()];
        let row = store
            .budgets(Some(&ids))
            .await?
            .into_iter()
            .find(|b| b.budget_id == budget_id)
            .map(|b| Arc::new(end_user_budget(b)));
        self.rows.pin().insert(budget_id.to_string(), row.clone());
        Ok(row)
    }

    /// Re-reads the cached rows (a reload, or `/budget/*` changed one).
    pub async fn reload(&self, store: &dyn Store) -> Result<(), StoreError> {
        let ids: Vec<String> = self.rows.pin().keys().cloned().collect();
        for id in ids {
            self.load(store, &id).await?;
        }
        Ok(())
    }

    /// Re-reads row `budget_id` when cached.
    pub async fn refresh(&self, store: &dyn Store, budget_id: &str) -> Result<(), StoreError> {
        if self.rows.pin().contains_key(budget_id) {
            self.load(store, budget_id).await?;
        }
        Ok(())
    }

    /// The cached rider `id`, when it rides `row` now.
    pub fn rider(&self, id: &str, row: &Arc<EndUserBudget>) -> Option<Arc<EndUserEntry>> {
        let rider = self.riders.pin().get(id).cloned()?;
        let rides = rider
            .record
            .litellm_budget_table
            .as_ref()
            .is_some_and(|b| b == row.as_ref());
        if !rides {
            return None;
        }
        // A restricted entry sharing the counter may have set its own
        // limits on it since.
        limit(&rider.budget, row);
        rider.budget.set_period(row.budget_reset_at);
        Some(rider)
    }

    /// The counter a rider of `id` keeps: its earlier one, if any.
    pub fn counter(&self, id: &str) -> Option<Arc<Budget>> {
        self.riders.pin().get(id).map(|r| r.budget.clone())
    }

    /// Makes `record` (the end user's row, or an empty one) ride `row`,
    /// counting on `counter` (its restricted entry's or earlier rider's)
    /// or a new one seeded with the row's spend.
    pub fn ride(
        &self,
        mut record: EndUserRecord,
        row: &Arc<EndUserBudget>,
        counter: Option<Arc<Budget>>,
    ) -> Arc<EndUserEntry> {
        let id = record.user_id.clone();
        let counter = counter.or_else(|| self.counter(&id)).unwrap_or_else(|| {
            Budget::at(
                Some(Place::principal("end_user", &id)),
                row.max_budget,
                row.soft_budget,
                record.spend,
            )
        });
        limit(&counter, row);
        // Its period is the row's: a reset of the row starts a new count
        // (in Redis too).
        counter.set_period(row.budget_reset_at);
        record.litellm_budget_table = Some(row.as_ref().clone());
        let entry = Arc::new(EndUserEntry::riding(record, counter));
        let riders = self.riders.pin();
        if riders.len() >= MAX_RIDERS {
            riders.retain(|_, r| Arc::strong_count(r) > 1 || !r.budget.idle());
        }
        riders.insert(id, entry.clone());
        entry
    }

    /// Moves `nanos` of rider `id`'s settled spend to "durable" once
    /// written (when no restricted entry shares its counter).
    pub fn flushed(&self, id: &str, nanos: i64) {
        if let Some(r) = self.riders.pin().get(id) {
            r.budget.flushed(nanos);
        }
    }

    /// Brings rider `id`'s counter to its row's spend (its row changed).
    pub fn row_changed(&self, record: Option<&EndUserRecord>, id: &str) {
        let riders = self.riders.pin();
        match record {
            Some(r) => {
                if let Some(rider) = riders.get(id) {
                    rider.budget.set_durable(r.spend);
                }
            }
            None => {
                riders.remove(id);
            }
        }
    }
}

/// Sets `counter`'s limits to `row`'s when they differ.
fn limit(counter: &Budget, row: &EndUserBudget) {
    if counter.max_usd() != row.max_budget || counter.soft_usd() != row.soft_budget {
        counter.set_limits(row.max_budget, row.soft_budget);
    }
}

/// A `LiteLLM_BudgetTable` row as end users read it.
fn end_user_budget(b: BudgetRecord) -> EndUserBudget {
    EndUserBudget {
        budget_id: b.budget_id,
        max_budget: b.max_budget,
        soft_budget: b.soft_budget,
        max_parallel_requests: b.max_parallel_requests,
        tpm_limit: b.tpm_limit,
        rpm_limit: b.rpm_limit,
        model_max_budget: b.model_max_budget.map(serde_json::Value::Object),
        budget_duration: b.budget_duration,
        budget_reset_at: b.budget_reset_at,
        created_at: b.created_at,
    }
}
