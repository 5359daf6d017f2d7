//! Rules a virtual key must pass: not blocked, not expired, model allowed for
//! the key, its team and its user.

use super::KeyEntry;
use crate::error::GatewayError;
use chrono::{DateTime, Utc};

/// Refuses blocked or expired keys and keys of blocked teams.
pub fn key_usable(entry: &KeyEntry, now: DateTime<Utc>) -> Result<(), GatewayError> {
    if entry.record.blocked {
        return Err(GatewayError::KeyBlocked("key".into()));
    }
    if let Some(team) = &entry.team {
        if team.record.blocked {
            return Err(GatewayError::KeyBlocked(format!(
                "team {}",
                team.record.team_id
            )));
        }
    }
    if let Some(expires) = entry.record.expires {
        if expires <= now {
            return Err(GatewayError::KeyExpired(expires.to_rfc3339()));
        }
    }
    Ok(())
}

/// Whether `m` is one of LiteLLM's values meaning "every model" rather
/// than a model name.
pub fn is_special_model_value(m: &str) -> bool {
    matches!(m, "*" | "all-proxy-models" | "all-team-models")
}

/// Whether a list of allowed models admits `model` (empty list: all), one
/// of its entries naming `model`, a prefix of it (`openai/*`), every model,
/// or one of `access_groups`, the model access groups that grant `model`
/// (LiteLLM's `_check_model_access_helper`).
fn list_allows(models: &[String], model: &str, access_groups: &[&str]) -> bool {
    models.is_empty()
        || models.iter().any(|m| {
            m == model
                || is_special_model_value(m)
                || access_groups.contains(&m.as_str())
                || m.strip_suffix('*')
                    .is_some_and(|prefix| model.starts_with(prefix))
        })
}

/// Whether a list of allowed models admits the model access group `name`
/// itself (empty list or every model: all groups), as LiteLLM lists them.
pub fn list_names_group(models: &[String], name: &str) -> bool {
    models.is_empty()
        || models
            .iter()
            .any(|m| m == name || is_special_model_value(m))
}

/// Refuses a model outside the key's, team's or user's allowed models, naming
/// the allowed ones (seed 004: `key_model_access_denied`); `access_groups`
/// are the model access groups that grant `model`.
pub fn model_allowed(
    entry: &KeyEntry,
    model: &str,
    access_groups: &[&str],
) -> Result<(), GatewayError> {
    let deny = |scope: &str, allowed: &[String]| GatewayError::ModelAccessDenied {
        scope: scope.to_string(),
        allowed: allowed.to_vec(),
        requested: model.to_string(),
    };
    if !list_allows(&entry.record.models, model, access_groups) {
        return Err(deny("key", &entry.record.models));
    }
    if let Some(team) = &entry.team {
        if !list_allows(&team.record.models, model, access_groups) {
            return Err(deny("team", &team.record.models));
        }
    }
    if let Some(user) = &entry.user {
        if !list_allows(&user.record.models, model, access_groups) {
            return Err(deny("user", &user.record.models));
        }
    }
    Ok(())
}

/// Keys with `metadata.role = "admin"` (or a `proxy_admin` user) may call the
/// management API.
pub fn is_admin_key(entry: &KeyEntry) -> bool {
    entry.record.metadata.get("role").and_then(|v| v.as_str()) == Some("admin")
        || entry
            .user
            .as_ref()
            .is_some_and(|u| u.record.user_role.as_deref() == Some("proxy_admin"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budget;
    use crate::store::KeyRecord;

    fn entry(models: &[&str]) -> KeyEntry {
        KeyEntry {
            record: KeyRecord {
                models: models.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
            budget: Budget::new(None, None, 0.0),
            team: None,
            user: None,
            model_budgets: Vec::new(),
        }
    }

    #[test]
    fn names_allowed_and_requested_models() {
        assert!(model_allowed(&entry(&[]), "any", &[]).is_ok());
        assert!(model_allowed(&entry(&["openai/*"]), "openai/gpt-4o", &[]).is_ok());
        assert!(model_allowed(&entry(&["beta"]), "chat-deep", &["alpha", "beta"]).is_ok());
        assert!(model_allowed(&entry(&["beta"]), "chat-deep", &["alpha"]).is_err());
        let err = model_allowed(&entry(&["chat-fast"]), "chat-deep", &[]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("chat-fast") && msg.contains("chat-deep"),
            "{msg}"
        );
        assert_eq!(
            (err.status(), err.error_type()),
            (403, "key_model_access_denied")
        );
    }

    #[test]
    fn blocked_and_expired_keys_are_refused() {
        let mut e = entry(&[]);
        e.record.blocked = true;
        assert_eq!(key_usable(&e, Utc::now()).unwrap_err().status(), 401);
        e.record.blocked = false;
        e.record.expires = Some(Utc::now() - chrono::Duration::seconds(1));
        assert!(key_usable(&e, Utc::now())
            .unwrap_err()
            .to_string()
            .contains("Expired"));
    }
}
