//! Issuing keys: new plain keys (random or chosen), their rows and their
//! insertion. Only a key's sha256 is stored; the plain key is shown once, in
//! the answer that created it.

use super::body::bad_field;
use super::db::{ensure_team, store_err, token_of, warm, Ctx};
use super::object;
use crate::auth::abbreviate;
use crate::error::GatewayError;
use crate::store::{Change, KeyRecord};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

/// A new key: `sk-` and 32 URL-safe characters, each 6 bits from the
/// operating system's CSPRNG (192 bits in all).
pub fn random_key() -> Result<String, GatewayError> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|_| GatewayError::Unavailable("no system randomness for a new key"))?;
    let body: String = bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(b & 63)]))
        .collect();
    Ok(format!("sk-{body}"))
}

/// Checks a key chosen by the caller (`key` or `new_key`).
pub fn custom_key(field: &str, key: String) -> Result<String, GatewayError> {
    if !key.starts_with("sk-") || key.len() == 3 {
        return Err(bad_field(field, "a virtual key must start with 'sk-'"));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad_field(
            field,
            "a virtual key may hold only visible ASCII characters",
        ));
    }
    Ok(key)
}

/// The row of a new key `plain`, created `now`.
pub fn new_record(plain: &str, now: DateTime<Utc>) -> KeyRecord {
    KeyRecord {
        token: token_of(plain),
        key_name: Some(abbreviate(plain)),
        created_at: Some(now),
        updated_at: Some(now),
        ..Default::default()
    }
}

/// Refuses an alias another key already has (LiteLLM keeps them unique).
pub async fn ensure_alias_free(
    ctx: &Ctx,
    alias: Option<&str>,
    own: &str,
) -> Result<(), GatewayError> {
    let Some(alias) = alias else { return Ok(()) };
    let keys = ctx.store().list_keys(None, None).await.map_err(store_err)?;
    if keys
        .iter()
        .any(|k| k.key_alias.as_deref() == Some(alias) && k.token != own)
    {
        return Err(bad_field(
            "key_alias",
            format!("'{alias}' is already the alias of another key"),
        ));
    }
    Ok(())
}

/// Inserts a new key after checking its team and alias, publishes it and
/// caches it on this replica.
pub async fn create(ctx: &Ctx, rec: &KeyRecord) -> Result<(), GatewayError> {
    ensure_team(ctx, rec.team_id.as_deref()).await?;
    ensure_alias_free(ctx, rec.key_alias.as_deref(), &rec.token).await?;
    ctx.store().insert_key(rec).await.map_err(store_err)?;
    ctx.publish(&[Change::Key(rec.token.clone())]).await;
    warm(ctx, &rec.token).await;
    Ok(())
}

/// LiteLLM's `GenerateKeyResponse`: the row, the plain key (only here) and
/// the hash as `token` and `token_id`.
pub fn issued(rec: &KeyRecord, plain: &str, duration: Option<String>) -> Map<String, Value> {
    let mut out = object(rec);
    out.insert("key".into(), plain.into());
    out.insert("token_id".into(), rec.token.clone().into());
    out.insert("duration".into(), duration.into());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_keys_are_long_url_safe_and_distinct() {
        let a = random_key().unwrap();
        let b = random_key().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 35);
        assert!(a[3..]
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
    }

    #[test]
    fn custom_keys_need_the_prefix() {
        assert!(custom_key("key", "sk-mine-1".into()).is_ok());
        for bad in ["mine", "sk-", "sk-has space"] {
            let err = custom_key("key", bad.into()).unwrap_err();
            assert_eq!(err.param(), Some("key"), "{bad}");
        }
    }
}
