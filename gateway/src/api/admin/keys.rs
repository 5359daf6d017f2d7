//! `/key/*`: virtual keys, created, read, changed, regenerated, blocked and
//! deleted by their plain key or hashed token.

use super::accepted;
use super::body::{
    after, amount, bad_field, limit, missing, parse, parse_accepting, period, Patch,
};
use super::db::{self, ensure_team, run, store_err, token_of, warm};
use super::issue::{create, custom_key, ensure_alias_free, issued, new_record, random_key};
use super::object;
use super::query::Query;
use crate::auth::credential;
use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::state::Worker;
use crate::store::{Change, KeyFilter, KeyRecord, RowKind};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The body of `/key/generate`, `/key/update` and `/key/regenerate`
/// (LiteLLM's `GenerateKeyRequest`, `UpdateKeyRequest` and
/// `RegenerateKeyRequest`, the fields this gateway enforces).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyRequest {
    key: Option<String>,
    new_key: Option<String>,
    spend: Patch<f64>,
    key_alias: Patch<String>,
    duration: Patch<String>,
    models: Patch<Vec<String>>,
    aliases: Patch<Map<String, Value>>,
    max_budget: Patch<f64>,
    soft_budget: Patch<f64>,
    budget_duration: Patch<String>,
    tpm_limit: Patch<i64>,
    rpm_limit: Patch<i64>,
    max_parallel_requests: Patch<i64>,
    model_max_budget: Patch<Map<String, Value>>,
    model_rpm_limit: Patch<Map<String, Value>>,
    model_tpm_limit: Patch<Map<String, Value>>,
    blocked: Patch<bool>,
    metadata: Patch<Map<String, Value>>,
    team_id: Patch<String>,
    user_id: Patch<String>,
    allowed_model_region: Patch<String>,
    allowed_routes: Patch<Vec<String>>,
    allowed_cache_controls: Patch<Vec<String>>,
    budget_limits: Patch<Vec<Value>>,
    budget_id: Patch<String>,
    /// Fields LiteLLM keeps in `metadata` ([`parse_accepting`]).
    #[serde(skip)]
    extra_metadata: Map<String, Value>,
    /// The `end_user_budget_id` asked for ([`requested_end_user_budget`]).
    #[serde(skip)]
    end_user_budget: Option<String>,
    /// Whether the body sets `throttle_on_budget_exceeded: true`.
    #[serde(skip)]
    throttle_on: bool,
}

/// The fields of a key request that are not settings of the row.
struct Handles {
    /// `key`: the key to change, or the custom key to create.
    key: Option<String>,
    /// `new_key`: the custom replacement of `/key/regenerate`.
    new_key: Option<String>,
    /// `spend`: a spend to set.
    spend: Option<f64>,
}

impl KeyRequest {
    /// Parses a body, accepting LiteLLM's fields this gateway does not
    /// enforce ([`accepted::KEY`]).
    pub(super) fn read(body: &[u8]) -> Result<KeyRequest, GatewayError> {
        super::body::refuse_when_set(body, accepted::KEY_REFUSED)?;
        let (mut req, extra): (KeyRequest, _) = parse_accepting(body, accepted::KEY)?;
        output_estimates(&extra)?;
        let in_metadata = match &req.metadata {
            Patch::Set(m) => Some(m),
            _ => None,
        };
        req.end_user_budget = requested_end_user_budget(&extra, in_metadata)?;
        req.throttle_on = extra.get(THROTTLE) == Some(&Value::Bool(true));
        req.extra_metadata = extra;
        Ok(req)
    }

    /// Takes the fields that are not settings of the row.
    fn take_handles(&mut self) -> Result<Handles, GatewayError> {
        let mut spend = None;
        std::mem::take(&mut self.spend).apply_amount("spend", &mut spend)?;
        Ok(Handles {
            key: self.key.take(),
            new_key: self.new_key.take(),
            spend,
        })
    }

    /// The requested `duration`, for the answer.
    fn duration_text(&self) -> Option<String> {
        match &self.duration {
            Patch::Set(d) => Some(d.clone()),
            _ => None,
        }
    }

    /// Applies the given fields to `k` as of `now`.
    pub(super) fn apply(self, k: &mut KeyRecord, now: DateTime<Utc>) -> Result<(), GatewayError> {
        let soft_given = matches!(self.soft_budget, Patch::Set(_));
        let budget_given = matches!(self.budget_id, Patch::Set(_));
        match self.duration {
            Patch::Keep => {}
            Patch::Clear => k.expires = None,
            Patch::Set(d) => k.expires = Some(after("duration", now, &d)?),
        }
        self.key_alias.apply(&mut k.key_alias);
        self.models.apply_or_default(&mut k.models);
        self.aliases.apply_or_default(&mut k.aliases);
        self.max_budget
            .apply_amount("max_budget", &mut k.max_budget)?;
        self.soft_budget
            .apply_amount("soft_budget", &mut k.soft_budget)?;
        self.budget_duration
            .apply_period(&mut k.budget_duration, &mut k.budget_reset_at, now)?;
        self.tpm_limit.apply_limit("tpm_limit", &mut k.tpm_limit)?;
        self.rpm_limit.apply_limit("rpm_limit", &mut k.rpm_limit)?;
        self.max_parallel_requests
            .apply_limit("max_parallel_requests", &mut k.max_parallel_requests)?;
        for (name, patch) in [
            ("model_rpm_limit", &self.model_rpm_limit),
            ("model_tpm_limit", &self.model_tpm_limit),
        ] {
            if let Patch::Set(limits) = patch {
                per_model_limits(name, limits)?;
            }
        }
        if let Patch::Set(budgets) = &self.model_max_budget {
            per_model_budgets(budgets)?;
        }
        self.model_max_budget
            .apply_or_default(&mut k.model_max_budget);
        self.model_rpm_limit
            .apply_or_default(&mut k.model_rpm_limit);
        self.model_tpm_limit
            .apply_or_default(&mut k.model_tpm_limit);
        self.blocked.apply_or_default(&mut k.blocked);
        self.metadata.apply_or_default(&mut k.metadata);
        k.metadata.extend(self.extra_metadata);
        self.team_id.apply(&mut k.team_id);
        self.user_id.apply(&mut k.user_id);
        self.allowed_model_region.apply(&mut k.allowed_model_region);
        if let Patch::Set(routes) = &self.allowed_routes {
            crate::auth::routes::check(routes)
                .map_err(|problem| super::body::bad_field("allowed_routes", problem))?;
        }
        self.allowed_routes.apply_or_default(&mut k.allowed_routes);
        self.allowed_cache_controls
            .apply_or_default(&mut k.allowed_cache_controls);
        apply_windows(self.budget_limits, &mut k.budget_limits, now)?;
        match self.budget_id {
            Patch::Keep => {}
            // Back to the key's own row (its soft budget, when given): the
            // soft budget read with it was the shared row's.
            Patch::Clear => {
                if k.shared_budget().is_some() && !soft_given {
                    k.soft_budget = None;
                }
                k.budget_id = None;
            }
            Patch::Set(id) if id.starts_with(crate::store::OWN_BUDGET_PREFIX) => {
                return Err(bad_field("budget_id", "names a key's own budget row"))
            }
            Patch::Set(id) => k.budget_id = Some(id),
        }
        if budget_given && soft_given {
            return Err(bad_field(
                "soft_budget",
                "give either a budget row (budget_id), whose soft budget the key takes, or a soft_budget",
            ));
        }
        k.updated_at = Some(now);
        Ok(())
    }
}

/// The largest `default_estimated_output_tokens` (as `max_tokens`).
const MAX_OUTPUT_ESTIMATE: u64 = 10_000_000;

/// The key's metadata field naming the budget row of its end users
/// (LiteLLM's `KEY_END_USER_BUDGET_ID_METADATA_FIELD`).
pub(super) const END_USER_BUDGET_ID: &str = "end_user_budget_id";

/// The `end_user_budget_id` a key body asks for, as LiteLLM's
/// `_requested_end_user_budget_id` reads it: the field, else the one in a
/// `metadata` given (which replaces the stored metadata whole, so one
/// without it asks for none: `""`); `None` when the body says nothing.
fn requested_end_user_budget(
    extra: &Map<String, Value>,
    metadata: Option<&Map<String, Value>>,
) -> Result<Option<String>, GatewayError> {
    if let Some(Value::String(id)) = extra.get(END_USER_BUDGET_ID) {
        return Ok(Some(id.clone()));
    }
    let Some(metadata) = metadata else {
        return Ok(None);
    };
    match metadata.get(END_USER_BUDGET_ID) {
        None | Some(Value::Null) => Ok(Some(String::new())),
        Some(Value::String(id)) => Ok(Some(id.clone())),
        Some(_) => Err(bad_field(
            "metadata.end_user_budget_id",
            "metadata.end_user_budget_id must be a budget id (a string)",
        )),
    }
}

/// The key field opting it in to LiteLLM's throttling past its budget.
const THROTTLE: &str = "throttle_on_budget_exceeded";

/// Refuses `throttle_on_budget_exceeded: true` from anyone but a proxy
/// admin on a key that did not have it (`before`'s metadata), as LiteLLM
/// does (403).
fn ensure_throttle_admin(
    asked: bool,
    before: Option<&Map<String, Value>>,
    admin: bool,
) -> Result<(), GatewayError> {
    let had = before.and_then(|m| m.get(THROTTLE)) == Some(&Value::Bool(true));
    if asked && !had && !admin {
        return Err(GatewayError::TeamAccessDenied(
            "Only proxy admins can enable throttle_on_budget_exceeded on a key.".into(),
        ));
    }
    Ok(())
}

/// Checks a key's `end_user_budget_id` change as LiteLLM's
/// `_validate_end_user_budget_id_change` does: a value differing from
/// `before`'s (empty: none) is a proxy admin's to make (403), and one that
/// names no budget row is a 400; empty clears it.
async fn ensure_end_user_budget(
    ctx: &db::Ctx,
    requested: Option<&str>,
    before: Option<&Map<String, Value>>,
    admin: bool,
) -> Result<(), GatewayError> {
    let Some(id) = requested else {
        return Ok(());
    };
    let stored = before
        .and_then(|m| m.get(END_USER_BUDGET_ID))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if stored == id {
        return Ok(());
    }
    if !admin {
        return Err(GatewayError::TeamAccessDenied(
            "Only proxy admins can set end_user_budget_id on a key.".into(),
        ));
    }
    if id.is_empty() || ctx.store().budget_exists(id).await.map_err(db::store_err)? {
        return Ok(());
    }
    Err(bad_field(
        END_USER_BUDGET_ID,
        format!("end_user_budget_id={id} does not match any budget."),
    ))
}

/// Refuses `default_estimated_output_tokens` (and its per-model form) that
/// is not a positive integer (LiteLLM's `PositiveInt`) up to `max_tokens`'
/// bound: it sizes budget reservations.
pub(super) fn output_estimates(extra: &Map<String, Value>) -> Result<(), GatewayError> {
    let check = |field: &str, v: &Value| {
        v.as_u64()
            .filter(|n| (1..=MAX_OUTPUT_ESTIMATE).contains(n))
            .map(drop)
            .ok_or_else(|| {
                bad_field(
                    field,
                    format!("must be an integer from 1 to {MAX_OUTPUT_ESTIMATE}"),
                )
            })
    };
    if let Some(v) = extra.get("default_estimated_output_tokens") {
        check("default_estimated_output_tokens", v)?;
    }
    if let Some(Value::Object(per_model)) = extra.get("default_estimated_output_tokens_per_model") {
        for (model, v) in per_model {
            check(
                &format!("default_estimated_output_tokens_per_model.{model}"),
                v,
            )?;
        }
    }
    Ok(())
}

/// Refuses per-model limits that are not integers within [`limit`]'s range.
pub(super) fn per_model_limits(
    name: &str,
    limits: &Map<String, Value>,
) -> Result<(), GatewayError> {
    for (model, v) in limits {
        let field = format!("{name}.{model}");
        let n = v
            .as_i64()
            .ok_or_else(|| bad_field(&field, "must be a non-negative integer"))?;
        limit(&field, n)?;
    }
    Ok(())
}

/// Refuses per-model budgets that are not USD amounts within [`amount`]'s
/// range, in either of LiteLLM's forms (`0.5` or
/// `{"budget_limit": 0.5, "time_period": "1d"}`, numbers also as strings).
pub(super) fn per_model_budgets(budgets: &Map<String, Value>) -> Result<(), GatewayError> {
    for (model, v) in budgets {
        let field = format!("model_max_budget.{model}");
        let (limit_value, field) = match v {
            Value::Object(o) => {
                if let Some(p) = o.get("time_period").filter(|p| !p.is_null()) {
                    let at = format!("{field}.time_period");
                    let text = p
                        .as_str()
                        .ok_or_else(|| bad_field(&at, "must be a duration"))?;
                    period(&at, text)?;
                }
                let value = o.get("budget_limit").unwrap_or(&Value::Null);
                (value, format!("{field}.budget_limit"))
            }
            other => (other, field),
        };
        let usd = crate::store::usd_value(limit_value)
            .ok_or_else(|| bad_field(&field, "must be a non-negative number"))?;
        amount(&field, usd)?;
    }
    Ok(())
}

/// Applies a `budget_limits` patch: each window checked (a duration and a
/// USD amount) and given its first `reset_at` as of `now`, as LiteLLM's
/// `_generate_budget_windows`; null or an empty list clears them.
pub(super) fn apply_windows(
    patch: Patch<Vec<Value>>,
    windows: &mut Vec<crate::store::BudgetWindow>,
    now: DateTime<Utc>,
) -> Result<(), GatewayError> {
    let list = match patch {
        Patch::Keep => return Ok(()),
        Patch::Clear => Vec::new(),
        Patch::Set(list) => list,
    };
    if list.len() > MAX_WINDOWS {
        return Err(bad_field(
            "budget_limits",
            format!("at most {MAX_WINDOWS} windows"),
        ));
    }
    let mut out: Vec<crate::store::BudgetWindow> = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let at = |f: &str| format!("budget_limits[{i}].{f}");
        let text = entry
            .get("budget_duration")
            .and_then(Value::as_str)
            .ok_or_else(|| bad_field(&at("budget_duration"), "must be a duration such as 1d"))?;
        let length = period(&at("budget_duration"), text)?;
        let usd = entry
            .get("max_budget")
            .and_then(Value::as_f64)
            .filter(|v| v.is_finite())
            .ok_or_else(|| bad_field(&at("max_budget"), "must be a finite number"))?;
        let usd = amount(&at("max_budget"), usd)?;
        if out.iter().any(|w| w.budget_duration == text) {
            return Err(bad_field(
                &at("budget_duration"),
                format!("'{text}' is given twice (each window's counter is named by its duration)"),
            ));
        }
        out.push(crate::store::BudgetWindow {
            budget_duration: text.to_string(),
            max_budget: usd,
            reset_at: now.checked_add_signed(length),
        });
    }
    *windows = out;
    Ok(())
}

/// Refuses a `budget_id` that names no budget row (400 naming it).
async fn ensure_budget(ctx: &db::Ctx, id: Option<&str>) -> Result<(), GatewayError> {
    let Some(id) = id else { return Ok(()) };
    if ctx.store().budget_exists(id).await.map_err(db::store_err)? {
        Ok(())
    } else {
        Err(bad_field("budget_id", format!("Budget {id} not found")))
    }
}

/// The most budget windows a key or team may have.
const MAX_WINDOWS: usize = 16;

fn no_new_key(new_key: &Option<String>) -> Result<(), GatewayError> {
    match new_key {
        Some(_) => Err(bad_field("new_key", "only /key/regenerate takes a new_key")),
        None => Ok(()),
    }
}

/// The `allowed_routes` a `/key/generate` body's `key_type` presets, as
/// LiteLLM's `handle_key_type` sets them (over any `allowed_routes`
/// given): `llm_api` the LLM routes, `management` the management routes,
/// `read_only` the info routes; `default` (or none) presets nothing.
fn key_type_routes(body: &[u8]) -> Result<Option<Vec<String>>, GatewayError> {
    #[derive(serde::Deserialize)]
    struct KeyType {
        key_type: Option<String>,
    }
    let Ok(KeyType { key_type }) = serde_json::from_slice::<KeyType>(body) else {
        return Ok(None);
    };
    let group = match key_type.as_deref() {
        None | Some("default") => return Ok(None),
        Some("llm_api") => "llm_api_routes",
        Some("management") => "management_routes",
        Some("read_only") => "info_routes",
        Some(_) => {
            return Err(super::body::bad_field(
                "key_type",
                "must be one of llm_api, management, read_only, default",
            ))
        }
    };
    Ok(Some(vec![group.to_string()]))
}

/// `POST /key/generate`; `admin`: the caller is a proxy admin.
pub async fn generate(worker: &Worker, body: &[u8], admin: bool) -> Result<Value, GatewayError> {
    let mut req = KeyRequest::read(body)?;
    if let Some(routes) = key_type_routes(body)? {
        req.allowed_routes = Patch::Set(routes);
    }
    let Handles {
        key,
        new_key,
        spend,
    } = req.take_handles()?;
    no_new_key(&new_key)?;
    let plain = match key {
        Some(k) => custom_key("key", k)?,
        None => random_key()?,
    };
    let now = Utc::now();
    let mut rec = new_record(&plain, now);
    let duration = req.duration_text();
    let req_end_user_budget = req.end_user_budget.take();
    let throttle_on = req.throttle_on;
    req.apply(&mut rec, now)?;
    rec.spend = spend.unwrap_or(0.0);
    let end_user_budget = req_end_user_budget;
    let rec = run(worker, move |ctx| async move {
        ensure_budget(&ctx, rec.shared_budget()).await?;
        ensure_throttle_admin(throttle_on, None, admin)?;
        ensure_end_user_budget(&ctx, end_user_budget.as_deref(), None, admin).await?;
        create(&ctx, &rec).await?;
        Ok(rec)
    })
    .await?;
    Ok(Value::Object(issued(&rec, &plain, duration)))
}

/// `GET /key/info?key=`: the row without its token, under the key as given
/// (the caller's own key when none is given).
pub async fn info(
    worker: &Worker,
    head: &RequestHead,
    mut q: Query,
) -> Result<Value, GatewayError> {
    let given = q.take("key");
    q.finish()?;
    let given = given
        .or_else(|| credential(head).map(str::to_string))
        .ok_or_else(|| missing("key"))?;
    let lookup = given.clone();
    let rec = run(
        worker,
        move |ctx| async move { db::key(&ctx, &lookup).await },
    )
    .await?;
    let mut info = object(&rec);
    info.remove("token");
    Ok(json!({"key": given, "info": info}))
}

/// `POST /key/update`: the fields given change, the others stay; `spend`
/// sets the spend (a reset). Takes effect on every replica at once.
/// `admin`: the caller is a proxy admin.
pub async fn update(worker: &Worker, body: &[u8], admin: bool) -> Result<Value, GatewayError> {
    let mut req = KeyRequest::read(body)?;
    let Handles {
        key,
        new_key,
        spend,
    } = req.take_handles()?;
    no_new_key(&new_key)?;
    let given = key.ok_or_else(|| missing("key"))?;
    let lookup = given.clone();
    let rec = run(worker, move |ctx| async move {
        let before = db::key(&ctx, &lookup).await?;
        let mut rec = before.clone();
        let (team_given, alias_given) = (req.team_id.is_given(), req.key_alias.is_given());
        let end_user_budget = req.end_user_budget.take();
        ensure_throttle_admin(req.throttle_on, Some(&before.metadata), admin)?;
        ensure_end_user_budget(
            &ctx,
            end_user_budget.as_deref(),
            Some(&before.metadata),
            admin,
        )
        .await?;
        req.apply(&mut rec, Utc::now())?;
        if team_given {
            ensure_team(&ctx, rec.team_id.as_deref()).await?;
        }
        if alias_given {
            ensure_alias_free(&ctx, rec.key_alias.as_deref(), &rec.token).await?;
        }
        if rec.budget_id != before.budget_id {
            ensure_budget(&ctx, rec.shared_budget()).await?;
        }
        let token = rec.token.clone();
        let store = ctx.store();
        let written = db::write_changes(&ctx, RowKind::Key, &token, (&before, &rec), || async {
            store.update_key(&rec).await
        })
        .await?;
        if !written {
            return Err(GatewayError::NotFound(format!(
                "Key {}",
                db::shown(&lookup)
            )));
        }
        if let Some(spend) = spend {
            ctx.store()
                .set_key_spend(&token, spend)
                .await
                .map_err(store_err)?;
        }
        ctx.publish(&[Change::Key(token.clone())]).await;
        db::key(&ctx, &token).await
    })
    .await?;
    if let Some(spend) = spend {
        crate::budget::fleet::set_spend(&worker.shared.limiter, "key", &rec.token, spend).await;
    }
    let mut out = object(&rec);
    out.insert("key".into(), given.into());
    Ok(Value::Object(out))
}

/// The body of `/key/delete`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct DeleteKeys {
    keys: Vec<String>,
    key_aliases: Vec<String>,
}

/// `POST /key/delete`: keys plain or hashed, or by alias; 404 when none
/// existed.
pub async fn delete(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let req: DeleteKeys = parse(body)?;
    if req.keys.is_empty() && req.key_aliases.is_empty() {
        return Err(bad_field(
            "keys",
            "give the keys (or key_aliases) to delete",
        ));
    }
    let asked: Vec<String> = req.keys.iter().map(|k| db::shown(k)).collect();
    let asked = [asked, req.key_aliases.clone()].concat().join(", ");
    let deleted = run(worker, move |ctx| async move {
        let mut named: Vec<(String, String)> =
            req.keys.iter().map(|k| (token_of(k), k.clone())).collect();
        if !req.key_aliases.is_empty() {
            let all = ctx.store().list_keys(None, None).await.map_err(store_err)?;
            named.extend(all.into_iter().filter_map(|k| {
                let alias = k.key_alias.filter(|a| req.key_aliases.contains(a))?;
                Some((k.token, alias))
            }));
        }
        let tokens: Vec<String> = named.iter().map(|(t, _)| t.clone()).collect();
        let gone = ctx.store().delete_keys(&tokens).await.map_err(store_err)?;
        let changes: Vec<Change> = gone.iter().cloned().map(Change::Key).collect();
        ctx.publish(&changes).await;
        Ok(named
            .into_iter()
            .filter(|(t, _)| gone.contains(t))
            .map(|(_, given)| given)
            .collect::<Vec<_>>())
    })
    .await?;
    if deleted.is_empty() {
        return Err(GatewayError::NotFound(format!("Keys {asked}")));
    }
    Ok(json!({ "deleted_keys": deleted }))
}

/// `POST /key/regenerate` and `POST /key/{key}/regenerate`: a new plain key
/// (random, or `new_key`) for the same row; the old one stops working at
/// once. Other fields in the body update the row as `/key/update` does.
/// `admin`: the caller is a proxy admin.
pub async fn regenerate(
    worker: &Worker,
    path_key: Option<&str>,
    body: &[u8],
    admin: bool,
) -> Result<Value, GatewayError> {
    let mut req = KeyRequest::read(body)?;
    let Handles {
        key,
        new_key,
        spend,
    } = req.take_handles()?;
    let given = key
        .or_else(|| path_key.map(str::to_string))
        .ok_or_else(|| missing("key"))?;
    let plain = match new_key {
        Some(k) => custom_key("new_key", k)?,
        None => random_key()?,
    };
    let duration = req.duration_text();
    let fresh = new_record(&plain, Utc::now());
    let rec = run(worker, move |ctx| async move {
        let old = db::key(&ctx, &given).await?;
        if ctx
            .store()
            .get_key(&fresh.token)
            .await
            .map_err(store_err)?
            .is_some()
        {
            return Err(bad_field("new_key", "that key is already in use"));
        }
        let (team_given, alias_given) = (req.team_id.is_given(), req.key_alias.is_given());
        let end_user_budget = req.end_user_budget.take();
        ensure_throttle_admin(req.throttle_on, Some(&old.metadata), admin)?;
        ensure_end_user_budget(&ctx, end_user_budget.as_deref(), Some(&old.metadata), admin)
            .await?;
        let mut rec = old.clone();
        req.apply(&mut rec, Utc::now())?;
        (rec.token, rec.key_name) = (fresh.token, fresh.key_name);
        if team_given {
            ensure_team(&ctx, rec.team_id.as_deref()).await?;
        }
        if alias_given {
            ensure_alias_free(&ctx, rec.key_alias.as_deref(), &old.token).await?;
        }
        if !ctx
            .store()
            .rename_key(&old.token, &rec)
            .await
            .map_err(store_err)?
        {
            return Err(GatewayError::NotFound(format!("Key {}", db::shown(&given))));
        }
        if let Some(spend) = spend {
            ctx.store()
                .set_key_spend(&rec.token, spend)
                .await
                .map_err(store_err)?;
            rec.spend = spend;
        }
        ctx.publish(&[Change::Key(old.token), Change::Key(rec.token.clone())])
            .await;
        warm(&ctx, &rec.token).await;
        Ok(rec)
    })
    .await?;
    if let Some(spend) = spend {
        crate::budget::fleet::set_spend(&worker.shared.limiter, "key", &rec.token, spend).await;
    }
    Ok(Value::Object(issued(&rec, &plain, duration)))
}

/// `GET /key/list?user_id=&team_id=&key_alias=&page=&size=&return_full_object=`:
/// hashed tokens (or rows), newest first, a page at a time. This gateway
/// also takes `has_limits=true`: only keys with an rpm, tpm or
/// parallel-request limit of their own (the console's Limits page).
pub async fn list(worker: &Worker, mut q: Query) -> Result<Value, GatewayError> {
    let user_id = q.take("user_id");
    let team_id = q.take("team_id");
    let alias = q.take("key_alias");
    let has_limits: bool = q.take_parsed("has_limits")?.unwrap_or(false);
    let page: usize = q.take_parsed("page")?.unwrap_or(1);
    let size: usize = q.take_parsed("size")?.unwrap_or(10);
    let full: bool = q.take_parsed("return_full_object")?.unwrap_or(false);
    q.finish()?;
    if page == 0 {
        return Err(bad_field("page", "pages start at 1"));
    }
    if !(1..=100).contains(&size) {
        return Err(bad_field("size", "must be between 1 and 100"));
    }
    // One page read from the store (Postgres pages in SQL), never every key.
    let offset = ((page - 1) as u64).saturating_mul(size as u64);
    let (keys, total) = run(worker, move |ctx| async move {
        let filter = KeyFilter {
            user_id: user_id.as_deref(),
            team_id: team_id.as_deref(),
            key_alias: alias.as_deref(),
            has_limits,
        };
        ctx.store()
            .list_keys_page(filter, offset, size as u64)
            .await
            .map_err(store_err)
    })
    .await?;
    let total = usize::try_from(total).unwrap_or(usize::MAX);
    let shown: Vec<Value> = keys
        .iter()
        .map(|k| match full {
            true => Value::Object(object(k)),
            false => k.token.clone().into(),
        })
        .collect();
    Ok(json!({
        "keys": shown,
        "total_count": total,
        "current_page": page,
        "total_pages": total.div_ceil(size),
    }))
}

/// The body of `/key/block` and `/key/unblock`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyRef {
    key: String,
}

/// `POST /key/block` and `/key/unblock`: the updated row.
pub async fn set_blocked(
    worker: &Worker,
    body: &[u8],
    blocked: bool,
) -> Result<Value, GatewayError> {
    let KeyRef { key } = parse(body)?;
    let rec = run(worker, move |ctx| async move {
        let token = db::key(&ctx, &key).await?.token;
        let fields = Map::from_iter([("blocked".to_string(), Value::Bool(blocked))]);
        if !ctx
            .store()
            .patch(RowKind::Key, &token, &fields)
            .await
            .map_err(store_err)?
        {
            return Err(GatewayError::NotFound(format!("Key {}", db::shown(&key))));
        }
        ctx.publish(&[Change::Key(token.clone())]).await;
        db::key(&ctx, &token).await
    })
    .await?;
    Ok(Value::Object(object(&rec)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ModelBudgets;

    #[test]
    fn applies_only_given_fields() {
        let now = Utc::now();
        let mut rec = new_record("sk-abcdefgh", now);
        rec.models = vec!["a".into()];
        rec.max_budget = Some(1.0);
        let req: KeyRequest = parse(
            br#"{"max_budget": 5, "duration": "1h", "budget_duration": "30d", "blocked": true}"#,
        )
        .unwrap();
        req.apply(&mut rec, now).unwrap();
        assert_eq!(rec.models, vec!["a".to_string()]);
        assert_eq!(rec.max_budget, Some(5.0));
        assert_eq!(rec.expires, Some(now + chrono::Duration::hours(1)));
        assert_eq!(rec.budget_reset_at, Some(now + chrono::Duration::days(30)));
        assert!(rec.blocked);
        let req: KeyRequest = parse(br#"{"max_budget": null, "models": null}"#).unwrap();
        req.apply(&mut rec, now).unwrap();
        assert_eq!((rec.max_budget, rec.models.len()), (None, 0));
        assert_eq!(rec.key_name.as_deref(), Some("sk-...efgh"));
    }

    #[test]
    fn names_bad_values() {
        let now = Utc::now();
        let mut rec = KeyRecord::default();
        for (body, field) in [
            (r#"{"duration": "forever"}"#, "duration"),
            (r#"{"max_budget": -1}"#, "max_budget"),
            (
                r#"{"model_rpm_limit": {"gpt-4o": "lots"}}"#,
                "model_rpm_limit.gpt-4o",
            ),
            (r#"{"duration": "100000000d"}"#, "duration"),
            (r#"{"duration": "99999999999999999999mo"}"#, "duration"),
            (r#"{"budget_duration": "100000000d"}"#, "budget_duration"),
            (r#"{"max_budget": 1e300}"#, "max_budget"),
            (r#"{"soft_budget": -0.5}"#, "soft_budget"),
            (r#"{"tpm_limit": 9223372036854775807}"#, "tpm_limit"),
            (r#"{"rpm_limit": -1}"#, "rpm_limit"),
            (r#"{"max_parallel_requests": -5}"#, "max_parallel_requests"),
            (
                r#"{"model_tpm_limit": {"m": 18446744073709551615}}"#,
                "model_tpm_limit.m",
            ),
            (r#"{"model_rpm_limit": {"m": -1}}"#, "model_rpm_limit.m"),
            (r#"{"model_max_budget": {"m": -1}}"#, "model_max_budget.m"),
            (
                r#"{"model_max_budget": {"m": "lots"}}"#,
                "model_max_budget.m",
            ),
            (
                r#"{"model_max_budget": {"m": {"budget_limit": 1e12}}}"#,
                "model_max_budget.m.budget_limit",
            ),
            (
                r#"{"model_max_budget": {"m": {"budget_limit": 1, "time_period": "100000000d"}}}"#,
                "model_max_budget.m.time_period",
            ),
        ] {
            let req: KeyRequest = parse(body.as_bytes()).unwrap();
            let err = req.apply(&mut rec, now).unwrap_err();
            assert_eq!(err.param(), Some(field), "{body}");
        }
        for (body, field) in [
            (r#"{"rpm_limit": "ten"}"#, "rpm_limit"),
            (r#"{"tpm_limit": 1.5}"#, "tpm_limit"),
            (r#"{"tpm_limit": 1e30}"#, "tpm_limit"),
            (r#"{"max_budget": 1e400}"#, "max_budget"),
            (r#"{"spend": "free"}"#, "spend"),
        ] {
            let err = parse::<KeyRequest>(body.as_bytes()).unwrap_err();
            assert_eq!(err.param(), Some(field), "{body}");
        }
        let mut req: KeyRequest = parse(br#"{"spend": 1e10}"#).unwrap();
        assert_eq!(req.take_handles().err().unwrap().param(), Some("spend"));
        let ok: KeyRequest = parse(
            br#"{"model_max_budget": {"a": 0.5, "b": "2", "c": {"budget_limit": "0.1", "time_period": "1d"}}, "model_rpm_limit": {"a": 10}}"#,
        )
        .unwrap();
        ok.apply(&mut rec, now).unwrap();
        assert_eq!(rec.model_budget("b"), Some(2.0));
        assert_eq!(rec.model_budget("c"), Some(0.1));
    }
}
