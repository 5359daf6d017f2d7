//! The batch poller: a background loop on one core of each replica that
//! polls the batches created through the gateway until they end, so a
//! finished batch is charged even when nobody asks for it again (LiteLLM's
//! `CheckBatchCost` job, every `proxy_batch_polling_interval` seconds).
//!
//! Each round claims the batches due in the store (`Managed::due`: their
//! next poll moved forward under the row's lock, so one replica polls a
//! batch per interval), at most [`PER_ROUND`] of them, and polls them one
//! at a time, each call within [`CALL_TIMEOUT`] (an output file read for
//! its charge within the files API's timeout). An answer is handled as a
//! client's poll is (`files::after_poll`): files recorded, the status
//! stored (a final one ends the polls), a finished batch charged once in
//! the fleet (`files::charge_batch`, the same claim as a client's poll).
//! A batch is polled for at most [`MAX_AGE`] after its creation (LiteLLM's
//! staleness cut-off).
//!
//! The first round runs [`FIRST_ROUND`] after start, not a whole interval
//! (an hour by default) later: batches left open when a replica stopped
//! are polled as soon as it is back, and a fleet redeployed more often than
//! its interval still polls. LiteLLM's scheduler waits the interval (plus
//! up to 30 s) before its first `CheckBatchCost`. A round that cannot read
//! the store is tried again after [`RETRY`] rather than a whole interval.

use super::files;
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::providers::files::FilesOp;
use crate::state::Worker;
use crate::store::ManagedObject;
use chrono::Utc;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most batches polled in one round (LiteLLM's
/// `MAX_OBJECTS_PER_POLL_CYCLE`).
const PER_ROUND: usize = 50;

/// Longest a batch is polled after its creation (LiteLLM's
/// `MANAGED_OBJECT_STALENESS_CUTOFF_DAYS`).
const MAX_AGE: chrono::TimeDelta = chrono::TimeDelta::days(7);

/// Longest one poll's upstream call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest batch object read.
const MAX_BATCH: usize = 1 << 20;

/// How long after start the first round runs (the store's connection is
/// made meanwhile).
const FIRST_ROUND: Duration = Duration::from_secs(2);

/// How long after a round that could not read the store the next runs.
const RETRY: Duration = Duration::from_secs(30);

/// Polls due batches soon after start, then every `every`, for as long as
/// the core runs.
pub async fn run(worker: Rc<Worker>, every: Duration) {
    let interval = chrono::TimeDelta::from_std(every).unwrap_or(chrono::TimeDelta::hours(1));
    let mut wait = every.min(FIRST_ROUND);
    loop {
        monoio::time::sleep(wait).await;
        wait = every;
        if worker.shared.is_shutting_down() {
            return;
        }
        let now = Utc::now();
        let due = worker
            .shared
            .managed
            .due(now + interval, now - MAX_AGE, PER_ROUND)
            .await;
        let due = match due {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "the batch poller could not read the due batches");
                wait = every.min(RETRY);
                continue;
            }
        };
        for batch in due {
            let batch = Arc::new(batch);
            if let Err(e) = Box::pin(poll(&worker, &batch)).await {
                tracing::warn!(batch = %batch.id, error = %e, "the batch poller could not poll a batch");
            }
        }
    }
}

/// Polls one batch and handles its answer.
async fn poll(worker: &Worker, batch: &Arc<ManagedObject>) -> Result<(), GatewayError> {
    let upstream = files::upstream_of(worker, None, &batch.route)?;
    let op = FilesOp::RetrieveBatch(&batch.id);
    let target = upstream
        .api
        .target(&upstream.base.path, op, "", &upstream.version);
    let head = files::request_head("GET", &upstream, &target, "", 0);
    let deadline = Instant::now() + CALL_TIMEOUT;
    let unreachable = |e| files::unreachable(&upstream, e);
    let mut resp = Box::pin(worker.upstream.send(&upstream.base, head, &[], deadline))
        .await
        .map_err(unreachable)?;
    let status = resp.head.status;
    let answer = Box::pin(resp.read_to_end(MAX_BATCH, CALL_TIMEOUT))
        .await
        .map_err(unreachable)?;
    if status == 404 {
        // Gone upstream: nothing more to poll or charge.
        worker.shared.managed.polled(&batch.id, "not_found", true);
        return Ok(());
    }
    if status != 200 {
        return Err(GatewayError::UpstreamProtocol {
            provider: upstream.api.name().to_string(),
            reason: format!("the batch answered {status}"),
        });
    }
    let answer: serde_json::Value =
        serde_json::from_slice(&answer).map_err(|e| GatewayError::UpstreamProtocol {
            provider: upstream.api.name().to_string(),
            reason: format!("the batch is not JSON: {e}"),
        })?;
    tracing::info!(
        target: "gateway::batches",
        batch = %batch.id,
        status = answer["status"].as_str().unwrap_or_default(),
        "batch polled"
    );
    if let Some(output) = Box::pin(files::after_poll(worker, batch, &answer)).await {
        let creator = creator(worker, &batch.key);
        Box::pin(files::charge_batch(
            worker,
            creator.as_ref(),
            &upstream,
            batch,
            &output,
        ))
        .await;
    }
    Ok(())
}

/// The key that created a batch, when this replica has it cached (its
/// budgets are then settled here at once; otherwise the spend row reaches
/// them through the store).
fn creator(worker: &Worker, token: &str) -> Option<Principal> {
    let auth = &worker.shared.auth;
    match auth.master_token() {
        Some(master) if master == token => return Some(Principal::Master),
        None if token.is_empty() => return Some(Principal::Anonymous),
        _ => {}
    }
    let hash: crate::auth::TokenHash = hex::decode(token).ok()?.try_into().ok()?;
    auth.keys().get(&hash).map(Principal::Key)
}
