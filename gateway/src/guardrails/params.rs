//! Reading one guardrail's `litellm_params`: strings, flags, the call's
//! deadline and a service's base URL, each error naming the parameter.

use serde_yaml::{Mapping, Value};
use std::time::Duration;

/// Deadline of one call when `timeout` is not set.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The parameter `k`, unless absent or null.
pub(super) fn get<'a>(params: &'a Mapping, k: &str) -> Option<&'a Value> {
    params.get(k).filter(|v| !v.is_null())
}

/// A string parameter.
pub(super) fn text(params: &Mapping, k: &str) -> Result<Option<String>, String> {
    match get(params, k) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(|s| Some(s.to_string()))
            .ok_or(format!("litellm_params.{k} must be a string")),
    }
}

/// A true/false parameter, `default` when absent.
pub(super) fn flag(params: &Mapping, k: &str, default: bool) -> Result<bool, String> {
    match get(params, k) {
        None => Ok(default),
        Some(v) => v
            .as_bool()
            .ok_or(format!("litellm_params.{k} must be true or false")),
    }
}

/// `timeout`: seconds above 0 and at most 600, default 10.
pub(super) fn timeout(params: &Mapping) -> Result<Duration, String> {
    match get(params, "timeout") {
        None => Ok(DEFAULT_TIMEOUT),
        Some(v) => v
            .as_f64()
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 600.0)
            .map(Duration::from_secs_f64)
            .ok_or("litellm_params.timeout must be seconds above 0 and at most 600".into()),
    }
}

/// A base URL parameter (`http://` or `https://`), without a trailing `/`.
pub(super) fn base(params: &Mapping, k: &str, default: &str) -> Result<String, String> {
    let base = text(params, k)?.unwrap_or_else(|| default.to_string());
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(format!(
            "litellm_params.{k} must start with http:// or https://"
        ));
    }
    Ok(base.trim_end_matches('/').to_string())
}
