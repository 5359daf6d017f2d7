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

/// `GET /health/readiness`: ready unless shutting down. Also reports the
/// rate limiter: where it counts (`local`, `redis`, `lease`), the script
/// calls it sent to Redis since start, and its circuit breaker.
pub async fn readiness(worker: &Worker, out: &mut Responder<'_>) -> Result<(), GatewayError> {
    if worker.shared.is_shutting_down() {
        return Err(GatewayError::Unavailable("shutting down"));
    }
    let limiter = &worker.shared.limiter;
    let breaker = limiter.breaker_state().map(|b| match b {
        crate::limits::BreakerState::Closed => "closed",
        crate::limits::BreakerState::Open => "open",
        crate::limits::BreakerState::HalfOpen => "half_open",
    });
    let body = serde_json::json!({
        "status": "healthy",
        "db": "Not connected",
        "cache": null,
        "litellm_version": crate::VERSION,
        "success_callbacks": [],
        "limiter": {
            "mode": limiter.mode().as_str(),
            "redis_calls": limiter.redis_calls(),
            "breaker": breaker,
        },
        "panics_caught": crate::panic_guard::caught(),
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
