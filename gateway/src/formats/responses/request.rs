//! A Responses request → an internal chat completions request, as
//! LiteLLM's bridge translates it.
//!
//! `instructions` becomes a system message; `input` (a string, or items:
//! messages with `input_text`/`output_text`/`input_image` parts, tool calls
//! and their outputs) becomes the messages; `max_output_tokens`
//! `max_tokens`; `tools` and `tool_choice` their chat forms; `text.format`
//! `response_format`; `reasoning.effort` `reasoning_effort`. A streamed
//! request asks for the usage chunk. The gateway keeps no responses, so
//! `previous_response_id` is refused.
//!
//! What a chat upstream cannot carry is flattened or dropped, never a
//! refusal of the whole request (LiteLLM 1.110.2's rules, see
//! [`tools`](super::tools)): a `namespace` tool's functions become
//! functions named `<namespace>__<name>`, a `custom` tool a function
//! taking its text as `content`; built-in tools are dropped. Input items:
//! `custom_tool_call` and a namespaced `function_call` become the
//! assistant's tool calls under those names, `custom_tool_call_output` and
//! `computer_call_output` tool messages, a `web_search_call` an assistant
//! note; `reasoning` and `compaction` items, and any other item without
//! `content`, are dropped; another item with `content` is a message.

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
        let tools = super::tools::to_chat(&tools)?;
        if !tools.is_empty() {
            out.insert("tools".into(), Value::Array(tools));
        }
    }
    match req.remove("tool_choice") {
        None | Some(Value::Null) => {}
        Some(choice) => {
            out.insert("tool_choice".into(), tool_choice(choice)?);
        }
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| GatewayError::MalformedJson(e.to_string()))
}

/// The chat form of a Responses `tool_choice`, as LiteLLM maps it: a mode
/// as it is, `{"type": "auto" | "none"}` that mode, `required` (or
/// `tool`, `any`) and a function or custom tool without a name
/// `"required"`, a named one that function.
fn tool_choice(choice: Value) -> Result<Value, GatewayError> {
    if let Value::String(_) = choice {
        return Ok(choice);
    }
    if choice["function"]["name"].is_string() {
        return Ok(json!({"type": "function", "function": {"name": choice["function"]["name"]}}));
    }
    let name = choice["name"]
        .as_str()
        .or_else(|| choice["custom"]["name"].as_str());
    match (choice["type"].as_str(), name) {
        (Some(mode @ ("auto" | "none")), _) => Ok(json!(mode)),
        (Some("required" | "tool" | "any"), _) | (Some("function" | "custom"), None) => {
            Ok(json!("required"))
        }
        (Some("function" | "custom"), Some(name)) => {
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        _ => Err(invalid(
            "tool_choice",
            "must be a mode, a function or a custom tool",
        )),
    }
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
        "function_call" | "custom_tool_call" => push_call(messages, super::tools::call_of(&item)),
        "function_call_output"
        | "custom_tool_call_output"
        | "computer_call_output"
        | "tool_result" => {
            // LiteLLM skips an output that names no call.
            if item["call_id"].as_str().is_some_and(|id| !id.is_empty()) {
                messages.push(json!({
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": tool_output(&item["output"]),
                }));
            }
        }
        // A hosted search of an earlier turn: an assistant note, as LiteLLM
        // replays it.
        "web_search_call" => {
            let mut call = item.clone();
            if let Some(fields) = call.as_object_mut() {
                fields.retain(|_, v| !v.is_null());
            }
            messages.push(
                json!({"role": "assistant", "content": format!("Hosted web search: {call}")}),
            );
        }
        // Reasoning and compaction items of earlier turns (encrypted, or
        // written by another service) have no place in the chat form.
        "reasoning" | "compaction" => {}
        // Any other item: a message when it has content (LiteLLM's rule),
        // else dropped.
        _ => match item.get("content").filter(|c| !c.is_null()) {
            Some(Value::String(text)) => {
                messages.push(json!({"role": other_role(&item), "content": text}));
            }
            Some(Value::Array(parts)) => {
                let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
                messages.push(json!({"role": other_role(&item), "content": text}));
            }
            _ => {}
        },
    }
    Ok(())
}

/// The role of an item of another type that has content: its own when
/// chat has it, else `user` (LiteLLM's default).
fn other_role(item: &Value) -> &str {
    match item["role"].as_str() {
        Some(r @ ("user" | "assistant" | "system" | "developer")) => r,
        _ => "user",
    }
}

/// Adds a tool call to the assistant message just before, or as a new
/// assistant message.
fn push_call(messages: &mut Vec<Value>, call: Value) {
    match messages.last_mut() {
        Some(last) if last["role"] == "assistant" && last.get("tool_calls").is_some() => {
            if let Some(calls) = last["tool_calls"].as_array_mut() {
                calls.push(call);
            }
        }
        _ => messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
    }
}

/// A tool output as a tool message's text: a string as it is, text parts
/// joined, anything else its JSON (as LiteLLM flattens it).
fn tool_output(output: &Value) -> String {
    match output {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(parts)
            if parts.iter().all(|p| {
                matches!(
                    p["type"].as_str(),
                    Some("input_text" | "output_text" | "text")
                ) && p["text"].is_string()
            }) =>
        {
            parts.iter().filter_map(|p| p["text"].as_str()).collect()
        }
        other => other.to_string(),
    }
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

    /// Codex CLI 0.171's first turn: developer messages, a namespace of
    /// functions and a web search tool; items of earlier turns that chat
    /// has no place for are dropped or flattened, never refused.
    #[test]
    fn what_chat_cannot_carry_is_flattened_or_dropped() {
        let out = convert(json!({
            "model": "m", "stream": true, "store": false, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "k", "client_metadata": {"x": "y"}, "reasoning": {"summary": "auto"},
            "tool_choice": "auto", "parallel_tool_calls": true,
            "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
                {"type": "function_call", "call_id": "c1", "namespace": "agents", "name": "spawn", "arguments": "{}"},
                {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
                {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "spawned"}]},
                {"type": "custom_tool_call_output", "call_id": "c2", "output": "patched"},
                {"type": "function_call_output", "call_id": "", "output": "orphan"},
                {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
                {"type": "local_shell_call", "call_id": "c3", "action": {"type": "exec"}},
                {"type": "file_search_call", "id": "fs_1"},
                {"type": "compaction", "encrypted_content": "opaque"},
                {"type": "item_reference", "id": "msg_1"},
            ],
            "tools": [
                {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
                {"type": "namespace", "name": "agents", "description": "Sub-agents.", "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}}]},
                {"type": "web_search", "external_web_access": false},
            ],
        }));
        assert_eq!(
            out["messages"],
            json!([
                {"role": "developer", "content": "rules"},
                {"role": "user", "content": [{"type": "text", "text": "go"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "agents__spawn", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "apply_patch", "arguments": "{\"content\":\"*** Begin Patch\"}"}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "spawned"},
                {"role": "tool", "tool_call_id": "c2", "content": "patched"},
                {"role": "assistant", "content": "Hosted web search: {\"action\":{\"query\":\"q\",\"type\":\"search\"},\"id\":\"ws_1\",\"status\":\"completed\",\"type\":\"web_search_call\"}"},
            ])
        );
        let names: Vec<&str> = out["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["function"]["name"].as_str())
            .collect();
        assert_eq!(names, ["exec_command", "agents__spawn"]);
        assert_eq!(out["tool_choice"], "auto");
        assert_eq!(
            convert(
                json!({"input": "x", "tool_choice": {"type": "custom", "name": "apply_patch"}})
            )["tool_choice"],
            json!({"type": "function", "function": {"name": "apply_patch"}})
        );
        assert_eq!(
            convert(json!({"input": "x", "tool_choice": {"type": "required"}}))["tool_choice"],
            "required"
        );
    }

    #[test]
    fn what_cannot_be_bridged_is_a_client_error() {
        for req in [
            json!({"input": 5}),
            json!({"input": "x", "previous_response_id": "resp_1"}),
            json!({"input": "x", "tool_choice": {"type": "web_search"}}),
            json!({"input": [{"role": "wizard", "content": "x"}]}),
            json!({"input": [{"role": "user", "content": [{"type": "input_file"}]}]}),
        ] {
            let err = to_chat(req.to_string().as_bytes(), "m").unwrap_err();
            assert_eq!(err.status(), 400, "{req}");
        }
    }
}
