//! `/v1/models`: the model groups a caller may use.

use crate::auth::Principal;
use crate::error::GatewayError;
use crate::server::{HeadBuilder, Responder};
use crate::state::Worker;
use serde_json::{json, Value};

fn model_object(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": 1677610602, "owned_by": "openai"})
}

/// `GET /v1/models`.
pub async fn list(
    worker: &Worker,
    _caller: &Principal,
    out: &mut Responder<'_>,
) -> Result<(), GatewayError> {
    let router = worker.shared.models.router();
    let data: Vec<Value> = router
        .registry()
        .group_names()
        .iter()
        .map(|n| model_object(n))
        .collect();
    let body = serde_json::to_vec(&json!({"object": "list", "data": data})).expect("json");
    let _ = out
        .send(200, HeadBuilder::new(200), "application/json", &body)
        .await;
    Ok(())
}

/// `GET /v1/models/{id}`.
pub async fn get(
    worker: &Worker,
    _caller: &Principal,
    id: &str,
    out: &mut Responder<'_>,
) -> Result<(), GatewayError> {
    if !worker.shared.models.router().registry().has_group(id) {
        return Err(GatewayError::ModelNotFound(id.to_string()));
    }
    let body = serde_json::to_vec(&model_object(id)).expect("json");
    let _ = out
        .send(200, HeadBuilder::new(200), "application/json", &body)
        .await;
    Ok(())
}
