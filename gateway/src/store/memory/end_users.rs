//! End users and their budget rows in the in-memory store.

use crate::store::{next_reset, EndUserBudget, EndUserRecord, EndUserUpdate, StoreError};
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// `LiteLLM_EndUserTable` and the `LiteLLM_BudgetTable` rows it links.
#[derive(Default)]
pub(super) struct EndUsers {
    /// Rows by id, without their budget row.
    rows: HashMap<String, EndUserRecord>,
    /// Budget rows by id.
    budgets: HashMap<String, EndUserBudget>,
}

impl EndUsers {
    /// `u` with its budget row.
    fn joined(&self, u: &EndUserRecord) -> EndUserRecord {
        let mut u = u.clone();
        u.litellm_budget_table = u
            .budget_id
            .as_ref()
            .and_then(|b| self.budgets.get(b))
            .cloned();
        u
    }

    /// An end user with its budget row.
    pub(super) fn get(&self, id: &str) -> Option<EndUserRecord> {
        self.rows.get(id).map(|u| self.joined(u))
    }

    /// Inserts an end user and its new budget row.
    pub(super) fn insert(
        &mut self,
        user: &EndUserRecord,
        budget: Option<&EndUserBudget>,
    ) -> Result<(), StoreError> {
        if self.rows.contains_key(&user.user_id) {
            return Err(StoreError::Conflict(format!("end user {}", user.user_id)));
        }
        let mut row = user.clone();
        row.litellm_budget_table = None;
        if let Some(b) = budget {
            row.budget_id = Some(b.budget_id.clone());
            self.budgets.insert(b.budget_id.clone(), b.clone());
        }
        self.rows.insert(row.user_id.clone(), row);
        Ok(())
    }

    /// Applies an update; the ids whose copies are stale, `None` when absent.
    pub(super) fn update(
        &mut self,
        id: &str,
        update: &EndUserUpdate,
        new_budget_id: &str,
    ) -> Option<Vec<String>> {
        let row = self.rows.get_mut(id)?;
        let existing = row
            .budget_id
            .as_ref()
            .and_then(|b| self.budgets.get(b))
            .cloned();
        let written = update.apply(row, existing, new_budget_id.to_string(), Utc::now());
        let mut stale = vec![id.to_string()];
        if let Some(budget) = written {
            stale.extend(
                self.rows
                    .values()
                    .filter(|u| u.user_id != id && u.budget_id.as_ref() == Some(&budget.budget_id))
                    .map(|u| u.user_id.clone()),
            );
            self.budgets.insert(budget.budget_id.clone(), budget);
        }
        Some(stale)
    }

    /// Sets `blocked`; blocking creates missing rows.
    pub(super) fn set_blocked(&mut self, ids: &[String], blocked: bool) -> Vec<EndUserRecord> {
        let mut out: Vec<EndUserRecord> = Vec::new();
        for id in ids {
            if out.iter().any(|u| &u.user_id == id) {
                continue;
            }
            if blocked && !self.rows.contains_key(id) {
                let row = EndUserRecord {
                    user_id: id.clone(),
                    ..Default::default()
                };
                self.rows.insert(id.clone(), row);
            }
            if let Some(u) = self.rows.get_mut(id) {
                u.blocked = blocked;
                let u = u.clone();
                out.push(self.joined(&u));
            }
        }
        out
    }

    /// Deletes end users; the ids that existed.
    pub(super) fn delete(&mut self, ids: &[String]) -> Vec<String> {
        ids.iter()
            .filter(|id| self.rows.remove(id.as_str()).is_some())
            .cloned()
            .collect()
    }

    /// A page of end users by id, matching `search` when given.
    pub(super) fn list(&self, offset: i64, limit: i64, search: Option<&str>) -> Vec<EndUserRecord> {
        let search = search.map(str::to_lowercase);
        let matches = |u: &EndUserRecord| {
            search.as_deref().is_none_or(|s| {
                u.user_id.to_lowercase().contains(s)
                    || u.alias
                        .as_deref()
                        .is_some_and(|a| a.to_lowercase().contains(s))
            })
        };
        let mut rows: Vec<&EndUserRecord> = self.rows.values().filter(|u| matches(u)).collect();
        rows.sort_by(|a, b| a.user_id.cmp(&b.user_id));
        rows.into_iter()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .take(usize::try_from(limit).unwrap_or(0))
            .map(|u| self.joined(u))
            .collect()
    }

    /// Calls `sink` with every restricted end user; how many.
    pub(super) fn restricted(&self, sink: &mut (dyn for<'t> FnMut(&'t str, bool) + Send)) -> usize {
        let mut n = 0;
        for u in self.rows.values().filter(|u| u.is_restricted()) {
            sink(&u.user_id, u.blocked);
            n += 1;
        }
        n
    }

    /// Ids of the end users whose budget row is `id`.
    pub(super) fn of_budget(&self, id: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .rows
            .values()
            .filter(|u| u.budget_id.as_deref() == Some(id))
            .map(|u| u.user_id.clone())
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Whether budget row `id` exists.
    pub(super) fn budget_exists(&self, id: &str) -> bool {
        self.budgets.contains_key(id)
    }

    /// Adds `spend` to end user `id`, creating it; whether it has a budget
    /// row (its cached copy then needs the new figure).
    pub(super) fn add_spend(&mut self, id: &str, spend: f64) -> bool {
        let u = self
            .rows
            .entry(id.to_string())
            .or_insert_with(|| EndUserRecord {
                user_id: id.to_string(),
                ..Default::default()
            });
        u.spend += spend;
        u.budget_id.is_some()
    }

    /// Zeroes the spend of the end users that link no budget row of their
    /// own (the riders of the proxy-wide default row); returns their ids.
    pub(super) fn reset_riders(&mut self) -> Vec<String> {
        let mut reset = Vec::new();
        for u in self.rows.values_mut() {
            if u.budget_id.is_none() && u.spend > 0.0 {
                u.spend = 0.0;
                reset.push(u.user_id.clone());
            }
        }
        reset
    }

    /// Zeroes the spend of the end users of every budget row whose reset
    /// is due and schedules its next; returns their ids.
    pub(super) fn reset_due(&mut self, now: DateTime<Utc>) -> Vec<String> {
        let mut due = Vec::new();
        for b in self.budgets.values_mut() {
            if b.budget_reset_at.is_some_and(|at| at <= now) {
                b.budget_reset_at = next_reset(b.budget_duration.as_deref(), now);
                due.push(b.budget_id.clone());
            }
        }
        let mut reset = Vec::new();
        for u in self.rows.values_mut() {
            if u.budget_id.as_ref().is_some_and(|b| due.contains(b)) {
                u.spend = 0.0;
                reset.push(u.user_id.clone());
            }
        }
        reset
    }
}
