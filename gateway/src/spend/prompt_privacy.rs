//! What of a prompt and answer a spend row may keep, as LiteLLM 1.110.2
//! decides it before storing them (`spend_tracking_utils.py`,
//! `litellm_core_utils/redact_messages.py`):
//!
//! - `general_settings.spend_logs_prompt_storage: latest_turn`: the
//!   request keeps only its `model` and its latest user turn as text (the
//!   last `messages` / `input` entry when it is the user's; images, files
//!   and audio as placeholders; a tool result keeps no turn), except a
//!   Responses request that continues a stored conversation
//!   (`previous_response_id`, `conversation`), kept whole.
//! - message logging turned off (`litellm_settings.turn_off_message_logging`,
//!   a request's `turn_off_message_logging`, LiteLLM's redaction headers):
//!   the request's `messages` become one redacted user message, `prompt`
//!   and `input` empty, `instructions` redacted; the answer's message
//!   contents, reasoning and tool-call arguments (chat), its output texts
//!   and arguments (Responses) are redacted, any other answer becomes
//!   `{"text": "redacted-by-litellm"}`.

use serde_json::{json, Map, Value};

/// LiteLLM's `REDACTED_BY_LITELLM`.
pub const REDACTED: &str = "redacted-by-litellm";

/// The request header that turns redaction off (honoured only for a key
/// or team with `allow_client_message_redaction_opt_out`).
pub const DISABLE_HEADER: &str = "litellm-disable-message-redaction";
/// The request headers that turn redaction on.
pub const ENABLE_HEADERS: [&str; 2] = [
    "litellm-enable-message-redaction",
    "x-litellm-enable-message-redaction",
];

/// What a request's headers say about redaction (a header is "set" when
/// present with a value, as LiteLLM's `bool(value)` reads it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedactionHeaders {
    /// [`DISABLE_HEADER`] is set.
    pub disable: bool,
    /// One of [`ENABLE_HEADERS`] is set.
    pub enable: bool,
}

/// Whether a request's row keeps its messages redacted, LiteLLM's
/// `should_redact_message_logging`: the disable header (when the key or
/// team may opt out) wins, then the request's own `turn_off_message_logging`
/// (`asked`, read by `inbound`; a `false` only counts when the key or team
/// may opt out or the global setting is off: LiteLLM strips it otherwise),
/// then the enable headers, then `by_default`
/// (`litellm_settings.turn_off_message_logging`).
pub fn redacts(
    by_default: bool,
    asked: Option<bool>,
    headers: RedactionHeaders,
    may_opt_out: bool,
) -> bool {
    if headers.disable && may_opt_out {
        return false;
    }
    let asked = asked.filter(|on| *on || may_opt_out || !by_default);
    if let Some(on) = asked {
        return on;
    }
    headers.enable || by_default
}

/// The request as `spend_logs_prompt_storage: latest_turn` keeps it
/// (LiteLLM's `_trimmed_turn`); `responses`: a `/v1/responses` request.
pub fn latest_turn(body: Value, responses: bool) -> Value {
    let Value::Object(mut map) = body else {
        return body;
    };
    let continues = |k: &str| map.get(k).is_some_and(truthy);
    if responses && (continues("previous_response_id") || continues("conversation")) {
        return Value::Object(map);
    }
    let mut kept = Map::new();
    if let Some(model) = map.remove("model") {
        kept.insert("model".into(), model);
    }
    let turns = ["messages", "input"]
        .into_iter()
        .find_map(|k| map.remove(k).map(|v| (k, v)));
    if let Some((key, turns)) = turns {
        if let Some(text) = latest_user_text(&turns) {
            kept.insert(key.into(), json!([{"role": "user", "content": text}]));
        }
    }
    Value::Object(kept)
}

/// Python's truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The text of the last turn when it is the user's (a plain string input
/// is one).
fn latest_user_text(turns: &Value) -> Option<String> {
    match turns {
        Value::String(s) => (!s.is_empty()).then(|| s.clone()),
        Value::Array(items) => {
            let last = items.last()?;
            if last.get("role").and_then(Value::as_str) != Some("user") {
                return None;
            }
            user_content_text(last.get("content")?)
        }
        _ => None,
    }
}

/// A user message's content as text; `None` for a tool result.
fn user_content_text(content: &Value) -> Option<String> {
    let blocks = match content {
        Value::String(s) => return (!s.is_empty()).then(|| s.clone()),
        Value::Array(blocks) => blocks,
        _ => return None,
    };
    let kind = |b: &Value| b.get("type").and_then(Value::as_str).map(str::to_owned);
    let tool_output = ["tool_result", "mcp_tool_result", "function_call_output"];
    if blocks
        .iter()
        .any(|b| kind(b).is_some_and(|k| tool_output.contains(&k.as_str())))
    {
        return None;
    }
    let texts: Vec<String> = blocks
        .iter()
        .filter_map(|b| match b {
            Value::String(s) => Some(s.clone()),
            _ => match kind(b)?.as_str() {
                "text" | "input_text" => b.get("text")?.as_str().map(str::to_owned),
                "image" | "image_url" | "input_image" => Some("[image omitted]".into()),
                "file" | "input_file" | "document" => Some("[file omitted]".into()),
                "input_audio" => Some("[audio omitted]".into()),
                _ => None,
            },
        })
        .filter(|t| !t.is_empty())
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n"))
}

/// The request with its messages redacted (LiteLLM's `perform_redaction`
/// on the body).
pub fn redact_request(body: &mut Value) {
    let Value::Object(map) = body else { return };
    map.insert(
        "messages".into(),
        json!([{"role": "user", "content": REDACTED}]),
    );
    map.insert("prompt".into(), json!(""));
    map.insert("input".into(), json!(""));
    if map.get("instructions").is_some_and(|v| !v.is_null()) {
        map.insert("instructions".into(), json!(REDACTED));
    }
}

/// The answer with its content redacted (LiteLLM's `perform_redaction`
/// on a response): chat choices, Responses output, else a redacted text.
pub fn redact_answer(answer: Value) -> Value {
    match answer {
        Value::Object(mut map) if map.contains_key("choices") => {
            if let Some(Value::Array(choices)) = map.get_mut("choices") {
                choices.iter_mut().for_each(redact_choice);
            }
            Value::Object(map)
        }
        Value::Object(mut map) if map.contains_key("output") => {
            if let Some(Value::Array(items)) = map.get_mut("output") {
                items.iter_mut().for_each(redact_output_item);
            }
            set_if_present(&mut map, "instructions");
            Value::Object(map)
        }
        _ => json!({"text": REDACTED}),
    }
}

/// Replaces `field` with [`REDACTED`] when it holds something.
fn set_if_present(map: &mut Map<String, Value>, field: &str) {
    if map.get(field).is_some_and(|v| !v.is_null()) {
        map.insert(field.into(), json!(REDACTED));
    }
}

/// Provider fields that carry reasoning or sources, dropped.
const DROPPED_PROVIDER_FIELDS: &[&str] = &[
    "thinking_blocks",
    "reasoningContentBlocks",
    "reasoningContent",
    "annotations",
    "citations",
    "citation",
    "citationsContent",
    "compaction_blocks",
    "compaction_start",
    "compaction_delta",
    "reasoning_details",
    "web_search_calls",
    "web_search_results",
    "tool_results",
    "code_interpreter_results",
    "search_results",
    "rerank_results",
    "executed_tools",
    "custom_outputs",
    "tool_search_items",
    "token_ids",
];

fn redact_provider_fields(holder: &mut Value) {
    let Some(Value::Object(fields)) = holder.get_mut("provider_specific_fields") else {
        return;
    };
    for field in ["reasoning_content", "reasoning", "reasoning_text"] {
        set_if_present(fields, field);
    }
    for field in DROPPED_PROVIDER_FIELDS {
        if let Some(v) = fields.get_mut(*field) {
            *v = Value::Null;
        }
    }
    if let Some(Value::Array(calls)) = fields.get_mut("server_tool_calls") {
        calls.iter_mut().for_each(redact_call_arguments);
    }
}

fn redact_call_arguments(call: &mut Value) {
    if let Some(Value::Object(function)) = call.get_mut("function") {
        function.insert("arguments".into(), json!(REDACTED));
    }
}

fn redact_choice(choice: &mut Value) {
    redact_provider_fields(choice);
    let Value::Object(map) = choice else { return };
    if map.get("token_ids").is_some_and(|v| !v.is_null()) {
        map.insert("token_ids".into(), Value::Null);
    }
    let body_key = ["message", "delta"]
        .into_iter()
        .find(|k| map.get(*k).is_some_and(Value::is_object));
    match body_key {
        Some(key) => {
            let body = map.get_mut(key).expect("found above");
            redact_provider_fields(body);
            let Value::Object(body) = body else { return };
            set_if_present(body, "content");
            set_if_present(body, "reasoning_content");
            for field in ["thinking_blocks", "reasoning_items", "audio"] {
                if let Some(v) = body.get_mut(field) {
                    *v = Value::Null;
                }
            }
            if let Some(Value::Array(calls)) = body.get_mut("tool_calls") {
                calls.iter_mut().for_each(redact_call_arguments);
            }
            if let Some(Value::Object(call)) = body.get_mut("function_call") {
                if call.contains_key("arguments") {
                    call.insert("arguments".into(), json!(REDACTED));
                }
            }
        }
        None => set_if_present(map, "text"),
    }
}

fn redact_output_item(item: &mut Value) {
    let Value::Object(map) = item else { return };
    set_if_present(map, "text");
    let kind = map.get("type").and_then(Value::as_str).map(str::to_owned);
    if let Some(Value::Array(parts)) = map.get_mut("content") {
        for part in parts.iter_mut().filter_map(Value::as_object_mut) {
            set_if_present(part, "text");
            set_if_present(part, "refusal");
        }
    }
    match kind.as_deref() {
        Some("reasoning") => {
            if let Some(Value::Array(parts)) = map.get_mut("summary") {
                for part in parts.iter_mut().filter_map(Value::as_object_mut) {
                    set_if_present(part, "text");
                }
            }
        }
        Some("compaction") if map.contains_key("encrypted_content") => {
            map.insert("encrypted_content".into(), json!(REDACTED));
        }
        Some("function_call") if map.contains_key("arguments") => {
            map.insert("arguments".into(), json!(REDACTED));
        }
        Some("custom_tool_call") if map.contains_key("input") => {
            map.insert("input".into(), json!(REDACTED));
        }
        Some("web_search_call") => {
            if let Some(Value::Object(action)) = map.get_mut("action") {
                for field in ["query", "url", "pattern"] {
                    set_if_present(action, field);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_turn_keeps_the_model_and_the_users_last_words() {
        let body = json!({"model": "m", "temperature": 0.2, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:..."}}]}]});
        assert_eq!(
            latest_turn(body, false),
            json!({"model": "m", "messages": [{"role": "user", "content": "look\n[image omitted]"}]})
        );
        // The last turn is a tool result, or not the user's: no turn.
        let tool = json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "42"}]}]});
        assert_eq!(latest_turn(tool, false), json!({"model": "m"}));
        let assistant = json!({"model": "m", "messages": [{"role": "assistant", "content": "x"}]});
        assert_eq!(latest_turn(assistant, false), json!({"model": "m"}));
        // A Responses string input is a user turn.
        let input = json!({"model": "m", "input": "hello", "instructions": "secret"});
        assert_eq!(
            latest_turn(input.clone(), true),
            json!({"model": "m", "input": [{"role": "user", "content": "hello"}]})
        );
        // One continuing a stored conversation is kept whole, on /v1/responses only.
        let resumed = json!({"model": "m", "input": "more", "previous_response_id": "resp_1"});
        assert_eq!(latest_turn(resumed.clone(), true), resumed);
        assert_eq!(
            latest_turn(resumed, false),
            json!({"model": "m", "input": [{"role": "user", "content": "more"}]})
        );
    }

    #[test]
    fn redaction_follows_litellms_precedence() {
        let none = RedactionHeaders::default();
        assert!(redacts(true, None, none, false), "the global setting");
        assert!(!redacts(false, None, none, false));
        // The request's own flag: true always counts, false only when the
        // caller may opt out or the global setting is off.
        assert!(redacts(false, Some(true), none, false));
        assert!(redacts(true, Some(false), none, false));
        assert!(!redacts(true, Some(false), none, true));
        assert!(!redacts(false, Some(false), none, false));
        // Headers: disable (when allowed) wins, enable turns it on.
        let disable = RedactionHeaders {
            disable: true,
            enable: false,
        };
        let enable = RedactionHeaders {
            disable: false,
            enable: true,
        };
        assert!(redacts(true, None, disable, false), "not allowed: ignored");
        assert!(!redacts(true, None, disable, true));
        assert!(redacts(false, None, enable, false));
    }

    #[test]
    fn requests_and_answers_are_redacted_as_litellm_redacts_them() {
        let mut req = json!({"model": "m", "instructions": "sys", "messages": [{"role": "user", "content": "hi"}]});
        redact_request(&mut req);
        assert_eq!(
            req,
            json!({"model": "m", "instructions": REDACTED, "prompt": "", "input": "",
                "messages": [{"role": "user", "content": REDACTED}]})
        );
        let chat = json!({"id": "c", "choices": [{"index": 0, "message": {"role": "assistant",
            "content": "secret", "reasoning_content": "why", "thinking_blocks": [{"t": 1}],
            "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]}}],
            "usage": {"total_tokens": 3}});
        let out = redact_answer(chat);
        let msg = &out["choices"][0]["message"];
        assert_eq!(
            (&msg["content"], &msg["reasoning_content"]),
            (&json!(REDACTED), &json!(REDACTED))
        );
        assert_eq!(msg["thinking_blocks"], Value::Null);
        assert_eq!(msg["tool_calls"][0]["function"]["arguments"], REDACTED);
        assert_eq!(msg["tool_calls"][0]["function"]["name"], "f", "names stay");
        assert_eq!(out["usage"]["total_tokens"], 3, "usage stays");
        let responses = json!({"id": "r", "instructions": "sys", "output": [
            {"type": "message", "content": [{"type": "output_text", "text": "secret"}]},
            {"type": "function_call", "name": "f", "arguments": "{}"}]});
        let out = redact_answer(responses);
        assert_eq!(out["output"][0]["content"][0]["text"], REDACTED);
        assert_eq!(out["output"][1]["arguments"], REDACTED);
        assert_eq!(out["instructions"], REDACTED);
        let messages = json!({"type": "message", "content": [{"type": "text", "text": "secret"}]});
        assert_eq!(redact_answer(messages), json!({"text": REDACTED}));
    }
}
