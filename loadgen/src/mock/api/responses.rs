//! `POST …/responses`: OpenAI's Responses API (and Azure's
//! `/openai/responses?api-version=`, with Azure's checks), with the checks
//! the real endpoint makes (a credential, `model` and `input` required,
//! no unknown top-level fields; the mock keeps no responses, so a
//! `previous_response_id` is "not found") and its real shapes: a Response
//! object with a `message` output item and `usage.input_tokens` /
//! `output_tokens`, or its event stream (`response.created`,
//! `response.in_progress`, `response.output_item.added`,
//! `response.content_part.added`, `response.output_text.delta`…,
//! `response.output_text.done`, `response.content_part.done`,
//! `response.output_item.done`, `response.completed`), each event with a
//! `sequence_number`.

use serde_json::{json, Value};

use super::{azure, sse, to_json, wants_stream, Ctx, Reply, Usage};
use crate::mock::tokens;

const KNOWN_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "stream",
    "max_output_tokens",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "reasoning",
    "metadata",
    "previous_response_id",
    "store",
    "user",
    "truncation",
    "include",
    "service_tier",
    "stream_options",
    "background",
    "prompt_cache_key",
];

fn error(status: u16, message: &str, param: Option<&str>, code: Option<&str>) -> Reply {
    Reply::json(
        status,
        to_json(
            &json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}),
        ),
    )
}

fn check(ctx: &Ctx<'_>, body: &Value) -> Result<(), Reply> {
    if ctx.req.path().contains("/openai/") {
        azure::check(ctx, body)?;
    } else if !ctx
        .req
        .header("authorization")
        .is_some_and(|a| a.starts_with("Bearer ") && a.len() > 7)
    {
        return Err(error(
            401,
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            None,
            None,
        ));
    }
    let Some(obj) = body.as_object() else {
        return Err(error(400, "the body must be a JSON object", None, None));
    };
    if let Some(extra) = obj.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())) {
        return Err(error(
            400,
            &format!("Unknown parameter: '{extra}'."),
            Some(extra),
            Some("unknown_parameter"),
        ));
    }
    if !obj.get("model").is_some_and(Value::is_string) {
        return Err(error(
            400,
            "Missing required parameter: 'model'.",
            Some("model"),
            Some("missing_required_parameter"),
        ));
    }
    if !obj
        .get("input")
        .is_some_and(|i| i.is_string() || i.is_array())
    {
        return Err(error(
            400,
            "Missing required parameter: 'input'.",
            Some("input"),
            Some("missing_required_parameter"),
        ));
    }
    if let Some(id) = obj.get("previous_response_id").and_then(Value::as_str) {
        return Err(error(
            400,
            &format!("Previous response with id '{id}' not found."),
            Some("previous_response_id"),
            Some("previous_response_not_found"),
        ));
    }
    Ok(())
}

/// Answers a Responses API request.
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    if let Err(refusal) = check(ctx, body) {
        return refusal;
    }
    let prompt = tokens::estimate(
        tokens::input_chars(&body["input"]) + tokens::input_chars(&body["instructions"]),
    );
    let max = body["max_output_tokens"].as_u64();
    let completion = max.map_or(ctx.controls.completion_tokens, |m| {
        m.min(ctx.controls.completion_tokens)
    });
    let usage = Usage { prompt, completion };
    let id = format!("resp_mock{}", ctx.id);
    let msg_id = format!("msg_mock{}", ctx.id);
    let text = tokens::text(completion);
    let item = |status: &str, text: &str| {
        json!({"id": msg_id, "type": "message", "status": status, "role": "assistant",
               "content": if status == "in_progress" { json!([]) } else { json!([{"type": "output_text", "text": text, "annotations": []}]) }})
    };
    let response = |status: &str, output: Vec<Value>, with_usage: bool| {
        json!({
            "id": id, "object": "response", "created_at": ctx.created, "status": status,
            "model": ctx.model, "output": output, "error": null, "incomplete_details": null,
            "instructions": body.get("instructions").cloned().unwrap_or(Value::Null),
            "usage": if with_usage { json!({
                "input_tokens": usage.prompt, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": usage.completion, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.prompt + usage.completion,
            }) } else { Value::Null },
        })
    };
    if !wants_stream(body) {
        return Reply::ok(
            &response("completed", vec![item("completed", &text)], true),
            usage,
        );
    }
    let mut seq = 0u64;
    let mut events = Vec::new();
    let mut push = |name: &str, mut data: Value, delay: u64| {
        data["type"] = name.into();
        data["sequence_number"] = seq.into();
        seq += 1;
        events.push(sse(Some(name), &data, delay));
    };
    push(
        "response.created",
        json!({"response": response("in_progress", vec![], false)}),
        0,
    );
    push(
        "response.in_progress",
        json!({"response": response("in_progress", vec![], false)}),
        0,
    );
    push(
        "response.output_item.added",
        json!({"output_index": 0, "item": item("in_progress", "")}),
        0,
    );
    push(
        "response.content_part.added",
        json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        0,
    );
    for i in 0..completion {
        push(
            "response.output_text.delta",
            json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "delta": tokens::piece(i, completion)}),
            ctx.token_delay(i),
        );
    }
    push(
        "response.output_text.done",
        json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "text": text}),
        0,
    );
    push(
        "response.content_part.done",
        json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": text, "annotations": []}}),
        0,
    );
    push(
        "response.output_item.done",
        json!({"output_index": 0, "item": item("completed", &text)}),
        0,
    );
    push(
        "response.completed",
        json!({"response": response("completed", vec![item("completed", &text)], true)}),
        0,
    );
    Reply::stream(events, usage)
}
