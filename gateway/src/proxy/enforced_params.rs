//! A key's `enforced_params` (kept in its `metadata`, as LiteLLM keeps
//! them): the request parameters every LLM request of the key must carry,
//! as LiteLLM's `_enforced_params_check` requires them. A name is a
//! top-level member (`user`) or one level down (`metadata.generation_name`);
//! a request without one is a 400 with LiteLLM's message. LiteLLM's proxy
//! always adds a `metadata` of its own to the body it checks on the routes
//! that keep their metadata there (all but `/v1/messages` and
//! `/v1/responses`), so `metadata` alone is always present on them.
//!
//! LiteLLM answers the missing parameter with a 500 (a bare `ValueError`)
//! and asks for an enterprise licence; the gateway answers 400, naming the
//! parameter, and asks for none.

use crate::auth::Principal;
use crate::error::GatewayError;
use crate::inbound::Endpoint;
use serde_json::Value;

/// Refuses a request of a key with `enforced_params` whose JSON `body`
/// lacks one of them. A body that is not a JSON object (a multipart
/// form) is read as its top-level members alone: none.
pub(crate) fn check(
    principal: &Principal,
    endpoint: Endpoint,
    body: &[u8],
) -> Result<(), GatewayError> {
    let Principal::Key(key) = principal else {
        return Ok(());
    };
    let Some(Value::Array(names)) = key.record.metadata.get("enforced_params") else {
        return Ok(());
    };
    if names.is_empty() {
        return Ok(());
    }
    let parsed: Option<serde_json::Map<String, Value>> = serde_json::from_slice(body).ok();
    let members = parsed.unwrap_or_default();
    let proxy_metadata = !matches!(endpoint, Endpoint::Messages | Endpoint::Responses);
    for name in names.iter().filter_map(Value::as_str) {
        missing(&members, name, proxy_metadata).map_or(Ok(()), Err)?;
    }
    Ok(())
}

/// The error for `name` when `members` lacks it.
fn missing(
    members: &serde_json::Map<String, Value>,
    name: &str,
    proxy_metadata: bool,
) -> Option<GatewayError> {
    let mut parts = name.split('.');
    let top = parts.next().unwrap_or_default();
    let inner = parts.next();
    // LiteLLM checks one or two levels; a longer name is not checked there.
    if parts.next().is_some() {
        return None;
    }
    let error = |shown: String| GatewayError::EnforcedParamMissing {
        shown,
        param: name.to_string(),
    };
    let value = members.get(top);
    if value.is_none() && !(proxy_metadata && top == "metadata" && inner.is_none()) {
        return Some(error(top.to_string()));
    }
    let inner = inner?;
    let held = match value {
        Some(Value::Object(m)) => m.contains_key(inner),
        Some(Value::Array(items)) => items.iter().any(|i| i.as_str() == Some(inner)),
        Some(Value::String(s)) => s.contains(inner),
        _ => false,
    };
    (!held).then(|| error(format!("[{top}][{inner}]")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn names_the_missing_parameter_as_litellm_does() {
        let body = map(serde_json::json!({"user": "u", "metadata": {"generation_name": "g"}}));
        assert!(missing(&body, "user", true).is_none());
        assert!(missing(&body, "metadata.generation_name", true).is_none());
        let e = missing(&body, "metadata.trace", true).unwrap();
        assert_eq!(
            e.to_string(),
            "BadRequest please pass param=[metadata][trace] in request body. This is a required param"
        );
        assert_eq!(e.param(), Some("metadata.trace"));
        let e = missing(&body, "temperature", true).unwrap();
        assert_eq!(e.status(), 400);
        assert!(e.to_string().contains("param=temperature "));
        let empty = serde_json::Map::new();
        assert!(missing(&empty, "metadata", true).is_none());
        assert!(missing(&empty, "metadata", false).is_some());
        assert!(missing(&empty, "a.b.c", true).is_none());
    }
}
