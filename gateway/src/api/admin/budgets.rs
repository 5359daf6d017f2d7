//! `/budget/*`: rows of `LiteLLM_BudgetTable`, LiteLLM's shared budgets
//! (organizations own one). Bodies, answers and error messages are
//! LiteLLM's (`budget_management_endpoints.py`); the budgets are stored, not
//! enforced on requests here.

use super::body::{amount, bad_field, limit, missing, parse, Patch};
use super::db::{run, store_err};
use super::query::Query;
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::orgs::parse_time;
use crate::store::{parse_duration, BudgetRecord, Change, OrgTable, StoreError};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// Who LiteLLM records as `created_by` / `updated_by`: the caller's user
/// id, else its proxy admin's name.
pub fn actor(caller: &Principal) -> String {
    match caller {
        Principal::Key(k) => k.record.user_id.clone(),
        _ => None,
    }
    .unwrap_or_else(|| "default_user_id".to_string())
}

/// The budget fields of a request (LiteLLM's `BudgetNewRequest`; the
/// `LiteLLM_BudgetTable` fields of `NewOrganizationRequest`).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetFields {
    pub(super) max_budget: Patch<f64>,
    pub(super) soft_budget: Patch<f64>,
    pub(super) max_parallel_requests: Patch<i64>,
    pub(super) tpm_limit: Patch<i64>,
    pub(super) rpm_limit: Patch<i64>,
    pub(super) tpd_limit: Patch<i64>,
    pub(super) model_max_budget: Patch<Map<String, Value>>,
    pub(super) budget_duration: Patch<String>,
    pub(super) budget_reset_at: Patch<String>,
    pub(super) allowed_models: Patch<Vec<String>>,
    pub(super) temp_budget_increase: Patch<f64>,
    pub(super) temp_budget_expiry: Patch<String>,
}

/// The body of `/budget/new` and `/budget/update` (`BudgetNewRequest`).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct BudgetRequest {
    budget_id: Option<String>,
    max_budget: Patch<f64>,
    soft_budget: Patch<f64>,
    max_parallel_requests: Patch<i64>,
    tpm_limit: Patch<i64>,
    rpm_limit: Patch<i64>,
    tpd_limit: Patch<i64>,
    model_max_budget: Patch<Map<String, Value>>,
    budget_duration: Patch<String>,
    budget_reset_at: Patch<String>,
}

impl BudgetRequest {
    /// Its budget fields (those `BudgetNewRequest` has).
    fn fields(self) -> (Option<String>, BudgetFields) {
        let f = BudgetFields {
            max_budget: self.max_budget,
            soft_budget: self.soft_budget,
            max_parallel_requests: self.max_parallel_requests,
            tpm_limit: self.tpm_limit,
            rpm_limit: self.rpm_limit,
            tpd_limit: self.tpd_limit,
            model_max_budget: self.model_max_budget,
            budget_duration: self.budget_duration,
            budget_reset_at: self.budget_reset_at,
            ..Default::default()
        };
        (self.budget_id, f)
    }
}

/// LiteLLM's check of a USD amount: finite and non-negative (its message),
/// then at most [`super::body::MAX_USD`].
fn usd(name: &str, v: f64) -> Result<f64, GatewayError> {
    if !v.is_finite() || v < 0.0 {
        return Err(bad_field(
            name,
            format!("{name} must be a non-negative finite number. Received: {v:?}"),
        ));
    }
    amount(name, v)
}

/// A time field of a budget.
fn time(name: &str, text: &str) -> Result<DateTime<Utc>, GatewayError> {
    parse_time(text)
        .ok()
        .filter(|t| (1..=9999).contains(&chrono::Datelike::year(t)))
        .ok_or_else(|| {
            bad_field(
                name,
                format!("'{text}' is not a valid datetime (years 1 to 9999)"),
            )
        })
}

/// LiteLLM's check of `model_max_budget`: each entry a `BudgetConfig`
/// (`budget_limit`/`max_budget` a number or a numeric string,
/// `time_period`/`budget_duration` a duration, integer limits).
fn check_model_max_budget(m: &Map<String, Value>) -> Result<(), GatewayError> {
    let invalid = |why: String| {
        bad_field(
            "model_max_budget",
            format!(
                "Invalid model_max_budget: {why}. Example of valid model_max_budget: \
                 https://docs.litellm.ai/docs/proxy/users"
            ),
        )
    };
    for (model, entry) in m {
        let Value::Object(entry) = entry else {
            return Err(invalid(format!("the entry of '{model}' is not an object")));
        };
        for (k, v) in entry {
            let ok = match k.as_str() {
                "budget_limit" | "max_budget" => {
                    v.is_null() || crate::store::usd_value(v).is_some_and(|n| n >= 0.0)
                }
                "time_period" | "budget_duration" => {
                    v.is_null() || v.as_str().is_some_and(|d| parse_duration(d).is_ok())
                }
                "tpm_limit" | "rpm_limit" => v.is_null() || v.as_i64().is_some_and(|n| n >= 0),
                _ => true,
            };
            if !ok {
                return Err(invalid(format!("'{model}'.{k} is not valid: {v}")));
            }
        }
    }
    Ok(())
}

/// LiteLLM's check of a budget duration, with its message.
fn duration(text: &str) -> Result<(), GatewayError> {
    parse_duration(text).map(drop).map_err(|_| {
        bad_field(
            "budget_duration",
            format!(
                "Invalid budget_duration '{text}'. Use a format like '1h', '24h', '7d', or '30d'."
            ),
        )
    })
}

impl BudgetFields {
    /// The given fields, checked, as column values (`null` clears one);
    /// a new `budget_duration` also schedules `budget_reset_at` from
    /// `now` unless that is given, and clearing the duration clears it.
    pub(super) fn columns(self, now: DateTime<Utc>) -> Result<Map<String, Value>, GatewayError> {
        let mut out = Map::new();
        let mut put = |name: &str, v: Value| {
            out.insert(name.to_string(), v);
        };
        for (name, p) in [
            ("max_budget", self.max_budget),
            ("soft_budget", self.soft_budget),
            ("temp_budget_increase", self.temp_budget_increase),
        ] {
            match p {
                Patch::Keep => {}
                Patch::Clear => put(name, Value::Null),
                Patch::Set(v) => put(name, json!(usd(name, v)?)),
            }
        }
        for (name, p) in [
            ("max_parallel_requests", self.max_parallel_requests),
            ("tpm_limit", self.tpm_limit),
            ("rpm_limit", self.rpm_limit),
            ("tpd_limit", self.tpd_limit),
        ] {
            match p {
                Patch::Keep => {}
                Patch::Clear => put(name, Value::Null),
                // `max_parallel_requests` is an INTEGER column.
                Patch::Set(v) if name == "max_parallel_requests" && v > i64::from(i32::MAX) => {
                    return Err(bad_field(name, format!("must be at most {}", i32::MAX)))
                }
                Patch::Set(v) => put(name, json!(limit(name, v)?)),
            }
        }
        match self.model_max_budget {
            Patch::Keep => {}
            Patch::Clear => put("model_max_budget", Value::Null),
            Patch::Set(m) => {
                check_model_max_budget(&m)?;
                put("model_max_budget", Value::Object(m));
            }
        }
        match self.allowed_models {
            Patch::Keep => {}
            Patch::Clear => put("allowed_models", json!([])),
            Patch::Set(m) => put("allowed_models", json!(m)),
        }
        for (name, p) in [
            ("budget_reset_at", &self.budget_reset_at),
            ("temp_budget_expiry", &self.temp_budget_expiry),
        ] {
            match p {
                Patch::Keep => {}
                Patch::Clear => put(name, Value::Null),
                Patch::Set(t) => put(name, json!(time(name, t)?)),
            }
        }
        let reset_given = self.budget_reset_at.is_given();
        match self.budget_duration {
            Patch::Keep => {}
            Patch::Clear => {
                put("budget_duration", Value::Null);
                if !reset_given {
                    put("budget_reset_at", Value::Null);
                }
            }
            Patch::Set(d) => {
                duration(&d)?;
                if !reset_given {
                    put(
                        "budget_reset_at",
                        json!(super::body::after("budget_duration", now, &d)?),
                    );
                }
                put("budget_duration", json!(d));
            }
        }
        Ok(out)
    }
}

/// A new budget row `id` with `columns` (from [`BudgetFields::columns`]).
pub(super) fn new_record(
    id: String,
    columns: Map<String, Value>,
    actor: &str,
    now: DateTime<Utc>,
) -> Result<BudgetRecord, GatewayError> {
    let mut row = columns;
    row.insert("budget_id".into(), json!(id));
    row.insert("created_at".into(), json!(now));
    row.insert("updated_at".into(), json!(now));
    row.insert("created_by".into(), json!(actor));
    row.insert("updated_by".into(), json!(actor));
    serde_json::from_value(Value::Object(row)).map_err(|e| bad_field(".", e.to_string()))
}

/// A budget row as LiteLLM answers it.
pub fn budget_json(b: &BudgetRecord) -> Value {
    serde_json::to_value(b).unwrap_or(Value::Null)
}

/// `POST /budget/new`: the new row; a taken `budget_id` is LiteLLM's 400.
pub async fn new(worker: &Worker, caller: &Principal, body: &[u8]) -> Result<Value, GatewayError> {
    let req: BudgetRequest = parse(body)?;
    let (id, fields) = req.fields();
    let now = Utc::now();
    let id = match id {
        Some(id) if id.is_empty() => return Err(bad_field("budget_id", "must not be empty")),
        Some(id) => id,
        None => uuid::Uuid::new_v4().to_string(),
    };
    let budget = new_record(id, fields.columns(now)?, &actor(caller), now)?;
    run(worker, move |ctx| async move {
        match ctx.store().insert_budget(&budget).await {
            Ok(()) => {
                // A default budget row named before it existed applies now.
                ctx.publish(&[Change::Budget(budget.budget_id.clone())])
                    .await;
                Ok(budget_json(&budget))
            }
            Err(StoreError::Conflict(_)) => Err(bad_field(
                "budget_id",
                format!("Budget with id '{}' already exists.", budget.budget_id),
            )),
            Err(e) => Err(store_err(e)),
        }
    })
    .await
}

/// `POST /budget/update`: the given fields change; the updated row.
pub async fn update(
    worker: &Worker,
    caller: &Principal,
    body: &[u8],
) -> Result<Value, GatewayError> {
    let req: BudgetRequest = parse(body)?;
    let (id, fields) = req.fields();
    let Some(id) = id else {
        return Err(bad_field("budget_id", "budget_id is required"));
    };
    let mut columns = fields.columns(Utc::now())?;
    columns.insert("updated_by".into(), json!(actor(caller)));
    run(worker, move |ctx| async move {
        let store = ctx.store();
        if !store
            .patch_org_row(OrgTable::Budget, &id, &columns)
            .await
            .map_err(store_err)?
        {
            return Err(GatewayError::NotFound(format!("Budget {id}")));
        }
        // End users read their limits and budget from this row: their
        // cached copies are refreshed (here, and on every replica).
        let users = store.end_users_of_budget(&id).await.map_err(store_err)?;
        let mut changes: Vec<Change> = users.into_iter().map(Change::EndUser).collect();
        // So do the keys of the teams of organizations using it.
        changes.extend(super::orgs::teams_of(&ctx, |o| o.budget_id == id).await?);
        // And the keys that link it.
        let keys = store.keys_of_budget(&id).await.map_err(store_err)?;
        changes.extend(keys.into_iter().map(Change::Key));
        // And the keys of teams whose member defaults it holds.
        let teams = store.list_teams().await.map_err(store_err)?;
        changes.extend(
            teams
                .into_iter()
                .filter(|t| {
                    t.metadata
                        .get(super::teams::MEMBER_BUDGET_ID)
                        .and_then(Value::as_str)
                        == Some(id.as_str())
                })
                .map(|t| Change::Team(t.team_id)),
        );
        // And the keys of members whose own budget it is.
        let teams = store.teams_of_member_budget(&id).await.map_err(store_err)?;
        changes.extend(teams.into_iter().map(Change::Team));
        // And the end users riding it as a key's or the proxy's default.
        changes.push(Change::Budget(id.clone()));
        ctx.publish(&changes).await;
        let ids = [id.clone()];
        let row = store.budgets(Some(&ids[..])).await.map_err(store_err)?;
        let row = row
            .first()
            .ok_or_else(|| GatewayError::NotFound(format!("Budget {id}")))?;
        Ok(budget_json(row))
    })
    .await
}

/// The body of `/budget/info` (`BudgetRequest`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetIds {
    budgets: Vec<String>,
}

/// `POST /budget/info`: the rows of the ids that exist.
pub async fn info(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let BudgetIds { budgets } = parse(body)?;
    if budgets.is_empty() {
        return Err(bad_field(
            "budgets",
            "Specify list of budget id's to query. Passed in=[]",
        ));
    }
    list_of(worker, Some(budgets)).await
}

/// `GET /budget/list`: every row.
pub async fn list(worker: &Worker, q: Query) -> Result<Value, GatewayError> {
    q.finish()?;
    list_of(worker, None).await
}

async fn list_of(worker: &Worker, ids: Option<Vec<String>>) -> Result<Value, GatewayError> {
    let rows = run(worker, move |ctx| async move {
        ctx.store().budgets(ids.as_deref()).await.map_err(store_err)
    })
    .await?;
    Ok(Value::Array(rows.iter().map(budget_json).collect()))
}

/// The fields `/budget/settings` lists, with LiteLLM's types and
/// descriptions (`BudgetNewRequest`'s, in its order).
const SETTINGS: [(&str, &str, &str); 8] = [
    ("max_budget", "Float", "Requests will fail if this budget (in USD) is exceeded."),
    ("soft_budget", "Float", "Requests will NOT fail if this is exceeded. Will fire alerting though."),
    ("max_parallel_requests", "Integer", "Max concurrent requests allowed for this budget id."),
    ("tpm_limit", "Integer", "Max tokens per minute, allowed for this budget id."),
    ("rpm_limit", "Integer", "Max requests per minute, allowed for this budget id."),
    ("tpd_limit", "Integer", "Max tokens per day, charged by batch submissions, allowed for this budget id."),
    ("budget_duration", "String", "Max duration budget should be set for (e.g. '1hr', '1d', '28d')"),
    ("model_max_budget", "Object", "Max budget for each model (e.g. {'gpt-4o': {'max_budget': '0.0000001', 'budget_duration': '1d', 'tpm_limit': 1000, 'rpm_limit': 1000}})"),
];

/// `GET /budget/settings?budget_id=`: LiteLLM's `ConfigList` of the
/// budget's settable fields with their values (none for an unknown id).
pub async fn settings(worker: &Worker, mut q: Query) -> Result<Value, GatewayError> {
    let id = q.take("budget_id").ok_or_else(|| missing("budget_id"))?;
    q.finish()?;
    let row = run(worker, move |ctx| async move {
        ctx.store()
            .budgets(Some(std::slice::from_ref(&id)))
            .await
            .map_err(store_err)
    })
    .await?;
    let values = row.first().map(budget_json).unwrap_or(Value::Null);
    let out: Vec<Value> = SETTINGS
        .iter()
        .map(|(name, kind, description)| {
            json!({
                "field_name": name,
                "field_type": kind,
                "field_description": description,
                "field_value": values.get(*name).cloned().unwrap_or(Value::Null),
                "stored_in_db": true,
                "field_default_value": null,
                "premium_field": false,
                "nested_fields": null,
                "field_options": null,
                "field_tab": null,
                "source": "unset",
                "editable": true,
            })
        })
        .collect();
    Ok(Value::Array(out))
}

/// The body of `/budget/delete` (`BudgetDeleteRequest`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetRef {
    id: String,
}

/// `POST /budget/delete`: the deleted row. A budget an organization still
/// uses is refused (LiteLLM's foreign key restricts it).
pub async fn delete(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let BudgetRef { id } = parse(body)?;
    run(worker, move |ctx| async move {
        let orgs = ctx.store().organizations(None).await.map_err(store_err)?;
        if let Some(org) = orgs.iter().find(|o| o.budget_id == id) {
            return Err(bad_field(
                "id",
                format!(
                    "budget '{id}' is the budget of organization '{}'; delete or move the organization first",
                    org.organization_id
                ),
            ));
        }
        match ctx.store().delete_budget(&id).await.map_err(store_err)? {
            Some(row) => {
                ctx.publish(&[Change::Budget(id.clone())]).await;
                Ok(budget_json(&row))
            }
            None => Err(GatewayError::NotFound(format!("Budget {id}"))),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(body: &str) -> Result<Map<String, Value>, GatewayError> {
        let req: BudgetRequest = parse(body.as_bytes()).unwrap();
        req.fields().1.columns(Utc::now())
    }

    #[test]
    fn checks_fields_with_litellm_messages() {
        let err = columns(r#"{"max_budget": -1}"#).unwrap_err();
        assert_eq!(err.param(), Some("max_budget"));
        assert!(
            err.to_string()
                .contains("max_budget must be a non-negative finite number. Received: -1.0"),
            "{err}"
        );
        let err = columns(r#"{"budget_duration": "soon"}"#).unwrap_err();
        assert!(
            err.to_string().contains("Invalid budget_duration 'soon'"),
            "{err}"
        );
        for (body, field) in [
            (r#"{"soft_budget": 2e9}"#, "soft_budget"),
            (r#"{"tpm_limit": -1}"#, "tpm_limit"),
            (
                r#"{"max_parallel_requests": 3000000000}"#,
                "max_parallel_requests",
            ),
            (
                r#"{"model_max_budget": {"m": {"budget_limit": "x"}}}"#,
                "model_max_budget",
            ),
            (r#"{"model_max_budget": {"m": 5}}"#, "model_max_budget"),
            (r#"{"budget_reset_at": "tomorrow"}"#, "budget_reset_at"),
        ] {
            assert_eq!(columns(body).unwrap_err().param(), Some(field), "{body}");
        }
    }

    #[test]
    fn schedules_and_clears_the_reset() {
        let c = columns(r#"{"budget_duration": "1h", "rpm_limit": 5}"#).unwrap();
        assert!(c["budget_reset_at"].is_string() && c["rpm_limit"] == 5);
        let c = columns(r#"{"budget_duration": "1h", "budget_reset_at": "2030-01-01T00:00:00"}"#)
            .unwrap();
        assert_eq!(c["budget_reset_at"], "2030-01-01T00:00:00Z");
        let c = columns(r#"{"budget_duration": null}"#).unwrap();
        assert!(c["budget_reset_at"].is_null() && c.contains_key("budget_reset_at"));
        assert!(columns("{}").unwrap().is_empty());
    }
}
