//! A Messages request → an internal chat completions request.
//!
//! `system` becomes the leading system message; user blocks become content
//! parts (`text`, `image` as `image_url`, `document` as `file`), and each
//! `tool_result` block its own `tool` message placed before the rest of its
//! turn; assistant `tool_use` blocks become `tool_calls`. `max_tokens`,
//! `stop_sequences`, `temperature`, `top_p`, `tools`, `tool_choice` and
//! `metadata.user_id` map to their OpenAI names. Thinking, `top_k`, cache
//! controls and server tools have no OpenAI counterpart and are dropped. A
//! streamed request asks for the usage chunk, which the Messages stream
//! needs for its final `message_delta`.

use crate::error::GatewayError;
use serde_json::{json, Map, Value};

fn invalid(param: &'static str, message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param,
        message: message.into(),
    }
}

/// The chat completions body for the Messages request `body`, naming
/// `model`.
pub fn to_chat(body: &[u8], model: &str) -> Result<Vec<u8>, GatewayError> {
    let mut req: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    let mut out = Map::new();
    out.insert("model".into(), Value::String(model.to_string()));
    let mut messages = Vec::new();
    match req.remove("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(Value::Array(blocks)) => {
            let parts: Vec<Value> = blocks
                .into_iter()
                .filter_map(|mut b| match b.get("type").and_then(Value::as_str) {
                    Some("text") => Some(json!({"type": "text", "text": b["text"].take()})),
                    _ => None,
                })
                .collect();
            if !parts.is_empty() {
                messages.push(json!({"role": "system", "content": parts}));
            }
        }
        Some(_) => return Err(invalid("system", "must be a string or an array of blocks")),
    }
    let Some(Value::Array(turns)) = req.remove("messages") else {
        return Err(invalid("messages", "must be an array of messages"));
    };
    for turn in turns {
        convert_turn(turn, &mut messages)?;
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(v) = req.remove("max_tokens").filter(|v| !v.is_null()) {
        out.insert("max_tokens".into(), v);
    }
    for (from, to) in [
        ("stop_sequences", "stop"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
    ] {
        if let Some(v) = req.remove(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v);
        }
    }
    if let Some(Value::Array(tools)) = req.remove("tools") {
        let tools: Vec<Value> = tools.into_iter().filter_map(convert_tool).collect();
        if !tools.is_empty() {
            out.insert("tools".into(), Value::Array(tools));
        }
    }
    if let Some(choice) = req.remove("tool_choice").filter(|v| !v.is_null()) {
        if choice.get("disable_parallel_tool_use") == Some(&Value::Bool(true)) {
            out.insert("parallel_tool_calls".into(), Value::Bool(false));
        }
        let mapped = match choice.get("type").and_then(Value::as_str) {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => {
                json!({"type": "function", "function": {"name": choice.get("name").cloned().unwrap_or(Value::Null)}})
            }
            _ => return Err(invalid("tool_choice", "unknown tool_choice type")),
        };
        if out.contains_key("tools") || mapped == json!("none") {
            out.insert("tool_choice".into(), mapped);
        }
    }
    if let Some(user) = req
        .get("metadata")
        .and_then(|m| m.get("user_id"))
        .and_then(Value::as_str)
    {
        out.insert("user".into(), Value::String(user.to_string()));
    }
    if req.get("stream") == Some(&Value::Bool(true)) {
        out.insert("stream".into(), Value::Bool(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    // LiteLLM's `mock_response` rides along for the `mock/` provider.
    if let Some(v) = req.remove("mock_response") {
        out.insert("mock_response".into(), v);
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| GatewayError::MalformedJson(e.to_string()))
}

/// One Messages turn → one or more chat messages.
fn convert_turn(turn: Value, out: &mut Vec<Value>) -> Result<(), GatewayError> {
    let Value::Object(mut turn) = turn else {
        return Err(invalid("messages", "every message must be an object"));
    };
    let role = match turn.get("role").and_then(Value::as_str) {
        Some("user") => "user",
        Some("assistant") => "assistant",
        _ => {
            return Err(invalid(
                "messages",
                "role must be \"user\" or \"assistant\"",
            ))
        }
    };
    let blocks = match turn.remove("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks,
        _ => {
            return Err(invalid(
                "messages",
                "content must be a string or an array of blocks",
            ))
        }
    };
    if role == "assistant" {
        out.push(assistant(blocks));
        return Ok(());
    }
    let mut parts = Vec::new();
    for mut block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => parts.push(json!({"type": "text", "text": block["text"].take()})),
            Some("image") => {
                if let Some(url) = source_url(&block["source"]) {
                    parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
            }
            Some("document") => {
                if let Some(url) = source_url(&block["source"]) {
                    parts.push(json!({"type": "file", "file": {"file_data": url}}));
                }
            }
            Some("tool_result") => out.push(tool_message(block)),
            _ => {}
        }
    }
    if !parts.is_empty() {
        out.push(json!({"role": "user", "content": parts}));
    }
    Ok(())
}

/// An assistant turn: text joined, `tool_use` blocks as `tool_calls`.
fn assistant(blocks: Vec<Value>) -> Value {
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => {
                let arguments = serde_json::to_string(&block["input"]).unwrap_or_default();
                calls.push(json!({
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": arguments},
                }));
            }
            _ => {}
        }
    }
    let mut msg = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) }});
    if !calls.is_empty() {
        msg["tool_calls"] = Value::Array(calls);
    }
    msg
}

/// A `tool_result` block → a `tool` message (text parts joined).
fn tool_message(mut block: Value) -> Value {
    let content = match block["content"].take() {
        Value::String(s) => s,
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    json!({"role": "tool", "tool_call_id": block["tool_use_id"], "content": content})
}

/// The URL of an image or document source: a data URL for base64 data.
fn source_url(source: &Value) -> Option<String> {
    match source.get("type").and_then(Value::as_str)? {
        "base64" => Some(format!(
            "data:{};base64,{}",
            source.get("media_type").and_then(Value::as_str)?,
            source.get("data").and_then(Value::as_str)?
        )),
        "url" => source
            .get("url")
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    }
}

/// A client tool → an OpenAI function; server tools (web search, code
/// execution...) have no OpenAI counterpart and are dropped.
fn convert_tool(mut tool: Value) -> Option<Value> {
    let kind = tool.get("type").and_then(Value::as_str);
    if !matches!(kind, None | Some("custom")) {
        return None;
    }
    let mut function = json!({"name": tool.get("name")?.clone()});
    if let Some(d) = tool.get_mut("description").map(Value::take) {
        function["description"] = d;
    }
    function["parameters"] = match tool.get_mut("input_schema").map(Value::take) {
        Some(schema) if schema.is_object() => schema,
        _ => json!({"type": "object", "properties": {}}),
    };
    Some(json!({"type": "function", "function": function}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Value {
        serde_json::from_slice(&to_chat(body.to_string().as_bytes(), "up").unwrap()).unwrap()
    }

    #[test]
    fn system_messages_and_parameters() {
        let out = chat(json!({
            "model": "claude", "max_tokens": 100, "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "hi"}],
            "stop_sequences": ["END"], "temperature": 0.5, "top_k": 3, "stream": true,
            "metadata": {"user_id": "u-1"}, "thinking": {"type": "enabled", "budget_tokens": 2000},
        }));
        assert_eq!(
            out,
            json!({
                "model": "up",
                "messages": [
                    {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
                    {"role": "user", "content": "hi"},
                ],
                "max_tokens": 100, "stop": ["END"], "temperature": 0.5, "user": "u-1",
                "stream": true, "stream_options": {"include_usage": true},
            })
        );
    }

    #[test]
    fn tools_calls_results_and_images() {
        let out = chat(json!({
            "model": "claude", "max_tokens": 10,
            "tools": [
                {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                {"type": "web_search_20250305", "name": "web_search"},
            ],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "text", "text": "thanks"},
                ]},
            ],
        }));
        assert_eq!(
            out["tools"],
            json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])
        );
        assert_eq!(
            out["tool_choice"],
            json!({"type": "function", "function": {"name": "get_weather"}})
        );
        assert_eq!(out["parallel_tool_calls"], json!(false));
        let m = &out["messages"];
        assert_eq!(
            m[0]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AAAA"
        );
        assert_eq!(m[0]["content"][2]["image_url"]["url"], "https://x/y.png");
        assert_eq!(m[1]["content"], "calling");
        assert_eq!(
            m[1]["tool_calls"][0]["function"],
            json!({"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})
        );
        assert_eq!(
            m[2],
            json!({"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"})
        );
        assert_eq!(
            m[3],
            json!({"role": "user", "content": [{"type": "text", "text": "thanks"}]})
        );
    }

    #[test]
    fn bad_shapes_name_the_parameter() {
        let bad = |body: Value| to_chat(body.to_string().as_bytes(), "m").unwrap_err();
        assert_eq!(bad(json!({"messages": 1})).param(), Some("messages"));
        assert_eq!(
            bad(json!({"messages": [{"role": "system", "content": "x"}]})).param(),
            Some("messages")
        );
        assert_eq!(
            bad(json!({"messages": [], "system": 3})).param(),
            Some("system")
        );
        assert!(matches!(
            to_chat(b"{", "m").unwrap_err(),
            GatewayError::MalformedJson(_)
        ));
    }
}
