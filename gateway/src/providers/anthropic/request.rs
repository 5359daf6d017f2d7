//! An internal chat completions request → a Messages request, as LiteLLM
//! translates it.
//!
//! System messages become `system` blocks; consecutive messages of one
//! role merge into one turn (Messages alternates roles), `tool` messages
//! become `tool_result` blocks of a user turn, assistant `tool_calls`
//! become `tool_use` blocks. Images by data URL become base64 `image`
//! blocks, by http(s) URL `url` sources. `max_tokens` is required by
//! Anthropic: the request's, else the caller's default. `stop` becomes
//! `stop_sequences`, `tools`/`tool_choice`/`parallel_tool_calls` their
//! Anthropic forms, `user` `metadata.user_id`, `reasoning_effort` a
//! thinking budget (LiteLLM's 1024/2048/4096...). OpenAI parameters
//! Anthropic has no use for (`n`, penalties, `seed`, `logprobs`...) are
//! dropped, as with LiteLLM's `drop_params`.

use crate::error::GatewayError;
use serde_json::{json, Map, Value};

fn invalid(param: &'static str, message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param,
        message: message.into(),
    }
}

/// Parameters passed through under the same name.
const SAME_NAME: &[&str] = &["temperature", "top_p", "top_k", "thinking", "service_tier"];

/// The Messages body for the chat completions request `body`, asking for
/// `model`, with `default_max_tokens` when the request sets none; and
/// whether a streamed request asked for the usage chunk.
pub fn from_chat(
    body: &[u8],
    model: &str,
    default_max_tokens: u64,
) -> Result<(Vec<u8>, bool), GatewayError> {
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
    out.insert("model".into(), Value::String(model.to_string()));
    let (system, turns) = convert_messages(messages)?;
    out.insert("messages".into(), Value::Array(turns));
    if !system.is_empty() {
        out.insert("system".into(), Value::Array(system));
    }
    let max_tokens = req
        .remove("max_completion_tokens")
        .filter(|v| !v.is_null())
        .or_else(|| req.remove("max_tokens").filter(|v| !v.is_null()))
        .unwrap_or_else(|| json!(default_max_tokens));
    out.insert("max_tokens".into(), max_tokens);
    match req.remove("stop") {
        Some(Value::String(s)) => {
            out.insert("stop_sequences".into(), json!([s]));
        }
        Some(Value::Array(list)) if !list.is_empty() => {
            out.insert("stop_sequences".into(), Value::Array(list));
        }
        _ => {}
    }
    for name in SAME_NAME {
        if let Some(v) = req.remove(*name).filter(|v| !v.is_null()) {
            out.insert((*name).into(), v);
        }
    }
    if let Some(effort) = req.remove("reasoning_effort") {
        if let Some(thinking) = thinking_for_effort(&effort)? {
            out.entry("thinking").or_insert(thinking);
        }
    }
    let mut tools = match req.remove("tools") {
        Some(Value::Array(tools)) => tools
            .into_iter()
            .map(convert_tool)
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    let parallel = req.remove("parallel_tool_calls").and_then(|v| v.as_bool());
    let mut choice = tool_choice(req.remove("tool_choice"), parallel)?;
    if let Some(schema) = response_schema(req.remove("response_format"))? {
        tools.push(json!({"name": JSON_TOOL, "input_schema": schema}));
        choice.get_or_insert_with(|| json!({"type": "tool", "name": JSON_TOOL}));
    }
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = choice {
        out.insert("tool_choice".into(), choice);
    }
    if let Some(Value::String(user)) = req.remove("user") {
        if !user.contains('@') {
            out.insert("metadata".into(), json!({"user_id": user}));
        }
    }
    if req.get("stream") == Some(&Value::Bool(true)) {
        out.insert("stream".into(), Value::Bool(true));
    }
    let body = serde_json::to_vec(&Value::Object(out))
        .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    Ok((body, include_usage))
}

/// The tool LiteLLM forces to get JSON matching a `response_format`
/// schema; its input comes back as the message content.
pub const JSON_TOOL: &str = "json_tool_call";

/// The JSON schema a `response_format` asks for (`json_schema`; a plain
/// `json_object` asks for any object), `None` for text.
fn response_schema(format: Option<Value>) -> Result<Option<Value>, GatewayError> {
    let Some(mut format) = format.filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "object"}))),
        Some("json_schema") => match format.pointer_mut("/json_schema/schema").map(Value::take) {
            Some(schema) if schema.is_object() => Ok(Some(schema)),
            _ => Err(invalid(
                "response_format",
                "json_schema needs a `schema` object",
            )),
        },
        _ => Err(invalid(
            "response_format",
            "type must be text, json_object or json_schema",
        )),
    }
}

/// LiteLLM's thinking budgets for `reasoning_effort`.
fn thinking_for_effort(effort: &Value) -> Result<Option<Value>, GatewayError> {
    let budget = match effort.as_str() {
        None => return Ok(None),
        Some("none") => return Ok(None),
        Some("minimal") | Some("low") => 1024,
        Some("medium") => 2048,
        Some("high") => 4096,
        Some("xhigh") => 8192,
        Some("max") => 16384,
        Some(other) => {
            return Err(invalid(
                "reasoning_effort",
                format!("unmapped reasoning effort {other:?}: must be one of minimal, low, medium, high, xhigh, max, none"),
            ))
        }
    };
    Ok(Some(json!({"type": "enabled", "budget_tokens": budget})))
}

/// OpenAI's `tool_choice` (and `parallel_tool_calls`) → Anthropic's.
fn tool_choice(
    choice: Option<Value>,
    parallel: Option<bool>,
) -> Result<Option<Value>, GatewayError> {
    let mut mapped = match &choice {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Some(json!({"type": "auto"})),
            "required" => Some(json!({"type": "any"})),
            "none" => Some(json!({"type": "none"})),
            other => {
                return Err(invalid(
                    "tool_choice",
                    format!("unknown tool_choice {other:?}"),
                ))
            }
        },
        Some(Value::Object(o)) => match o.get("function").and_then(|f| f.get("name")) {
            Some(name) => Some(json!({"type": "tool", "name": name})),
            None => match o.get("type").and_then(Value::as_str) {
                Some("auto") => Some(json!({"type": "auto"})),
                Some("required" | "any") => Some(json!({"type": "any"})),
                Some("none") => Some(json!({"type": "none"})),
                _ => return Err(invalid("tool_choice", "expected a function name")),
            },
        },
        Some(_) => return Err(invalid("tool_choice", "must be a string or an object")),
    };
    if let Some(parallel) = parallel {
        let is_none = mapped.as_ref().is_some_and(|m| m["type"] == "none");
        if !is_none {
            let m = mapped.get_or_insert_with(|| json!({"type": "auto"}));
            m["disable_parallel_tool_use"] = Value::Bool(!parallel);
        }
    }
    Ok(mapped)
}

/// An OpenAI tool → an Anthropic tool; a tool already in Anthropic's shape
/// (`input_schema`, or a server tool such as `web_search_20250305`) passes
/// as it is.
fn convert_tool(mut tool: Value) -> Result<Value, GatewayError> {
    if tool.get("input_schema").is_some() || tool.get("function").is_none() {
        return Ok(tool);
    }
    let mut function = tool["function"].take();
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("tools", "every function needs a name"))?
        .to_string();
    let schema = match function.get_mut("parameters").map(Value::take) {
        Some(p) if p.is_object() => p,
        _ => json!({"type": "object", "properties": {}}),
    };
    let mut out = json!({"name": name, "input_schema": schema});
    if let Some(d) = function
        .get_mut("description")
        .map(Value::take)
        .filter(|d| !d.is_null())
    {
        out["description"] = d;
    }
    if let Some(c) = tool.get_mut("cache_control").map(Value::take) {
        out["cache_control"] = c;
    }
    Ok(out)
}

/// Chat messages → (system blocks, alternating turns).
fn convert_messages(messages: Vec<Value>) -> Result<(Vec<Value>, Vec<Value>), GatewayError> {
    let mut system = Vec::new();
    let mut turns: Vec<Value> = Vec::new();
    for message in messages {
        let Value::Object(mut m) = message else {
            return Err(invalid("messages", "every message must be an object"));
        };
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let (turn_role, blocks) = match role.as_str() {
            "system" | "developer" => {
                system.extend(content_blocks(
                    m.remove("content"),
                    m.remove("cache_control"),
                )?);
                continue;
            }
            "user" => (
                "user",
                content_blocks(m.remove("content"), m.remove("cache_control"))?,
            ),
            "assistant" => ("assistant", assistant_blocks(m)?),
            "tool" | "function" => ("user", vec![tool_result(m)]),
            other => return Err(invalid("messages", format!("unknown role {other:?}"))),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last["role"] == turn_role => {
                if let Some(existing) = last["content"].as_array_mut() {
                    existing.extend(blocks);
                }
            }
            _ => turns.push(json!({"role": turn_role, "content": blocks})),
        }
    }
    Ok((system, turns))
}

/// A message's `content` (string or parts) → Anthropic blocks; a message
/// level `cache_control` lands on the last block.
fn content_blocks(
    content: Option<Value>,
    cache_control: Option<Value>,
) -> Result<Vec<Value>, GatewayError> {
    let mut blocks = match content {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) if s.is_empty() => Vec::new(),
        Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
        Some(Value::Array(parts)) => parts
            .into_iter()
            .filter_map(|p| convert_part(p).transpose())
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return Err(invalid(
                "messages",
                "content must be a string or an array of parts",
            ))
        }
    };
    if let (Some(cc), Some(last)) = (
        cache_control,
        blocks.last_mut().and_then(Value::as_object_mut),
    ) {
        last.insert("cache_control".into(), cc);
    }
    Ok(blocks)
}

/// One content part → one block (`None`: nothing to send).
fn convert_part(mut part: Value) -> Result<Option<Value>, GatewayError> {
    let cache_control = part.get_mut("cache_control").map(Value::take);
    let mut block = match part.get("type").and_then(Value::as_str) {
        Some("text") => match part.get_mut("text").map(Value::take) {
            Some(Value::String(t)) if t.is_empty() => return Ok(None),
            Some(t) => json!({"type": "text", "text": t}),
            None => return Ok(None),
        },
        Some("image_url") => {
            let url = match &part["image_url"] {
                Value::String(s) => s.as_str(),
                v => v["url"].as_str().unwrap_or_default(),
            };
            json!({"type": "image", "source": image_source(url)?})
        }
        Some("file") => {
            let data = part["file"]["file_data"].as_str().unwrap_or_default();
            let (media_type, data) = data_url(data).ok_or_else(|| {
                invalid(
                    "messages",
                    "a file part needs `file_data` as a base64 data URL",
                )
            })?;
            json!({"type": "document", "source": {"type": "base64", "media_type": media_type, "data": data}})
        }
        // Anthropic blocks sent as they are (`document`, `image`...).
        _ => part,
    };
    if let Some(cc) = cache_control {
        block["cache_control"] = cc;
    }
    Ok(Some(block))
}

/// `data:<media>;base64,<data>` → (media type, data).
fn data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media = meta.strip_suffix(";base64")?;
    Some((media, data))
}

/// An image URL → an Anthropic image source.
fn image_source(url: &str) -> Result<Value, GatewayError> {
    if let Some((media_type, data)) = data_url(url) {
        return Ok(json!({"type": "base64", "media_type": media_type, "data": data}));
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(json!({"type": "url", "url": url}));
    }
    Err(invalid(
        "messages",
        "image_url must be a base64 data URL or an http(s) URL",
    ))
}

/// An assistant message → thinking, text and `tool_use` blocks.
fn assistant_blocks(mut m: Map<String, Value>) -> Result<Vec<Value>, GatewayError> {
    let mut blocks = Vec::new();
    if let Some(Value::Array(thinking)) = m.remove("thinking_blocks") {
        blocks.extend(thinking.into_iter().map(|mut b| {
            if let Some(o) = b.as_object_mut() {
                o.remove("index");
            }
            b
        }));
    }
    blocks.extend(content_blocks(
        m.remove("content"),
        m.remove("cache_control"),
    )?);
    for call in m
        .remove("tool_calls")
        .and_then(|c| match c {
            Value::Array(a) => Some(a),
            _ => None,
        })
        .into_iter()
        .flatten()
    {
        let arguments = call["function"]["arguments"].as_str().unwrap_or("");
        let input = if arguments.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str::<Value>(arguments).map_err(|e| {
                invalid("messages", format!("tool call arguments are not JSON: {e}"))
            })?
        };
        blocks.push(json!({
            "type": "tool_use",
            "id": call["id"],
            "name": call["function"]["name"],
            "input": input,
        }));
    }
    Ok(blocks)
}

/// A `tool` message → a `tool_result` block.
fn tool_result(mut m: Map<String, Value>) -> Value {
    let id = m
        .remove("tool_call_id")
        .or_else(|| m.remove("name"))
        .unwrap_or(Value::Null);
    let content = match m.remove("content") {
        Some(Value::String(s)) => Value::String(s),
        Some(Value::Array(parts)) => Value::Array(
            parts
                .into_iter()
                .filter_map(|p| convert_part(p).ok().flatten())
                .collect(),
        ),
        _ => Value::String(String::new()),
    };
    json!({"type": "tool_result", "tool_use_id": id, "content": content})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translate(body: Value) -> Value {
        serde_json::from_slice(
            &from_chat(body.to_string().as_bytes(), "claude-x", 4096)
                .unwrap()
                .0,
        )
        .unwrap()
    }

    #[test]
    fn system_parameters_and_defaults() {
        let out = translate(json!({
            "model": "g", "stream": true, "stream_options": {"include_usage": true},
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "user", "content": [{"type": "text", "text": "there", "cache_control": {"type": "ephemeral"}}]},
            ],
            "stop": "END", "temperature": 0.2, "top_p": 0.9, "n": 1, "presence_penalty": 0, "user": "u-1",
        }));
        assert_eq!(
            out,
            json!({
                "model": "claude-x",
                "system": [{"type": "text", "text": "be brief"}],
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "text", "text": "there", "cache_control": {"type": "ephemeral"}},
                ]}],
                "max_tokens": 4096, "stop_sequences": ["END"], "temperature": 0.2, "top_p": 0.9,
                "metadata": {"user_id": "u-1"}, "stream": true,
            })
        );
        let capped = translate(
            json!({"messages": [], "max_completion_tokens": 7, "max_tokens": 9, "reasoning_effort": "medium"}),
        );
        assert_eq!(capped["max_tokens"], 7);
        assert_eq!(
            capped["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
    }

    #[test]
    fn tools_tool_calls_results_and_images() {
        let out = translate(json!({
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "what is this"},
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/"}},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
                {"role": "user", "content": "thanks"},
            ],
            "tools": [{"type": "function", "function": {"name": "look", "description": "Look", "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}}}}],
            "tool_choice": "required",
            "parallel_tool_calls": false,
        }));
        assert_eq!(
            out["tools"],
            json!([{"name": "look", "description": "Look", "input_schema": {"type": "object", "properties": {"q": {"type": "integer"}}}}])
        );
        assert_eq!(
            out["tool_choice"],
            json!({"type": "any", "disable_parallel_tool_use": true})
        );
        let m = &out["messages"];
        assert_eq!(
            m[0]["content"][1]["source"],
            json!({"type": "base64", "media_type": "image/jpeg", "data": "/9j/"})
        );
        assert_eq!(
            m[0]["content"][2]["source"],
            json!({"type": "url", "url": "https://x/y.png"})
        );
        assert_eq!(
            m[1],
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "look", "input": {"q": 1}}]})
        );
        assert_eq!(
            m[2],
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "a cat"},
                {"type": "text", "text": "thanks"},
            ]})
        );
    }

    #[test]
    fn response_format_forces_the_json_tool() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let out = translate(
            json!({"messages": [], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
        );
        assert_eq!(
            out["tools"],
            json!([{"name": "json_tool_call", "input_schema": schema}])
        );
        assert_eq!(
            out["tool_choice"],
            json!({"type": "tool", "name": "json_tool_call"})
        );
        let out = translate(json!({"messages": [], "response_format": {"type": "text"}}));
        assert!(out.get("tools").is_none());
        let e = from_chat(
            br#"{"messages":[],"response_format":{"type":"yaml"}}"#,
            "m",
            1,
        )
        .unwrap_err();
        assert_eq!(e.param(), Some("response_format"));
    }

    #[test]
    fn bad_input_names_the_parameter() {
        let bad = |body: Value| from_chat(body.to_string().as_bytes(), "m", 1).unwrap_err();
        assert_eq!(bad(json!({"messages": "x"})).param(), Some("messages"));
        assert_eq!(
            bad(json!({"messages": [{"role": "wizard", "content": "x"}]})).param(),
            Some("messages")
        );
        assert_eq!(
            bad(json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}]})).param(),
            Some("messages")
        );
        assert_eq!(
            bad(json!({"messages": [], "tool_choice": "sometimes"})).param(),
            Some("tool_choice")
        );
        assert_eq!(
            bad(json!({"messages": [], "reasoning_effort": "extreme"})).param(),
            Some("reasoning_effort")
        );
        assert_eq!(
            bad(json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{"}}]}]})).param(),
            Some("messages")
        );
    }
}
