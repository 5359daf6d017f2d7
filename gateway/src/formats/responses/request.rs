//! A Responses request → an internal chat completions request, as
//! LiteLLM's bridge translates it.
//!
//! `instructions` becomes a system message; `input` (a string, or items:
//! messages with `input_text`/`output_text`/`input_image` parts,
//! `function_call` and `function_call_output` items) becomes the messages;
//! `max_output_tokens` `max_tokens`; function `tools` and `tool_choice`
//! their chat forms; `text.format` `response_format`; `reasoning.effort`
//! `reasoning_effort`. A streamed request asks for the usage chunk. The
//! gateway keeps no responses, so `previous_response_id` is refused, and
//! built-in tools (web search, file search...) have no chat equivalent.

use crate::error::GatewayError;
use serde_json::{json, Map, Value};

fn invalid(param: &'static str, message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param,
        message: message.into(),
    }
}

/// Parameters passed through under the same name.
const SAME_NAME: &[&str] = &[
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "stream",
    "service_tier",
];

/// The chat completions body for the Responses request `body`, asking for
/// `model`.
pub fn to_chat(body: &[u8], model: &str) -> Result<Vec<u8>, GatewayError> {
    let mut req: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    if req
        .get("previous_response_id")
        .is_some_and(|v| !v.is_null())
    {
        return Err(invalid(
            "previous_response_id",
            "this gateway keeps no responses: send the whole conversation in `input`",
        ));
    }
    let mut out = Map::new();
    out.insert("model".into(), Value::String(model.to_string()));
    let mut messages = Vec::new();
    match req.remove("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(_) => return Err(invalid("instructions", "must be a string")),
    }
    match req.remove("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for item in items {
                push_item(&mut messages, item)?;
            }
        }
        _ => return Err(invalid("input", "must be a string or an array of items")),
    }
    out.insert("messages".into(), Value::Array(messages));
    for name in SAME_NAME {
        if let Some(v) = req.remove(*name).filter(|v| !v.is_null()) {
            out.insert((*name).into(), v);
        }
    }
    if let Some(max) = req.remove("max_output_tokens").filter(|v| !v.is_null()) {
        out.insert("max_tokens".into(), max);
    }
    if out.get("stream") == Some(&Value::Bool(true)) {
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(effort) = req
        .remove("reasoning")
        .and_then(|r| r.get("effort").cloned())
    {
        if !effort.is_null() {
            out.insert("reasoning_effort".into(), effort);
        }
    }
    if let Some(format) = req.remove("text").and_then(|t| t.get("format").cloned()) {
        match format["type"].as_str() {
            None | Some("text") => {}
            Some("json_object") => {
                out.insert("response_format".into(), json!({"type": "json_object"}));
            }
            Some("json_schema") => {
                let mut schema = Map::new();
                for key in ["name", "schema", "strict", "description"] {
                    if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                        schema.insert(key.into(), v.clone());
                    }
                }
                out.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": schema}),
                );
            }
            Some(_) => {
                return Err(invalid(
                    "text",
                    "format.type must be text, json_object or json_schema",
                ))
            }
        }
    }
    if let Some(Value::Array(tools)) = req.remove("tools") {
        let tools = tools
            .into_iter()
            .map(convert_tool)
            .collect::<Result<Vec<_>, _>>()?;
        if !tools.is_empty() {
            out.insert("tools".into(), Value::Array(tools));
        }
    }
    match req.remove("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            out.insert("tool_choice".into(), Value::String(s));
        }
        Some(choice) => match choice["name"].as_str() {
            Some(name) if choice["type"] == "function" => {
                out.insert(
                    "tool_choice".into(),
                    json!({"type": "function", "function": {"name": name}}),
                );
            }
            _ => return Err(invalid("tool_choice", "must be a mode or a function")),
        },
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| GatewayError::MalformedJson(e.to_string()))
}

fn convert_tool(tool: Value) -> Result<Value, GatewayError> {
    if tool["type"] != "function" {
        return Err(invalid(
            "tools",
            format!(
                "tool type {} is not served through chat completions; only function tools are",
                tool["type"]
            ),
        ));
    }
    let Some(name) = tool["name"].as_str() else {
        return Err(invalid("tools", "each function tool needs a name"));
    };
    let mut function = Map::new();
    function.insert("name".into(), json!(name));
    for key in ["description", "parameters", "strict"] {
        if let Some(v) = tool.get(key).filter(|v| !v.is_null()) {
            function.insert(key.into(), v.clone());
        }
    }
    Ok(json!({"type": "function", "function": function}))
}

/// Appends the chat message(s) of one input item.
fn push_item(messages: &mut Vec<Value>, item: Value) -> Result<(), GatewayError> {
    let kind = item["type"].as_str().unwrap_or("message");
    match kind {
        "message" => {
            let role = match item["role"].as_str() {
                Some(r @ ("user" | "assistant" | "system" | "developer")) => r,
                _ => {
                    return Err(invalid(
                        "input",
                        "a message item needs a role: user, assistant, system or developer",
                    ))
                }
            };
            let content = match &item["content"] {
                Value::String(s) => Value::String(s.clone()),
                Value::Array(parts) => {
                    let parts = parts
                        .iter()
                        .map(convert_part)
                        .collect::<Result<Vec<_>, _>>()?;
                    if role == "user" {
                        Value::Array(parts)
                    } else {
                        // Chat's other roles take text only.
                        let text: String =
                            parts.iter().filter_map(|p| p["text"].as_str()).collect();
                        Value::String(text)
                    }
                }
                _ => {
                    return Err(invalid(
                        "input",
                        "message content must be a string or parts",
                    ))
                }
            };
            messages.push(json!({"role": role, "content": content}));
        }
        "function_call" => {
            let call = json!({
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"].as_str().unwrap_or("{}")},
            });
            match messages.last_mut() {
                Some(last) if last["role"] == "assistant" && last.get("tool_calls").is_some() => {
                    if let Some(calls) = last["tool_calls"].as_array_mut() {
                        calls.push(call);
                    }
                }
                _ => messages
                    .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        "function_call_output" => {
            let output = match &item["output"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            messages
                .push(json!({"role": "tool", "tool_call_id": item["call_id"], "content": output}));
        }
        // Reasoning items of earlier turns: the chat form has no place for them.
        "reasoning" => {}
        other => {
            return Err(invalid(
                "input",
                format!("input item type \"{other}\" is not served through chat completions"),
            ))
        }
    }
    Ok(())
}

fn convert_part(part: &Value) -> Result<Value, GatewayError> {
    match part["type"].as_str() {
        Some("input_text" | "output_text" | "text") => {
            Ok(json!({"type": "text", "text": part["text"].as_str().unwrap_or_default()}))
        }
        Some("input_image") => match part["image_url"].as_str() {
            Some(url) => Ok(json!({"type": "image_url", "image_url": {"url": url}})),
            None => Err(invalid("input", "input_image needs an image_url")),
        },
        _ => Err(invalid(
            "input",
            "content parts must be input_text, output_text or input_image",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(req: Value) -> Value {
        serde_json::from_slice(&to_chat(req.to_string().as_bytes(), "gpt").unwrap()).unwrap()
    }

    #[test]
    fn instructions_input_items_and_options() {
        let out = convert(json!({
            "model": "m", "instructions": "be brief", "stream": true, "max_output_tokens": 9,
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            ],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
            "reasoning": {"effort": "low"},
            "store": false,
        }));
        assert_eq!(
            out,
            json!({
                "model": "gpt",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "42"},
                    {"role": "assistant", "content": "ok"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 9,
                "reasoning_effort": "low",
                "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}},
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                "tool_choice": {"type": "function", "function": {"name": "f"}},
            })
        );
        assert_eq!(
            convert(json!({"input": "hi"}))["messages"],
            json!([{"role": "user", "content": "hi"}])
        );
    }

    #[test]
    fn what_cannot_be_bridged_is_a_client_error() {
        for req in [
            json!({"input": 5}),
            json!({"input": "x", "previous_response_id": "resp_1"}),
            json!({"input": "x", "tools": [{"type": "web_search"}]}),
            json!({"input": [{"type": "file_search_call"}]}),
            json!({"input": [{"role": "wizard", "content": "x"}]}),
            json!({"input": [{"role": "user", "content": [{"type": "input_file"}]}]}),
        ] {
            let err = to_chat(req.to_string().as_bytes(), "m").unwrap_err();
            assert_eq!(err.status(), 400, "{req}");
        }
    }
}
