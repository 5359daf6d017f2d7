//! Rules a virtual key must pass: not blocked, not expired, model allowed for
//! the key, its team and its user.

use super::KeyEntry;
use crate::error::GatewayError;
use crate::store::KeyRecord;
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde_json::Value;

/// A key's `max_budget` as LiteLLM applies it: raised by
/// `metadata.temp_budget_increase` while `metadata.temp_budget_expiry` (an
/// ISO 8601 time, UTC when it names no zone) is in the future
/// (`_update_key_budget_with_temp_budget_increase`); no budget stays none.
pub fn raised_max_budget(record: &KeyRecord, now: DateTime<Utc>) -> Option<f64> {
    let max = record.max_budget?;
    let increase = record
        .metadata
        .get("temp_budget_increase")
        .and_then(Value::as_f64)
        .filter(|i| i.is_finite() && *i > 0.0);
    let expiry = record
        .metadata
        .get("temp_budget_expiry")
        .and_then(Value::as_str)
        .and_then(iso_time);
    match (increase, expiry) {
        (Some(increase), Some(expiry)) if expiry > now => Some(max + increase),
        _ => Some(max),
    }
}

/// A time as Python's `datetime.fromisoformat` reads it: with an offset,
/// or without one (then UTC), or a bare date (midnight UTC).
fn iso_time(text: &str) -> Option<DateTime<Utc>> {
    if text.len() > 64 {
        return None;
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
    .or_else(|| {
        NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
    })
    .map(|t| t.and_utc())
}

/// Refuses blocked or expired keys, keys of blocked teams, and keys whose
/// row or team row holds a field LiteLLM acts on and this gateway does not
/// ([`super::unapplied`]). A key with a
/// temporary budget increase has its budget's limit set to what
/// [`raised_max_budget`] says now (the increase ends at its expiry without
/// a change of the row), and so has its user's budget in its team when
/// the member's row has one.
pub fn key_usable(entry: &KeyEntry, now: DateTime<Utc>) -> Result<(), GatewayError> {
    let nanos = |usd: Option<f64>| usd.map(crate::budget::to_nanos);
    if entry.record.metadata.contains_key("temp_budget_increase") {
        let max = raised_max_budget(&entry.record, now);
        if nanos(entry.budget.max_usd()) != nanos(max) {
            entry.budget.set_limits(max, entry.record.soft_budget);
        }
    }
    // The member's budget in its team, raised by its row's temporary
    // increase until the expiry (LiteLLM's `effective_max_budget`).
    let member_increase = entry
        .member_row
        .as_ref()
        .is_some_and(|r| r.temp_budget_increase.is_some());
    if let (Some(budget), true) = (&entry.member_budget, member_increase) {
        let max = entry.member_max_budget(now);
        if max.is_some() && nanos(budget.max_usd()) != nanos(max) {
            budget.set_limits(max, None);
        }
    }
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
    super::unapplied::check(entry)
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
/// the allowed ones (seed 004: `key_model_access_denied`), or outside the
/// key user's own models in its team (LiteLLM's `team_model_access_denied`);
/// `access_groups` are the model access groups that grant `model`.
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
        // A name the team's own aliases map is the team's (LiteLLM's
        // `_model_in_team_aliases`, on the name the caller sent).
        let aliased = team.record.model_aliases.contains_key(model);
        if !aliased && !list_allows(&team.record.models, model, access_groups) {
            return Err(deny("team", &team.record.models));
        }
    }
    if let Some(user) = &entry.user {
        if !list_allows(&user.record.models, model, access_groups) {
            return Err(deny("user", &user.record.models));
        }
    }
    // A team member's own model scope (its budget row's `allowed_models`;
    // empty: the team's models), LiteLLM's `check_team_member_model_access`.
    let member_models = entry
        .member_row
        .as_ref()
        .filter(|_| entry.team.is_some() && entry.record.user_id.is_some())
        .and_then(|r| r.allowed_models.as_deref())
        .unwrap_or_default();
    if !member_models.is_empty() && !list_allows(member_models, model, access_groups) {
        return Err(GatewayError::MemberModelAccessDenied(model.to_string()));
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
            budget_throttle: None,
            record: KeyRecord {
                models: models.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
            budget: Budget::new(None, None, 0.0),
            team: None,
            user: None,
            model_budgets: Vec::new(),
            member_budget: None,
            member_model_budgets: Vec::new(),
            member_row: None,
            counter_names: Default::default(),
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
    fn a_temporary_increase_raises_the_budget_until_its_expiry() {
        let now = Utc::now();
        let mut e = entry(&[]);
        e.record.max_budget = Some(1.0);
        e.record.metadata = serde_json::json!({"temp_budget_increase": 2.5,
            "temp_budget_expiry": (now + chrono::Duration::hours(1)).naive_utc().to_string()})
        .as_object()
        .cloned()
        .unwrap();
        assert_eq!(raised_max_budget(&e.record, now), Some(3.5));
        key_usable(&e, now).unwrap();
        assert_eq!(e.budget.max_usd(), Some(3.5));
        let later = now + chrono::Duration::hours(2);
        assert_eq!(raised_max_budget(&e.record, later), Some(1.0));
        key_usable(&e, later).unwrap();
        assert_eq!(e.budget.max_usd(), Some(1.0));
        e.record.max_budget = None;
        assert_eq!(raised_max_budget(&e.record, now), None);
        assert_eq!(
            iso_time("2026-01-02"),
            Some("2026-01-02T00:00:00Z".parse().unwrap())
        );
        assert_eq!(
            iso_time("2026-01-02T03:04:05+01:00"),
            Some("2026-01-02T02:04:05Z".parse().unwrap())
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
