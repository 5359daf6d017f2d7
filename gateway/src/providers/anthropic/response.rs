//! A Messages response → an internal `chat.completion`, as LiteLLM
//! exposes it: text joined into `content`, `tool_use` blocks as
//! `tool_calls`, thinking as `reasoning_content` plus `thinking_blocks`,
//! usage with cached tokens in `prompt_tokens_details`.

use crate::formats::{unix_now, TranslateError};
use serde_json::{json, Value};

/// OpenAI's `finish_reason` for an Anthropic `stop_reason` (LiteLLM's map).
pub(super) fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "pause_turn" | "compaction" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// OpenAI usage for Anthropic usage counts: `prompt_tokens` includes
/// cache reads and writes, which are also reported on their own (LiteLLM's
/// shape).
pub(super) fn openai_usage(u: &Value) -> Value {
    let input = count(&u["input_tokens"]);
    let read = count(&u["cache_read_input_tokens"]);
    let created = count(&u["cache_creation_input_tokens"]);
    let output = count(&u["output_tokens"]);
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

/// A `tool_use` block → an OpenAI tool call.
pub(super) fn tool_call(block: &Value) -> Value {
    json!({
        "id": block["id"],
        "type": "function",
        "function": {
            "name": block["name"],
            "arguments": serde_json::to_string(&block["input"]).unwrap_or_default(),
        },
    })
}

/// The chat completion for the Messages response `body`.
pub fn to_chat(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let resp: Value = serde_json::from_slice(body)?;
    let mut text = String::new();
    let mut reasoning: Option<String> = None;
    let mut thinking_blocks = Vec::new();
    let mut calls = Vec::new();
    let mut json_answer = None;
    for block in resp["content"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            // The forced `response_format` tool: its input is the answer.
            Some("tool_use") if block["name"] == super::request::JSON_TOOL => {
                json_answer = Some(block["input"].to_string());
            }
            Some("tool_use") => calls.push(tool_call(block)),
            Some("thinking") => {
                reasoning
                    .get_or_insert_with(String::new)
                    .push_str(block["thinking"].as_str().unwrap_or_default());
                thinking_blocks.push(block.clone());
            }
            Some("redacted_thinking") => thinking_blocks.push(block.clone()),
            _ => {}
        }
    }
    let mut stop = resp["stop_reason"].as_str().unwrap_or("end_turn");
    if let Some(answer) = json_answer {
        text = answer;
        if calls.is_empty() {
            stop = "end_turn";
        }
    }
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() { Value::Null } else { Value::String(text) },
    });
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    if !thinking_blocks.is_empty() {
        message["reasoning_content"] = reasoning.map_or(Value::Null, Value::String);
        message["thinking_blocks"] = Value::Array(thinking_blocks);
    }
    let out = json!({
        "id": resp["id"],
        "object": "chat.completion",
        "created": unix_now(),
        "model": resp["model"],
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason(stop),
        }],
        "usage": openai_usage(&resp["usage"]),
    });
    Ok(serde_json::to_vec(&out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_tools_thinking_and_cached_usage() {
        let body = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-3-5-sonnet-20241022",
            "content": [
                {"type": "thinking", "thinking": "let me see", "signature": "sig"},
                {"type": "text", "text": "Checking"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20},
        });
        let out: Value =
            serde_json::from_slice(&to_chat(body.to_string().as_bytes()).unwrap()).unwrap();
        assert_eq!(out["id"], "msg_1");
        assert_eq!(out["object"], "chat.completion");
        let choice = &out["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], "Checking");
        assert_eq!(choice["message"]["reasoning_content"], "let me see");
        assert_eq!(choice["message"]["thinking_blocks"][0]["signature"], "sig");
        assert_eq!(
            choice["message"]["tool_calls"][0],
            json!({"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})
        );
        assert_eq!(out["usage"]["prompt_tokens"], 130);
        assert_eq!(out["usage"]["total_tokens"], 135);
        assert_eq!(out["usage"]["prompt_tokens_details"]["cached_tokens"], 100);
        assert_eq!(out["usage"]["cache_creation_input_tokens"], 20);
    }

    #[test]
    fn the_json_tool_answer_becomes_the_content() {
        let body = json!({"id": "m", "model": "c", "stop_reason": "tool_use", "content": [
            {"type": "tool_use", "id": "t", "name": "json_tool_call", "input": {"a": 1}},
        ], "usage": {}});
        let out: Value =
            serde_json::from_slice(&to_chat(body.to_string().as_bytes()).unwrap()).unwrap();
        assert_eq!(out["choices"][0]["message"]["content"], "{\"a\":1}");
        assert!(out["choices"][0]["message"].get("tool_calls").is_none());
        assert_eq!(out["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn stop_reasons_map_as_litellm_does() {
        assert_eq!(finish_reason("end_turn"), "stop");
        assert_eq!(finish_reason("stop_sequence"), "stop");
        assert_eq!(finish_reason("max_tokens"), "length");
        assert_eq!(finish_reason("tool_use"), "tool_calls");
        assert_eq!(finish_reason("refusal"), "content_filter");
        assert!(to_chat(b"[1").is_err());
    }
}
