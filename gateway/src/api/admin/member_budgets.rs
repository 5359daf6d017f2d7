//! A team member's own budget row (`LiteLLM_TeamMembership.budget_id` →
//! `LiteLLM_BudgetTable`), written as LiteLLM 1.110.2 writes it:
//! `max_budget_in_team` and `budget_duration` on `/team/member_add`
//! (`_resolve_member_budget_id`) and `/team/member_update`
//! (`upsert_budget_and_membership`), and the link of members to their
//! team's default member budget row. The request path reads the row
//! (`auth::cache`); the budget-period sweep zeroes the member's spend when
//! the row's `budget_duration` ends.

use super::body::{amount, Patch};
use super::budgets::{new_record, BudgetFields};
use super::db::{store_err, Ctx};
use super::teams::MEMBER_BUDGET_ID;
use crate::error::GatewayError;
use crate::store::{BudgetRecord, OrgTable, TeamRecord};
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

/// The per-member budget fields of a request: `max_budget_in_team` (the
/// row's `max_budget`) and `budget_duration`.
#[derive(Debug, Default)]
pub struct MemberLimits {
    /// `max_budget_in_team`, USD.
    pub max_budget: Patch<f64>,
    /// `budget_duration`.
    pub budget_duration: Patch<String>,
}

impl MemberLimits {
    /// The limits, checked (`max_budget_in_team` a USD amount, the duration
    /// LiteLLM's format).
    pub fn checked(max_budget: Patch<f64>, duration: Patch<String>) -> Result<Self, GatewayError> {
        if let Patch::Set(v) = max_budget {
            amount("max_budget_in_team", v)?;
        }
        let limits = MemberLimits {
            max_budget,
            budget_duration: duration,
        };
        limits.columns(Utc::now())?;
        Ok(limits)
    }

    /// Whether no field is given.
    pub fn is_empty(&self) -> bool {
        !self.max_budget.is_given() && !self.budget_duration.is_given()
    }

    /// The given fields as budget-row columns (a duration schedules the
    /// row's `budget_reset_at` from `now`; `null` clears).
    fn columns(&self, now: DateTime<Utc>) -> Result<Map<String, Value>, GatewayError> {
        let fields = BudgetFields {
            max_budget: self.max_budget.clone(),
            budget_duration: self.budget_duration.clone(),
            ..BudgetFields::default()
        };
        fields.columns(now)
    }
}

/// The limit fields of a member budget row LiteLLM counts as "a meaningful
/// limit" (`_TEAM_MEMBER_BUDGET_LIMIT_FIELDS`) and clones from a team's
/// default (`_CLONABLE_BUDGET_FIELDS`, which has `budget_duration` too).
const LIMIT_FIELDS: [&str; 10] = [
    "max_budget",
    "soft_budget",
    "max_parallel_requests",
    "tpm_limit",
    "rpm_limit",
    "model_max_budget",
    "budget_duration",
    "allowed_models",
    "temp_budget_increase",
    "temp_budget_expiry",
];

/// Whether `v` sets a limit (not null, not an empty list or object).
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

/// Whether a row's columns set any limit.
fn has_limit(row: &Map<String, Value>) -> bool {
    LIMIT_FIELDS.iter().any(|f| row.get(*f).is_some_and(is_set))
}

/// A budget row as columns.
fn row_columns(b: &BudgetRecord) -> Map<String, Value> {
    match serde_json::to_value(b) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// The team's default member budget row id (`metadata.team_member_budget_id`).
pub fn default_id(team: &TeamRecord) -> Option<String> {
    team.metadata
        .get(MEMBER_BUDGET_ID)
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// One budget row by id.
async fn row(ctx: &Ctx, id: &str) -> Result<Option<BudgetRecord>, GatewayError> {
    let rows = ctx
        .store()
        .budgets(Some(&[id.to_string()]))
        .await
        .map_err(store_err)?;
    Ok(rows.into_iter().next())
}

/// Inserts a new member budget row of `columns`; its id.
async fn create(
    ctx: &Ctx,
    columns: Map<String, Value>,
    now: DateTime<Utc>,
) -> Result<String, GatewayError> {
    let id = uuid::Uuid::new_v4().to_string();
    let record = new_record(id.clone(), columns, "default_user_id", now)?;
    ctx.store()
        .insert_budget(&record)
        .await
        .map_err(store_err)?;
    Ok(id)
}

/// The budget row a member added to `team` with `limits` is linked to, as
/// LiteLLM's `_resolve_member_budget_id`: a new row for an explicit
/// `max_budget_in_team`; the team's default row with nothing given; a copy
/// of the default with its own reset window for a lone `budget_duration`
/// (a window-only row without a default); none otherwise.
pub async fn for_new_member(
    ctx: &Ctx,
    team: &TeamRecord,
    limits: &MemberLimits,
) -> Result<Option<String>, GatewayError> {
    let now = Utc::now();
    let default = match default_id(team) {
        Some(id) => row(ctx, &id).await?,
        None => None,
    };
    let explicit = matches!(limits.max_budget, Patch::Set(_));
    let duration = matches!(limits.budget_duration, Patch::Set(_));
    match (&default, explicit, duration) {
        (Some(d), false, false) => Ok(Some(d.budget_id.clone())),
        (None, false, false) => Ok(None),
        (Some(d), false, true) => {
            let mut columns: Map<String, Value> = row_columns(d)
                .into_iter()
                .filter(|(k, v)| LIMIT_FIELDS.contains(&k.as_str()) && is_set(v))
                .collect();
            columns.extend(limits.columns(now)?);
            Ok(Some(create(ctx, columns, now).await?))
        }
        _ => Ok(Some(create(ctx, limits.columns(now)?, now).await?)),
    }
}

/// Applies `limits` to the budget row of `user_id`'s membership in `team`,
/// as LiteLLM's `upsert_budget_and_membership`: its own row is written in
/// place (and unlinked when no limit is left); a member without a row, or
/// linked to the team's shared default, gets a new row (copied from the
/// default, the default itself untouched). Announces the team when the
/// link changes.
pub async fn update_member(
    ctx: &Ctx,
    team: &TeamRecord,
    user_id: &str,
    limits: &MemberLimits,
) -> Result<(), GatewayError> {
    if limits.is_empty() {
        return Ok(());
    }
    let store = ctx.store();
    let team_id = &team.team_id;
    let now = Utc::now();
    let patch = limits.columns(now)?;
    let current = store
        .membership(team_id, user_id)
        .await
        .map_err(store_err)?
        .and_then(|m| m.budget_id);
    let shared = current.is_some() && current == default_id(team);
    let existing = match &current {
        Some(id) => row(ctx, id).await?,
        None => None,
    };
    if let (Some(id), Some(row), false) = (&current, &existing, shared) {
        let mut merged = row_columns(row);
        merged.extend(patch.clone());
        if !has_limit(&merged) {
            return store
                .link_member_budget(team_id, user_id, None)
                .await
                .map_err(store_err);
        }
        store
            .patch_org_row(OrgTable::Budget, id, &patch)
            .await
            .map_err(store_err)?;
        // Linked again: the team is announced to every replica with it.
        return store
            .link_member_budget(team_id, user_id, Some(id))
            .await
            .map_err(store_err);
    }
    let source = match (&existing, shared) {
        (Some(row), true) => row_columns(row),
        _ => Map::new(),
    };
    if shared && patch.iter().all(|(k, v)| source.get(k) == Some(v)) {
        return Ok(());
    }
    let mut columns: Map<String, Value> = source
        .iter()
        .filter(|(k, v)| {
            LIMIT_FIELDS.contains(&k.as_str()) && *k != "model_max_budget" && is_set(v)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    columns.extend(patch.clone());
    // An edit that leaves the window alone keeps the default's reset.
    if !patch.contains_key("budget_duration") {
        if let Some(at) = source.get("budget_reset_at").filter(|v| !v.is_null()) {
            columns.insert("budget_reset_at".into(), at.clone());
        }
    }
    if !has_limit(&columns) {
        if current.is_some() {
            store
                .link_member_budget(team_id, user_id, None)
                .await
                .map_err(store_err)?;
        }
        return Ok(());
    }
    columns.insert("model_max_budget".into(), json!({}));
    let id = create(ctx, columns, now).await?;
    store
        .link_member_budget(team_id, user_id, Some(&id))
        .await
        .map_err(store_err)
}

/// Links every member of `team` without a budget row to the team's default
/// member budget row, as LiteLLM backfills them when the defaults are set
/// (one store change, one announcement); members with a row of their own
/// keep it.
pub async fn backfill(ctx: &Ctx, team: &TeamRecord) -> Result<(), GatewayError> {
    let Some(default) = default_id(team) else {
        return Ok(());
    };
    if team.members.is_empty() {
        return Ok(());
    }
    ctx.store()
        .link_unlinked_members(&team.team_id, &team.members, &default)
        .await
        .map_err(store_err)
}
