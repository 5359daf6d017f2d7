//! LiteLLM's `throttle_on_budget_exceeded` (`proxy/auth/budget_throttle.py`):
//! a key that opted in (`metadata.throttle_on_budget_exceeded: true`, a
//! proxy admin's to set) and has an rpm or tpm limit is not refused once
//! its own spend reaches its `max_budget`: it keeps being served at
//! `litellm_settings.budget_exceeded_throttle_percentage` of those limits
//! (each at least 1), recomputed from the key's own limits on every
//! request so the throttle never compounds. Only the key's own budget
//! gives way; its team's, user's, end user's and the other budgets refuse
//! as before.

use crate::store::KeyRecord;

/// The key metadata field that opts a key in.
pub const OPT_IN_FIELD: &str = "throttle_on_budget_exceeded";

/// The share of its limits a key that opted in keeps past its budget:
/// `percentage` when the key opted in and has an rpm or tpm limit to
/// scale down (a key without either stays refused at its budget, as in
/// LiteLLM), else `None`.
pub fn share(record: &KeyRecord, percentage: Option<f64>) -> Option<f64> {
    let opted_in = record.metadata.get(OPT_IN_FIELD) == Some(&serde_json::Value::Bool(true));
    let limited = record.rpm_limit.is_some() || record.tpm_limit.is_some();
    percentage.filter(|_| opted_in && limited)
}

/// `limit` scaled to `share`, at least 1 (LiteLLM's `throttled_limit`).
pub fn throttled_limit(limit: Option<i64>, share: f64) -> Option<i64> {
    limit.map(|l| ((l as f64 * share).floor() as i64).max(1))
}

/// A copy of `record` with its rpm and tpm limits scaled to `share`.
pub fn throttled(record: &KeyRecord, share: f64) -> KeyRecord {
    let mut out = record.clone();
    out.rpm_limit = throttled_limit(record.rpm_limit, share);
    out.tpm_limit = throttled_limit(record.tpm_limit, share);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(metadata: serde_json::Value, rpm: Option<i64>, tpm: Option<i64>) -> KeyRecord {
        KeyRecord {
            metadata: metadata.as_object().cloned().unwrap_or_default(),
            rpm_limit: rpm,
            tpm_limit: tpm,
            ..Default::default()
        }
    }

    #[test]
    fn only_a_key_that_opted_in_with_a_limit_is_throttled() {
        let on = json!({OPT_IN_FIELD: true});
        assert_eq!(
            share(&key(on.clone(), Some(10), None), Some(0.5)),
            Some(0.5)
        );
        assert_eq!(
            share(&key(on.clone(), None, Some(10)), Some(0.5)),
            Some(0.5)
        );
        assert_eq!(
            share(&key(on.clone(), None, None), Some(0.5)),
            None,
            "nothing to scale"
        );
        assert_eq!(
            share(&key(on, Some(10), None), None),
            None,
            "no percentage set"
        );
        let truthy = json!({OPT_IN_FIELD: "true"});
        assert_eq!(
            share(&key(truthy, Some(10), None), Some(0.5)),
            None,
            "true only"
        );
        assert_eq!(share(&key(json!({}), Some(10), None), Some(0.5)), None);
    }

    #[test]
    fn limits_scale_down_to_at_least_one() {
        assert_eq!(throttled_limit(Some(100), 0.1), Some(10));
        assert_eq!(throttled_limit(Some(15), 0.1), Some(1));
        assert_eq!(throttled_limit(Some(3), 0.1), Some(1), "a trickle, never 0");
        assert_eq!(throttled_limit(None, 0.1), None);
        let k = throttled(&key(json!({}), Some(40), Some(1000)), 0.25);
        assert_eq!((k.rpm_limit, k.tpm_limit), (Some(10), Some(250)));
    }
}
