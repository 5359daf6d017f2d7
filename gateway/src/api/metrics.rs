//! `GET /metrics`: the Prometheus exposition, served when LiteLLM's
//! `prometheus` callback (or `gateway_settings.metrics.enabled`) is on. It
//! needs an admin credential unless
//! `litellm_settings.require_auth_for_metrics_endpoint` is false, as in
//! LiteLLM. The text is rendered on the control plane's blocking pool, so a
//! scrape never holds up a core.

use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::state::Worker;
use std::time::Duration;

/// Longest a scrape waits for the exposition.
const RENDER_TIMEOUT: Duration = Duration::from_secs(10);

/// Prometheus' text format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics`.
pub async fn scrape(worker: &Worker, out: &mut Responder<'_>) -> Result<(), GatewayError> {
    let metrics = worker.shared.metrics.clone();
    let rendered = worker
        .shared
        .control
        .call(RENDER_TIMEOUT, move |_| async move {
            tokio::task::spawn_blocking(move || metrics.render()).await
        })
        .await;
    let body = match rendered {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => return Err(GatewayError::Internal("the metrics could not be rendered")),
        Err(_) => {
            return Err(GatewayError::Unavailable(
                "the metrics are not available right now",
            ))
        }
    };
    let _ = out
        .send(200, HeadBuilder::new(200), CONTENT_TYPE, body.as_bytes())
        .await;
    Ok(())
}
