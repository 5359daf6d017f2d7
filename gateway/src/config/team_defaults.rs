//! Defaults of teams created through `/team/new`, as LiteLLM reads them:
//! `litellm_settings.default_team_params` (`max_budget`, `budget_duration`,
//! `tpm_limit`, `rpm_limit`), then the legacy
//! `litellm_settings.default_team_settings[0].max_budget`. The rest of
//! `default_team_settings` (per-team logging callbacks) is checked for
//! LiteLLM's shape and not used.

use serde_yaml::Value;

/// What `/team/new` fills in when the request leaves it out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TeamDefaults {
    /// USD.
    pub max_budget: Option<f64>,
    /// A LiteLLM duration (`30d`).
    pub budget_duration: Option<String>,
    /// Tokens per minute.
    pub tpm_limit: Option<i64>,
    /// Requests per minute.
    pub rpm_limit: Option<i64>,
}

/// The largest default budget (as `/team/new` accepts).
const MAX_USD: f64 = 1e9;
/// The largest default rpm or tpm limit (as `/team/new` accepts).
const MAX_LIMIT: i64 = 1_000_000_000_000;

impl TeamDefaults {
    /// Reads the defaults from `litellm_settings`; an error names the field.
    pub fn from_litellm_settings(litellm: Option<&Value>) -> Result<TeamDefaults, String> {
        let mut out = TeamDefaults::default();
        let Some(settings) = litellm else {
            return Ok(out);
        };
        let settings_list = settings
            .get("default_team_settings")
            .filter(|v| !v.is_null());
        if let Some(list) = settings_list {
            let shape = "litellm_settings.default_team_settings must be a list of {team_id, ...}";
            let teams = list.as_sequence().ok_or(shape)?;
            for (i, team) in teams.iter().enumerate() {
                if team.get("team_id").and_then(Value::as_str).is_none() {
                    return Err(format!(
                        "litellm_settings.default_team_settings[{i}]: team_id is required"
                    ));
                }
            }
            if let Some(first) = teams.first() {
                out.max_budget = usd(first, "default_team_settings[0].max_budget")?;
            }
        }
        if let Some(params) = settings.get("default_team_params").filter(|v| !v.is_null()) {
            if !params.is_mapping() {
                return Err("litellm_settings.default_team_params must be a mapping".into());
            }
            out.max_budget = usd(params, "default_team_params.max_budget")?.or(out.max_budget);
            out.tpm_limit = count(params, "tpm_limit")?;
            out.rpm_limit = count(params, "rpm_limit")?;
            if let Some(d) = params.get("budget_duration").filter(|v| !v.is_null()) {
                let text = d.as_str().ok_or(
                    "litellm_settings.default_team_params.budget_duration must be a duration",
                )?;
                crate::store::parse_duration(text).map_err(|_| {
                    format!("litellm_settings.default_team_params.budget_duration: '{text}' is not a duration such as 30d")
                })?;
                out.budget_duration = Some(text.to_string());
            }
        }
        Ok(out)
    }
}

/// The USD amount at `map.max_budget` (named `field` in errors).
fn usd(map: &Value, field: &str) -> Result<Option<f64>, String> {
    match map.get("max_budget") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(n) if n.is_finite() && (0.0..=MAX_USD).contains(&n) => Ok(Some(n)),
            _ => Err(format!(
                "litellm_settings.{field} must be a USD amount from 0 to {MAX_USD}"
            )),
        },
    }
}

/// The limit `name` of `default_team_params`.
fn count(params: &Value, name: &str) -> Result<Option<i64>, String> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_i64() {
            Some(n) if (0..=MAX_LIMIT).contains(&n) => Ok(Some(n)),
            _ => Err(format!(
                "litellm_settings.default_team_params.{name} must be an integer from 0 to {MAX_LIMIT}"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<TeamDefaults, String> {
        let v: Value = serde_yaml::from_str(yaml).unwrap();
        TeamDefaults::from_litellm_settings(Some(&v))
    }

    #[test]
    fn reads_params_then_the_legacy_list() {
        let d = parse(
            "default_team_settings: [{team_id: a, max_budget: 3, success_callback: [langfuse]}]",
        )
        .unwrap();
        assert_eq!(d.max_budget, Some(3.0));
        let d = parse("default_team_settings: [{team_id: a, max_budget: 3}]\ndefault_team_params: {max_budget: 7, budget_duration: 30d, rpm_limit: 5}").unwrap();
        assert_eq!(
            d,
            TeamDefaults {
                max_budget: Some(7.0),
                budget_duration: Some("30d".into()),
                tpm_limit: None,
                rpm_limit: Some(5),
            }
        );
        for bad in [
            "default_team_settings: [{max_budget: 3}]",
            "default_team_settings: {team_id: a}",
            "default_team_params: {max_budget: -1}",
            "default_team_params: {budget_duration: soon}",
            "default_team_params: {tpm_limit: 1.5}",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
