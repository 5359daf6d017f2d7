//! LiteLLM's `rpm_limit_type` / `tpm_limit_type: dynamic` on a key
//! (`parallel_request_limiter_v3._get_enforced_limit`): a key whose
//! `metadata` says `dynamic` for its rpm (or tpm) limit is held to that
//! limit only while a deployment of the model group it asks for has more
//! than `DYNAMIC_RATE_LIMIT_ERROR_THRESHOLD_PER_MINUTE` (default 1)
//! failures in the current minute; otherwise the limit is not enforced, so
//! the key may use the room other keys leave.

use crate::store::KeyRecord;
use std::sync::OnceLock;

/// Failures a deployment may have this minute before dynamic limits bind
/// (`DYNAMIC_RATE_LIMIT_ERROR_THRESHOLD_PER_MINUTE`, read once).
pub fn failure_threshold() -> u64 {
    static THRESHOLD: OnceLock<u64> = OnceLock::new();
    *THRESHOLD.get_or_init(|| {
        std::env::var("DYNAMIC_RATE_LIMIT_ERROR_THRESHOLD_PER_MINUTE")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(1)
    })
}

/// Whether the key's `field` (`rpm_limit_type`, `tpm_limit_type`) is
/// `dynamic`.
fn dynamic(record: &KeyRecord, field: &str) -> bool {
    record.metadata.get(field).and_then(|v| v.as_str()) == Some("dynamic")
}

/// Whether any of the key's limits is dynamic.
pub fn has_dynamic(record: &KeyRecord) -> bool {
    dynamic(record, "rpm_limit_type") || dynamic(record, "tpm_limit_type")
}

/// `record` without the limits that are dynamic, when the group is not
/// failing (`failing`: a deployment passed the threshold this minute);
/// `None` when nothing changes.
pub fn relaxed(record: &KeyRecord, failing: bool) -> Option<KeyRecord> {
    if failing || !has_dynamic(record) {
        return None;
    }
    let mut out = record.clone();
    if dynamic(record, "rpm_limit_type") {
        out.rpm_limit = None;
    }
    if dynamic(record, "tpm_limit_type") {
        out.tpm_limit = None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(metadata: serde_json::Value) -> KeyRecord {
        KeyRecord {
            metadata: metadata.as_object().cloned().unwrap_or_default(),
            rpm_limit: Some(5),
            tpm_limit: Some(100),
            ..Default::default()
        }
    }

    #[test]
    fn dynamic_limits_bind_only_while_the_group_fails() {
        let rpm = key(json!({"rpm_limit_type": "dynamic"}));
        let k = relaxed(&rpm, false).expect("relaxed");
        assert_eq!((k.rpm_limit, k.tpm_limit), (None, Some(100)));
        assert!(relaxed(&rpm, true).is_none(), "failing: enforced");
        let tpm =
            key(json!({"tpm_limit_type": "dynamic", "rpm_limit_type": "guaranteed_throughput"}));
        let k = relaxed(&tpm, false).expect("relaxed");
        assert_eq!((k.rpm_limit, k.tpm_limit), (Some(5), None));
        assert!(relaxed(&key(json!({})), false).is_none());
    }
}
