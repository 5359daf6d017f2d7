//! Health: probes for orchestrators (no credential needed, as in LiteLLM)
//! and `GET /health`, the health of every deployment (admin).

use super::admin::query::Query;
use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::state::Worker;
use std::sync::Arc;
use std::time::Duration;

/// Time the control plane gets beyond the probe timeout to answer.
const CHECK_SLACK: Duration = Duration::from_secs(5);

/// `GET /health[?model=<group or provider/model>][&model_id=<id>]`:
/// LiteLLM's `healthy_endpoints` / `unhealthy_endpoints` with their counts,
/// from the last background check when those run, else from a check made
/// now on the control plane. A request for one model with nothing healthy
/// is a 503, as in LiteLLM.
pub async fn deployments(
    worker: &Worker,
    head: &RequestHead,
    out: &mut Responder<'_>,
) -> Result<(), GatewayError> {
    let mut query = Query::parse(head.query())?;
    let model = query.take("model");
    let model_id = query.take("model_id");
    query.finish()?;
    let wanted = |group: &str, shown: &str, id: &str| {
        model.as_deref().is_none_or(|m| m == group || m == shown)
            && model_id.as_deref().is_none_or(|m| m == id)
    };
    let health = worker.shared.health.clone();
    let background = health.settings().background;
    let report = match health.latest().filter(|_| background) {
        Some(report) => report,
        None => {
            let router = worker.shared.models.router();
            let deps: Vec<_> = router
                .registry()
                .deployments()
                .iter()
                .filter(|d| {
                    let shown = format!("{}/{}", d.provider_name, d.upstream_model);
                    wanted(&d.group, &shown, &d.id)
                })
                .cloned()
                .collect();
            let timeout = health.settings().timeout + CHECK_SLACK;
            let report = worker
                .shared
                .control
                .call(timeout, move |_| async move {
                    Arc::new(health.check(&deps).await)
                })
                .await
                .map_err(|_| GatewayError::Unavailable("the health check did not finish"))?;
            if background {
                crate::health::steer(&report, &worker.shared.models);
            }
            report
        }
    };
    let (body, healthy) = report.body(|e| {
        let shown = e.shown["model"].as_str().unwrap_or_default();
        wanted(&e.group, shown, &e.model_id)
    });
    let status = if (model.is_some() || model_id.is_some()) && healthy == 0 {
        503
    } else {
        200
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let _ = out
        .send(status, HeadBuilder::new(status), "application/json", &body)
        .await;
    Ok(())
}

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

/// Longest the readiness probe waits for the database's answer.
const DB_PING_TIMEOUT: Duration = Duration::from_secs(1);

/// `GET /health/readiness`, for anyone (load balancers, orchestrators):
/// ready unless shutting down, with LiteLLM's public fields only, `status`
/// and `db` (`connected`, `disconnected` or `Not connected` without a
/// database, asked now). With `allow_public_health_readiness_details` it
/// answers what [`readiness_details`] does, as LiteLLM does. Postgres or
/// Redis down does not make it a 503: the data plane keeps serving
/// (LiteLLM's `allow_requests_on_db_unavailable`).
pub async fn readiness(worker: &Worker, out: &mut Responder<'_>) -> Result<(), GatewayError> {
    if worker.shared.is_shutting_down() {
        return Err(GatewayError::Unavailable("shutting down"));
    }
    if worker.shared.health.settings().public_readiness_details {
        return readiness_details(worker, out).await;
    }
    let (db, _) = database_state(worker).await;
    let body = serde_json::json!({"status": "healthy", "db": db});
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

/// The database's state (asked now, with a deadline) and whether this
/// replica hears the others' changes, as readiness reports them.
async fn database_state(worker: &Worker) -> (&'static str, &'static str) {
    let shared = &worker.shared;
    if !shared.database {
        return ("Not connected", "Not connected");
    }
    let ping = shared
        .control
        .call(
            DB_PING_TIMEOUT,
            |ctx| async move { ctx.store().ping().await },
        )
        .await;
    let db = if matches!(ping, Ok(Ok(()))) {
        "connected"
    } else {
        "disconnected"
    };
    let heard = crate::sync::listener::is_listening();
    (db, if heard { "connected" } else { "disconnected" })
}

/// `GET /health/readiness/details` (a caller with a key, or the console's
/// session): LiteLLM's fields, `status`, `db`, `cache` (the response
/// cache's type, else `redis` when Redis is configured),
/// `success_callbacks`, `litellm_version`; and this gateway's: `redis`
/// (`connected`, `disconnected`, `reconnecting`, from the limiter's circuit
/// breaker), `change_listener` (whether other replicas' changes are
/// heard), the rate limiter (where it counts, script calls sent to Redis,
/// breaker), panics caught and the trace exporter's counts.
pub async fn readiness_details(
    worker: &Worker,
    out: &mut Responder<'_>,
) -> Result<(), GatewayError> {
    let shared = &worker.shared;
    let limiter = &shared.limiter;
    let breaker = limiter.breaker_state().map(|b| match b {
        crate::redis::BreakerState::Closed => "closed",
        crate::redis::BreakerState::Open => "open",
        crate::redis::BreakerState::HalfOpen => "half_open",
    });
    let redis = limiter.breaker_state().map(|b| match b {
        crate::redis::BreakerState::Closed => "connected",
        crate::redis::BreakerState::Open => "disconnected",
        crate::redis::BreakerState::HalfOpen => "reconnecting",
    });
    let redis_configured = limiter.settings().redis_url.is_some();
    let (db, listener) = database_state(worker).await;
    let mut callbacks = Vec::new();
    if shared.metrics.enabled() {
        callbacks.push("prometheus");
    }
    if shared.tracer.enabled() {
        callbacks.push("otel");
    }
    let (exported, dropped) = shared.tracer.counts();
    let body = serde_json::json!({
        "status": "healthy",
        "db": db,
        // The response cache's type when it is on (LiteLLM's), else Redis
        // when the limiter has one.
        "cache": match shared.cache.load().as_deref().map(|c| c.settings().backend) {
            Some(crate::cache::Backend::Local) => Some("local"),
            Some(crate::cache::Backend::Redis) => Some("redis"),
            None => redis_configured.then_some("redis"),
        },
        "redis": redis,
        "change_listener": listener,
        "litellm_version": crate::VERSION,
        "success_callbacks": callbacks,
        "limiter": {
            "mode": limiter.mode().as_str(),
            "redis_calls": limiter.redis_calls(),
            "breaker": breaker,
        },
        "panics_caught": crate::panic_guard::caught(),
        "otel": shared.tracer.enabled().then(|| serde_json::json!({
            "spans_exported": exported,
            "spans_dropped": dropped,
        })),
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
