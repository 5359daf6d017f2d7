//! `general_settings`' health-check and readiness fields, read by the config
//! (a layer below the checks themselves).

use std::collections::BTreeMap;
use std::time::Duration;

/// LiteLLM's `HEALTH_CHECK_TIMEOUT_SECONDS`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// LiteLLM's `DEFAULT_HEALTH_CHECK_INTERVAL`.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);
/// Longest interval or timeout an operator may set (a day).
const MAX_SECS: u64 = 86_400;

/// `general_settings.background_health_checks`, `health_check_interval`
/// (seconds), `health_check_timeout` (seconds, per probe) and
/// `allow_public_health_readiness_details`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSettings {
    /// Whether checks run in the background and feed routing.
    pub background: bool,
    /// Time between background checks.
    pub interval: Duration,
    /// Time one probe may take.
    pub timeout: Duration,
    /// Whether `/health/readiness` answers anyone with the details that
    /// `/health/readiness/details` gives a caller with a key (LiteLLM's
    /// `allow_public_health_readiness_details`; off: status and database
    /// only).
    pub public_readiness_details: bool,
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            background: false,
            interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
            public_readiness_details: false,
        }
    }
}

impl HealthSettings {
    /// Reads the settings from `general_settings`; the error names the field.
    pub fn from_general(general: &BTreeMap<String, serde_yaml::Value>) -> Result<Self, String> {
        let secs = |name: &str, default: Duration| -> Result<Duration, String> {
            match general.get(name) {
                None | Some(serde_yaml::Value::Null) => Ok(default),
                Some(v) => match v.as_u64() {
                    Some(n) if (1..=MAX_SECS).contains(&n) => Ok(Duration::from_secs(n)),
                    _ => Err(format!(
                        "general_settings.{name} must be a whole number of seconds from 1 to {MAX_SECS}"
                    )),
                },
            }
        };
        let flag = |name: &str| -> Result<bool, String> {
            match general.get(name) {
                None | Some(serde_yaml::Value::Null) => Ok(false),
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| format!("general_settings.{name} must be true or false")),
            }
        };
        Ok(HealthSettings {
            background: flag("background_health_checks")?,
            public_readiness_details: flag("allow_public_health_readiness_details")?,
            interval: secs("health_check_interval", DEFAULT_INTERVAL)?,
            timeout: secs("health_check_timeout", DEFAULT_TIMEOUT)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_and_bounded() {
        let general = |yaml: &str| -> BTreeMap<String, serde_yaml::Value> {
            serde_yaml::from_str(yaml).unwrap()
        };
        assert_eq!(
            HealthSettings::from_general(&general("{}")).unwrap(),
            HealthSettings::default()
        );
        let s = HealthSettings::from_general(&general(
            "background_health_checks: true\nhealth_check_interval: 30\nhealth_check_timeout: 5",
        ))
        .unwrap();
        assert_eq!(
            (s.background, s.interval, s.timeout),
            (true, Duration::from_secs(30), Duration::from_secs(5))
        );
        assert!(HealthSettings::from_general(&general("health_check_interval: 0")).is_err());
        assert!(HealthSettings::from_general(&general("health_check_interval: -3")).is_err());
        assert!(HealthSettings::from_general(&general("background_health_checks: 1")).is_err());
        assert!(
            HealthSettings::from_general(&general("allow_public_health_readiness_details: true"))
                .unwrap()
                .public_readiness_details
        );
        let err = HealthSettings::from_general(&general(
            "allow_public_health_readiness_details: sometimes",
        ))
        .unwrap_err();
        assert!(
            err.contains("allow_public_health_readiness_details"),
            "{err}"
        );
    }
}
