//! End users ("customers"): rows of LiteLLM's `LiteLLM_EndUserTable`, the
//! callers' own users named by a request's `user`, with the
//! `LiteLLM_BudgetTable` row their budget and limits live in (linked by
//! `budget_id`), under LiteLLM's field names so `/customer/*` serializes
//! them as LiteLLM does.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `LiteLLM_EndUserTable` with its budget row (LiteLLM's `CustomerResponse`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct EndUserRecord {
    /// The id clients send as `user`.
    pub user_id: String,
    /// Refused while true.
    pub blocked: bool,
    /// Admin-facing label.
    pub alias: Option<String>,
    /// Spend so far, USD (added to by every request naming this end user).
    pub spend: f64,
    /// Region its requests must be served from (`eu`, `us`).
    pub allowed_model_region: Option<String>,
    /// Model for requests when no deployment is in the region.
    pub default_model: Option<String>,
    /// Models it may use; empty means all.
    pub models: Vec<String>,
    /// Its `LiteLLM_BudgetTable` row.
    pub budget_id: Option<String>,
    /// That row, when linked.
    pub litellm_budget_table: Option<EndUserBudget>,
    /// LiteLLM's object permissions, kept as they are.
    pub object_permission_id: Option<String>,
}

/// The `LiteLLM_BudgetTable` row of an end user (the fields it enforces
/// and the ones LiteLLM's response shows).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct EndUserBudget {
    /// Id.
    pub budget_id: String,
    /// Hard budget, USD.
    pub max_budget: Option<f64>,
    /// Alert threshold, USD.
    pub soft_budget: Option<f64>,
    /// Concurrent requests.
    pub max_parallel_requests: Option<i64>,
    /// Tokens per minute.
    pub tpm_limit: Option<i64>,
    /// Requests per minute.
    pub rpm_limit: Option<i64>,
    /// Per-model budgets, kept as given.
    pub model_max_budget: Option<Value>,
    /// Budget period, e.g. `30d`.
    pub budget_duration: Option<String>,
    /// When the end users' spend next resets.
    pub budget_reset_at: Option<DateTime<Utc>>,
    /// Creation time.
    pub created_at: Option<DateTime<Utc>>,
}

impl EndUserRecord {
    /// Whether the row restricts what its end user may do (blocked, a
    /// budget row, a region): only such rows are read on the request path,
    /// as LiteLLM reads only its "restricted" end users.
    pub fn is_restricted(&self) -> bool {
        self.blocked || self.budget_id.is_some() || self.allowed_model_region.is_some()
    }
}

/// The budget fields of a `/customer/new` or `/customer/update`: each one
/// given is written, the others kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BudgetFields {
    /// Hard budget, USD.
    pub max_budget: Option<f64>,
    /// Alert threshold, USD.
    pub soft_budget: Option<f64>,
    /// Concurrent requests.
    pub max_parallel_requests: Option<i64>,
    /// Tokens per minute.
    pub tpm_limit: Option<i64>,
    /// Requests per minute.
    pub rpm_limit: Option<i64>,
    /// Per-model budgets.
    pub model_max_budget: Option<Value>,
    /// Budget period; with it, the next reset.
    pub budget_duration: Option<(String, DateTime<Utc>)>,
}

impl BudgetFields {
    /// Whether no field is given.
    pub fn is_empty(&self) -> bool {
        *self == BudgetFields::default()
    }

    /// A new budget row `budget_id` of these fields, created `now`.
    pub fn row(&self, budget_id: String, now: DateTime<Utc>) -> EndUserBudget {
        let mut row = EndUserBudget {
            budget_id,
            created_at: Some(now),
            ..Default::default()
        };
        self.apply(&mut row);
        row
    }

    /// Writes the given fields into `row`.
    pub fn apply(&self, row: &mut EndUserBudget) {
        fn set<T: Clone>(field: &mut Option<T>, v: &Option<T>) {
            if let Some(v) = v {
                *field = Some(v.clone());
            }
        }
        set(&mut row.max_budget, &self.max_budget);
        set(&mut row.soft_budget, &self.soft_budget);
        set(&mut row.max_parallel_requests, &self.max_parallel_requests);
        set(&mut row.tpm_limit, &self.tpm_limit);
        set(&mut row.rpm_limit, &self.rpm_limit);
        set(&mut row.model_max_budget, &self.model_max_budget);
        if let Some((duration, reset_at)) = &self.budget_duration {
            row.budget_duration = Some(duration.clone());
            row.budget_reset_at = Some(*reset_at);
        }
    }
}

/// A `/customer/update`: each field given is written (LiteLLM never
/// clears a field through it), in one statement per table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndUserUpdate {
    /// New label.
    pub alias: Option<String>,
    /// Blocked or not.
    pub blocked: Option<bool>,
    /// New region.
    pub allowed_model_region: Option<String>,
    /// New default model.
    pub default_model: Option<String>,
    /// New model list (an empty one clears it).
    pub models: Option<Vec<String>>,
    /// Another existing budget row to link.
    pub budget_id: Option<String>,
    /// Fields of its budget row: the linked row is changed, or a new one
    /// created and linked when there is none.
    pub budget: BudgetFields,
}

impl EndUserUpdate {
    /// Applies the update to `u` (the in-memory store); a new budget row
    /// gets `new_budget_id`. Returns the budget row to write, if any.
    pub fn apply(
        &self,
        u: &mut EndUserRecord,
        existing: Option<EndUserBudget>,
        new_budget_id: String,
        now: DateTime<Utc>,
    ) -> Option<EndUserBudget> {
        if let Some(v) = &self.alias {
            u.alias = Some(v.clone());
        }
        if let Some(v) = self.blocked {
            u.blocked = v;
        }
        if let Some(v) = &self.allowed_model_region {
            u.allowed_model_region = Some(v.clone());
        }
        if let Some(v) = &self.default_model {
            u.default_model = Some(v.clone());
        }
        if let Some(v) = &self.models {
            u.models = v.clone();
        }
        if let Some(v) = &self.budget_id {
            u.budget_id = Some(v.clone());
        }
        if self.budget.is_empty() {
            return None;
        }
        let row = match existing {
            Some(mut row) => {
                self.budget.apply(&mut row);
                row
            }
            None => {
                let row = self.budget.row(new_budget_id, now);
                u.budget_id = Some(row.budget_id.clone());
                row
            }
        };
        Some(row)
    }
}
