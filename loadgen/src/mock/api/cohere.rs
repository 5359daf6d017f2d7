//! Cohere's v2 API: `POST …/v2/chat` (and its stream), `…/v2/embed`,
//! `…/v2/rerank`, with the checks the real endpoints make: the key in
//! `Authorization: Bearer` must be [`API_KEY`] (a missing one is 401 `no
//! api key supplied`, another 401 `invalid api token`); `model` is
//! required everywhere; chat takes Cohere's fields only (an OpenAI-only
//! member such as `top_p`, `stop`, `n` or `stream_options` is an unknown
//! field), `messages` of `system`/`user`/`assistant`/`tool` turns (a tool
//! turn needs its `tool_call_id`, an assistant turn content or tool
//! calls), `tool_choice` `REQUIRED` or `NONE`; embed takes up to 96
//! `texts`, an `input_type` (required for v3 and later models) and
//! `embedding_types`; rerank a `query` and up to 1,000 `documents`.
//! Errors are Cohere's `{"id", "message"}`. Answers have the real shapes:
//! chat `message.content` parts, `finish_reason`, `usage.billed_units` and
//! `usage.tokens`; streams named events (`message-start`,
//! `content-start`, `content-delta`…, `content-end`, `tool-call-*`,
//! `message-end` with the usage); embed `embeddings` by type with
//! `meta.billed_units.input_tokens`; rerank `results` with
//! `meta.billed_units.search_units` (one per 100 documents).
//!
//! Behaviour: `tool_choice: REQUIRED` (or a prompt containing
//! `mock-tool-use`) with tools answers with a call of the first tool; a
//! prompt containing `mock-context-window` is refused as too many tokens.

use serde_json::{json, Map, Value};

use super::{embeddings, sse, to_json, Ctx, Event, Reply, Usage};
use crate::mock::tokens;

/// The only API key the mock accepts.
pub const API_KEY: &str = "mock-cohere-api-key";
/// Tokens of Cohere's own prompt template, counted in `usage.tokens`
/// but not billed.
const TEMPLATE_TOKENS: u64 = 64;
/// Most texts of one embed call.
const MAX_TEXTS: usize = 96;
/// Most documents of one rerank call.
const MAX_DOCUMENTS: usize = 1000;

const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "tools",
    "strict_tools",
    "documents",
    "citation_options",
    "response_format",
    "safety_mode",
    "max_tokens",
    "stop_sequences",
    "temperature",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "k",
    "p",
    "logprobs",
    "tool_choice",
    "thinking",
    "priority",
];
const INPUT_TYPES: &[&str] = &[
    "search_document",
    "search_query",
    "classification",
    "clustering",
    "image",
];
const EMBEDDING_TYPES: &[&str] = &["float", "int8", "uint8", "binary", "ubinary", "base64"];

/// Which Cohere endpoint a path is, if any.
pub fn endpoint(path: &str) -> Option<&'static str> {
    ["chat", "embed", "rerank"]
        .into_iter()
        .find(|e| path.strip_suffix(e).is_some_and(|p| p.ends_with("/v2/")))
}

/// An error reply in Cohere's shape.
pub fn error(status: u16, message: &str) -> Reply {
    let body = json!({"id": "00000000-0000-4000-8000-000000000000", "message": message});
    Reply::json(status, to_json(&body))
}

fn invalid(message: &str) -> Reply {
    error(400, &format!("invalid request: {message}"))
}

/// The key check: `Authorization: Bearer <API_KEY>`.
fn check_key(ctx: &Ctx<'_>) -> Result<(), Reply> {
    let Some(auth) = ctx.req.header("authorization") else {
        return Err(error(401, "no api key supplied"));
    };
    let token = auth
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("bearer "))
        .map(|_| auth[7..].trim());
    if token == Some(API_KEY) {
        Ok(())
    } else {
        Err(error(401, "invalid api token"))
    }
}

fn model_of(body: &Value) -> Result<&str, Reply> {
    match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => Ok(m),
        _ => Err(invalid("model must be specified")),
    }
}

/// Answers a request to a Cohere endpoint (see [`endpoint`]).
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let checked = check_key(ctx).and_then(|()| model_of(body).map(drop));
    if let Err(refusal) = checked {
        return refusal;
    }
    match endpoint(ctx.req.path()) {
        Some("chat") => chat(ctx, body).unwrap_or_else(|r| r),
        Some("embed") => embed(ctx, body).unwrap_or_else(|r| r),
        Some("rerank") => rerank(ctx, body).unwrap_or_else(|r| r),
        _ => error(404, "not found"),
    }
}

fn check_chat(body: &Value) -> Result<(), Reply> {
    let obj = body.as_object().expect("the caller checked an object");
    if let Some(extra) = obj.keys().find(|k| !CHAT_FIELDS.contains(&k.as_str())) {
        return Err(invalid(&format!(
            "unknown field: parameter {extra} is not a valid field"
        )));
    }
    let Some(messages) = body["messages"].as_array().filter(|m| !m.is_empty()) else {
        return Err(invalid("messages must not be empty"));
    };
    for m in messages {
        let has_content = m.get("content").is_some_and(|c| !c.is_null());
        match m["role"].as_str() {
            Some("system" | "user") if has_content => {}
            Some("assistant") if has_content || m["tool_calls"].is_array() => {}
            Some("tool") if m["tool_call_id"].is_string() && has_content => {}
            Some("system" | "user" | "assistant" | "tool") => {
                return Err(invalid("message is missing required fields"))
            }
            _ => return Err(invalid("role must be one of system, user, assistant, tool")),
        }
    }
    match body.get("tool_choice") {
        None => {}
        Some(Value::String(c)) if c == "REQUIRED" || c == "NONE" => {}
        Some(_) => return Err(invalid("tool_choice must be REQUIRED or NONE")),
    }
    Ok(())
}

fn chat(ctx: &Ctx<'_>, body: &Value) -> Result<Reply, Reply> {
    check_chat(body)?;
    let prompt_text = body["messages"].to_string();
    if prompt_text.contains("mock-context-window") {
        return Err(invalid(
            "too many tokens: size limit exceeded by 1200 tokens. Try using shorter or fewer inputs.",
        ));
    }
    let usage = Usage {
        prompt: tokens::estimate(tokens::messages_chars(body)),
        completion: tokens::completion_tokens(ctx.controls.completion_tokens, body),
    };
    let tool = body["tools"].get(0).filter(|_| {
        body["tool_choice"] == "REQUIRED"
            || (body["tool_choice"] != "NONE" && prompt_text.contains("mock-tool-use"))
    });
    let id = format!("mock-cohere-{}", ctx.id);
    let stream = body["stream"] == true;
    if let Some(tool) = tool {
        let name = tool["function"]["name"].as_str().unwrap_or("tool");
        let args = tool_args(tool).to_string();
        let call_id = format!("{name}_{}", ctx.id);
        if stream {
            return Ok(Reply::stream(
                tool_stream(ctx, &id, name, &call_id, &args, usage),
                usage,
            ));
        }
        let answer = json!({
            "id": id,
            "finish_reason": "TOOL_CALL",
            "message": {
                "role": "assistant",
                "tool_plan": format!("I will call {name}."),
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}],
            },
            "usage": chat_usage(usage),
        });
        return Ok(Reply::ok(&answer, usage));
    }
    if stream {
        return Ok(Reply::stream(text_stream(ctx, &id, usage), usage));
    }
    let answer = json!({
        "id": id,
        "finish_reason": "COMPLETE",
        "message": {
            "role": "assistant",
            "content": [{"type": "text", "text": tokens::text(usage.completion)}],
        },
        "usage": chat_usage(usage),
    });
    Ok(Reply::ok(&answer, usage))
}

fn chat_usage(u: Usage) -> Value {
    json!({
        "billed_units": {"input_tokens": u.prompt, "output_tokens": u.completion},
        "tokens": {"input_tokens": u.prompt + TEMPLATE_TOKENS, "output_tokens": u.completion},
    })
}

fn tool_args(tool: &Value) -> Value {
    let mut args = Map::new();
    let props = tool
        .pointer("/function/parameters/properties")
        .and_then(Value::as_object);
    for (name, schema) in props.into_iter().flatten() {
        let value = match schema.get("type").and_then(Value::as_str) {
            Some("integer" | "number") => json!(1),
            Some("boolean") => json!(true),
            _ => json!("mock"),
        };
        args.insert(name.clone(), value);
    }
    Value::Object(args)
}

fn named(kind: &str, value: Value, delay_ms: u64) -> Event {
    sse(Some(kind), &value, delay_ms)
}

fn message_start(id: &str, delay_ms: u64) -> Event {
    named(
        "message-start",
        json!({"id": id, "type": "message-start", "delta": {"message": {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": [], "citations": []}}}),
        delay_ms,
    )
}

fn message_end(reason: &str, usage: Usage) -> Event {
    named(
        "message-end",
        json!({"type": "message-end", "delta": {"finish_reason": reason, "usage": chat_usage(usage)}}),
        0,
    )
}

fn text_stream(ctx: &Ctx<'_>, id: &str, usage: Usage) -> Vec<Event> {
    let n = usage.completion;
    let mut events = Vec::with_capacity(n as usize + 4);
    events.push(message_start(id, ctx.controls.ttft_ms));
    events.push(named(
        "content-start",
        json!({"type": "content-start", "index": 0, "delta": {"message": {"content": {"type": "text", "text": ""}}}}),
        0,
    ));
    for i in 0..n {
        let delay = if i == 0 {
            0
        } else {
            ctx.controls.chunk_delay_ms
        };
        events.push(named(
            "content-delta",
            json!({"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": tokens::piece(i, n)}}}}),
            delay,
        ));
    }
    events.push(named(
        "content-end",
        json!({"type": "content-end", "index": 0}),
        0,
    ));
    events.push(message_end("COMPLETE", usage));
    events
}

fn tool_stream(
    ctx: &Ctx<'_>,
    id: &str,
    name: &str,
    call_id: &str,
    args: &str,
    usage: Usage,
) -> Vec<Event> {
    let mut events = vec![
        message_start(id, ctx.controls.ttft_ms),
        named(
            "tool-plan-delta",
            json!({"type": "tool-plan-delta", "delta": {"message": {"tool_plan": format!("I will call {name}.")}}}),
            0,
        ),
        named(
            "tool-call-start",
            json!({"type": "tool-call-start", "index": 0, "delta": {"message": {"tool_calls": {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}}}}),
            0,
        ),
    ];
    let (head, tail) = args.split_at(args.len() / 2);
    for piece in [head, tail] {
        events.push(named(
            "tool-call-delta",
            json!({"type": "tool-call-delta", "index": 0, "delta": {"message": {"tool_calls": {"function": {"arguments": piece}}}}}),
            ctx.controls.chunk_delay_ms,
        ));
    }
    events.push(named(
        "tool-call-end",
        json!({"type": "tool-call-end", "index": 0}),
        0,
    ));
    events.push(message_end("TOOL_CALL", usage));
    events
}

fn embed(ctx: &Ctx<'_>, body: &Value) -> Result<Reply, Reply> {
    let model = model_of(body)?;
    let texts = match body.get("texts") {
        Some(Value::Array(t))
            if !t.is_empty() && t.len() <= MAX_TEXTS && t.iter().all(Value::is_string) =>
        {
            t
        }
        Some(Value::Array(t)) if t.len() > MAX_TEXTS => {
            return Err(invalid(&format!(
                "texts cannot have more than {MAX_TEXTS} elements"
            )))
        }
        _ => return Err(invalid("texts must be a non-empty list of strings")),
    };
    match body.get("input_type").and_then(Value::as_str) {
        Some(t) if INPUT_TYPES.contains(&t) => {}
        Some(t) => {
            return Err(invalid(&format!(
                "input_type {t} is not a valid input type"
            )))
        }
        // Cohere's v2 models and older take none.
        None if model.contains("-v2") => {}
        None => {
            return Err(invalid(
                "valid input_type must be provided with the provided model",
            ))
        }
    }
    let types: Vec<&str> = match body.get("embedding_types") {
        None => vec!["float"],
        Some(Value::Array(list)) if !list.is_empty() => {
            let mut types = Vec::with_capacity(list.len());
            for t in list {
                match t.as_str().filter(|t| EMBEDDING_TYPES.contains(t)) {
                    Some(t) => types.push(t),
                    None => {
                        return Err(invalid(&format!(
                            "embedding_types must be some of {}",
                            EMBEDDING_TYPES.join(", ")
                        )))
                    }
                }
            }
            types
        }
        Some(_) => return Err(invalid("embedding_types must be a non-empty list")),
    };
    let mut by_type = Map::new();
    for t in types {
        let vectors: Vec<Value> = (0..texts.len())
            .map(|i| {
                let floats = embeddings::vector(i);
                match t {
                    "float" => json!(floats),
                    "base64" => json!(embeddings::encode_base64(&floats)),
                    // The quantized types: one integer per dimension.
                    _ => json!(floats.map(|f| (f * 100.0) as i32)),
                }
            })
            .collect();
        by_type.insert(t.to_string(), Value::Array(vectors));
    }
    let prompt = tokens::estimate(tokens::input_chars(&body["texts"]));
    let usage = Usage {
        prompt,
        completion: 0,
    };
    let answer = json!({
        "id": format!("mock-cohere-embed-{}", ctx.id),
        "texts": texts,
        "embeddings": by_type,
        "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": prompt}},
        "response_type": "embeddings_by_type",
    });
    Ok(Reply::ok(&answer, usage))
}

fn rerank(ctx: &Ctx<'_>, body: &Value) -> Result<Reply, Reply> {
    let Some(query) = body["query"].as_str().filter(|q| !q.is_empty()) else {
        return Err(invalid("query must be a non-empty string"));
    };
    let documents = match body.get("documents") {
        Some(Value::Array(d))
            if !d.is_empty() && d.len() <= MAX_DOCUMENTS && d.iter().all(Value::is_string) =>
        {
            d
        }
        Some(Value::Array(d)) if d.len() > MAX_DOCUMENTS => {
            return Err(invalid(&format!(
                "too many documents: at most {MAX_DOCUMENTS}"
            )))
        }
        _ => return Err(invalid("documents must be a non-empty list of strings")),
    };
    let top_n = match body.get("top_n") {
        None => documents.len(),
        Some(v) => match v.as_u64().filter(|n| *n >= 1) {
            Some(n) => (n as usize).min(documents.len()),
            None => return Err(invalid("top_n must be a positive integer")),
        },
    };
    // Documents sharing words with the query rank first.
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    let mut scored: Vec<(usize, f64)> = documents
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let text = d.as_str().unwrap_or("").to_lowercase();
            let hits = words.iter().filter(|w| text.contains(w.as_str())).count();
            (
                i,
                (hits as f64 + 1.0) / (words.len() as f64 + 2.0) - i as f64 * 1e-4,
            )
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    let results: Vec<Value> = scored
        .into_iter()
        .take(top_n)
        .map(|(index, score)| json!({"index": index, "relevance_score": score}))
        .collect();
    let search_units = documents.len().div_ceil(100) as u64;
    let answer = json!({
        "id": format!("mock-cohere-rerank-{}", ctx.id),
        "results": results,
        "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": search_units}},
    });
    // Search units are counted as prompt units in the stats.
    Ok(Reply::ok(
        &answer,
        Usage {
            prompt: search_units,
            completion: 0,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::{test_request, Body};
    use crate::mock::controls::Controls;

    fn call(path: &str, auth: Option<&str>, body: Value) -> Reply {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let req = test_request(path, &headers);
        let controls = Controls {
            completion_tokens: 3,
            ..Controls::default()
        };
        let ctx = Ctx {
            id: 1,
            created: 1,
            model: "command-r",
            controls: &controls,
            req: &req,
        };
        handle(&ctx, &body)
    }

    const KEY: Option<&str> = Some("Bearer mock-cohere-api-key");

    fn json_of(r: &Reply) -> Value {
        let Body::Full(b) = &r.body else { panic!() };
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn routes_only_v2_paths() {
        assert_eq!(endpoint("/v2/chat"), Some("chat"));
        assert_eq!(endpoint("/cohere/v2/embed"), Some("embed"));
        assert_eq!(endpoint("/v2/rerank"), Some("rerank"));
        assert_eq!(endpoint("/v1/chat"), None);
        assert_eq!(endpoint("/v2/chatty"), None);
    }

    #[test]
    fn keys_models_and_fields_are_checked() {
        let hi = json!({"model": "command-r", "messages": [{"role": "user", "content": "hi"}]});
        let r = call("/v2/chat", None, hi.clone());
        assert_eq!(
            (r.status, json_of(&r)["message"].clone()),
            (401, json!("no api key supplied"))
        );
        let r = call("/v2/chat", Some("Bearer nope"), hi.clone());
        assert_eq!(
            (r.status, json_of(&r)["message"].clone()),
            (401, json!("invalid api token"))
        );
        assert_eq!(
            call("/v2/chat", Some("mock-cohere-api-key"), hi.clone()).status,
            401
        );
        assert_eq!(call("/v2/chat", KEY, hi.clone()).status, 200);
        for bad in [
            json!({"messages": [{"role": "user", "content": "hi"}]}),
            json!({"model": "m", "messages": []}),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_p": 1}),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream_options": {}}),
            json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}),
            json!({"model": "m", "messages": [{"role": "developer", "content": "x"}]}),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto"}),
        ] {
            let r = call("/v2/chat", KEY, bad.clone());
            assert_eq!(r.status, 400, "{bad}");
            assert!(json_of(&r)["message"].is_string());
        }
        let embed = json!({"model": "embed-english-v3.0", "texts": ["a"]});
        let r = call("/v2/embed", KEY, embed);
        assert_eq!(r.status, 400, "v3 models need an input_type");
        let ok = json!({"model": "embed-english-v2.0", "texts": ["a"]});
        assert_eq!(call("/v2/embed", KEY, ok).status, 200);
        let r = call(
            "/v2/rerank",
            KEY,
            json!({"model": "rerank-v3.5", "query": "q"}),
        );
        assert_eq!(r.status, 400);
    }

    #[test]
    fn answers_have_cohere_shapes() {
        let r = call(
            "/v2/chat",
            KEY,
            json!({"model": "command-r", "messages": [{"role": "user", "content": "hello there"}]}),
        );
        let v = json_of(&r);
        assert_eq!(v["finish_reason"], "COMPLETE");
        assert_eq!(v["message"]["content"][0]["text"], "lorem ipsum dolor");
        assert_eq!(
            v["usage"]["billed_units"],
            json!({"input_tokens": 3, "output_tokens": 3})
        );
        let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}}]);
        let r = call(
            "/v2/chat",
            KEY,
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": tools, "tool_choice": "REQUIRED"}),
        );
        let v = json_of(&r);
        assert_eq!(v["finish_reason"], "TOOL_CALL");
        assert_eq!(
            v["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"n\":1}"
        );
        let r = call(
            "/v2/chat",
            KEY,
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": true}),
        );
        let Body::Stream(events) = r.body else {
            panic!()
        };
        let names: Vec<String> = events
            .iter()
            .map(|e| {
                String::from_utf8_lossy(&e.data)
                    .lines()
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(names[0], "event: message-start");
        assert_eq!(names[2], "event: content-delta");
        assert_eq!(names.last().unwrap(), "event: message-end");
        let r = call(
            "/v2/embed",
            KEY,
            json!({"model": "embed-english-v3.0", "texts": ["a", "b"], "input_type": "search_query", "embedding_types": ["float", "int8"]}),
        );
        let v = json_of(&r);
        assert_eq!(v["embeddings"]["float"].as_array().unwrap().len(), 2);
        assert!(v["embeddings"]["int8"][0][0].is_i64());
        assert!(v["meta"]["billed_units"]["input_tokens"].as_u64().unwrap() > 0);
        let docs: Vec<String> = (0..150).map(|i| format!("doc {i}")).collect();
        let mut docs = serde_json::to_value(docs).unwrap();
        docs[7] = json!("the capital of France is Paris");
        let r = call(
            "/v2/rerank",
            KEY,
            json!({"model": "rerank-v3.5", "query": "capital of France", "documents": docs, "top_n": 3}),
        );
        let v = json_of(&r);
        assert_eq!(v["results"].as_array().unwrap().len(), 3);
        assert_eq!(v["results"][0]["index"], 7);
        assert_eq!(v["meta"]["billed_units"]["search_units"], 2);
    }
}
