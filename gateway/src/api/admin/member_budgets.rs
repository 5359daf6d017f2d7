//! A team member's own budget row (`LiteLLM_TeamMembership.budget_id` →
//! `LiteLLM_BudgetTable`), written as LiteLLM 1.110.2 writes it:
//! `max_budget_in_team` and `budget_duration` on `/team/member_add`
//! (`_resolve_member_budget_id`) and `/team/member_update`
//! (`upsert_budget_and_membership`), and the link of members to their
//! team's default member budget row. The request path reads the row
//! (`auth::cache`); the budget-period sweep zeroes the member's spend when
//! the row's `budget_duration` ends.

use super::body::{amount, bad_field, Patch};
use super::budgets::{new_record, BudgetFields};
use super::db::{store_err, Ctx};
use super::teams::MEMBER_BUDGET_ID;
use crate::error::GatewayError;
use crate::store::{BudgetRecord, OrgTable, TeamRecord};
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

/// The per-member budget fields of a request (LiteLLM's
/// `MEMBER_BUDGET_PATCH_FIELDS`): `max_budget_in_team` (the row's
/// `max_budget`), `budget_duration`, `tpm_limit`, `rpm_limit`,
/// `allowed_models`, `temp_budget_increase`, `temp_budget_expiry` and
/// `model_max_budget`. A field absent stays, `null` clears it.
#[derive(Debug, Default)]
pub struct MemberLimits {
    /// `max_budget_in_team`, USD.
    pub max_budget: Patch<f64>,
    /// `budget_duration`.
    pub budget_duration: Patch<String>,
    /// `tpm_limit`: the member's `team_member` tokens per minute.
    pub tpm_limit: Patch<i64>,
    /// `rpm_limit`: the member's `team_member` requests per minute.
    pub rpm_limit: Patch<i64>,
    /// `allowed_models`: the member's model scope in the team.
    pub allowed_models: Patch<Vec<String>>,
    /// `temp_budget_increase`, USD, added to the budget until the expiry.
    pub temp_budget_increase: Patch<f64>,
    /// `temp_budget_expiry`, when the increase ends.
    pub temp_budget_expiry: Patch<String>,
    /// `model_max_budget`: per-model budgets, each with its own window.
    pub model_max_budget: Patch<Map<String, Value>>,
}

impl MemberLimits {
    /// The limits, checked as LiteLLM checks them (`max_budget_in_team` a
    /// USD amount, the duration LiteLLM's format, the temporary increase
    /// and its expiry given together, each `model_max_budget` entry a cap
    /// with a window and no rate limit), with `model_max_budget` in the
    /// shape LiteLLM stores (`max_budget`, `budget_duration`).
    pub fn checked(mut self) -> Result<Self, GatewayError> {
        if let Patch::Set(v) = self.max_budget {
            amount("max_budget_in_team", v)?;
        }
        let increase = matches!(self.temp_budget_increase, Patch::Set(_));
        let expiry = matches!(self.temp_budget_expiry, Patch::Set(_));
        if increase != expiry {
            return Err(bad_field(
                if increase {
                    "temp_budget_expiry"
                } else {
                    "temp_budget_increase"
                },
                "temp_budget_increase and temp_budget_expiry must be set together",
            ));
        }
        if let Patch::Set(m) = &self.model_max_budget {
            self.model_max_budget = Patch::Set(model_budgets(m)?);
        }
        self.columns(Utc::now())?;
        Ok(self)
    }

    /// Whether no field is given.
    pub fn is_empty(&self) -> bool {
        !self.max_budget.is_given()
            && !self.budget_duration.is_given()
            && !self.tpm_limit.is_given()
            && !self.rpm_limit.is_given()
            && !self.allowed_models.is_given()
            && !self.temp_budget_increase.is_given()
            && !self.temp_budget_expiry.is_given()
            && !self.model_max_budget.is_given()
    }

    /// The given fields as budget-row columns (a duration schedules the
    /// row's `budget_reset_at` from `now`; `null` clears).
    fn columns(&self, now: DateTime<Utc>) -> Result<Map<String, Value>, GatewayError> {
        let fields = BudgetFields {
            max_budget: self.max_budget.clone(),
            budget_duration: self.budget_duration.clone(),
            tpm_limit: self.tpm_limit.clone(),
            rpm_limit: self.rpm_limit.clone(),
            allowed_models: self.allowed_models.clone(),
            temp_budget_increase: self.temp_budget_increase.clone(),
            temp_budget_expiry: self.temp_budget_expiry.clone(),
            model_max_budget: self.model_max_budget.clone(),
            ..BudgetFields::default()
        };
        fields.columns(now)
    }
}

/// A member's `model_max_budget`, checked as LiteLLM's
/// `validate_team_model_max_budget` checks it (a model name, a
/// non-negative finite cap, a window, no rate limits; its messages), in
/// the shape LiteLLM stores (`BudgetConfig`: `budget_limit` read as
/// `max_budget`, `time_period` as `budget_duration`).
fn model_budgets(m: &Map<String, Value>) -> Result<Map<String, Value>, GatewayError> {
    let param = "model_max_budget";
    let mut out = Map::new();
    for (model, entry) in m {
        if model.trim().is_empty() {
            return Err(bad_field(
                param,
                "model_max_budget keys must be non-empty model names",
            ));
        }
        let Value::Object(entry) = entry else {
            return Err(bad_field(
                param,
                format!("model_max_budget['{model}'] must be an object"),
            ));
        };
        let field = |a: &str, b: &str| {
            entry
                .get(a)
                .or_else(|| entry.get(b))
                .filter(|v| !v.is_null())
        };
        let max = field("max_budget", "budget_limit");
        let cap = max.and_then(crate::store::usd_value);
        let Some(cap) = cap.filter(|c| c.is_finite() && *c >= 0.0) else {
            let shown = max.map_or("None".to_string(), Value::to_string);
            return Err(bad_field(
                param,
                format!(
                    "model_max_budget['{model}'].max_budget must be a non-negative finite number. Received: {shown}"
                ),
            ));
        };
        amount(param, cap)?;
        let Some(duration) = field("budget_duration", "time_period") else {
            return Err(bad_field(
                param,
                format!(
                    "model_max_budget['{model}'] requires a budget_duration, e.g. '1d' or '30d'"
                ),
            ));
        };
        let duration = duration
            .as_str()
            .filter(|d| crate::store::parse_duration(d).is_ok())
            .ok_or_else(|| {
                bad_field(
                    param,
                    format!(
                        "Invalid budget_duration '{}'. Use a format like '1h', '24h', '7d', or '30d'.",
                        duration.as_str().map_or_else(|| duration.to_string(), str::to_string)
                    ),
                )
            })?;
        if field("tpm_limit", "tpm_limit").is_some() || field("rpm_limit", "rpm_limit").is_some() {
            return Err(bad_field(
                param,
                format!(
                    "model_max_budget['{model}'] tpm_limit/rpm_limit are not enforced on a team; \
                     set per-model rate limits on the key instead"
                ),
            ));
        }
        out.insert(
            model.clone(),
            json!({"max_budget": cap, "budget_duration": duration,
                "tpm_limit": null, "rpm_limit": null}),
        );
    }
    Ok(out)
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
/// `max_budget_in_team` or `allowed_models` (a member with models of its
/// own and no cap takes the default's window, its cap left to the
/// default); the team's default row with nothing given; a copy of the
/// default with its own reset window for a lone `budget_duration` (a
/// window-only row without a default); none otherwise.
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
    let capped = matches!(limits.max_budget, Patch::Set(_));
    let explicit = capped || matches!(limits.allowed_models, Patch::Set(_));
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
        _ => {
            let mut columns = limits.columns(now)?;
            let inherited = default
                .as_ref()
                .filter(|_| !capped && !duration)
                .and_then(|d| d.budget_duration.clone());
            if let Some(window) = inherited {
                let fields = BudgetFields {
                    budget_duration: Patch::Set(window),
                    ..BudgetFields::default()
                };
                columns.extend(fields.columns(now)?);
            }
            Ok(Some(create(ctx, columns, now).await?))
        }
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
    let mut patch = limits.columns(now)?;
    let current = store
        .membership(team_id, user_id)
        .await
        .map_err(store_err)?
        .and_then(|m| m.budget_id);
    let shared = current.is_some() && current == default_id(team);
    // Clearing per-model budgets of a member on the shared default is no
    // change: the member falls back to the default's anyway (LiteLLM's
    // `ignore_default_model_budget_clear`).
    let clears = |v: &Value| v.is_null() || v.as_object().is_some_and(Map::is_empty);
    if shared && patch.get("model_max_budget").is_some_and(clears) {
        patch.remove("model_max_budget");
        if patch.is_empty() {
            return Ok(());
        }
    }
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
    // The default's per-model budgets stay the default's: the copy starts
    // with none of its own (it falls back to them) unless the patch sets some.
    let mut columns: Map<String, Value> = source
        .iter()
        .filter(|(k, v)| {
            LIMIT_FIELDS.contains(&k.as_str()) && *k != "model_max_budget" && is_set(v)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    columns.insert("model_max_budget".into(), json!({}));
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
