//! An internal chat completions request → a Cohere v2 chat request
//! (`POST /v2/chat`), as LiteLLM's `CohereV2ChatConfig` maps it.
//!
//! Cohere's v2 messages are OpenAI's roles (`system`, `user`, `assistant`,
//! `tool`) with text and `image_url` content parts, assistant
//! `tool_calls` and tool results by `tool_call_id`: they pass with
//! `developer` turns made `system` turns and empty assistant contents
//! left out. `max_tokens` (or `max_completion_tokens`), `temperature`,
//! `seed` and the penalties keep their names; `top_p` becomes `p`,
//! `top_k` `k`, `stop` `stop_sequences`; function tools pass as they are,
//! `tool_choice` `required`/`none` become `REQUIRED`/`NONE` (`auto` is
//! Cohere's default; a named function has no Cohere form and is
//! refused); `response_format` becomes Cohere's `json_object` (with its
//! schema). Parameters Cohere has no use for (`n`, `logprobs`, `user`...)
//! are dropped, as LiteLLM's `drop_params` does.

use crate::error::GatewayError;
use serde_json::{json, Map, Value};

fn invalid(param: &'static str, message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param,
        message: message.into(),
    }
}

/// The Cohere body for the chat completions request `body`, asking for
/// `model`; and whether a streamed request asked for the usage chunk.
pub fn from_chat(body: &[u8], model: &str) -> Result<(Vec<u8>, bool), GatewayError> {
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
    out.insert("model".into(), json!(model));
    out.insert("messages".into(), Value::Array(convert_messages(messages)?));
    if req.get("stream") == Some(&Value::Bool(true)) {
        out.insert("stream".into(), Value::Bool(true));
    }
    if let Some(max) = req
        .remove("max_completion_tokens")
        .filter(|v| !v.is_null())
        .or_else(|| req.remove("max_tokens").filter(|v| !v.is_null()))
    {
        out.insert("max_tokens".into(), max);
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "p"),
        ("top_k", "k"),
        ("seed", "seed"),
        ("frequency_penalty", "frequency_penalty"),
        ("presence_penalty", "presence_penalty"),
    ] {
        if let Some(v) = req.remove(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v);
        }
    }
    match req.remove("stop") {
        Some(Value::String(s)) => {
            out.insert("stop_sequences".into(), json!([s]));
        }
        Some(Value::Array(list)) if !list.is_empty() => {
            out.insert("stop_sequences".into(), Value::Array(list));
        }
        _ => {}
    }
    if let Some(Value::Array(tools)) = req.remove("tools") {
        for tool in &tools {
            if tool["type"] != "function" || !tool["function"]["name"].is_string() {
                return Err(invalid(
                    "tools",
                    "provider cohere takes function tools with a name",
                ));
            }
        }
        if !tools.is_empty() {
            out.insert("tools".into(), Value::Array(tools));
        }
    }
    match req.remove("tool_choice") {
        None | Some(Value::Null) => {}
        Some(choice) => match choice.as_str() {
            Some("auto") => {}
            Some("none") => {
                out.insert("tool_choice".into(), json!("NONE"));
            }
            Some("required") => {
                out.insert("tool_choice".into(), json!("REQUIRED"));
            }
            _ => {
                return Err(invalid(
                    "tool_choice",
                    "provider cohere takes none, auto or required (no named function)",
                ))
            }
        },
    }
    if let Some(format) = req.remove("response_format").filter(|v| !v.is_null()) {
        match format["type"].as_str() {
            Some("json_object") => {
                out.insert("response_format".into(), json!({"type": "json_object"}));
            }
            Some("json_schema") => {
                let mut f = json!({"type": "json_object"});
                if let Some(schema) = format.pointer("/json_schema/schema") {
                    f["json_schema"] = schema.clone();
                }
                out.insert("response_format".into(), f);
            }
            _ => {}
        }
    }
    let body = serde_json::to_vec(&Value::Object(out))
        .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    Ok((body, include_usage))
}

/// OpenAI's messages in Cohere's v2 form.
fn convert_messages(messages: Vec<Value>) -> Result<Vec<Value>, GatewayError> {
    if messages.is_empty() {
        return Err(invalid("messages", "must hold at least one message"));
    }
    let mut out = Vec::with_capacity(messages.len());
    for message in messages {
        let Value::Object(mut m) = message else {
            return Err(invalid("messages", "every message must be an object"));
        };
        let role = match m.get("role").and_then(Value::as_str) {
            Some("developer" | "system") => "system",
            Some("user") => "user",
            Some("assistant") => "assistant",
            Some("tool") => "tool",
            Some("function") => {
                return Err(invalid(
                    "messages",
                    "provider cohere takes tool messages, not the deprecated function role",
                ))
            }
            _ => {
                return Err(invalid(
                    "messages",
                    "every message needs a role: system, developer, user, assistant or tool",
                ))
            }
        };
        m.insert("role".into(), json!(role));
        // Cohere refuses an assistant turn with an empty content beside
        // its tool calls, and OpenAI-only members.
        if role == "assistant"
            && m.get("content")
                .is_none_or(|c| c.is_null() || c.as_str() == Some(""))
        {
            m.remove("content");
        }
        m.remove("name");
        m.remove("refusal");
        m.remove("function_call");
        out.push(Value::Object(m));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(req: Value) -> Value {
        let (body, _) = from_chat(req.to_string().as_bytes(), "command-r").unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    #[test]
    fn messages_parameters_and_tools() {
        let out = convert(json!({
            "model": "g",
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            ],
            "max_completion_tokens": 9, "top_p": 0.5, "top_k": 3, "stop": "END", "n": 2,
            "temperature": 0.2, "stream": true, "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "tool_choice": "required",
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        }));
        assert_eq!(out["model"], "command-r");
        assert_eq!(out["messages"][0]["role"], "system");
        assert!(out["messages"][2].get("content").is_none());
        assert_eq!(out["messages"][3]["tool_call_id"], "c1");
        assert_eq!(
            (
                &out["max_tokens"],
                &out["p"],
                &out["k"],
                &out["stop_sequences"]
            ),
            (&json!(9), &json!(0.5), &json!(3), &json!(["END"]))
        );
        assert_eq!(out["stream"], true);
        assert!(out.get("n").is_none() && out.get("stream_options").is_none());
        assert_eq!(out["tools"][0]["function"]["name"], "f");
        assert_eq!(out["tool_choice"], "REQUIRED");
        assert_eq!(
            out["response_format"],
            json!({"type": "json_object", "json_schema": {"type": "object"}})
        );
        let (_, usage) = from_chat(
            br#"{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}"#,
            "m",
        )
        .unwrap();
        assert!(usage);
    }

    #[test]
    fn bad_input_is_a_client_error() {
        for body in [
            json!({"messages": []}),
            json!({"messages": "hi"}),
            json!({"messages": [{"content": "no role"}]}),
            json!({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function", "function": {"name": "f"}}}),
            json!({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval"}]}),
        ] {
            let err = from_chat(body.to_string().as_bytes(), "m").unwrap_err();
            assert_eq!(err.status(), 400, "{body}");
        }
    }
}
