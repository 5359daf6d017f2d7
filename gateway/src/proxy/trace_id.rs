//! A team's `require_trace_id` (kept in its `metadata`, as LiteLLM keeps
//! it): a request of one of its keys without a trace id is refused, as
//! LiteLLM's `common_checks` refuses it. A trace id is, in LiteLLM's order:
//! an `x-litellm-trace-id` or `x-litellm-session-id` header, an
//! `x-<vendor>-session-id` header (`x-claude-code-session-id`, ...), Codex's
//! `session-id`-like headers from a Codex client, an `x-session-id` header;
//! then, on LLM routes, the body's `litellm_trace_id`, a W3C `traceparent`
//! header (when the body has no `litellm_trace_id`), or a non-empty
//! `trace_id` in the body's metadata (`metadata`, or `litellm_metadata` on
//! LiteLLM's routes that read that one first). Pass-through routes read the
//! headers only.

use crate::auth::Principal;
use crate::error::GatewayError;
use crate::http1::RequestHead;
use serde::Deserialize;
use serde_json::Value;

/// Refuses a request of a key whose team requires a trace id when it
/// carries none; `body` is `None` where only headers count (pass-through).
pub(crate) fn check(
    principal: &Principal,
    head: &RequestHead,
    body: Option<&[u8]>,
) -> Result<(), GatewayError> {
    let Principal::Key(key) = principal else {
        return Ok(());
    };
    let Some(team) = &key.team else {
        return Ok(());
    };
    let required = team.record.metadata.get("require_trace_id") == Some(&Value::Bool(true));
    if !required || matches!(head.method(), "GET" | "HEAD" | "OPTIONS") {
        return Ok(());
    }
    if in_headers(head) || body.is_some_and(|b| in_body(head, b)) {
        return Ok(());
    }
    Err(GatewayError::TraceIdRequired(team.record.team_id.clone()))
}

/// Whether the headers name a trace (LiteLLM's `get_chain_id_from_headers`).
fn in_headers(head: &RequestHead) -> bool {
    let header = |name: &str| head.header(name).filter(|v| !v.is_empty());
    if header("x-litellm-trace-id").is_some() || header("x-litellm-session-id").is_some() {
        return true;
    }
    let vendor = head.headers().any(|(name, value)| {
        let name = name.to_ascii_lowercase();
        name.len() > "x--session-id".len()
            && name.starts_with("x-")
            && name.ends_with("-session-id")
            && session_like(value)
    });
    if vendor {
        return true;
    }
    let codex = head.header("user-agent").is_some_and(is_codex);
    if codex
        && ["session-id", "session_id", "thread-id", "conversation_id"]
            .iter()
            .any(|h| head.header(h).is_some_and(session_like))
    {
        return true;
    }
    head.header("x-session-id").is_some_and(session_like)
}

/// LiteLLM's session-id values: at least 8 of `[a-zA-Z0-9_-]`.
fn session_like(value: &str) -> bool {
    value.len() >= 8
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A Codex client's `user-agent` (`codex` then `-`, `_`, space or `/`).
fn is_codex(agent: &str) -> bool {
    let b = agent.as_bytes();
    b.len() > 5
        && b[..5].eq_ignore_ascii_case(b"codex")
        && matches!(b[5], b'-' | b'_' | b' ' | b'/')
}

/// A field of the body, told apart when present (even `null`) or absent.
#[derive(Debug, Default)]
struct Given(Option<Value>);

impl<'de> Deserialize<'de> for Given {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(|v| Given(Some(v)))
    }
}

/// The body's fields that may carry a trace id.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TraceFields {
    litellm_trace_id: Given,
    metadata: Given,
    litellm_metadata: Given,
}

/// Whether the body (or the `traceparent` header) names a trace.
fn in_body(head: &RequestHead, body: &[u8]) -> bool {
    let fields: TraceFields = serde_json::from_slice(body).unwrap_or_default();
    match &fields.litellm_trace_id.0 {
        Some(Value::String(id)) if !id.is_empty() => return true,
        Some(_) => {}
        None => {
            if head.header("traceparent").is_some_and(traceparent_ok) {
                return true;
            }
        }
    }
    let (first, second) = if litellm_metadata_route(head.path()) {
        (&fields.litellm_metadata, &fields.metadata)
    } else {
        (&fields.metadata, &fields.litellm_metadata)
    };
    match trace_id_of(first) {
        Some(Some(id)) => nonempty(id),
        _ => trace_id_of(second).flatten().is_some_and(nonempty),
    }
}

/// `Some(field)` when `m` is an object (the field `None` when it has no
/// `trace_id`).
fn trace_id_of(m: &Given) -> Option<Option<&Value>> {
    m.0.as_ref()
        .and_then(Value::as_object)
        .map(|o| o.get("trace_id"))
}

fn nonempty(v: &Value) -> bool {
    v.as_str().is_some_and(|s| !s.is_empty())
}

/// LiteLLM's routes whose metadata is `litellm_metadata`
/// (`LITELLM_METADATA_ROUTES`).
fn litellm_metadata_route(path: &str) -> bool {
    [
        "batches",
        "bedrock",
        "/v1/messages",
        "responses",
        "files",
        "interactions",
        "thread",
        "assistant",
    ]
    .iter()
    .any(|r| path.contains(r))
}

/// A W3C `traceparent` with a trace id that is not all zeros.
fn traceparent_ok(value: &str) -> bool {
    let parts: Vec<&str> = value.trim().split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    parts.len() == 4
        && hex(parts[0], 2)
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1].bytes().any(|b| b != b'0')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_litellms_trace_id_forms() {
        assert!(traceparent_ok(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        assert!(!traceparent_ok(
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
        ));
        assert!(!traceparent_ok("00-4bf92f35-00f067aa0ba902b7-01"));
        assert!(session_like("e96634a3-fa28-4083-b354-55542e2dca01"));
        assert!(!session_like("short") && !session_like("has space 123"));
        assert!(is_codex("codex_exec/0.169.0") && !is_codex("codexy/1"));
        assert!(
            litellm_metadata_route("/v1/messages")
                && !litellm_metadata_route("/v1/chat/completions")
        );
    }
}
