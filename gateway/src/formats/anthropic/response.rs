//! An internal `chat.completion` → a Messages response.

use crate::formats::TranslateError;
use serde_json::{json, Map, Value};

/// Anthropic's `stop_reason` for an OpenAI `finish_reason` (LiteLLM's map).
pub(super) fn stop_reason(finish_reason: &str) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" | "refusal" => "refusal",
        _ => "end_turn",
    }
}

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Anthropic's usage for an OpenAI usage object: cached and cache-creation
/// tokens leave `input_tokens` for their own members.
pub(super) fn usage(u: &Value) -> Value {
    let cache_read = [
        &u["cache_read_input_tokens"],
        &u["prompt_tokens_details"]["cached_tokens"],
    ]
    .into_iter()
    .map(count)
    .find(|&n| n > 0)
    .unwrap_or(0);
    let cache_creation = [
        &u["cache_creation_input_tokens"],
        &u["prompt_tokens_details"]["cache_creation_tokens"],
    ]
    .into_iter()
    .map(count)
    .find(|&n| n > 0)
    .unwrap_or(0);
    let input =
        count(&u["prompt_tokens"]).saturating_sub(cache_read.saturating_add(cache_creation));
    let mut out = Map::new();
    out.insert("input_tokens".into(), input.into());
    out.insert(
        "output_tokens".into(),
        count(&u["completion_tokens"]).into(),
    );
    if cache_creation > 0 {
        out.insert("cache_creation_input_tokens".into(), cache_creation.into());
    }
    if cache_read > 0 {
        out.insert("cache_read_input_tokens".into(), cache_read.into());
    }
    Value::Object(out)
}

/// The Messages response for the chat completion `body`.
pub fn from_chat(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let mut resp: Value = serde_json::from_slice(body)?;
    let choice = resp
        .pointer_mut("/choices/0")
        .map(Value::take)
        .unwrap_or_default();
    let message = &choice["message"];
    let mut content = Vec::new();
    if let Some(reasoning) = message["reasoning_content"]
        .as_str()
        .filter(|r| !r.is_empty())
    {
        content.push(json!({"type": "thinking", "thinking": reasoning, "signature": ""}));
    }
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let arguments = call["function"]["arguments"].as_str().unwrap_or("");
        let input: Value = match serde_json::from_str(arguments) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({}),
        };
        content.push(json!({
            "type": "tool_use",
            "id": call["id"],
            "name": call["function"]["name"],
            "input": input,
        }));
    }
    let stop = stop_reason(choice["finish_reason"].as_str().unwrap_or("stop"));
    let out = json!({
        "id": resp["id"],
        "type": "message",
        "role": "assistant",
        "model": resp["model"],
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": usage(&resp["usage"]),
    });
    Ok(serde_json::to_vec(&out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_tools_and_usage() {
        let body = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "checking",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}],
            }}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37, "prompt_tokens_details": {"cached_tokens": 10}},
        });
        let out: Value =
            serde_json::from_slice(&from_chat(body.to_string().as_bytes()).unwrap()).unwrap();
        assert_eq!(
            out,
            json!({
                "id": "chatcmpl-1", "type": "message", "role": "assistant", "model": "gpt-4o",
                "content": [
                    {"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 20, "output_tokens": 7, "cache_read_input_tokens": 10},
            })
        );
    }

    #[test]
    fn finish_reasons_and_bad_bodies() {
        assert_eq!(stop_reason("stop"), "end_turn");
        assert_eq!(stop_reason("length"), "max_tokens");
        assert_eq!(stop_reason("content_filter"), "refusal");
        assert!(from_chat(b"not json").is_err());
        let empty: Value = serde_json::from_slice(&from_chat(b"{}").unwrap()).unwrap();
        assert_eq!(empty["content"], json!([]));
        assert_eq!(
            empty["usage"],
            json!({"input_tokens": 0, "output_tokens": 0})
        );
    }
}
