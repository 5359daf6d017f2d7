//! `general_settings.enforced_params` and
//! `general_settings.service_account_settings.enforced_params`: request
//! parameters every LLM request must carry, as LiteLLM 1.110 reads them
//! (`_get_enforced_params` in `litellm/proxy/litellm_pre_call_utils.py`):
//! the first on every caller's requests (the master key's included), the
//! second on the requests of service-account keys (a key whose `metadata`
//! has a `service_account_id`). A key's own `enforced_params` are added to
//! them when requests are checked (`proxy::enforced_params`).

use serde_yaml::Value;
use std::collections::BTreeMap;

/// The proxy-wide enforced parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnforcedParams {
    /// Required on every caller's requests.
    pub all: Vec<String>,
    /// Also required on service-account keys' requests.
    pub service_accounts: Vec<String>,
}

impl EnforcedParams {
    /// Reads both settings from `general_settings`' other keys. A value
    /// that is not a list of names is a problem naming it; a name LiteLLM
    /// never checks (more than two levels, `a.b.c`) and a key of
    /// `service_account_settings` other than `enforced_params` go to
    /// `warnings`.
    pub fn from_general(
        general: &BTreeMap<String, Value>,
        warnings: &mut Vec<String>,
    ) -> Result<EnforcedParams, (String, String)> {
        let all = names(general.get("enforced_params"), "enforced_params", warnings)?;
        let mut service_accounts = Vec::new();
        match general.get("service_account_settings") {
            None | Some(Value::Null) => {}
            Some(Value::Mapping(settings)) => {
                for (key, value) in settings {
                    match key.as_str() {
                        Some("enforced_params") => {
                            service_accounts = names(
                                Some(value),
                                "service_account_settings.enforced_params",
                                warnings,
                            )?;
                        }
                        other => warnings.push(format!(
                            "general_settings.service_account_settings.{} is not acted on by this gateway; it is ignored",
                            other.unwrap_or("?")
                        )),
                    }
                }
            }
            Some(_) => {
                return Err((
                    "general_settings.service_account_settings".into(),
                    "must be a mapping (LiteLLM reads its enforced_params)".into(),
                ))
            }
        }
        Ok(EnforcedParams {
            all,
            service_accounts,
        })
    }

    /// Whether no caller is held to any parameter by the config.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty() && self.service_accounts.is_empty()
    }
}

/// The list of parameter names at `general_settings.{entry}`.
fn names(
    value: Option<&Value>,
    entry: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<String>, (String, String)> {
    let shape = || {
        (
            format!("general_settings.{entry}"),
            "must be a list of parameter names (`user`, `metadata.generation_name`)".to_string(),
        )
    };
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Sequence(items)) => items,
        Some(_) => return Err(shape()),
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let name = item.as_str().filter(|n| !n.is_empty()).ok_or_else(shape)?;
        if name.split('.').count() > 2 {
            warnings.push(format!(
                "general_settings.{entry}: `{name}` names more than two levels, which LiteLLM never checks; it is ignored"
            ));
        }
        out.push(name.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> (Result<EnforcedParams, (String, String)>, Vec<String>) {
        let general: BTreeMap<String, Value> = serde_yaml::from_str(yaml).unwrap();
        let mut warnings = Vec::new();
        (
            EnforcedParams::from_general(&general, &mut warnings),
            warnings,
        )
    }

    #[test]
    fn reads_both_lists() {
        let (read_back, warnings) = read(
            "{enforced_params: [user, metadata.generation_name], service_account_settings: {enforced_params: [metadata.team]}}",
        );
        let read_back = read_back.unwrap();
        assert_eq!(read_back.all, ["user", "metadata.generation_name"]);
        assert_eq!(read_back.service_accounts, ["metadata.team"]);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(read("{other: 1}").0.unwrap().is_empty());
    }

    #[test]
    fn a_wrong_shape_is_refused_naming_the_setting() {
        let (err, _) = read("{enforced_params: user}");
        assert_eq!(err.unwrap_err().0, "general_settings.enforced_params");
        let (err, _) = read("{enforced_params: [1]}");
        assert_eq!(err.unwrap_err().0, "general_settings.enforced_params");
        let (err, _) = read("{service_account_settings: [x]}");
        assert_eq!(
            err.unwrap_err().0,
            "general_settings.service_account_settings"
        );
        let (err, _) = read("{service_account_settings: {enforced_params: {a: 1}}}");
        assert_eq!(
            err.unwrap_err().0,
            "general_settings.service_account_settings.enforced_params"
        );
    }

    #[test]
    fn names_litellm_never_checks_are_named_in_a_warning() {
        let (read_back, warnings) =
            read("{enforced_params: [a.b.c], service_account_settings: {other: 1}}");
        assert_eq!(read_back.unwrap().all, ["a.b.c"]);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("a.b.c"), "{warnings:?}");
        assert!(warnings[1].contains("service_account_settings.other"));
    }
}
