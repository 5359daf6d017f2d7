//! Health probes for orchestrators; no credential needed, as in LiteLLM.

use crate::error::GatewayError;
use crate::server::{HeadBuilder, Responder};
use crate::state::Worker;

/// `GET /health/liveliness`: the process serves requests.
pub async fn liveliness(out: &mut Responder<'_>) -> Result<(), GatewayError> {
    let _ = out
        .send(
            200,
            HeadBuilder::new(200),
            "application/json",
            b"\"I'm alive!\"",
        )
        .await;
    Ok(())
}

/// `GET /health/readiness`: ready unless shutting down.
pub async fn readiness(worker: &Worker, out: &mut Responder<'_>) -> Result<(), GatewayError> {
    if worker.shared.is_shutting_down() {
        return Err(GatewayError::Unavailable("shutting down"));
    }
    let body = serde_json::json!({
        "status": "healthy",
        "db": "Not connected",
        "cache": null,
        "litellm_version": crate::VERSION,
        "success_callbacks": [],
    });
    let _ = out
        .send(
            200,
            HeadBuilder::new(200),
            "application/json",
            &serde_json::to_vec(&body).expect("json"),
        )
        .await;
    Ok(())
}
