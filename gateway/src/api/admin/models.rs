//! `/model/*`: deployments added, changed and removed at run time, with
//! LiteLLM's bodies (`model_name`, `litellm_params`, `model_info.id`). A
//! body is validated by the config file's rules before anything is stored,
//! so a bad `litellm_params` is a 400 naming the field and the deployment
//! already serving stays. Every change is published on the control plane:
//! this replica serves it before the answer goes out, the others on their
//! change notification (or their read-through of the name).
//! Deployments of the config file are listed but not changed here.

use super::body::{bad_field, missing, parse};
use super::db::{run, store_err};
use super::query::Query;
use crate::config::EntryError;
use crate::deployment::Deployment;
use crate::error::GatewayError;
use crate::models::{deployment_json, redacted};
use crate::state::Worker;
use crate::store::{Change, ModelRecord};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The body of `/model/new` (LiteLLM's `Deployment`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewModel {
    model_name: String,
    litellm_params: Map<String, Value>,
    #[serde(default)]
    model_info: Map<String, Value>,
}

/// The body of `/model/update` (LiteLLM's `updateDeployment`): the fields
/// given replace the stored ones, key by key; `null` removes a key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateModel {
    model_name: Option<String>,
    #[serde(default)]
    litellm_params: Map<String, Value>,
    #[serde(default)]
    model_info: Map<String, Value>,
}

/// The body of `/model/delete`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteModel {
    id: String,
}

/// A validation failure as a 400 naming the field.
fn invalid(e: EntryError) -> GatewayError {
    bad_field(&e.field, e.problem)
}

/// `model_info.id` when given: a non-empty string.
fn given_id(info: &Map<String, Value>) -> Result<Option<String>, GatewayError> {
    match info.get("id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if !id.is_empty() => Ok(Some(id.clone())),
        Some(_) => Err(bad_field("model_info.id", "must be a non-empty string")),
    }
}

/// A config deployment cannot be changed through the API.
fn config_owned(id: &str) -> GatewayError {
    bad_field(
        "id",
        format!("model '{id}' is defined in the config file; change it there"),
    )
}

/// A stored model as the answers show it.
fn shown(r: &ModelRecord) -> Value {
    json!({
        "model_id": r.model_id,
        "model_name": r.model_name,
        "litellm_params": redacted(&r.litellm_params),
        "model_info": r.model_info,
    })
}

/// `POST /model/new`: `model_info.id` is a new uuid when not given.
pub async fn new(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let req: NewModel = parse(body)?;
    let id = given_id(&req.model_info)?.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let mut model_info = req.model_info;
    model_info.insert("id".into(), Value::String(id.clone()));
    let now = Utc::now();
    let record = ModelRecord {
        model_id: id.clone(),
        model_name: req.model_name,
        litellm_params: req.litellm_params,
        model_info,
        created_at: Some(now),
        created_by: Some("gateway".into()),
        updated_at: Some(now),
        updated_by: Some("gateway".into()),
    };
    let models = &worker.shared.models;
    let dep = models.validate(&record).map_err(invalid)?;
    if models.is_config(&id) {
        return Err(GatewayError::Conflict(format!("model {id}")));
    }
    warn_if_unpriced(worker.shared.unpriced_models, &dep);
    run(worker, move |ctx| async move {
        ctx.store().insert_model(&record).await.map_err(store_err)?;
        ctx.publish(&[Change::Model(record.model_id.clone())]).await;
        Ok(shown(&record))
    })
    .await
}

/// `POST /model/update`: the model named by `model_info.id`.
pub async fn update(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let req: UpdateModel = parse(body)?;
    let id = given_id(&req.model_info)?.ok_or_else(|| missing("model_info.id"))?;
    if worker.shared.models.is_config(&id) {
        return Err(config_owned(&id));
    }
    let unpriced = worker.shared.unpriced_models;
    run(worker, move |ctx| async move {
        let mut record = ctx
            .store()
            .get_model(&id)
            .await
            .map_err(store_err)?
            .ok_or_else(|| GatewayError::NotFound(format!("Model {id}")))?;
        if let Some(name) = req.model_name {
            record.model_name = name;
        }
        merge(&mut record.litellm_params, req.litellm_params);
        merge(&mut record.model_info, req.model_info);
        record.updated_at = Some(Utc::now());
        record.updated_by = Some("gateway".into());
        let dep = ctx.models.validate(&record).map_err(invalid)?;
        warn_if_unpriced(unpriced, &dep);
        if !ctx.store().update_model(&record).await.map_err(store_err)? {
            return Err(GatewayError::NotFound(format!("Model {id}")));
        }
        ctx.publish(&[Change::Model(id)]).await;
        Ok(shown(&record))
    })
    .await
}

/// Names an added or changed deployment that has no price: served at
/// cost 0 (or refused to callers with a budget, as the setting says).
fn warn_if_unpriced(policy: crate::spend::UnpricedModels, dep: &crate::deployment::Deployment) {
    if !dep.is_wildcard() && !crate::spend::is_priced(dep, &dep.upstream_model) {
        let label = format!("model {} (model_name \"{}\")", dep.id, dep.group);
        tracing::warn!("{}", policy.warning(&label, dep));
    }
}

/// Sets the keys of `patch` in `into`; a `null` removes the key.
fn merge(into: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (k, v) in patch {
        if v.is_null() {
            into.remove(&k);
        } else {
            into.insert(k, v);
        }
    }
}

/// `POST /model/delete`.
pub async fn delete(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let req: DeleteModel = parse(body)?;
    let id = req.id;
    if worker.shared.models.is_config(&id) {
        return Err(config_owned(&id));
    }
    run(worker, move |ctx| async move {
        if !ctx.store().delete_model(&id).await.map_err(store_err)? {
            return Err(GatewayError::NotFound(format!("Model {id}")));
        }
        ctx.publish(&[Change::Model(id.clone())]).await;
        Ok(json!({"message": format!("Model: {id} deleted successfully")}))
    })
    .await
}

/// `GET /model/info[?litellm_model_id=]`: every served deployment (or the
/// one asked for), secrets left out; `model_info.cooling_down` says whether
/// the router keeps it out of rotation now (the console's Models page).
/// Unpaged as LiteLLM's: the deployments are the router's, in memory, as
/// many as the config file and `/model/new` made.
pub async fn info(
    worker: &Worker,
    caller: &crate::auth::Principal,
    mut q: Query,
) -> Result<Value, GatewayError> {
    let wanted = q.take("litellm_model_id");
    q.finish()?;
    let keep = |d: &Deployment| wanted.as_deref().is_none_or(|w| *d.id == *w);
    let (data, _) = visible(worker, caller, keep, 0, usize::MAX);
    if let (Some(id), true) = (&wanted, data.is_empty()) {
        return Err(GatewayError::NotFound(format!("Model {id}")));
    }
    Ok(json!({"data": data}))
}

/// Most deployments a page of `/v2/model/info` holds.
const MAX_MODEL_PAGE: usize = 500;

/// `GET /v2/model/info`: LiteLLM's paged deployment list (`page`, `size`
/// up to 500, `search` (part of the model name, ignoring case), `modelId`),
/// shown as `/model/info` shows them, as `{data, total_count,
/// current_page, total_pages, size}`.
pub fn info_v2(
    worker: &Worker,
    caller: &crate::auth::Principal,
    mut q: Query,
) -> Result<Value, GatewayError> {
    let page: usize = q.take_parsed("page")?.unwrap_or(1);
    let size: usize = q.take_parsed("size")?.unwrap_or(50);
    if !(1..=1_000_000).contains(&page) {
        return Err(bad_field("page", "must be from 1 to 1000000"));
    }
    if !(1..=MAX_MODEL_PAGE).contains(&size) {
        return Err(bad_field(
            "size",
            format!("must be from 1 to {MAX_MODEL_PAGE}"),
        ));
    }
    let search = q
        .take("search")
        .filter(|s| !s.is_empty())
        .map(|s| s.to_lowercase());
    let model_id = q.take("modelId").filter(|s| !s.is_empty());
    let model = q.take("model").filter(|s| !s.is_empty());
    for unsupported in ["teamId", "sortBy", "user_models_only", "access_group"] {
        if q.take(unsupported).is_some() {
            return Err(bad_field(
                unsupported,
                "this parameter is not supported here",
            ));
        }
    }
    for ignored in [
        "sortOrder",
        "include_team_models",
        "debug",
        "exclude_auto_routers",
    ] {
        q.take(ignored);
    }
    q.finish()?;
    let keep = |d: &Deployment| {
        model_id.as_deref().is_none_or(|id| *d.id == *id)
            && model.as_deref().is_none_or(|m| *d.group == *m)
            && search
                .as_deref()
                .is_none_or(|s| d.group.to_lowercase().contains(s))
    };
    let (data, total) = visible(worker, caller, keep, (page - 1) * size, size);
    Ok(json!({
        "data": data,
        "total_count": total,
        "current_page": page,
        "total_pages": total.div_ceil(size),
        "size": size,
    }))
}

/// The deployments `caller` may see that `keep` picks, in the router's
/// order: `take` of them from `skip` as `/model/info` shows them, and how
/// many there are in all.
fn visible(
    worker: &Worker,
    caller: &crate::auth::Principal,
    keep: impl Fn(&Deployment) -> bool,
    skip: usize,
    take: usize,
) -> (Vec<Value>, usize) {
    let models = &worker.shared.models;
    let router = models.router();
    let registry = router.registry();
    let mut total = 0;
    let mut data = Vec::new();
    for d in registry.deployments().iter() {
        // A key that is no admin sees the models it may use, as LiteLLM's.
        let allowed = caller.is_admin()
            || caller
                .check_model(&d.group, &registry.access_groups_of(&d.group))
                .is_ok();
        if !allowed || !keep(d) {
            continue;
        }
        if total >= skip && data.len() < take {
            let mut shown = deployment_json(d, models.stored(&d.id).as_ref());
            shown["model_info"]["cooling_down"] = router.is_cooling(&d.id).into();
            data.push(shown);
        }
        total += 1;
    }
    (data, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sets_and_removes_keys() {
        let mut params = json!({"model": "openai/x", "api_base": "http://a", "rpm": 1});
        let patch = json!({"api_base": "http://b", "rpm": null});
        let into = params.as_object_mut().unwrap();
        merge(into, patch.as_object().unwrap().clone());
        assert_eq!(params, json!({"model": "openai/x", "api_base": "http://b"}));
    }

    #[test]
    fn ids_must_be_non_empty_strings() {
        let info = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(given_id(&info(json!({}))).unwrap(), None);
        assert_eq!(
            given_id(&info(json!({"id": "m1"}))).unwrap().as_deref(),
            Some("m1")
        );
        for bad in [json!({"id": 3}), json!({"id": ""})] {
            let err = given_id(&info(bad)).unwrap_err();
            assert!(
                matches!(err, GatewayError::BadField { field, .. } if field == "model_info.id")
            );
        }
    }
}
