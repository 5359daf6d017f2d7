//! End users (the body's `user`) as the request path reads them: a
//! lock-free cache of the end users whose row restricts them (blocked, a
//! budget row with a budget or limits, a region), beside the set of every such id
//! the store holds ([`KnownKeys`] over the id's sha256). As in LiteLLM,
//! which reads only its "restricted" end users, an id outside the set
//! costs nothing: no row, or a row that restricts nothing, means no
//! restriction. An id inside it and not cached is read through once; a
//! miss is remembered for a moment so a flood of one id cannot hammer the
//! database. Cached entries are refreshed in place when their row changes
//! (`end_user:<id>` notifications), their budget counters kept.

use super::end_user_defaults::DefaultBudgets;
use super::known::{prefix, KnownKeys};
use super::{hash_key, TokenHash};
use crate::budget::fleet::Place;
use crate::budget::{Budget, Flushes};
use crate::keyed_hash::KeyedHash;
use crate::limits::ScopeLimits;
use crate::read_through::ReadThroughGuard;
use crate::store::{EndUserRecord, Store, StoreError};
use std::sync::Arc;

/// A restricted end user as the request path needs it.
#[derive(Debug)]
pub struct EndUserEntry {
    /// Its row, with its budget row.
    pub record: EndUserRecord,
    /// Its budget counter (spend against its budget row's `max_budget`);
    /// survives refreshes.
    pub budget: Arc<Budget>,
    /// Its budget row's `model_max_budget`: per group, the budget and the
    /// window length in seconds (0: one window for ever).
    model_limits: Vec<(String, f64, i64)>,
}

impl EndUserEntry {
    /// An end user held to a default budget row (`record`'s
    /// `litellm_budget_table`), counting on `budget`.
    pub(super) fn riding(record: EndUserRecord, budget: Arc<Budget>) -> EndUserEntry {
        let row = record.litellm_budget_table.as_ref();
        let model_limits = model_limits(row.and_then(|b| b.model_max_budget.as_ref()));
        EndUserEntry {
            record,
            budget,
            model_limits,
        }
    }

    /// Whether its row links a budget row of its own (else a default
    /// budget applies, [`DefaultBudgets`]).
    pub fn has_own_budget(&self) -> bool {
        self.record.budget_id.is_some() && self.record.litellm_budget_table.is_some()
    }

    /// The end user's budget for `group` in the window holding `now`, when
    /// its budget row's `model_max_budget` names the group. As in LiteLLM
    /// (which keeps end users' per-model spend on each replica), the counter
    /// lives in this process only, from zero at the start of each window
    /// (`time_period`, aligned to the epoch like keys' windows).
    pub fn model_budget(
        &self,
        windows: &ModelWindows,
        group: &str,
        now: i64,
    ) -> Option<Arc<Budget>> {
        let (_, max, period) = self.model_limits.iter().find(|(g, _, _)| g == group)?;
        let start = if *period > 0 {
            now.checked_sub(now.rem_euclid(*period))?
        } else {
            0
        };
        Some(windows.counter(&self.record.user_id, group, start, *max))
    }

    /// The rpm, tpm and parallel limits of its budget row.
    pub fn limits(&self) -> ScopeLimits {
        let b = self.record.litellm_budget_table.as_ref();
        ScopeLimits::from_fields(
            b.and_then(|b| b.rpm_limit),
            b.and_then(|b| b.tpm_limit),
            b.and_then(|b| b.max_parallel_requests),
        )
    }
}

/// End users' per-model budget counters, one per (end user, group), each
/// for its current window: a counter of an older window is replaced when
/// the next one starts.
#[derive(Default)]
pub struct ModelWindows {
    counters: papaya::HashMap<(String, String), (i64, Arc<Budget>), KeyedHash>,
}

impl ModelWindows {
    /// The counter of `end_user`'s budget `max` USD for `group` in the
    /// window starting at `start` (epoch seconds).
    fn counter(&self, end_user: &str, group: &str, start: i64, max: f64) -> Arc<Budget> {
        let map = self.counters.pin();
        let key = (end_user.to_string(), group.to_string());
        let fresh = || (start, Budget::new(Some(max), None, 0.0));
        let (_, budget) = map.update_or_insert_with(
            key,
            |(at, old)| {
                if *at == start {
                    old.set_limits(Some(max), None);
                    (*at, old.clone())
                } else {
                    fresh()
                }
            },
            fresh,
        );
        budget.clone()
    }
}

/// The process-wide cache of restricted end users.
#[derive(Default)]
pub struct EndUserCache {
    entries: papaya::HashMap<String, Arc<EndUserEntry>, KeyedHash>,
    restricted: KnownKeys,
    misses: ReadThroughGuard<String>,
    windows: ModelWindows,
    defaults: DefaultBudgets,
    /// The spend writes marked flushed (shared with the key cache).
    flushes: Arc<Flushes>,
}

impl EndUserCache {
    /// An empty cache whose reads of spend watch `flushes`.
    pub fn watching(flushes: Arc<Flushes>) -> Self {
        EndUserCache {
            flushes,
            ..EndUserCache::default()
        }
    }

    /// The cached end user `id`, if any.
    pub fn get(&self, id: &str) -> Option<Arc<EndUserEntry>> {
        self.entries.pin().get(id).cloned()
    }

    /// The spend counter end user `id` is charged on here: its restricted
    /// entry's, else the one it keeps riding a default budget row.
    pub fn counter(&self, id: &str) -> Option<Arc<Budget>> {
        match self.entries.pin().get(id) {
            Some(e) => Some(e.budget.clone()),
            None => self.defaults.counter(id),
        }
    }

    /// Whether the store may hold a restricting row for `id` that is not
    /// cached: only then is it worth a read-through.
    pub fn worth_reading(&self, id: &str) -> bool {
        self.restricted.contains(&hash_key(id)) && !self.misses.recently_missed(id)
    }

    /// The default budget rows and the end users riding them.
    pub fn defaults(&self) -> &DefaultBudgets {
        &self.defaults
    }

    /// End users' per-model budget counters ([`EndUserEntry::model_budget`]).
    pub fn model_windows(&self) -> &ModelWindows {
        &self.windows
    }

    /// Remembers that `id` has no restricting row.
    pub fn note_miss(&self, id: &str) {
        self.misses.note_miss(id.to_string());
    }

    /// Reads the ids of every restricted end user into the set, and the
    /// cached ones again (start-up, periodically, after the change listener
    /// reconnects: changes nobody announced, such as a LiteLLM proxy's on
    /// the same database, are seen within that period); returns how many
    /// there are.
    pub async fn reload(&self, store: &dyn Store) -> Result<usize, StoreError> {
        let reload = self.restricted.begin_reload();
        let mut prefixes = Vec::new();
        let count = store
            .restricted_end_users(&mut |id, _| prefixes.push(prefix(&hash_key(id))))
            .await?;
        self.restricted.finish_reload(reload, prefixes);
        self.misses.clear();
        self.defaults.reload(store).await?;
        let cached: Vec<String> = self.entries.pin().keys().cloned().collect();
        for id in cached {
            self.load(store, &id).await?;
        }
        Ok(count)
    }

    /// Reads end user `id` from `store`: cached when its row restricts it
    /// (its budget counter kept from an earlier copy), dropped otherwise.
    /// Read again when a spend write was marked flushed meanwhile
    /// ([`Flushes`]).
    pub async fn load(
        &self,
        store: &dyn Store,
        id: &str,
    ) -> Result<Option<Arc<EndUserEntry>>, StoreError> {
        self.flushes
            .read_settled(|| self.load_once(store, id))
            .await
    }

    async fn load_once(
        &self,
        store: &dyn Store,
        id: &str,
    ) -> Result<Option<Arc<EndUserEntry>>, StoreError> {
        let record = store.get_end_user(id).await?;
        self.defaults.row_changed(record.as_ref(), id);
        let Some(record) = record.filter(EndUserRecord::is_restricted) else {
            self.entries.pin().remove(id);
            self.note_miss(id);
            return Ok(None);
        };
        let budget_row = record.litellm_budget_table.as_ref();
        let max = budget_row.and_then(|b| b.max_budget);
        let soft = budget_row.and_then(|b| b.soft_budget);
        let period = budget_row.and_then(|b| b.budget_reset_at);
        let model_limits = model_limits(budget_row.and_then(|b| b.model_max_budget.as_ref()));
        // One counter per end user, even when two cores load it at once:
        // a cached copy's counter is kept, else the first insert's wins.
        let entry_with = |budget: Arc<Budget>| {
            budget.set_period(period);
            Arc::new(EndUserEntry {
                record: record.clone(),
                budget,
                model_limits: model_limits.clone(),
            })
        };
        let entries = self.entries.pin();
        let entry = entries
            .update_or_insert_with(
                id.to_string(),
                |old| {
                    old.budget.set_limits(max, soft);
                    old.budget.set_durable(record.spend);
                    entry_with(old.budget.clone())
                },
                || {
                    // A rider's counter is kept: one counter per end user.
                    let budget = match self.defaults.counter(id) {
                        Some(b) => {
                            b.set_limits(max, soft);
                            b.set_durable(record.spend);
                            b
                        }
                        None => Budget::at(
                            Some(Place::principal("end_user", id)),
                            max,
                            soft,
                            record.spend,
                        ),
                    };
                    entry_with(budget)
                },
            )
            .clone();
        let hash: TokenHash = hash_key(id);
        self.restricted.insert(&hash);
        self.misses.forget(id);
        Ok(Some(entry))
    }

    /// Brings end user `id` up to date after a change of its row: re-read
    /// when cached or now restricted, so the next request sees the change.
    pub async fn refresh(&self, store: &dyn Store, id: &str) -> Result<(), StoreError> {
        self.misses.forget(id);
        self.load(store, id).await.map(drop)
    }

    /// Moves `nanos` of end user `id`'s settled spend to "durable" once
    /// written.
    pub fn flushed(&self, id: &str, nanos: i64) {
        match self.entries.pin().get(id) {
            Some(e) => e.budget.flushed(nanos),
            None => self.defaults.flushed(id, nanos),
        }
    }
}

/// The entries of a budget row's `model_max_budget`, in either of
/// LiteLLM's forms, as (group, budget, window seconds); entries that are
/// not amounts are left out (the management API refuses them).
fn model_limits(budgets: Option<&serde_json::Value>) -> Vec<(String, f64, i64)> {
    let Some(serde_json::Value::Object(budgets)) = budgets else {
        return Vec::new();
    };
    budgets
        .iter()
        .filter_map(|(group, v)| {
            let max = crate::store::usd_value(v)
                .or_else(|| v.get("budget_limit").and_then(crate::store::usd_value))?;
            let period = v
                .get("time_period")
                .and_then(serde_json::Value::as_str)
                .and_then(|p| crate::store::parse_duration(p).ok())
                .map_or(0, |d| d.num_seconds().max(1));
            Some((group.clone(), max, period))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{EndUserBudget, MemoryStore};

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn cores_loading_one_end_user_at_once_share_one_budget_counter() {
        // Two counters for one end user would each admit up to its budget.
        const THREADS: usize = 8;
        const USERS: usize = 200;
        let store = MemoryStore::default();
        let budget = EndUserBudget {
            budget_id: "b".into(),
            max_budget: Some(1.0),
            ..Default::default()
        };
        block_on(async {
            for i in 0..USERS {
                let user = EndUserRecord {
                    user_id: format!("u{i}"),
                    ..Default::default()
                };
                store.insert_end_user(&user, Some(&budget)).await.unwrap();
            }
        });
        let cache = EndUserCache::default();
        let start = std::sync::Barrier::new(THREADS);
        let seen: Vec<Vec<Arc<Budget>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        block_on(async {
                            let mut budgets = Vec::with_capacity(USERS);
                            for i in 0..USERS {
                                let entry = cache.load(&store, &format!("u{i}")).await;
                                budgets.push(entry.unwrap().unwrap().budget.clone());
                            }
                            budgets
                        })
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for user in 0..USERS {
            let cached = cache.get(&format!("u{user}")).unwrap().budget.clone();
            for loaded in &seen {
                assert!(
                    Arc::ptr_eq(&cached, &loaded[user]),
                    "end user {user} got two budget counters"
                );
            }
        }
    }

    #[test]
    fn only_restricted_end_users_are_read_and_cached() {
        let store = MemoryStore::default();
        let cache = EndUserCache::default();
        block_on(async {
            let plain = EndUserRecord {
                user_id: "plain".into(),
                ..Default::default()
            };
            store.insert_end_user(&plain, None).await.unwrap();
            let budget = EndUserBudget {
                budget_id: "b1".into(),
                max_budget: Some(2.0),
                rpm_limit: Some(7),
                ..Default::default()
            };
            let rich = EndUserRecord {
                user_id: "rich".into(),
                spend: 0.5,
                ..Default::default()
            };
            store.insert_end_user(&rich, Some(&budget)).await.unwrap();
            assert!(!cache.worth_reading("rich"), "nothing loaded yet");
            assert_eq!(cache.reload(&store).await.unwrap(), 1);
            assert!(cache.worth_reading("rich") && !cache.worth_reading("plain"));
            let entry = cache.load(&store, "rich").await.unwrap().unwrap();
            assert_eq!(entry.budget.max_usd(), Some(2.0));
            assert_eq!(entry.limits().rpm, Some(7));
            assert!(cache.load(&store, "plain").await.unwrap().is_none());
            assert!(cache.get("plain").is_none() && cache.get("rich").is_some());

            let counter = entry.budget.clone();
            let ids = ["rich".to_string()];
            store.set_end_users_blocked(&ids, true).await.unwrap();
            cache.refresh(&store, "rich").await.unwrap();
            let fresh = cache.get("rich").unwrap();
            assert!(fresh.record.blocked);
            assert!(Arc::ptr_eq(&fresh.budget, &counter), "the counter survives");
            store.delete_end_users(&ids).await.unwrap();
            cache.refresh(&store, "rich").await.unwrap();
            assert!(cache.get("rich").is_none());
        });
    }
}
