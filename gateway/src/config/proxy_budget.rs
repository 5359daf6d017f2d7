//! The proxy-wide budget, as LiteLLM reads it: `litellm_settings.max_budget`
//! (USD; 0 or less, or none, is no budget) and `budget_duration` (how often
//! its spend resets; none is never). Every LLM request counts against it.

use serde_yaml::Value;

/// `litellm_settings.max_budget` and `budget_duration`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyBudget {
    /// USD, above 0.
    pub max_usd: f64,
    /// A LiteLLM duration (`30d`), checked.
    pub duration: Option<String>,
}

/// The largest proxy-wide budget, USD (as `/user/new` accepts).
const MAX_USD: f64 = 1e9;

impl ProxyBudget {
    /// Reads it from `litellm_settings`; `None` when `max_budget` sets no
    /// budget. An error names the field.
    pub fn from_litellm_settings(litellm: Option<&Value>) -> Result<Option<ProxyBudget>, String> {
        let Some(settings) = litellm else {
            return Ok(None);
        };
        let duration = match settings.get("budget_duration").filter(|v| !v.is_null()) {
            None => None,
            Some(d) => {
                let text = d
                    .as_str()
                    .ok_or("litellm_settings.budget_duration must be a duration such as 30d")?;
                crate::store::parse_duration(text).map_err(|_| {
                    format!(
                        "litellm_settings.budget_duration: '{text}' is not a duration such as 30d"
                    )
                })?;
                Some(text.trim().to_string())
            }
        };
        let max = match settings.get("max_budget").filter(|v| !v.is_null()) {
            None => return Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|n| n.is_finite() && *n <= MAX_USD)
                .ok_or_else(|| {
                    format!("litellm_settings.max_budget must be a number of USD up to {MAX_USD}")
                })?,
        };
        // LiteLLM enforces it only above 0.
        Ok((max > 0.0).then_some(ProxyBudget {
            max_usd: max,
            duration,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<Option<ProxyBudget>, String> {
        let v: Value = serde_yaml::from_str(yaml).unwrap();
        ProxyBudget::from_litellm_settings(Some(&v))
    }

    #[test]
    fn reads_the_budget_and_its_period() {
        assert_eq!(
            read("{max_budget: 100, budget_duration: 30d}"),
            Ok(Some(ProxyBudget {
                max_usd: 100.0,
                duration: Some("30d".into())
            }))
        );
        assert_eq!(
            read("{max_budget: 0.5}"),
            Ok(Some(ProxyBudget {
                max_usd: 0.5,
                duration: None
            }))
        );
        for off in [
            "{}",
            "{max_budget: 0}",
            "{max_budget: -1}",
            "{max_budget: null}",
        ] {
            assert_eq!(read(off), Ok(None), "{off}");
        }
        assert_eq!(ProxyBudget::from_litellm_settings(None), Ok(None));
    }

    #[test]
    fn refuses_what_is_not_a_budget_or_a_duration() {
        for (bad, field) in [
            ("{max_budget: lots}", "litellm_settings.max_budget"),
            ("{max_budget: 1e12}", "litellm_settings.max_budget"),
            ("{max_budget: .inf}", "litellm_settings.max_budget"),
            (
                "{max_budget: 1, budget_duration: soon}",
                "litellm_settings.budget_duration",
            ),
            (
                "{max_budget: 1, budget_duration: 5}",
                "litellm_settings.budget_duration",
            ),
        ] {
            let err = read(bad).unwrap_err();
            assert!(err.contains(field), "{bad}: {err}");
        }
    }
}
