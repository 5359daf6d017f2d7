//! `/customer/*` (and LiteLLM's older `/end_user/*` names): end users, the
//! callers' own users a request names as `user`, with their budget and
//! limits in a `LiteLLM_BudgetTable` row, in LiteLLM's request and response
//! shapes (`customer_endpoints.py`, litellm 1.110). Every change is
//! published, so the next request of that end user, on any replica, sees
//! it.

use super::body::{after, amount, bad_field, limit, missing, parse, parse_accepting, Kind};
use super::db::{run, store_err};
use super::object;
use super::query::Query;
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::{BudgetFields, Change, EndUserRecord, EndUserUpdate};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// One `/customer/*` endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `POST /customer/new`.
    New,
    /// `GET /customer/info?end_user_id=`.
    Info,
    /// `POST /customer/update`.
    Update,
    /// `POST /customer/delete`.
    Delete,
    /// `POST /customer/block` (`true`) and `/customer/unblock`.
    Block(bool),
    /// `GET /customer/list`.
    List,
}

/// The endpoint of `method` `path`, under `/customer/` or `/end_user/`.
pub fn route(method: &str, path: &str) -> Option<Op> {
    let name = path
        .strip_prefix("/customer/")
        .or_else(|| path.strip_prefix("/end_user/"))?;
    let get = method == "GET" || method == "HEAD";
    let post = method == "POST";
    Some(match name {
        "new" if post => Op::New,
        "info" if get => Op::Info,
        "update" if post => Op::Update,
        "delete" if post => Op::Delete,
        "block" if post => Op::Block(true),
        "unblock" if post => Op::Block(false),
        "list" if get => Op::List,
        _ => return None,
    })
}

/// Answers one `/customer/*` request.
pub async fn handle(worker: &Worker, op: Op, q: Query, body: &[u8]) -> Result<Value, GatewayError> {
    match op {
        Op::New => new(worker, body).await,
        Op::Info => info(worker, q).await,
        Op::Update => update(worker, body).await,
        Op::Delete => delete(worker, body).await,
        Op::Block(blocked) => set_blocked(worker, body, blocked).await,
        Op::List => list(worker, q).await,
    }
}

/// Fields of LiteLLM's `NewCustomerRequest` and `UpdateCustomerRequest`
/// accepted and not enforced here (type-checked, then ignored as LiteLLM
/// ignores them or keeps them elsewhere): `allowed_region` is the name
/// LiteLLM's own documentation sends, which LiteLLM ignores too.
const ACCEPTED: &[(&str, Kind)] = &[
    ("tpd_limit", Kind::Int),
    ("budget_reset_at", Kind::Str),
    ("object_permission", Kind::Object),
    ("metadata", Kind::Object),
    ("allowed_region", Kind::Str),
];

/// The regions LiteLLM allows (`AllowedModelRegion`).
const REGIONS: [&str; 2] = ["eu", "us"];

/// The body of `/customer/new` and `/customer/update`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct CustomerRequest {
    user_id: Option<String>,
    alias: Option<String>,
    blocked: Option<bool>,
    budget_id: Option<String>,
    spend: Option<f64>,
    allowed_model_region: Option<String>,
    default_model: Option<String>,
    models: Option<Vec<String>>,
    max_budget: Option<f64>,
    soft_budget: Option<f64>,
    max_parallel_requests: Option<i64>,
    tpm_limit: Option<i64>,
    rpm_limit: Option<i64>,
    budget_duration: Option<String>,
    model_max_budget: Option<Map<String, Value>>,
}

impl CustomerRequest {
    /// The end user's id: required, not empty.
    fn take_id(&mut self) -> Result<String, GatewayError> {
        match self.user_id.take() {
            Some(id) if id.is_empty() => Err(bad_field("user_id", "must not be empty")),
            Some(id) => Ok(id),
            None => Err(missing("user_id")),
        }
    }

    /// The budget fields given, range-checked. On an update, LiteLLM
    /// ignores a zero (its `_should_update_field`): `skip_zero`.
    fn budget(&mut self, skip_zero: bool) -> Result<BudgetFields, GatewayError> {
        let usd = |name: &str, v: Option<f64>| -> Result<Option<f64>, GatewayError> {
            v.filter(|v| !(skip_zero && *v == 0.0))
                .map(|v| amount(name, v))
                .transpose()
        };
        let count = |name: &str, v: Option<i64>| -> Result<Option<i64>, GatewayError> {
            v.filter(|v| !(skip_zero && *v == 0))
                .map(|v| limit(name, v))
                .transpose()
        };
        if let Some(budgets) = &self.model_max_budget {
            super::keys::per_model_budgets(budgets)?;
        }
        let now = Utc::now();
        let budget_duration = self
            .budget_duration
            .take()
            .map(|d| after("budget_duration", now, &d).map(|at| (d, at)))
            .transpose()?;
        Ok(BudgetFields {
            max_budget: usd("max_budget", self.max_budget.take())?,
            soft_budget: usd("soft_budget", self.soft_budget.take())?,
            max_parallel_requests: count(
                "max_parallel_requests",
                self.max_parallel_requests.take(),
            )?,
            tpm_limit: count("tpm_limit", self.tpm_limit.take())?,
            rpm_limit: count("rpm_limit", self.rpm_limit.take())?,
            model_max_budget: self
                .model_max_budget
                .take()
                .filter(|m| !m.is_empty())
                .map(Value::Object),
            budget_duration,
        })
    }

    /// Checks `allowed_model_region` and `default_model`.
    fn check(&self, worker: &Worker) -> Result<(), GatewayError> {
        if let Some(region) = &self.allowed_model_region {
            if !REGIONS.contains(&region.as_str()) {
                return Err(bad_field(
                    "allowed_model_region",
                    format!("must be one of {REGIONS:?}"),
                ));
            }
        }
        if let Some(model) = &self.default_model {
            let router = worker.shared.models.router();
            if router.registry().resolve(model).is_none() {
                return Err(bad_field(
                    "default_model",
                    format!("Default Model not on proxy. Configure via `/model/new` or config.yaml. Default_model={model}"),
                ));
            }
        }
        Ok(())
    }
}

/// An end user as LiteLLM's `CustomerResponse` shows it.
fn customer_json(u: &EndUserRecord) -> Value {
    let mut out = object(u);
    out.insert("object_permission".into(), Value::Null);
    if let Some(Value::Object(budget)) = out.get_mut("litellm_budget_table") {
        for absent in [
            "tpd_limit",
            "allowed_models",
            "temp_budget_increase",
            "temp_budget_expiry",
        ] {
            budget.insert(absent.into(), Value::Null);
        }
    }
    Value::Object(out)
}

/// LiteLLM's 404 for end users that do not exist.
fn not_found(ids: &str, param: &'static str) -> GatewayError {
    GatewayError::CustomerNotFound {
        message: format!("End User Id={ids} does not exist in db"),
        param,
    }
}

/// `POST /customer/new`: the end user, and a budget row of the budget
/// fields given (linked as its `budget_id`); or an existing `budget_id`.
pub async fn new(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let (mut req, _): (CustomerRequest, _) = parse_accepting(body, ACCEPTED)?;
    let user_id = req.take_id()?;
    if req.max_budget.is_some() && req.budget_id.is_some() {
        return Err(bad_field(
            "budget_id",
            "Set either 'max_budget' or 'budget_id', not both.",
        ));
    }
    req.check(worker)?;
    let spend = req.spend.map(|s| amount("spend", s)).transpose()?;
    let fields = req.budget(false)?;
    let now = Utc::now();
    let budget = (!fields.is_empty()).then(|| fields.row(uuid::Uuid::new_v4().to_string(), now));
    let user = EndUserRecord {
        user_id,
        blocked: req.blocked.unwrap_or(false),
        alias: req.alias,
        spend: spend.unwrap_or(0.0),
        allowed_model_region: req.allowed_model_region,
        default_model: req.default_model,
        models: req.models.unwrap_or_default(),
        budget_id: budget
            .as_ref()
            .map(|b| b.budget_id.clone())
            .or(req.budget_id),
        ..Default::default()
    };
    let user = run(worker, move |ctx| async move {
        if let (None, Some(id)) = (&budget, &user.budget_id) {
            if !ctx.store().budget_exists(id).await.map_err(store_err)? {
                return Err(bad_field(
                    "budget_id",
                    format!("budget '{id}' does not exist"),
                ));
            }
        }
        let inserted = ctx.store().insert_end_user(&user, budget.as_ref()).await;
        if let Err(crate::store::StoreError::Conflict(_)) = inserted {
            return Err(GatewayError::CustomerExists(user.user_id.clone()));
        }
        inserted.map_err(store_err)?;
        ctx.publish(&[Change::EndUser(user.user_id.clone())]).await;
        read(&ctx, &user.user_id, "user_id").await
    })
    .await?;
    Ok(customer_json(&user))
}

/// End user `id` as stored, or LiteLLM's 404 naming `param`.
async fn read(
    ctx: &super::db::Ctx,
    id: &str,
    param: &'static str,
) -> Result<EndUserRecord, GatewayError> {
    ctx.store()
        .get_end_user(id)
        .await
        .map_err(store_err)?
        .ok_or_else(|| not_found(id, param))
}

/// `GET /customer/info?end_user_id=`.
pub async fn info(worker: &Worker, mut q: Query) -> Result<Value, GatewayError> {
    let id = q
        .take("end_user_id")
        .ok_or_else(|| missing("end_user_id"))?;
    q.finish()?;
    let user = run(worker, move |ctx| async move {
        read(&ctx, &id, "end_user_id").await
    })
    .await?;
    Ok(customer_json(&user))
}

/// `POST /customer/update`: each field given is written (a zero or empty
/// value is ignored, as LiteLLM ignores it); budget fields change the
/// linked budget row, or create one.
pub async fn update(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let (mut req, _): (CustomerRequest, _) = parse_accepting(body, ACCEPTED)?;
    let user_id = req.take_id()?;
    if req.spend.is_some() {
        return Err(bad_field("spend", "only /customer/new takes this field"));
    }
    req.check(worker)?;
    let budget = req.budget(true)?;
    let update = EndUserUpdate {
        alias: req.alias,
        blocked: req.blocked,
        allowed_model_region: req.allowed_model_region,
        default_model: req.default_model,
        models: req.models,
        budget_id: req.budget_id.filter(|b| !b.is_empty()),
        budget,
    };
    let new_budget_id = uuid::Uuid::new_v4().to_string();
    let user = run(worker, move |ctx| async move {
        if let Some(id) = &update.budget_id {
            if !ctx.store().budget_exists(id).await.map_err(store_err)? {
                return Err(bad_field(
                    "budget_id",
                    format!("budget '{id}' does not exist"),
                ));
            }
        }
        let stale = ctx
            .store()
            .update_end_user(&user_id, &update, &new_budget_id)
            .await
            .map_err(store_err)?
            .ok_or_else(|| not_found(&user_id, "user_id"))?;
        let changes: Vec<Change> = stale.into_iter().map(Change::EndUser).collect();
        ctx.publish(&changes).await;
        read(&ctx, &user_id, "user_id").await
    })
    .await?;
    Ok(customer_json(&user))
}

/// The body of `/customer/delete`, `/customer/block` and `/unblock`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserIds {
    user_ids: Vec<String>,
}

/// The ids of a `{"user_ids": [...]}` body: at least one.
fn user_ids(body: &[u8]) -> Result<Vec<String>, GatewayError> {
    let UserIds { user_ids } = parse(body)?;
    if user_ids.is_empty() || user_ids.iter().any(String::is_empty) {
        return Err(bad_field(
            "user_ids",
            "name at least one end user, none empty",
        ));
    }
    Ok(user_ids)
}

/// `POST /customer/delete`: all the end users, or none when one does not
/// exist (LiteLLM's 404 names those).
pub async fn delete(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let ids = user_ids(body)?;
    // Python's `str` of the list, as LiteLLM's message shows it.
    let quoted: Vec<String> = ids.iter().map(|id| format!("'{id}'")).collect();
    let asked = format!("[{}]", quoted.join(", "));
    let deleted = run(worker, move |ctx| async move {
        let mut missing = Vec::new();
        for id in &ids {
            if ctx
                .store()
                .get_end_user(id)
                .await
                .map_err(store_err)?
                .is_none()
            {
                missing.push(id.as_str());
            }
        }
        if !missing.is_empty() {
            return Err(GatewayError::CustomerNotFound {
                message: format!("End User Id(s)={} do not exist in db", missing.join(", ")),
                param: "user_ids",
            });
        }
        let gone = ctx
            .store()
            .delete_end_users(&ids)
            .await
            .map_err(store_err)?;
        let changes: Vec<Change> = gone.iter().cloned().map(Change::EndUser).collect();
        ctx.publish(&changes).await;
        Ok(gone.len())
    })
    .await?;
    Ok(json!({
        "deleted_customers": deleted,
        "message": format!("Successfully deleted customers with ids: {asked}"),
    }))
}

/// `POST /customer/block` (creating the end users not yet known, as
/// LiteLLM does) and `/customer/unblock`. Block answers the rows; unblock
/// the ids of the end users still blocked (LiteLLM's
/// `UnblockUsersResponse`).
pub async fn set_blocked(
    worker: &Worker,
    body: &[u8],
    blocked: bool,
) -> Result<Value, GatewayError> {
    let ids = user_ids(body)?;
    run(worker, move |ctx| async move {
        let rows = ctx
            .store()
            .set_end_users_blocked(&ids, blocked)
            .await
            .map_err(store_err)?;
        let changes: Vec<Change> = rows
            .iter()
            .map(|u| Change::EndUser(u.user_id.clone()))
            .collect();
        ctx.publish(&changes).await;
        if blocked {
            let rows: Vec<Value> = rows.iter().map(|u| Value::Object(object(u))).collect();
            return Ok(json!({ "blocked_users": rows }));
        }
        let mut still = Vec::new();
        ctx.store()
            .restricted_end_users(&mut |id, blocked| {
                if blocked {
                    still.push(id.to_string());
                }
            })
            .await
            .map_err(store_err)?;
        still.sort();
        Ok(json!({ "blocked_users": still }))
    })
    .await
}

/// The most end users one `/customer/list` page holds (LiteLLM's cap).
const MAX_PAGE_SIZE: i64 = 100;

/// `GET /customer/list?page=&page_size=&search=`: end users by id, a page
/// at a time (LiteLLM's defaults: page 1 of 50), those whose id or alias
/// contains `search` (any case) when given.
pub async fn list(worker: &Worker, mut q: Query) -> Result<Value, GatewayError> {
    let page: i64 = q.take_parsed("page")?.unwrap_or(1);
    let page_size: i64 = q.take_parsed("page_size")?.unwrap_or(50);
    if !(1..=1_000_000).contains(&page) {
        return Err(bad_field("page", "must be from 1 to 1000000"));
    }
    if !(1..=MAX_PAGE_SIZE).contains(&page_size) {
        return Err(bad_field(
            "page_size",
            format!("must be from 1 to {MAX_PAGE_SIZE}"),
        ));
    }
    let search = q.take("search");
    q.finish()?;
    let offset = (page - 1) * page_size;
    let users = run(worker, move |ctx| async move {
        ctx.store()
            .list_end_users(offset, page_size, search.as_deref())
            .await
            .map_err(store_err)
    })
    .await?;
    Ok(Value::Array(users.iter().map(customer_json).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_both_names() {
        assert_eq!(route("POST", "/customer/new"), Some(Op::New));
        assert_eq!(route("POST", "/end_user/unblock"), Some(Op::Block(false)));
        assert_eq!(route("GET", "/end_user/info"), Some(Op::Info));
        assert_eq!(route("GET", "/customer/new"), None);
        assert_eq!(route("POST", "/customer/nope"), None);
        assert_eq!(route("POST", "/customers/new"), None);
    }

    #[test]
    fn names_out_of_range_budget_fields() {
        for (body, field) in [
            (r#"{"max_budget": -1}"#, "max_budget"),
            (r#"{"soft_budget": 1e300}"#, "soft_budget"),
            (r#"{"tpm_limit": -5}"#, "tpm_limit"),
            (r#"{"rpm_limit": 1000000000000000}"#, "rpm_limit"),
            (r#"{"max_parallel_requests": -1}"#, "max_parallel_requests"),
            (r#"{"budget_duration": "100000000d"}"#, "budget_duration"),
        ] {
            let mut req: CustomerRequest = parse(body.as_bytes()).unwrap();
            let err = req.budget(false).unwrap_err();
            assert_eq!(err.param(), Some(field), "{body}");
        }
        let mut req: CustomerRequest = parse(br#"{"max_budget": 0, "rpm_limit": 0}"#).unwrap();
        assert!(
            req.budget(true).unwrap().is_empty(),
            "an update ignores zeros"
        );
        let mut req: CustomerRequest = parse(br#"{"max_budget": 0, "rpm_limit": 3}"#).unwrap();
        let fields = req.budget(false).unwrap();
        assert_eq!((fields.max_budget, fields.rpm_limit), (Some(0.0), Some(3)));
    }
}
