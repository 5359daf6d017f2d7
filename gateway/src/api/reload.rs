//! `POST /config/reload` (admin): re-reads the config file as SIGHUP does
//! (see `crate::reload`) and answers what changed, or a 400 naming the
//! invalid entry (nothing changed then).

use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::state::Worker;
use serde_json::json;
use std::time::Duration;

/// Longest a reload may take.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// `POST /config/reload`.
pub async fn reload(worker: &Worker, out: &mut Responder<'_>) -> Result<(), GatewayError> {
    let shared = worker.shared.clone();
    let done = worker
        .shared
        .control
        .call(RELOAD_TIMEOUT, move |_| async move {
            shared
                .reloader
                .reload(&shared.limiter, &shared.alerts, &shared.models)
                .await
        })
        .await
        .map_err(|_| GatewayError::Unavailable("the config reload did not finish"))?;
    let report = done.map_err(GatewayError::ConfigRejected)?;
    let m = &report.models;
    let body = json!({
        "status": "reloaded",
        "deployments": {"kept": m.kept, "changed": m.changed, "added": m.added, "removed": m.removed},
        "not_reloaded": report.not_reloaded,
    });
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let _ = out
        .send(200, HeadBuilder::new(200), "application/json", &body)
        .await;
    Ok(())
}
