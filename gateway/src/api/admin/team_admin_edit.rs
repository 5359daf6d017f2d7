//! What a team `admin` member may change on `/team/update`, as LiteLLM
//! 1.110 decides it (`team_admin_edit_verdict`,
//! `_check_team_budget_update_authority`): the fields the request would
//! change (values compared with the stored team, so a setting resent
//! unchanged is no change) must all be granted by
//! `general_settings.team_admin_editable_team_fields`; metadata keys the
//! proxy controls (LiteLLM's fields kept in `metadata`, such as
//! `require_trace_id`, `tags`, `guardrails`, `model_rpm_limit`) are never a
//! team admin's; and a team admin may lower `max_budget` but raise it only
//! with `raise_max_budget`, and never remove it. Each refusal is LiteLLM's
//! 403 and message.

use crate::config::TeamAdminFields;
use crate::error::GatewayError;
use crate::store::{BudgetRecord, TeamRecord};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Where LiteLLM's UI grants the fields, named in its refusals.
const SETTINGS_LOCATION: &str = "Settings > UI > Team admin editable fields";

/// LiteLLM's fields a team request keeps in `metadata`.
const FOLDED: &[&str] = &super::body::METADATA_FIELDS;

/// Metadata keys the proxy sets, beyond [`FOLDED`]
/// (`PROXY_CONTROLLED_TEAM_METADATA_KEYS`).
const PROXY_CONTROLLED: &[&str] = &[
    "team_member_budget_id",
    "otel_service_name_override",
    "otel_service_name",
    "batch_enqueued_token_limit",
    "max_batch_file_records",
    "max_batch_file_uploads_per_day",
    "max_file_downloads_per_minute",
    "scim_managed",
    "scim_data",
    "opted_out_global_guardrails",
    "spend_logs_metadata",
    "model_config",
    "callback_settings",
    "priority",
    "zguard_policy_id",
    "allowed_tools",
    "allow_client_mock_response",
    "allow_client_message_redaction_opt_out",
    "allow_client_pricing_override",
    "allow_litellm_changed_by_header",
    "soft_budget_alerting_emails",
    "team_member_max_budget_alert_emails",
    "phoenix_project_name_override",
    "phoenix_project_name",
    "opik",
];

/// Metadata keys the proxy restores when a request's `metadata` leaves
/// them out: never a change.
const SYSTEM_MANAGED: &[&str] = &["team_member_budget_id"];

/// Refuses a team admin's `/team/update` of `team` with `body` unless
/// `granted` allows every change it makes.
pub fn check(
    granted: &TeamAdminFields,
    body: &Map<String, Value>,
    (team, member_defaults): (&TeamRecord, Option<&BudgetRecord>),
) -> Result<(), GatewayError> {
    let refuse = |m: String| Err(GatewayError::TeamAccessDenied(m));
    if granted.none() {
        return refuse(format!(
            "Team admins on this proxy cannot edit team settings. Ask a proxy admin to enable \
             fields under {SETTINGS_LOCATION}."
        ));
    }
    let metadata = changed_metadata(body, &team.metadata);
    let controlled = metadata
        .iter()
        .filter(|k| FOLDED.contains(&k.as_str()) || PROXY_CONTROLLED.contains(&k.as_str()))
        .min();
    if let Some(key) = controlled {
        return refuse(format!(
            "Team metadata key '{key}' is a proxy setting that team admins cannot add, change \
             or remove in team settings. Ask a proxy admin to change it."
        ));
    }
    let mut stored = serde_json::to_value(team).unwrap_or(Value::Null);
    // The member defaults compare with the team's member budget row.
    if let Value::Object(fields) = &mut stored {
        let row = member_defaults;
        for (field, value) in [
            (
                "team_member_budget",
                row.and_then(|b| b.max_budget).map(Value::from),
            ),
            (
                "team_member_rpm_limit",
                row.and_then(|b| b.rpm_limit).map(Value::from),
            ),
            (
                "team_member_tpm_limit",
                row.and_then(|b| b.tpm_limit).map(Value::from),
            ),
            (
                "team_member_budget_duration",
                row.and_then(|b| b.budget_duration.clone()).map(Value::from),
            ),
        ] {
            fields.insert(field.into(), value.unwrap_or(Value::Null));
        }
    }
    let mut changed: BTreeSet<String> = body
        .iter()
        .filter(|(f, _)| {
            !matches!(f.as_str(), "team_id" | "metadata") && !FOLDED.contains(&f.as_str())
        })
        .filter(|(f, v)| match stored.get(f.as_str()) {
            // A field the row does not keep is a change whenever sent.
            None => true,
            Some(old) => !same(v, old),
        })
        .map(|(f, _)| f.clone())
        .collect();
    if !metadata.is_empty() {
        changed.insert("metadata".into());
    }
    if let Some(field) = changed.iter().find(|f| !granted.permits(f)) {
        return refuse(format!(
            "Team admins on this proxy do not have permission to update '{field}'. Ask a proxy \
             admin to add it under {SETTINGS_LOCATION}."
        ));
    }
    budget_authority(granted, body, team.max_budget)
}

/// LiteLLM's rule for a restricted caller's `max_budget`: kept or lowered,
/// raised only with `raise_max_budget`, never removed.
fn budget_authority(
    granted: &TeamAdminFields,
    body: &Map<String, Value>,
    current: Option<f64>,
) -> Result<(), GatewayError> {
    let (Some(current), Some(sent)) = (current, body.get("max_budget")) else {
        return Ok(());
    };
    let now = python_float(current);
    match sent.as_f64() {
        None if sent.is_null() => Err(GatewayError::TeamAccessDenied(format!(
            "Only a proxy admin can remove a team's max_budget. Team's current max_budget={now}."
        ))),
        Some(asked) if asked > current && !granted.may_raise_max_budget() => {
            Err(GatewayError::TeamAccessDenied(format!(
                "Only a proxy admin can raise a team's max_budget. Team's current \
                 max_budget={now}, requested={}.",
                python_float(asked)
            )))
        }
        _ => Ok(()),
    }
}

/// A float as Python prints it (`10.0`, `0.5`).
fn python_float(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e16 {
        format!("{v:.1}")
    } else {
        v.to_string()
    }
}

/// The metadata keys the request would change: its `metadata` (else the
/// stored one) with the top-level fields LiteLLM keeps in `metadata` laid
/// over it, against the stored metadata.
fn changed_metadata(body: &Map<String, Value>, stored: &Map<String, Value>) -> BTreeSet<String> {
    let mut merged = match body.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        Some(_) => Map::new(),
        None => stored.clone(),
    };
    for f in FOLDED {
        if let Some(v) = body.get(*f) {
            merged.insert((*f).to_string(), v.clone());
        }
    }
    merged
        .keys()
        .chain(stored.keys())
        .filter(|k| !SYSTEM_MANAGED.contains(&k.as_str()))
        .filter(|k| match (merged.get(*k), stored.get(*k)) {
            (Some(a), Some(b)) => !same(a, b),
            (None, None) => false,
            _ => true,
        })
        .cloned()
        .collect()
}

/// JSON values equal as LiteLLM compares them: numbers by value (`10` is
/// `10.0`), the rest structurally.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn granted(fields: &[&str]) -> TeamAdminFields {
        let yaml = format!("team_admin_editable_team_fields: {fields:?}");
        let general = serde_yaml::from_str(&yaml).unwrap();
        TeamAdminFields::from_general(&general, &mut Vec::new()).unwrap()
    }

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn check_of(
        g: &TeamAdminFields,
        body: &Map<String, Value>,
        team: &TeamRecord,
    ) -> Result<(), GatewayError> {
        check(g, body, (team, None))
    }

    fn message(r: Result<(), GatewayError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn only_granted_changes_pass() {
        let team = TeamRecord {
            team_id: "t".into(),
            max_budget: Some(10.0),
            tpm_limit: Some(5),
            models: vec!["m".into()],
            metadata: body(json!({"note": "a", "tags": ["x"]})),
            ..Default::default()
        };
        let g = granted(&["tpm_limit", "max_budget", "metadata"]);
        assert!(check_of(&g, &body(json!({"team_id": "t", "tpm_limit": 9})), &team).is_ok());
        // Resent unchanged: no change, whatever the grant.
        assert!(check_of(
            &g,
            &body(json!({"team_id": "t", "models": ["m"], "max_budget": 10})),
            &team
        )
        .is_ok());
        let m = message(check_of(
            &g,
            &body(json!({"team_id": "t", "rpm_limit": 1})),
            &team,
        ));
        assert!(m.contains("permission to update 'rpm_limit'"), "{m}");
        assert!(check_of(
            &g,
            &body(json!({"team_id": "t", "metadata": {"note": "b", "tags": ["x"]}})),
            &team
        )
        .is_ok());
        let m = message(check_of(
            &g,
            &body(json!({"team_id": "t", "require_trace_id": true})),
            &team,
        ));
        assert!(
            m.contains("Team metadata key 'require_trace_id' is a proxy setting"),
            "{m}"
        );
        let m = message(check_of(
            &g,
            &body(json!({"team_id": "t", "metadata": {"note": "a"}})),
            &team,
        ));
        assert!(m.contains("'tags'"), "removing a proxy-controlled key: {m}");
        assert!(check_of(&g, &body(json!({"team_id": "t", "max_budget": 5})), &team).is_ok());
        let m = message(check_of(
            &g,
            &body(json!({"team_id": "t", "max_budget": 50})),
            &team,
        ));
        assert!(m.contains("Only a proxy admin can raise a team's max_budget. Team's current max_budget=10.0, requested=50.0."), "{m}");
        let m = message(check_of(
            &g,
            &body(json!({"team_id": "t", "max_budget": null})),
            &team,
        ));
        assert!(m.contains("can remove"), "{m}");
        let raise = granted(&["max_budget", "raise_max_budget"]);
        assert!(check_of(
            &raise,
            &body(json!({"team_id": "t", "max_budget": 50})),
            &team
        )
        .is_ok());
        let m = message(check_of(
            &TeamAdminFields::default(),
            &body(json!({"team_id": "t"})),
            &team,
        ));
        assert!(m.contains("cannot edit team settings"), "{m}");
    }
}
