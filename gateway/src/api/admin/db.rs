//! Store access for the management handlers: every call runs on the control
//! plane; store errors become client errors; lookups that miss become 404s.

use super::body::bad_field;
use crate::auth::{abbreviate, hash_key, token_hex};
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::{KeyRecord, RowKind, StoreError, TeamRecord, UserRecord};
use crate::sync::SyncCtx;
use serde::Serialize;
use serde_json::{Map, Value};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What a management job gets on the control plane: the store and the
/// caches its changes refresh.
pub type Ctx = Arc<SyncCtx>;

/// How long a management call may take on the control plane.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `f` on the control plane and waits for its result; a busy, stopped
/// or late control plane is a 503.
pub async fn run<T, F, Fut>(worker: &Worker, f: F) -> Result<T, GatewayError>
where
    T: Send + 'static,
    F: FnOnce(Ctx) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, GatewayError>> + Send + 'static,
{
    let caches = worker.shared.caches.clone();
    worker
        .shared
        .control
        .call(TIMEOUT, move |ctx| f(caches.on(ctx)))
        .await
        .map_err(|e| GatewayError::Store(e.to_string()))?
}

/// A store failure as the client sees it: a collision is a 409, anything
/// else a 503.
pub fn store_err(e: StoreError) -> GatewayError {
    match e {
        StoreError::Conflict(what) => GatewayError::Conflict(what),
        other => GatewayError::Store(other.to_string()),
    }
}

/// The hashed token of a key given plain (`sk-...`) or already hashed, as
/// LiteLLM accepts both.
pub fn token_of(key: &str) -> String {
    if key.starts_with("sk-") {
        token_hex(&hash_key(key))
    } else {
        key.to_ascii_lowercase()
    }
}

/// A key as given, safe to echo in an error.
pub fn shown(key: &str) -> String {
    if key.starts_with("sk-") {
        abbreviate(key)
    } else {
        key.to_string()
    }
}

/// The key named by `given` (plain or hashed), or a 404.
pub async fn key(ctx: &Ctx, given: &str) -> Result<KeyRecord, GatewayError> {
    ctx.store()
        .get_key(&token_of(given))
        .await
        .map_err(store_err)?
        .ok_or_else(|| GatewayError::NotFound(format!("Key {}", shown(given))))
}

/// The team `id`, or a 404.
pub async fn team(ctx: &Ctx, id: &str) -> Result<TeamRecord, GatewayError> {
    ctx.store()
        .get_team(id)
        .await
        .map_err(store_err)?
        .ok_or_else(|| GatewayError::NotFound(format!("Team {id}")))
}

/// The user `id`, or a 404.
pub async fn user(ctx: &Ctx, id: &str) -> Result<UserRecord, GatewayError> {
    ctx.store()
        .get_user(id)
        .await
        .map_err(store_err)?
        .ok_or_else(|| GatewayError::NotFound(format!("User {id}")))
}

/// Refuses a `team_id` field that names no team (400, not 404: the request
/// is wrong, not the path).
pub async fn ensure_team(ctx: &Ctx, id: Option<&str>) -> Result<(), GatewayError> {
    let Some(id) = id else { return Ok(()) };
    match ctx.store().get_team(id).await.map_err(store_err)? {
        Some(_) => Ok(()),
        None => Err(bad_field("team_id", format!("team '{id}' does not exist"))),
    }
}

/// The fields of `after` that differ from `before`, when every one of them
/// is a column [`Store::patch`](crate::store::Store::patch) writes (so an
/// update writes only what it changes); `None` when one is not. The
/// record's own `updated_at` is left to the store.
pub fn changed_columns<T: Serialize>(
    kind: RowKind,
    before: &T,
    after: &T,
) -> Option<Map<String, Value>> {
    let (Value::Object(old), Value::Object(new)) = (
        serde_json::to_value(before).ok()?,
        serde_json::to_value(after).ok()?,
    ) else {
        return None;
    };
    let mut changed = Map::new();
    for (k, v) in new {
        if k == "updated_at" || old.get(&k) == Some(&v) {
            continue;
        }
        if !kind.columns().contains(&k.as_str()) {
            return None;
        }
        changed.insert(k, v);
    }
    Some(changed)
}

/// Writes the changes from `before` to `after` of row `id`: only the
/// changed columns when [`changed_columns`] allows (nothing when nothing
/// changed), else the whole row through `full`. `false` when the row is
/// gone.
pub async fn write_changes<T, F, Fut>(
    ctx: &Ctx,
    kind: RowKind,
    id: &str,
    (before, after): (&T, &T),
    full: F,
) -> Result<bool, GatewayError>
where
    T: Serialize,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<bool, StoreError>>,
{
    match changed_columns(kind, before, after) {
        Some(fields) if fields.is_empty() => Ok(true),
        Some(fields) => ctx
            .store()
            .patch(kind, id, &fields)
            .await
            .map_err(store_err),
        None => full().await.map_err(store_err),
    }
}

/// Loads a new key into this replica's cache so its first request needs no
/// read-through.
pub async fn warm(ctx: &Ctx, token: &str) {
    if let Err(e) = ctx.keys.load(ctx.store(), token).await {
        tracing::warn!(error = %e, "could not cache a new key; it will be read through on first use");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_plain_keys_and_keeps_tokens() {
        let token = token_of("sk-abc");
        assert_eq!(token, token_hex(&hash_key("sk-abc")));
        assert_eq!(token_of(&token.to_uppercase()), token);
        assert_eq!(shown("sk-abcdefghijkl"), "sk-...ijkl");
        assert_eq!(shown(&token), token);
    }
}
