//! `POST …/messages` and `…/messages/count_tokens`: Anthropic's Messages
//! API, with the checks the real endpoint makes (`x-api-key`,
//! `anthropic-version`, `model`, `max_tokens`, `messages`, no unknown
//! top-level fields) and its real shapes: content blocks, `stop_reason`,
//! usage with cache counts, and event streams framed with `event:` lines
//! (`message_start`, `ping`, `content_block_*`, `message_delta`,
//! `message_stop`).
//!
//! Behaviour: `tool_choice` of type `any` or `tool` (or a prompt containing
//! `mock-tool-use`, until the last message carries a `tool_result`)
//! answers with a `tool_use` block for the chosen (else first) tool, its input made from the tool's schema; `thinking` enabled
//! adds a thinking block; a prompt containing `mock-context-window` is
//! refused as too long; `x-mock-cache-read-tokens` and
//! `x-mock-cache-creation-tokens` set the cache counts reported. `image`
//! blocks need a `base64` source whose bytes match its `media_type` (jpeg,
//! png, gif, webp) or a `url` source over https; a prompt containing
//! `mock-describe-images` is answered with what they were (`images`).

use serde_json::{json, Map, Value};

use super::{images, sse, to_json, wants_stream, Ctx, Event, Reply, Usage};
use crate::mock::tokens;

/// Prompt text that makes the mock refuse the request as too long.
pub const CONTEXT_TRIGGER: &str = "mock-context-window";
/// Prompt text that makes the mock call a tool.
pub const TOOL_TRIGGER: &str = "mock-tool-use";

/// Top-level request fields the Messages API accepts.
const KNOWN_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "metadata",
    "stop_sequences",
    "stream",
    "system",
    "temperature",
    "tool_choice",
    "tools",
    "top_k",
    "top_p",
    "thinking",
    "service_tier",
    "container",
    "mcp_servers",
    "context_management",
    // Effort and structured outputs (Claude Code sends it).
    "output_config",
    "inference_geo",
];

/// Anthropic's error `type` for a status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// An error reply in Anthropic's shape.
pub fn error(status: u16, message: &str) -> Reply {
    let body = json!({"type": "error", "error": {"type": error_type(status), "message": message}});
    Reply::json(status, to_json(&body))
}

/// The checks every Messages endpoint makes: credentials, version, and the
/// body's required and known fields.
fn check(ctx: &Ctx<'_>, body: &Value, counting: bool) -> Result<(), Reply> {
    if ctx.req.header("x-api-key").is_none_or(str::is_empty) {
        return Err(error(401, "x-api-key header is required"));
    }
    if ctx.req.header("anthropic-version").is_none() {
        return Err(error(400, "anthropic-version: header is required"));
    }
    if !body.get("model").is_some_and(Value::is_string) {
        return Err(error(400, "model: Field required"));
    }
    check_fields(body, counting)
}

/// The body's required and known fields (`model` aside).
pub fn check_fields(body: &Value, counting: bool) -> Result<(), Reply> {
    if !body.get("messages").is_some_and(Value::is_array) {
        return Err(error(400, "messages: Field required"));
    }
    if !counting && !body.get("max_tokens").is_some_and(Value::is_u64) {
        return Err(error(400, "max_tokens: Field required"));
    }
    if let Some(o) = body.as_object() {
        if let Some(extra) = o.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())) {
            return Err(error(
                400,
                &format!("{extra}: Extra inputs are not permitted"),
            ));
        }
    }
    for block in image_blocks(body) {
        check_image(block)?;
    }
    Ok(())
}

/// The `image` blocks of every message.
fn image_blocks(body: &Value) -> impl Iterator<Item = &Value> {
    let messages = body["messages"].as_array().into_iter().flatten();
    messages
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "image")
}

/// An image block's source: base64 bytes of its media type, or an https
/// URL; what it is, as `<media type> <bytes>` or `url <url>`.
fn check_image(block: &Value) -> Result<String, Reply> {
    let source = &block["source"];
    match source["type"].as_str() {
        Some("base64") => {
            let media = source["media_type"].as_str().unwrap_or_default();
            let format = match media {
                "image/jpeg" | "image/png" | "image/gif" | "image/webp" => &media[6..],
                _ => {
                    return Err(error(
                        400,
                        &format!("messages: image source media_type {media:?} is not one of image/jpeg, image/png, image/gif, image/webp"),
                    ))
                }
            };
            let data = source["data"].as_str().unwrap_or_default();
            let len = images::check(format, data).map_err(|m| error(400, &m))?;
            Ok(format!("{media} {len}"))
        }
        Some("url") => {
            let url = source["url"].as_str().unwrap_or_default();
            if !url.starts_with("https://") {
                return Err(error(
                    400,
                    "messages: image source url must be an https URL",
                ));
            }
            Ok(format!("url {url}"))
        }
        _ => Err(error(
            400,
            "messages: image source type must be base64 or url",
        )),
    }
}

/// Answers `count_tokens`: the prompt estimate.
pub fn count_tokens(ctx: &Ctx<'_>, body: &Value) -> Reply {
    if let Err(refusal) = check(ctx, body, true) {
        return refusal;
    }
    let tokens = tokens::estimate(tokens::messages_chars(body));
    Reply::json(200, to_json(&json!({"input_tokens": tokens})))
}

/// The tool to call, if this request gets a `tool_use` answer.
fn chosen_tool<'a>(body: &'a Value, prompt: &str) -> Option<&'a Value> {
    let tools = body.get("tools")?.as_array()?;
    let choice = body.get("tool_choice");
    let kind = choice.and_then(|c| c.get("type")).and_then(Value::as_str);
    match kind {
        Some("tool") => {
            let name = choice.and_then(|c| c.get("name"));
            tools.iter().find(|t| t.get("name") == name)
        }
        Some("any") => tools.first(),
        Some("none") => None,
        // A deferred tool is not loaded until a tool search finds it.
        _ if prompt.contains(TOOL_TRIGGER) && !answers_tool(body) => tools
            .iter()
            .find(|t| t.get("defer_loading") != Some(&Value::Bool(true))),
        _ => None,
    }
}

/// Whether the last message carries tool results: a model asked to use a
/// tool answers with text once it has the tool's result.
fn answers_tool(body: &Value) -> bool {
    body.pointer("/messages")
        .and_then(Value::as_array)
        .and_then(|ms| ms.last())
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        .is_some_and(|blocks| {
            blocks
                .iter()
                .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        })
}

/// An input for `tool` made from its schema's required properties (all
/// of them when none is required).
fn tool_input(tool: &Value) -> Value {
    let mut input = Map::new();
    let props = tool
        .pointer("/input_schema/properties")
        .and_then(Value::as_object);
    let required: Vec<&str> = tool
        .pointer("/input_schema/required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, schema) in props.into_iter().flatten() {
        if !required.is_empty() && !required.contains(&name.as_str()) {
            continue;
        }
        let value = match schema.get("type").and_then(Value::as_str) {
            Some("integer" | "number") => json!(1),
            Some("boolean") => json!(true),
            Some("array") => json!([]),
            Some("object") => json!({}),
            _ => json!("mock"),
        };
        input.insert(name.clone(), value);
    }
    Value::Object(input)
}

/// A number from an `x-mock-*` header.
fn header_count(ctx: &Ctx<'_>, name: &str) -> u64 {
    ctx.req
        .header(name)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Answers an Anthropic Messages request.
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    if let Err(refusal) = check(ctx, body, false) {
        return refusal;
    }
    answer(ctx, body)
}

/// The answer to a Messages request whose credentials and fields were
/// checked.
pub fn answer(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let prompt = body
        .get("messages")
        .map(Value::to_string)
        .unwrap_or_default();
    if prompt.contains(CONTEXT_TRIGGER) {
        return error(400, "prompt is too long: 250000 tokens > 200000 maximum");
    }
    let usage = Usage {
        prompt: tokens::estimate(tokens::messages_chars(body)),
        completion: tokens::completion_tokens(ctx.controls.completion_tokens, body),
    };
    let cache_read = header_count(ctx, "x-mock-cache-read-tokens");
    let cache_creation = header_count(ctx, "x-mock-cache-creation-tokens");
    let usage_json = |output: u64| {
        json!({
            "input_tokens": usage.prompt,
            "output_tokens": output,
            "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_creation,
        })
    };
    let thinking = body.pointer("/thinking/type").and_then(Value::as_str) == Some("enabled");
    let tool = chosen_tool(body, &prompt);
    let id = format!("msg_mock_{}", ctx.id);
    let stop_reason = if tool.is_some() {
        "tool_use"
    } else {
        "end_turn"
    };
    let text = if prompt.contains("mock-describe-images") {
        let seen: Vec<String> = image_blocks(body)
            .filter_map(|b| check_image(b).ok())
            .collect();
        seen.join("\n")
    } else {
        tokens::text(usage.completion)
    };
    let counted = Usage {
        prompt: usage.prompt + cache_read + cache_creation,
        completion: usage.completion,
    };
    if !wants_stream(body) {
        let mut content = Vec::new();
        if thinking {
            content.push(json!({"type": "thinking", "thinking": "Let me think.", "signature": "mock-signature"}));
        }
        content.push(json!({"type": "text", "text": text}));
        if let Some(tool) = tool {
            content.push(json!({"type": "tool_use", "id": format!("toolu_mock_{}", ctx.id), "name": tool["name"], "input": tool_input(tool)}));
        }
        let message = json!({
            "id": id, "type": "message", "role": "assistant", "model": ctx.model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": usage_json(usage.completion),
        });
        return Reply::ok(&message, counted);
    }

    let n = usage.completion;
    let mut events: Vec<Event> = Vec::with_capacity(n as usize + 12);
    let mut push = |name: &str, v: Value, delay| events.push(sse(Some(name), &v, delay));
    let start = json!({
        "id": id, "type": "message", "role": "assistant", "model": ctx.model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": usage_json(1),
    });
    push(
        "message_start",
        json!({"type": "message_start", "message": start}),
        0,
    );
    push("ping", json!({"type": "ping"}), 0);
    let mut index = 0;
    if thinking {
        push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": ""}}),
            0,
        );
        push(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": "Let me think."}}),
            0,
        );
        push(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": "mock-signature"}}),
            0,
        );
        push(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
            0,
        );
        index += 1;
    }
    push(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        0,
    );
    for i in 0..n {
        let delta = json!({"type": "text_delta", "text": tokens::piece(i, n)});
        push(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ctx.token_delay(i),
        );
    }
    let delay = if n == 0 { ctx.controls.ttft_ms } else { 0 };
    push(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
        delay,
    );
    if let Some(tool) = tool {
        index += 1;
        let block = json!({"type": "tool_use", "id": format!("toolu_mock_{}", ctx.id), "name": tool["name"], "input": {}});
        push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
            0,
        );
        let args = tool_input(tool).to_string();
        let (a, b) = args.split_at(args.len() / 2);
        for part in [a, b] {
            let delta = json!({"type": "input_json_delta", "partial_json": part});
            push(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
                0,
            );
        }
        push(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
            0,
        );
    }
    push(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": n}}),
        0,
    );
    push("message_stop", json!({"type": "message_stop"}), 0);
    Reply::stream(events, counted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::{test_request, Body};
    use crate::mock::controls::Controls;

    const HEADERS: &[(&str, &str)] =
        &[("x-api-key", "sk-ant"), ("anthropic-version", "2023-06-01")];

    fn run(headers: &[(&str, &str)], body: Value, tokens: u64) -> Reply {
        let controls = Controls {
            completion_tokens: tokens,
            ttft_ms: 9,
            ..Controls::default()
        };
        let req = test_request("/v1/messages", headers);
        let ctx = Ctx {
            id: 3,
            created: 0,
            model: "claude-x",
            controls: &controls,
            req: &req,
        };
        handle(&ctx, &body)
    }

    fn json_of(reply: Reply) -> (u16, Value) {
        let Body::Full(b) = reply.body else { panic!() };
        (reply.status, serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn full_message() {
        let body = json!({"model": "claude-x", "max_tokens": 2, "system": "be brief",
            "messages": [{"role": "user", "content": "hi"}]});
        let reply = run(HEADERS, body, 4);
        assert_eq!(
            reply.usage,
            Some(Usage {
                prompt: 3,
                completion: 2
            })
        );
        let (status, v) = json_of(reply);
        assert_eq!(status, 200);
        assert_eq!(v["id"], "msg_mock_3");
        assert_eq!(v["type"], "message");
        assert_eq!(v["content"][0]["text"], "lorem ipsum");
        assert_eq!(v["stop_reason"], "end_turn");
        assert_eq!(v["usage"]["input_tokens"], 3);
        assert_eq!(v["usage"]["output_tokens"], 2);
    }

    #[test]
    fn checks_what_the_real_endpoint_checks() {
        let ok = json!({"model": "c", "max_tokens": 5, "messages": []});
        let refused = |headers, body| {
            let (status, v) = json_of(run(headers, body, 1));
            (
                status,
                v["error"]["type"].as_str().unwrap().to_string(),
                v["error"]["message"].as_str().unwrap().to_string(),
            )
        };
        assert_eq!(refused(&[("anthropic-version", "x")], ok.clone()).0, 401);
        assert_eq!(
            refused(&[("x-api-key", "k")], ok.clone()).1,
            "invalid_request_error"
        );
        let no_max = json!({"model": "c", "messages": []});
        assert_eq!(refused(HEADERS, no_max).2, "max_tokens: Field required");
        let extra = json!({"model": "c", "max_tokens": 5, "messages": [], "stream_options": {}});
        assert_eq!(
            refused(HEADERS, extra).2,
            "stream_options: Extra inputs are not permitted"
        );
        let long = json!({"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "mock-context-window"}]});
        assert!(refused(HEADERS, long).2.starts_with("prompt is too long"));
    }

    #[test]
    fn tool_use_and_thinking() {
        let body = json!({"model": "c", "max_tokens": 50, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}],
            "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": "weather?"}]});
        let (_, v) = json_of(run(HEADERS, body.clone(), 2));
        assert_eq!(v["content"][0]["type"], "thinking");
        assert_eq!(v["content"][2]["input"], json!({"city": "mock", "days": 1}));
        assert_eq!(v["stop_reason"], "tool_use");
        let mut streamed = body;
        streamed["stream"] = json!(true);
        let Body::Stream(events) = run(HEADERS, streamed, 2).body else {
            panic!()
        };
        let text: String = events
            .iter()
            .map(|e| String::from_utf8_lossy(&e.data).into_owned())
            .collect();
        assert!(text.contains("\"partial_json\""), "{text}");
        assert!(text.contains("signature_delta"), "{text}");
    }

    #[test]
    fn stream_event_sequence() {
        let body = json!({"model": "claude-x", "max_tokens": 5, "stream": true, "messages": []});
        let Body::Stream(events) = run(HEADERS, body, 2).body else {
            panic!()
        };
        let names: Vec<String> = events
            .iter()
            .map(|e| {
                let s = std::str::from_utf8(&e.data).unwrap();
                let (head, data) = s.split_once('\n').unwrap();
                let name = head.strip_prefix("event: ").unwrap();
                let v: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap().trim_end()).unwrap();
                assert_eq!(v["type"], name);
                name.to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(events[3].delay_ms, 9);
        let s = std::str::from_utf8(&events[6].data).unwrap();
        assert!(s.contains(r#""usage":{"output_tokens":2}"#), "{s}");
    }
}
