//! An internal chat completions request → a Converse request, as LiteLLM
//! translates it.
//!
//! System and developer messages become `system` blocks; consecutive
//! messages of one role merge into one turn (Converse alternates roles);
//! `tool` messages become `toolResult` blocks of a user turn, assistant
//! `tool_calls` `toolUse` blocks; images by data URL `image` blocks (http
//! URLs are refused: the gateway downloads nothing). `max_tokens`,
//! `temperature`, `top_p` and `stop` go to `inferenceConfig`; `tools` and
//! `tool_choice` to `toolConfig`; `top_k` and `thinking` to
//! `additionalModelRequestFields`. Other OpenAI parameters are dropped, as
//! with LiteLLM's `drop_params` (`response_format` among them).

use crate::error::GatewayError;
use serde_json::{json, Map, Value};

fn invalid(param: &'static str, message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param,
        message: message.into(),
    }
}

/// The Converse body for the chat completions request `body`; and whether
/// a streamed request asked for the usage chunk.
pub fn from_chat(body: &[u8]) -> Result<(Vec<u8>, bool), GatewayError> {
    let mut req: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    let include_usage = req
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        == Some(&Value::Bool(true));
    let Some(Value::Array(messages)) = req.remove("messages") else {
        return Err(invalid("messages", "must be an array of messages"));
    };
    let mut out = Map::new();
    let (system, turns) = convert_messages(messages)?;
    out.insert("messages".into(), Value::Array(turns));
    if !system.is_empty() {
        out.insert("system".into(), Value::Array(system));
    }
    let mut config = Map::new();
    if let Some(max) = req
        .remove("max_completion_tokens")
        .filter(|v| !v.is_null())
        .or_else(|| req.remove("max_tokens").filter(|v| !v.is_null()))
    {
        config.insert("maxTokens".into(), max);
    }
    for (from, to) in [("temperature", "temperature"), ("top_p", "topP")] {
        if let Some(v) = req.remove(from).filter(|v| !v.is_null()) {
            config.insert(to.into(), v);
        }
    }
    match req.remove("stop") {
        Some(Value::String(s)) => {
            config.insert("stopSequences".into(), json!([s]));
        }
        Some(Value::Array(list)) if !list.is_empty() => {
            config.insert("stopSequences".into(), Value::Array(list));
        }
        _ => {}
    }
    if !config.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(config));
    }
    let mut extra = Map::new();
    for name in ["top_k", "thinking"] {
        if let Some(v) = req.remove(name).filter(|v| !v.is_null()) {
            extra.insert(name.into(), v);
        }
    }
    if !extra.is_empty() {
        out.insert("additionalModelRequestFields".into(), Value::Object(extra));
    }
    let tools = match req.remove("tools") {
        Some(Value::Array(tools)) => tools
            .into_iter()
            .map(convert_tool)
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    let choice = req.remove("tool_choice").filter(|v| !v.is_null());
    if !tools.is_empty() && choice.as_ref().and_then(Value::as_str) != Some("none") {
        let mut tool_config = Map::new();
        tool_config.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = tool_choice(choice)? {
            tool_config.insert("toolChoice".into(), choice);
        }
        out.insert("toolConfig".into(), Value::Object(tool_config));
    }
    let body = serde_json::to_vec(&Value::Object(out))
        .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    Ok((body, include_usage))
}

fn convert_tool(tool: Value) -> Result<Value, GatewayError> {
    let f = &tool["function"];
    let Some(name) = f["name"].as_str() else {
        return Err(invalid("tools", "each tool needs function.name"));
    };
    let mut spec = Map::new();
    spec.insert("name".into(), json!(name));
    if let Some(d) = f["description"].as_str().filter(|d| !d.is_empty()) {
        spec.insert("description".into(), json!(d));
    }
    let schema = match &f["parameters"] {
        Value::Object(_) => f["parameters"].clone(),
        _ => json!({"type": "object", "properties": {}}),
    };
    spec.insert("inputSchema".into(), json!({ "json": schema }));
    Ok(json!({ "toolSpec": spec }))
}

fn tool_choice(choice: Option<Value>) -> Result<Option<Value>, GatewayError> {
    match choice {
        None => Ok(None),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok(Some(json!({"auto": {}}))),
            "required" | "any" => Ok(Some(json!({"any": {}}))),
            _ => Err(invalid(
                "tool_choice",
                "must be none, auto, required or a function",
            )),
        },
        Some(v) => match v["function"]["name"].as_str() {
            Some(name) => Ok(Some(json!({"tool": {"name": name}}))),
            None => Err(invalid("tool_choice", "a function choice needs its name")),
        },
    }
}

/// `system` blocks and the alternating turns of `messages`.
fn convert_messages(messages: Vec<Value>) -> Result<(Vec<Value>, Vec<Value>), GatewayError> {
    let mut system = Vec::new();
    let mut turns: Vec<Value> = Vec::new();
    for msg in messages {
        let role = msg["role"].as_str().unwrap_or_default();
        let (role, blocks) = match role {
            "system" | "developer" => {
                for text in texts(&msg["content"]) {
                    system.push(json!({ "text": text }));
                }
                continue;
            }
            "user" => ("user", content_blocks(&msg["content"])?),
            "assistant" => {
                let mut blocks: Vec<Value> = texts(&msg["content"])
                    .into_iter()
                    .map(|t| json!({ "text": t }))
                    .collect();
                for call in msg["tool_calls"].as_array().into_iter().flatten() {
                    let args = call["function"]["arguments"].as_str().unwrap_or("{}");
                    let input: Value = serde_json::from_str(args)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(json!({"toolUse": {
                        "toolUseId": call["id"],
                        "name": call["function"]["name"],
                        "input": input,
                    }}));
                }
                ("assistant", blocks)
            }
            "tool" | "function" => {
                let text = texts(&msg["content"]).join("");
                let id = msg["tool_call_id"].as_str().unwrap_or_default();
                let content = if text.is_empty() {
                    json!([{ "text": "." }])
                } else {
                    json!([{ "text": text }])
                };
                (
                    "user",
                    vec![json!({"toolResult": {"toolUseId": id, "content": content}})],
                )
            }
            other => {
                return Err(invalid(
                    "messages",
                    format!("unknown message role \"{other}\""),
                ))
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(content) = last["content"].as_array_mut() {
                    content.extend(blocks);
                }
            }
            _ => turns.push(json!({"role": role, "content": blocks})),
        }
    }
    Ok((system, turns))
}

/// The non-empty texts of a content string or array of parts.
fn texts(content: &Value) -> Vec<String> {
    match content {
        Value::String(s) if !s.is_empty() => vec![s.clone()],
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// A user message's content as Converse blocks.
fn content_blocks(content: &Value) -> Result<Vec<Value>, GatewayError> {
    let Value::Array(parts) = content else {
        return Ok(texts(content)
            .into_iter()
            .map(|t| json!({ "text": t }))
            .collect());
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for part in parts {
        match part["type"].as_str() {
            Some("text") => {
                if let Some(t) = part["text"].as_str().filter(|t| !t.is_empty()) {
                    blocks.push(json!({ "text": t }));
                }
            }
            Some("image_url") => {
                let url = part["image_url"]["url"]
                    .as_str()
                    .or(part["image_url"].as_str())
                    .unwrap_or_default();
                blocks.push(image(url)?);
            }
            _ => {
                return Err(invalid(
                    "messages",
                    "content parts must be text or image_url",
                ))
            }
        }
    }
    Ok(blocks)
}

/// An image block for a `data:image/<format>;base64,<data>` URL.
fn image(url: &str) -> Result<Value, GatewayError> {
    let parsed = url
        .strip_prefix("data:image/")
        .and_then(|rest| rest.split_once(";base64,"));
    let Some((format, data)) = parsed else {
        return Err(invalid(
            "messages",
            "Bedrock images must be base64 data URLs (data:image/png;base64,...)",
        ));
    };
    let format = if format == "jpg" { "jpeg" } else { format };
    if !["png", "jpeg", "gif", "webp"].contains(&format) {
        return Err(invalid(
            "messages",
            format!("image format \"{format}\" is not png, jpeg, gif or webp"),
        ));
    }
    Ok(json!({"image": {"format": format, "source": {"bytes": data}}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(req: Value) -> Value {
        let (body, _) = from_chat(req.to_string().as_bytes()).unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    #[test]
    fn messages_system_config_and_tools() {
        let out = convert(json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:image/jpg;base64,AAAA"}}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "get", "arguments": "{\"a\":1}"}}]},
                {"role": "tool", "tool_call_id": "t1", "content": "42"},
                {"role": "user", "content": "and?"},
            ],
            "max_tokens": 100, "temperature": 0.5, "top_p": 0.9, "stop": "END", "top_k": 3,
            "tools": [{"type": "function", "function": {"name": "get", "description": "gets", "parameters": {"type": "object"}}}],
            "tool_choice": "required",
            "n": 1, "stream": true,
        }));
        assert_eq!(
            out,
            json!({
                "system": [{"text": "be brief"}],
                "messages": [
                    {"role": "user", "content": [{"text": "look"}, {"image": {"format": "jpeg", "source": {"bytes": "AAAA"}}}]},
                    {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "get", "input": {"a": 1}}}]},
                    {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "42"}]}}, {"text": "and?"}]},
                ],
                "inferenceConfig": {"maxTokens": 100, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]},
                "additionalModelRequestFields": {"top_k": 3},
                "toolConfig": {
                    "tools": [{"toolSpec": {"name": "get", "description": "gets", "inputSchema": {"json": {"type": "object"}}}}],
                    "toolChoice": {"any": {}},
                },
            })
        );
    }

    #[test]
    fn bad_input_is_a_client_error() {
        for req in [
            json!({"messages": "x"}),
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AA"}}]}]}),
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            json!({"messages": [], "tools": [{"function": {}}]}),
            json!({"messages": [], "tools": [{"function": {"name": "f"}}], "tool_choice": "maybe"}),
        ] {
            let err = from_chat(req.to_string().as_bytes()).unwrap_err();
            assert_eq!(err.status(), 400, "{req}");
        }
        let named = convert(
            json!({"messages": [], "tools": [{"function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "f"}}}),
        );
        assert_eq!(
            named["toolConfig"]["toolChoice"],
            json!({"tool": {"name": "f"}})
        );
        let none = convert(
            json!({"messages": [], "tools": [{"function": {"name": "f"}}], "tool_choice": "none"}),
        );
        assert!(none.get("toolConfig").is_none());
    }
}
