//! A Converse response → an internal chat completion, and its usage.
//!
//! Text blocks join into `content`, `toolUse` blocks become tool calls,
//! `reasoningContent` becomes `reasoning_content`; `stopReason` maps to a
//! finish reason (`guardrail_intervened` and `content_filtered` to
//! `content_filter`). Usage counts cache reads and writes into the prompt,
//! as OpenAI's do.

use crate::formats::{unix_now, TranslateError};
use crate::spend::Usage;
use serde_json::{json, Value};

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// OpenAI's finish reason for a Converse `stopReason`.
pub(super) fn finish_reason(stop: &str) -> &'static str {
    match stop {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "guardrail_intervened" | "content_filtered" => "content_filter",
        _ => "stop",
    }
}

/// An OpenAI usage object for a Converse `usage`.
pub(super) fn openai_usage(u: &Value) -> Value {
    let input = count(&u["inputTokens"]);
    let read = count(&u["cacheReadInputTokens"]);
    let created = count(&u["cacheWriteInputTokens"]);
    let output = count(&u["outputTokens"]);
    let prompt = input.saturating_add(read).saturating_add(created);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt.saturating_add(output),
        "prompt_tokens_details": {"cached_tokens": read, "cache_creation_tokens": created},
        "cache_creation_input_tokens": created,
        "cache_read_input_tokens": read,
    })
}

/// A chat completion id (Converse answers carry none).
pub(super) fn completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::new_v4().simple())
}

/// The chat completion for the Converse response `body`.
pub fn to_chat(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let resp: Value = serde_json::from_slice(body)?;
    let Some(content) = resp["output"]["message"]["content"].as_array() else {
        return Err(TranslateError(
            "Converse answer without output.message".into(),
        ));
    };
    let mut text = String::new();
    let mut reasoning: Option<String> = None;
    let mut calls = Vec::new();
    for block in content {
        if let Some(t) = block["text"].as_str() {
            text.push_str(t);
        } else if let Some(tool) = block.get("toolUse") {
            calls.push(json!({
                "id": tool["toolUseId"],
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "arguments": serde_json::to_string(&tool["input"]).unwrap_or_default(),
                },
            }));
        } else if let Some(r) = block["reasoningContent"]["reasoningText"]["text"].as_str() {
            reasoning.get_or_insert_with(String::new).push_str(r);
        }
    }
    let mut message = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    if let Some(r) = reasoning {
        message["reasoning_content"] = Value::String(r);
    }
    let out = json!({
        "id": completion_id(),
        "object": "chat.completion",
        "created": unix_now(),
        "model": "",
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason(resp["stopReason"].as_str().unwrap_or("end_turn")),
        }],
        "usage": openai_usage(&resp["usage"]),
    });
    Ok(serde_json::to_vec(&out)?)
}

/// The usage of a whole Converse answer.
pub fn usage_from_body(body: &[u8]) -> Option<Usage> {
    let resp: Value = serde_json::from_slice(body).ok()?;
    match resp.get("usage") {
        Some(u) => Some(usage_of(u)),
        None => super::embeddings::usage(&resp),
    }
}

/// The gateway's usage for a Converse `usage` object.
pub(super) fn usage_of(u: &Value) -> Usage {
    let read = count(&u["cacheReadInputTokens"]);
    let created = count(&u["cacheWriteInputTokens"]);
    Usage {
        prompt_tokens: count(&u["inputTokens"])
            .saturating_add(read)
            .saturating_add(created),
        completion_tokens: count(&u["outputTokens"]),
        cached_tokens: read,
        cache_creation_tokens: created,
        search_units: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converse_answers_become_chat_completions() {
        let body = json!({
            "output": {"message": {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "hmm"}}},
                {"text": "Hi"},
                {"toolUse": {"toolUseId": "t", "name": "f", "input": {"x": 1}}},
            ]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 3, "outputTokens": 5, "totalTokens": 8, "cacheReadInputTokens": 10, "cacheWriteInputTokens": 2},
            "metrics": {"latencyMs": 9},
        })
        .to_string();
        let chat: Value = serde_json::from_slice(&to_chat(body.as_bytes()).unwrap()).unwrap();
        let choice = &chat["choices"][0];
        assert_eq!(choice["message"]["content"], "Hi");
        assert_eq!(choice["message"]["reasoning_content"], "hmm");
        assert_eq!(
            choice["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"x\":1}"
        );
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(chat["usage"]["prompt_tokens"], 15);
        assert_eq!(chat["usage"]["prompt_tokens_details"]["cached_tokens"], 10);
        let usage = usage_from_body(body.as_bytes()).unwrap();
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cached_tokens,
                usage.cache_creation_tokens
            ),
            (15, 5, 10, 2)
        );
        assert!(to_chat(b"{}").is_err());
        assert!(to_chat(b"[").is_err());
        assert_eq!(finish_reason("guardrail_intervened"), "content_filter");
        assert_eq!(finish_reason("max_tokens"), "length");
    }
}
