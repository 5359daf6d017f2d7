//! An internal chat completions request → a Gemini `generateContent`
//! request, as LiteLLM translates it.
//!
//! System and developer messages become `systemInstruction`; user turns
//! `user` contents, assistant turns `model` contents (tool calls as
//! `functionCall` parts), tool messages `functionResponse` parts named
//! after the call they answer; consecutive turns of one role merge. Images
//! by data URL become `inlineData` (http URLs are refused: the gateway
//! downloads nothing). `max_tokens`, `temperature`, `top_p`, `top_k`,
//! `stop`, `n` and `response_format` go to `generationConfig`; function
//! tools to `functionDeclarations` (schema keys Gemini refuses removed);
//! `tool_choice` to `toolConfig.functionCallingConfig`.

use crate::error::GatewayError;
use serde_json::{json, Map, Value};

fn invalid(param: &'static str, message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param,
        message: message.into(),
    }
}

/// The Gemini body for the chat completions request `body`; and whether a
/// streamed request asked for the usage chunk.
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
    let (system, contents) = convert_messages(messages)?;
    out.insert("contents".into(), Value::Array(contents));
    if !system.is_empty() {
        out.insert("systemInstruction".into(), json!({ "parts": system }));
    }
    let mut config = Map::new();
    if let Some(max) = req
        .remove("max_completion_tokens")
        .filter(|v| !v.is_null())
        .or_else(|| req.remove("max_tokens").filter(|v| !v.is_null()))
    {
        config.insert("maxOutputTokens".into(), max);
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("top_k", "topK"),
        ("n", "candidateCount"),
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ] {
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
    if let Some(format) = req.remove("response_format").filter(|v| !v.is_null()) {
        match format["type"].as_str() {
            Some("json_object") => {
                config.insert("responseMimeType".into(), json!("application/json"));
            }
            Some("json_schema") => {
                config.insert("responseMimeType".into(), json!("application/json"));
                if let Some(schema) = format.pointer("/json_schema/schema") {
                    config.insert("responseSchema".into(), clean_schema(schema.clone()));
                }
            }
            _ => {}
        }
    }
    if !config.is_empty() {
        out.insert("generationConfig".into(), Value::Object(config));
    }
    if let Some(Value::Array(tools)) = req.remove("tools") {
        let decls = tools
            .into_iter()
            .map(declaration)
            .collect::<Result<Vec<_>, _>>()?;
        if !decls.is_empty() {
            out.insert("tools".into(), json!([{ "functionDeclarations": decls }]));
        }
    }
    if let Some(choice) = req.remove("tool_choice").filter(|v| !v.is_null()) {
        let config = match choice.as_str() {
            Some("auto") => json!({"mode": "AUTO"}),
            Some("none") => json!({"mode": "NONE"}),
            Some("required") => json!({"mode": "ANY"}),
            Some(_) => {
                return Err(invalid(
                    "tool_choice",
                    "must be none, auto, required or a function",
                ))
            }
            None => match choice["function"]["name"].as_str() {
                Some(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
                None => return Err(invalid("tool_choice", "a function choice needs its name")),
            },
        };
        out.insert(
            "toolConfig".into(),
            json!({ "functionCallingConfig": config }),
        );
    }
    let body = serde_json::to_vec(&Value::Object(out))
        .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    Ok((body, include_usage))
}

/// A JSON schema without the keys Gemini refuses.
fn clean_schema(mut schema: Value) -> Value {
    fn walk(v: &mut Value, depth: usize) {
        if depth > 64 {
            return;
        }
        match v {
            Value::Object(map) => {
                map.remove("additionalProperties");
                map.remove("$schema");
                map.remove("strict");
                for child in map.values_mut() {
                    walk(child, depth + 1);
                }
            }
            Value::Array(items) => {
                for child in items {
                    walk(child, depth + 1);
                }
            }
            _ => {}
        }
    }
    walk(&mut schema, 0);
    schema
}

fn declaration(tool: Value) -> Result<Value, GatewayError> {
    let f = &tool["function"];
    let Some(name) = f["name"].as_str() else {
        return Err(invalid("tools", "each tool needs function.name"));
    };
    let mut decl = Map::new();
    decl.insert("name".into(), json!(name));
    if let Some(d) = f["description"].as_str().filter(|d| !d.is_empty()) {
        decl.insert("description".into(), json!(d));
    }
    let has_props = f["parameters"]["properties"]
        .as_object()
        .is_some_and(|p| !p.is_empty());
    if has_props {
        decl.insert("parameters".into(), clean_schema(f["parameters"].clone()));
    }
    Ok(Value::Object(decl))
}

/// `systemInstruction` parts and the contents of `messages`.
fn convert_messages(messages: Vec<Value>) -> Result<(Vec<Value>, Vec<Value>), GatewayError> {
    let mut system = Vec::new();
    let mut contents: Vec<Value> = Vec::new();
    // Names of the tool calls so far, by id, for their responses.
    let mut call_names: Vec<(String, Value)> = Vec::new();
    for msg in messages {
        let (role, parts) = match msg["role"].as_str().unwrap_or_default() {
            "system" | "developer" => {
                system.extend(
                    texts(&msg["content"])
                        .into_iter()
                        .map(|t| json!({ "text": t })),
                );
                continue;
            }
            "user" => ("user", user_parts(&msg["content"])?),
            "assistant" => {
                let mut parts: Vec<Value> = texts(&msg["content"])
                    .into_iter()
                    .map(|t| json!({ "text": t }))
                    .collect();
                for call in msg["tool_calls"].as_array().into_iter().flatten() {
                    let args = call["function"]["arguments"].as_str().unwrap_or("{}");
                    let args: Value = serde_json::from_str(args)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    let name = call["function"]["name"].clone();
                    if let Some(id) = call["id"].as_str() {
                        call_names.push((id.to_string(), name.clone()));
                    }
                    parts.push(json!({"functionCall": {"name": name, "args": args}}));
                }
                ("model", parts)
            }
            "tool" | "function" => {
                let id = msg["tool_call_id"].as_str().unwrap_or_default();
                let name = call_names
                    .iter()
                    .find(|(i, _)| i == id)
                    .map(|(_, n)| n.clone())
                    .or_else(|| msg.get("name").cloned())
                    .unwrap_or_else(|| json!(id));
                let text = texts(&msg["content"]).join("");
                (
                    "user",
                    vec![
                        json!({"functionResponse": {"name": name, "response": {"content": text}}}),
                    ],
                )
            }
            other => {
                return Err(invalid(
                    "messages",
                    format!("unknown message role \"{other}\""),
                ))
            }
        };
        if parts.is_empty() {
            continue;
        }
        match contents.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(p) = last["parts"].as_array_mut() {
                    p.extend(parts);
                }
            }
            _ => contents.push(json!({"role": role, "parts": parts})),
        }
    }
    Ok((system, contents))
}

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

fn user_parts(content: &Value) -> Result<Vec<Value>, GatewayError> {
    let Value::Array(parts) = content else {
        return Ok(texts(content)
            .into_iter()
            .map(|t| json!({ "text": t }))
            .collect());
    };
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        match part["type"].as_str() {
            Some("text") => {
                if let Some(t) = part["text"].as_str().filter(|t| !t.is_empty()) {
                    out.push(json!({ "text": t }));
                }
            }
            Some("image_url") => {
                let url = part["image_url"]["url"]
                    .as_str()
                    .or(part["image_url"].as_str())
                    .unwrap_or_default();
                let inline = url
                    .strip_prefix("data:")
                    .and_then(|rest| rest.split_once(";base64,"));
                let Some((mime, data)) = inline else {
                    return Err(invalid(
                        "messages",
                        "Gemini images must be base64 data URLs (data:image/png;base64,...)",
                    ));
                };
                out.push(json!({"inlineData": {"mimeType": mime, "data": data}}));
            }
            _ => {
                return Err(invalid(
                    "messages",
                    "content parts must be text or image_url",
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(req: Value) -> Value {
        let (body, _) = from_chat(req.to_string().as_bytes()).unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    #[test]
    fn messages_config_and_tools() {
        let out = convert(json!({
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "get", "arguments": "{\"a\":1}"}}]},
                {"role": "tool", "tool_call_id": "t1", "content": "42"},
            ],
            "max_tokens": 100, "temperature": 0.5, "stop": ["END"],
            "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": false}}}],
            "tool_choice": {"type": "function", "function": {"name": "get"}},
            "response_format": {"type": "json_object"},
        }));
        assert_eq!(
            out,
            json!({
                "systemInstruction": {"parts": [{"text": "be brief"}]},
                "contents": [
                    {"role": "user", "parts": [{"text": "look"}, {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]},
                    {"role": "model", "parts": [{"functionCall": {"name": "get", "args": {"a": 1}}}]},
                    {"role": "user", "parts": [{"functionResponse": {"name": "get", "response": {"content": "42"}}}]},
                ],
                "generationConfig": {"maxOutputTokens": 100, "temperature": 0.5, "stopSequences": ["END"], "responseMimeType": "application/json"},
                "tools": [{"functionDeclarations": [{"name": "get", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}]}],
                "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get"]}},
            })
        );
    }

    #[test]
    fn bad_input_is_a_client_error() {
        for req in [
            json!({"messages": {}}),
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]}),
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            json!({"messages": [], "tool_choice": "maybe"}),
        ] {
            assert_eq!(
                from_chat(req.to_string().as_bytes()).unwrap_err().status(),
                400,
                "{req}"
            );
        }
    }
}
