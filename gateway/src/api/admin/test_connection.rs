//! `POST /health/test_connection` (LiteLLM's): one minimal request to one
//! deployment, now, answered as `{"status": "success" | "error", "result"}`
//! with what `/health` shows of it (and the upstream's error when it fails).
//! The console's "Test" button calls it for a row of the Models page.
//!
//! Which deployment: the served one `model_info.id` names (404 when there is
//! none), else the served one `litellm_params.model` names (a model group,
//! or a `provider/model` string) when nothing else is sent; else one built
//! from the request's `litellm_params` alone, by the config file's rules, so
//! a model can be tried before it is added. A served deployment is tested as
//! served: its stored credentials are never sent anywhere the request
//! chooses. `os.environ/` references in the request are refused, as in
//! LiteLLM. Only chat probes exist here (`mode` absent or `chat`).

use super::body::{bad_field, parse};
use crate::deployment::Deployment;
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::ModelRecord;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// Time the control plane gets beyond the probe timeout to answer.
const SLACK: Duration = Duration::from_secs(5);

/// The body (LiteLLM's `test_model_connection` parameters).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestBody {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    litellm_params: Map<String, Value>,
    #[serde(default)]
    model_info: Map<String, Value>,
}

/// Whether any string in `v` is an `os.environ/` reference.
fn names_env(v: &Value) -> bool {
    match v {
        Value::String(s) => s.starts_with("os.environ/"),
        Value::Array(items) => items.iter().any(names_env),
        Value::Object(m) => m.values().any(names_env),
        _ => false,
    }
}

/// The served deployment `model_info.id` or `litellm_params.model` names.
fn served(worker: &Worker, req: &TestBody) -> Result<Option<Arc<Deployment>>, GatewayError> {
    let router = worker.shared.models.router();
    let deps = router.registry().deployments();
    match req.model_info.get("id") {
        None | Some(Value::Null) => {}
        Some(Value::String(id)) if !id.is_empty() => {
            if req.litellm_params.keys().any(|k| k != "model") {
                return Err(bad_field(
                    "litellm_params",
                    "a served deployment is tested as served: send only model_info.id, \
                     or litellm_params without model_info.id to try other settings",
                ));
            }
            return deps
                .iter()
                .find(|d| *d.id == **id)
                .cloned()
                .map(Some)
                .ok_or_else(|| GatewayError::NotFound(format!("Model {id}")));
        }
        Some(_) => return Err(bad_field("model_info.id", "must be a non-empty string")),
    }
    let model = match req.litellm_params.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m,
        None | Some(Value::Null) => return Err(bad_field("litellm_params.model", "missing")),
        Some(_) => return Err(bad_field("litellm_params.model", "must be a string")),
    };
    if req.litellm_params.len() > 1 {
        return Ok(None);
    }
    let by_group = deps.iter().find(|d| d.group == *model);
    let by_model = || {
        deps.iter()
            .find(|d| format!("{}/{}", d.provider_name, d.upstream_model) == *model)
    };
    Ok(by_group.or_else(by_model).cloned())
}

/// A deployment from the request's `litellm_params` alone.
fn built(worker: &Worker, req: TestBody) -> Result<Arc<Deployment>, GatewayError> {
    let record = ModelRecord {
        model_id: "test_model".into(),
        model_name: "test_model".into(),
        litellm_params: req.litellm_params,
        model_info: Map::new(),
        created_at: None,
        created_by: None,
        updated_at: None,
        updated_by: None,
    };
    let dep = worker
        .shared
        .models
        .validate(&record)
        .map_err(|e| bad_field(&e.field, e.problem))?;
    Ok(Arc::new(dep))
}

/// `POST /health/test_connection`.
pub async fn test(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let req: TestBody = parse(body)?;
    match req.mode.as_deref() {
        None | Some("chat") => {}
        Some(other) => {
            return Err(bad_field(
                "mode",
                format!("mode '{other}' is not tested by this gateway: only chat"),
            ))
        }
    }
    if names_env(&Value::Object(req.litellm_params.clone())) {
        return Err(bad_field(
            "litellm_params",
            "os.environ/ references are not accepted in a test request",
        ));
    }
    let dep = match served(worker, &req)? {
        Some(dep) => dep,
        None => built(worker, req)?,
    };
    let health = worker.shared.health.clone();
    let timeout = health.settings().timeout + SLACK;
    let result = worker
        .shared
        .control
        .call(timeout, move |_| async move { health.test(&dep).await })
        .await
        .map_err(|_| GatewayError::Unavailable("the test request did not finish"))?;
    let status = if result.healthy { "success" } else { "error" };
    Ok(json!({"status": status, "result": result.shown}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_references_are_found_anywhere() {
        assert!(names_env(&json!({"api_key": "os.environ/OPENAI_API_KEY"})));
        assert!(names_env(&json!({"headers": {"x": ["os.environ/A"]}})));
        assert!(!names_env(&json!({"model": "openai/x", "rpm": 3})));
    }
}
