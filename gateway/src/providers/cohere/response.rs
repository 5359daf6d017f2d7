//! A Cohere v2 chat answer → an internal chat completion.
//!
//! `message.content` text parts join into `content` (`thinking` parts
//! into `reasoning_content`), `message.tool_calls` (already OpenAI's
//! shape) become tool calls; `finish_reason` as LiteLLM maps it
//! (`COMPLETE`/`STOP_SEQUENCE`/`ERROR` → stop, `MAX_TOKENS` → length,
//! `TOOL_CALL` → tool_calls, `ERROR_TOXIC` → content_filter); the usage
//! from `usage` (see `usage`). Cohere's answer names no model: `model` is
//! empty.

use super::usage;
use crate::formats::{unix_now, TranslateError};
use serde_json::{json, Value};

/// OpenAI's finish reason for Cohere's `reason`.
pub(super) fn finish_reason(reason: &str) -> &'static str {
    match reason {
        "MAX_TOKENS" => "length",
        "TOOL_CALL" => "tool_calls",
        "ERROR_TOXIC" => "content_filter",
        _ => "stop",
    }
}

/// `chatcmpl-` and Cohere's answer id (a fresh one when it has none).
pub(super) fn chat_id(id: Option<&str>) -> String {
    match id {
        Some(id) => format!("chatcmpl-{id}"),
        None => format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
    }
}

/// The chat completion for the Cohere answer `body`.
pub fn to_chat(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let resp: Value = serde_json::from_slice(body)?;
    let Some(message) = resp.get("message").filter(|m| m.is_object()) else {
        return Err(TranslateError("Cohere answer has no message".into()));
    };
    let mut text = String::new();
    let mut thinking = String::new();
    for part in message["content"].as_array().into_iter().flatten() {
        match part["type"].as_str() {
            Some("thinking") => thinking.push_str(part["thinking"].as_str().unwrap_or("")),
            _ => text.push_str(part["text"].as_str().unwrap_or("")),
        }
    }
    let calls: Vec<Value> = message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({
                "id": c["id"],
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"].as_str().unwrap_or("{}"),
                },
            })
        })
        .collect();
    let mut out_message = json!({"role": "assistant", "content": text});
    if !thinking.is_empty() {
        out_message["reasoning_content"] = json!(thinking);
    }
    if !calls.is_empty() {
        out_message["tool_calls"] = Value::Array(calls);
        if text.is_empty() {
            out_message["content"] = Value::Null;
        }
    }
    let reason = finish_reason(resp["finish_reason"].as_str().unwrap_or("COMPLETE"));
    let used = resp
        .get("usage")
        .and_then(usage::of_chat)
        .unwrap_or_default();
    let out = json!({
        "id": chat_id(resp["id"].as_str()),
        "object": "chat.completion",
        "created": unix_now(),
        "model": "",
        "choices": [{"index": 0, "message": out_message, "finish_reason": reason}],
        "usage": usage::openai(used),
    });
    Ok(serde_json::to_vec(&out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_chat_completions() {
        let body = br#"{"id":"c1","finish_reason":"COMPLETE","message":{"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"Hello"},{"type":"text","text":" there"}]},"usage":{"billed_units":{"input_tokens":3,"output_tokens":2},"tokens":{"input_tokens":60,"output_tokens":2}}}"#;
        let out: Value = serde_json::from_slice(&to_chat(body).unwrap()).unwrap();
        assert_eq!(out["id"], "chatcmpl-c1");
        assert_eq!(out["object"], "chat.completion");
        let choice = &out["choices"][0];
        assert_eq!(choice["message"]["content"], "Hello there");
        assert_eq!(choice["message"]["reasoning_content"], "hm");
        assert_eq!(choice["finish_reason"], "stop");
        assert_eq!(
            out["usage"],
            json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
        );
        let tools = br#"{"id":"c2","finish_reason":"TOOL_CALL","message":{"role":"assistant","tool_plan":"I will call f","tool_calls":[{"id":"f_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"usage":{"tokens":{"input_tokens":9,"output_tokens":4}}}"#;
        let out: Value = serde_json::from_slice(&to_chat(tools).unwrap()).unwrap();
        let choice = &out["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert!(choice["message"]["content"].is_null());
        assert_eq!(choice["message"]["tool_calls"][0]["id"], "f_1");
        assert_eq!(
            choice["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":1}"
        );
        assert_eq!(out["usage"]["prompt_tokens"], 9);
        let cut = br#"{"id":"c3","finish_reason":"MAX_TOKENS","message":{"role":"assistant","content":[{"type":"text","text":"x"}]}}"#;
        let out: Value = serde_json::from_slice(&to_chat(cut).unwrap()).unwrap();
        assert_eq!(out["choices"][0]["finish_reason"], "length");
        assert!(to_chat(b"{}").is_err());
        assert!(to_chat(b"[1]").is_err());
    }
}
