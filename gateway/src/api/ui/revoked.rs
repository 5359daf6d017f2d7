//! Console logouts shared by the fleet. When the fleet counts in Redis (the
//! limiter's mode `redis` or `lease`, its client and breaker), a logout
//! sets `{gateway:console}:logout:<id>` until the session would have
//! expired; else, with a database, it is a row of
//! `gateway_console_logouts` until then. Every use of a session on any
//! replica asks the one that holds logouts (one round trip, on the
//! console's calls only, never on an LLM request). While it does not
//! answer, a replica goes by the logouts it has seen itself.

use crate::limits::{Limiter, LuaScript, ScriptCall};
use crate::state::Worker;
use crate::store::StoreError;
use chrono::{DateTime, Utc};
use std::future::Future;
use std::time::Duration;

/// How long a logout's write or a session's look-up may take in Postgres.
const DB_TIMEOUT: Duration = Duration::from_secs(2);

/// Marks a session logged out: `KEYS[1]` for `ARGV[1]` seconds.
static MARK: LuaScript =
    LuaScript::new("redis.call('SET', KEYS[1], '1', 'EX', ARGV[1])\nreturn {1}\n");
/// Whether a session is logged out: `{1}` when `KEYS[1]` is set.
static CHECK: LuaScript = LuaScript::new("return {redis.call('EXISTS', KEYS[1])}\n");

/// The Redis key of session `id`'s logout.
fn key(id: &str) -> String {
    format!("{{gateway:console}}:logout:{id}")
}

/// Where the fleet's logouts are kept.
enum Shared<'a> {
    Redis(&'a Limiter),
    Database,
    /// One replica without a database: its own list is the fleet's.
    Nowhere,
}

fn shared(worker: &Worker) -> Shared<'_> {
    let limiter = &worker.shared.limiter;
    if limiter.shared() {
        Shared::Redis(limiter)
    } else if worker.shared.database {
        Shared::Database
    } else {
        Shared::Nowhere
    }
}

/// Tells the fleet session `id` ended, remembered for `ttl_secs` (at least
/// one) from `now` (Unix seconds); whether the fleet's store confirmed it
/// (`true` when there is no fleet to tell).
pub async fn announce(worker: &Worker, id: &str, now: u64, ttl_secs: u64) -> bool {
    let ttl_secs = ttl_secs.max(1);
    match shared(worker) {
        Shared::Redis(limiter) => {
            let call = ScriptCall {
                script: &MARK,
                keys: vec![key(id)],
                args: vec![ttl_secs.to_string()],
            };
            limiter.eval(call, None, |_| None, None).await.is_some()
        }
        Shared::Database => {
            let Some(expires) = now
                .checked_add(ttl_secs)
                .and_then(|s| i64::try_from(s).ok())
                .and_then(|s| DateTime::<Utc>::from_timestamp(s, 0))
            else {
                return false;
            };
            let id = id.to_string();
            on_database(worker, move |ctx| async move {
                ctx.store().end_console_session(&id, expires).await
            })
            .await
            .is_some()
        }
        Shared::Nowhere => true,
    }
}

/// Whether another replica logged session `id` out (`false` with no fleet
/// store, or while it does not answer).
pub async fn logged_out_elsewhere(worker: &Worker, id: &str) -> bool {
    match shared(worker) {
        Shared::Redis(limiter) => {
            let call = ScriptCall {
                script: &CHECK,
                keys: vec![key(id)],
                args: Vec::new(),
            };
            matches!(
                limiter.eval(call, None, |_| None, None).await.as_deref(),
                Some([1])
            )
        }
        Shared::Database => {
            let id = id.to_string();
            on_database(worker, move |ctx| async move {
                ctx.store().console_session_ended(&id).await
            })
            .await
            .unwrap_or(false)
        }
        Shared::Nowhere => false,
    }
}

/// Runs `f` with the store on the control plane; `None` when it failed or
/// took longer than [`DB_TIMEOUT`] (logged).
async fn on_database<T, F, Fut>(worker: &Worker, f: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce(std::sync::Arc<crate::control::ControlCtx>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
{
    match worker.shared.control.call(DB_TIMEOUT, f).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "console logouts: the database failed");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "console logouts: the control plane did not answer");
            None
        }
    }
}
