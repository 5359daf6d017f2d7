//! `POST …/chat/completions`: OpenAI `chat.completion` and its stream.
//!
//! A request with `tools` whose `tool_choice` is `required` or names a
//! function, or whose messages contain `mock-tool-use` (until the last
//! message is a `tool` result), is answered with a call to the named (else
//! first) function, its arguments made from the schema's required
//! properties (all of them when none is required).

use serde::Serialize;
use serde_json::Value;

use super::{sse, sse_done, wants_stream, wants_stream_usage, Ctx, OpenAiUsage, Reply, Usage};
use crate::mock::tokens;

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    usage: OpenAiUsage,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    message: Message<'a>,
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [ChunkChoice<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<OpenAiUsage>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
}

/// Answers a chat completion request.
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let usage = Usage {
        prompt: tokens::estimate(tokens::messages_chars(body)),
        completion: tokens::completion_tokens(ctx.controls.completion_tokens, body),
    };
    let id = format!("chatcmpl-mock-{}", ctx.id);
    if let Some(function) = called_function(body) {
        return tool_call(ctx, &id, usage, function, body);
    }
    if wants_stream(body) {
        return Reply::stream(stream(ctx, &id, usage, wants_stream_usage(body)), usage);
    }
    let content = tokens::text(usage.completion);
    let completion = Completion {
        id: &id,
        object: "chat.completion",
        created: ctx.created,
        model: ctx.model,
        choices: [Choice {
            index: 0,
            message: Message {
                role: "assistant",
                content: &content,
            },
            finish_reason: "stop",
        }],
        usage: usage.into(),
    };
    Reply::ok(&completion, usage)
}

/// The function the answer calls, if it calls one.
fn called_function(body: &Value) -> Option<&Value> {
    let tools = body.get("tools")?.as_array()?;
    let functions = || tools.iter().filter_map(|t| t.get("function"));
    match body.get("tool_choice") {
        Some(Value::String(s)) if s == "none" => None,
        Some(Value::String(s)) if s == "required" => functions().next(),
        Some(choice @ Value::Object(_)) => {
            let name = choice.pointer("/function/name");
            functions().find(|f| f.get("name") == name)
        }
        _ => {
            let messages = body.get("messages")?;
            let answered = messages
                .as_array()
                .and_then(|ms| ms.last())
                .is_some_and(|m| m.get("role").and_then(Value::as_str) == Some("tool"));
            (!answered
                && messages
                    .to_string()
                    .contains(super::anthropic::TOOL_TRIGGER))
            .then(|| functions().next())
            .flatten()
        }
    }
}

/// Arguments for `function` made from its schema.
fn arguments(function: &Value) -> String {
    let props = function
        .pointer("/parameters/properties")
        .and_then(Value::as_object);
    let required: Vec<&str> = function
        .pointer("/parameters/required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut args = serde_json::Map::new();
    for (name, schema) in props.into_iter().flatten() {
        if !required.is_empty() && !required.contains(&name.as_str()) {
            continue;
        }
        let value = match schema.get("type").and_then(Value::as_str) {
            Some("integer" | "number") => serde_json::json!(1),
            Some("boolean") => serde_json::json!(true),
            Some("array") => serde_json::json!([]),
            Some("object") => serde_json::json!({}),
            _ => serde_json::json!("mock"),
        };
        args.insert(name.clone(), value);
    }
    Value::Object(args).to_string()
}

/// An answer calling `function`, whole or streamed (the call's id in the
/// first chunk, its arguments in two pieces).
fn tool_call(ctx: &Ctx<'_>, id: &str, usage: Usage, function: &Value, body: &Value) -> Reply {
    use serde_json::json;
    let call_id = format!("call_mock_{}", ctx.id);
    let name = function.get("name").cloned().unwrap_or(Value::Null);
    let args = arguments(function);
    let base = |object: &str| json!({"id": id, "object": object, "created": ctx.created, "model": ctx.model});
    let usage_json = serde_json::to_value(OpenAiUsage::from(usage)).unwrap_or(Value::Null);
    if !wants_stream(body) {
        let mut completion = base("chat.completion");
        completion["choices"] = json!([{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}],
        }}]);
        completion["usage"] = usage_json;
        return Reply::ok(&completion, usage);
    }
    let chunk = |choices: Value| {
        let mut c = base("chat.completion.chunk");
        c["choices"] = choices;
        sse(None, &c, 0)
    };
    let (a, b) = args.split_at(args.len() / 2);
    let mut events = vec![
        chunk(
            json!([{"index": 0, "finish_reason": null, "delta": {"role": "assistant", "content": null,
            "tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}}]),
        ),
        chunk(
            json!([{"index": 0, "finish_reason": null, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": a}}]}}]),
        ),
        chunk(
            json!([{"index": 0, "finish_reason": null, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": b}}]}}]),
        ),
        chunk(json!([{"index": 0, "finish_reason": "tool_calls", "delta": {}}])),
    ];
    if wants_stream_usage(body) {
        let mut last = base("chat.completion.chunk");
        last["choices"] = json!([]);
        last["usage"] = usage_json;
        events.push(sse(None, &last, 0));
    }
    events.push(sse_done());
    Reply::stream(events, usage)
}

fn stream(ctx: &Ctx<'_>, id: &str, usage: Usage, include_usage: bool) -> Vec<super::Event> {
    let n = usage.completion;
    let emit = |choices: &[ChunkChoice<'_>], usage: Option<OpenAiUsage>, delay_ms: u64| {
        let chunk = Chunk {
            id,
            object: "chat.completion.chunk",
            created: ctx.created,
            model: ctx.model,
            choices,
            usage,
        };
        sse(None, &chunk, delay_ms)
    };
    let mut events = Vec::with_capacity(n as usize + 3);
    for i in 0..n {
        let piece = tokens::piece(i, n);
        let choice = ChunkChoice {
            index: 0,
            delta: Delta {
                role: (i == 0).then_some("assistant"),
                content: Some(&piece),
            },
            finish_reason: None,
        };
        events.push(emit(&[choice], None, ctx.token_delay(i)));
    }
    let last = ChunkChoice {
        index: 0,
        delta: Delta {
            role: (n == 0).then_some("assistant"),
            content: None,
        },
        finish_reason: Some("stop"),
    };
    let delay = if n == 0 { ctx.controls.ttft_ms } else { 0 };
    events.push(emit(&[last], None, delay));
    if include_usage {
        events.push(emit(&[], Some(usage.into()), 0));
    }
    events.push(sse_done());
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::Body;
    use crate::mock::controls::Controls;
    use serde_json::json;

    static REQ: std::sync::LazyLock<crate::mock::http::Request> =
        std::sync::LazyLock::new(|| crate::mock::api::test_request("/v1/chat/completions", &[]));

    fn ctx(controls: &Controls) -> Ctx<'_> {
        Ctx {
            id: 7,
            created: 1,
            model: "gpt-x",
            controls,
            req: &REQ,
        }
    }

    #[test]
    fn tool_calls_until_a_tool_answers() {
        let controls = Controls::default();
        let tools = json!([{"type": "function", "function": {"name": "run", "parameters": {"type": "object",
            "properties": {"cmd": {"type": "string"}, "n": {"type": "integer"}}, "required": ["cmd"]}}}]);
        let body = json!({"model": "gpt-x", "tools": tools, "messages": [{"role": "user", "content": "mock-tool-use"}]});
        let Body::Full(b) = handle(&ctx(&controls), &body).body else {
            panic!()
        };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "run");
        assert_eq!(call["function"]["arguments"], "{\"cmd\":\"mock\"}");
        let answered = json!({"model": "gpt-x", "tools": tools, "messages": [
            {"role": "user", "content": "mock-tool-use"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "done"},
        ]});
        let Body::Full(b) = handle(&ctx(&controls), &answered).body else {
            panic!()
        };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        let streamed = json!({"model": "gpt-x", "tools": tools, "tool_choice": "required", "stream": true, "messages": []});
        let Body::Stream(events) = handle(&ctx(&controls), &streamed).body else {
            panic!()
        };
        let text: String = events
            .iter()
            .map(|e| String::from_utf8_lossy(&e.data).into_owned())
            .collect();
        assert!(text.contains("\"finish_reason\":\"tool_calls\""), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    }

    #[test]
    fn full_completion() {
        let controls = Controls {
            completion_tokens: 5,
            ..Controls::default()
        };
        let body = json!({"model": "gpt-x", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3});
        let reply = handle(&ctx(&controls), &body);
        assert_eq!(
            reply.usage,
            Some(Usage {
                prompt: 2,
                completion: 3
            })
        );
        let Body::Full(b) = reply.body else { panic!() };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["id"], "chatcmpl-mock-7");
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "gpt-x");
        assert_eq!(v["choices"][0]["message"]["content"], "lorem ipsum dolor");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["usage"]["total_tokens"], 5);
    }

    #[test]
    fn stream_events() {
        let controls = Controls {
            completion_tokens: 3,
            ttft_ms: 50,
            chunk_delay_ms: 10,
            ..Controls::default()
        };
        let body = json!({"model": "gpt-x", "messages": [], "stream": true, "stream_options": {"include_usage": true}});
        let Body::Stream(events) = handle(&ctx(&controls), &body).body else {
            panic!()
        };
        assert_eq!(events.len(), 3 + 1 + 1 + 1);
        let delays: Vec<u64> = events.iter().map(|e| e.delay_ms).collect();
        assert_eq!(delays, vec![50, 10, 10, 0, 0, 0]);
        let parse = |e: &super::super::Event| -> Value {
            let s = std::str::from_utf8(&e.data).unwrap();
            serde_json::from_str(s.strip_prefix("data: ").unwrap().trim_end()).unwrap()
        };
        let first = parse(&events[0]);
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(first["object"], "chat.completion.chunk");
        let text: String = events[..3]
            .iter()
            .map(|e| {
                parse(e)["choices"][0]["delta"]["content"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(text, "lorem ipsum dolor");
        assert_eq!(parse(&events[3])["choices"][0]["finish_reason"], "stop");
        assert_eq!(parse(&events[4])["usage"]["completion_tokens"], 3);
        assert_eq!(parse(&events[4])["choices"], json!([]));
        assert_eq!(events[5].data, b"data: [DONE]\n\n");
    }
}
