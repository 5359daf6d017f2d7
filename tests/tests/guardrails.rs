//! Guardrails (issue 37): LiteLLM's top-level `guardrails:` with the
//! `litellm_content_filter` type, against the real gateway. A scripted
//! upstream records what reached it, so a mask is seen on the wire and a
//! block is seen to cost no upstream call.

use e2e::{assert_error, base_config, free_port, openai_model, Gateway, RawUpstream, MASTER_KEY};
use serde_json::{json, Value};

/// An OpenAI chat answer whose text carries an email address.
const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"upstream-gpt","choices":[{"index":0,"message":{"role":"assistant","content":"write to bob@example.com please"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}"#;

fn upstream() -> RawUpstream {
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{ANSWER}",
        ANSWER.len()
    );
    RawUpstream::start(reply.into_bytes(), false)
}

/// `pii-mask` (default on, masks emails and SSNs), `no-secrets` (named
/// per request or key: blocks AWS keys and the word "project falcon"),
/// `answer-mask` (post_call, masks emails in answers).
fn guardrails() -> Value {
    json!([
        {"guardrail_name": "pii-mask", "litellm_params": {
            "guardrail": "litellm_content_filter", "mode": "pre_call", "default_on": true,
            "patterns": [
                {"pattern_type": "prebuilt", "pattern_name": "email", "action": "MASK"},
                {"pattern_type": "prebuilt", "pattern_name": "us_ssn", "action": "MASK"},
            ]}},
        {"guardrail_name": "no-secrets", "litellm_params": {
            "guardrail": "litellm_content_filter", "mode": ["pre_call"],
            "patterns": [{"pattern_type": "prebuilt", "pattern_name": "aws_access_key", "action": "BLOCK"}],
            "blocked_words": [{"keyword": "Project Falcon", "action": "BLOCK", "description": "internal codename"}]}},
        {"guardrail_name": "answer-mask", "litellm_params": {
            "guardrail": "litellm_content_filter", "mode": "post_call",
            "patterns": [{"pattern_type": "prebuilt", "pattern_name": "email", "action": "MASK"}],
            "blocked_words": [{"keyword": "Project Falcon", "action": "MASK"}]}},
        {"guardrail_name": "falcon-during", "litellm_params": {
            "guardrail": "litellm_content_filter", "mode": "during_call",
            "blocked_words": [{"keyword": "Project Falcon", "action": "BLOCK"}]}},
        {"guardrail_name": "answer-block", "litellm_params": {
            "guardrail": "litellm_content_filter", "mode": "post_call",
            "patterns": [{"pattern_type": "prebuilt", "pattern_name": "us_ssn", "action": "BLOCK"}]}},
    ])
}

fn start(raw: &RawUpstream) -> Gateway {
    let mut config = base_config(free_port());
    config["model_list"][0] = openai_model("gpt-4o", "dep-1", &raw.api_base(), json!({}));
    config["model_list"][1]["litellm_params"]["mock_response"] = json!("ask carol@example.org");
    config["guardrails"] = guardrails();
    Gateway::start_json(&config, &[])
}

fn chat(text: &str, extra: Value) -> Value {
    let mut body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]});
    if let (Some(b), Value::Object(extra)) = (body.as_object_mut(), extra) {
        b.extend(extra);
    }
    body
}

fn call(gw: &Gateway, key: &str, path: &str, body: &Value) -> e2e::Response {
    let auth = format!("Bearer {key}");
    gw.call(
        "POST",
        path,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

fn sent(raw: &RawUpstream) -> String {
    String::from_utf8_lossy(&raw.last_request()).into_owned()
}

#[test]
fn default_on_guardrail_masks_what_reaches_the_upstream() {
    let raw = upstream();
    let gw = start(&raw);
    let resp = call(
        &gw,
        MASTER_KEY,
        "/v1/chat/completions",
        &chat("I am jane@corp.com, ssn 123-45-6789", json!({})),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let wire = sent(&raw);
    assert!(
        wire.contains("I am [EMAIL_REDACTED], ssn [US_SSN_REDACTED]"),
        "{wire}"
    );
    assert!(
        !wire.contains("jane@corp.com") && !wire.contains("123-45-6789"),
        "{wire}"
    );
    // Text parts, Anthropic Messages and embeddings input are masked too.
    let parts = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "text", "text": "cc x@y.io"}]}]});
    assert_eq!(
        call(&gw, MASTER_KEY, "/v1/chat/completions", &parts).status,
        200
    );
    assert!(sent(&raw).contains("cc [EMAIL_REDACTED]"), "{}", sent(&raw));
    let messages = json!({"model": "gpt-4o", "max_tokens": 10, "messages": [{"role": "user", "content": "to z@q.dev"}]});
    let resp = call(&gw, MASTER_KEY, "/v1/messages", &messages);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(sent(&raw).contains("to [EMAIL_REDACTED]"), "{}", sent(&raw));
    let embed = json!({"model": "gpt-4o", "input": ["id 987-65-4321"]});
    call(&gw, MASTER_KEY, "/v1/embeddings", &embed);
    assert!(
        sent(&raw).contains("id [US_SSN_REDACTED]"),
        "{}",
        sent(&raw)
    );
    // Tool-call arguments (a JSON text inside the JSON body): the mask
    // lands inside them and they stay a JSON text.
    let tools = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "book it"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "book", "arguments": "{\"email\": \"ann@corp.com\", \"seats\": 2}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "booked for ann@corp.com"},
    ]});
    let resp = call(&gw, MASTER_KEY, "/v1/chat/completions", &tools);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let wire = sent(&raw);
    let body: Value = serde_json::from_str(&wire[wire.find("\r\n\r\n").unwrap() + 4..])
        .expect("the body sent upstream is JSON");
    let arguments = body["messages"][1]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .expect("arguments stay a string");
    let arguments: Value = serde_json::from_str(arguments).expect("arguments stay a JSON text");
    assert_eq!(arguments, json!({"email": "[EMAIL_REDACTED]", "seats": 2}));
    assert_eq!(
        body["messages"][2]["content"],
        "booked for [EMAIL_REDACTED]"
    );
    assert!(!wire.contains("ann@corp.com"), "{wire}");
}

#[test]
fn a_block_is_litellms_400_and_no_upstream_call() {
    let raw = upstream();
    let gw = start(&raw);
    let body = chat(
        "key AKIAIOSFODNN7EXAMPLE",
        json!({"guardrails": ["no-secrets"]}),
    );
    let resp = call(&gw, MASTER_KEY, "/v1/chat/completions", &body);
    let err = assert_error(&resp, 400);
    assert_eq!(
        err["message"],
        "Content blocked: aws_access_key pattern detected"
    );
    assert_eq!(err["provider_specific_fields"]["pattern"], "aws_access_key");
    // Named in metadata, a blocked word in any case.
    let body = chat(
        "about PROJECT FALCON",
        json!({"metadata": {"guardrails": ["no-secrets"]}}),
    );
    let err = assert_error(&call(&gw, MASTER_KEY, "/v1/chat/completions", &body), 400);
    assert_eq!(
        err["message"],
        "Content blocked: keyword 'project falcon' detected (internal codename)"
    );
    assert_eq!(raw.requests(), 0, "a blocked request reaches no upstream");
    // Not named: the same text passes.
    let resp = call(
        &gw,
        MASTER_KEY,
        "/v1/chat/completions",
        &chat("about project falcon", json!({})),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(raw.requests(), 1);
    assert!(
        !sent(&raw).contains("\"guardrails\""),
        "the gateway's own member is not forwarded"
    );
}

#[test]
fn a_keys_guardrails_apply_to_its_requests() {
    let raw = upstream();
    let gw = start(&raw);
    let made = gw.post("/key/generate", &json!({"guardrails": ["no-secrets"]}));
    assert_eq!(made.status, 200, "{}", made.text());
    let key = made.json()["key"].as_str().unwrap().to_string();
    let resp = call(
        &gw,
        &key,
        "/v1/chat/completions",
        &chat("project falcon plans", json!({})),
    );
    assert_error(&resp, 400);
    assert_eq!(raw.requests(), 0);
}

#[test]
fn an_exhausted_budget_answers_before_a_blocking_guardrail() {
    let raw = upstream();
    let gw = start(&raw);
    let made = gw.post(
        "/key/generate",
        &json!({"guardrails": ["no-secrets"], "max_budget": 1.0}),
    );
    assert_eq!(made.status, 200, "{}", made.text());
    let key = made.json()["key"].as_str().unwrap().to_string();
    let blocked = chat("project falcon plans", json!({}));
    // Within its budget, the guardrail refuses.
    let err = assert_error(&call(&gw, &key, "/v1/chat/completions", &blocked), 400);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .starts_with("Content blocked"),
        "{err:?}"
    );
    let updated = gw.post("/key/update", &json!({"key": key, "spend": 2.0}));
    assert_eq!(updated.status, 200, "{}", updated.text());
    // Over its budget and blocked: LiteLLM's key check answers first.
    let resp = call(&gw, &key, "/v1/chat/completions", &blocked);
    let err = assert_error(&resp, 422);
    assert_eq!(err["type"], "budget_exceeded", "{err:?}");
    // The request of another body shape too (Anthropic Messages).
    let messages = json!({"model": "gpt-4o", "max_tokens": 5,
        "messages": [{"role": "user", "content": "project falcon plans"}]});
    let resp = call(&gw, &key, "/v1/messages", &messages);
    assert_ne!(resp.status, 200, "{}", resp.text());
    assert!(
        resp.text().contains("Budget has been exceeded"),
        "{}",
        resp.text()
    );
    assert_eq!(raw.requests(), 0);
}

/// A key of `fields` (its limits, guardrails, models).
fn key_with(gw: &Gateway, fields: Value) -> String {
    let made = gw.post("/key/generate", &fields);
    assert_eq!(made.status, 200, "{}", made.text());
    made.json()["key"].as_str().unwrap().to_string()
}

/// LiteLLM's order: its key check (model access, budgets), then the
/// `pre_call` hooks (the config's guardrails, then its rate limiter, added
/// after them at start-up), then the `during_call` hooks beside the call.
/// A `pre_call` block is not counted toward the key's rpm; a
/// `during_call` one is, and frees its parallel slot.
#[test]
fn a_block_counts_toward_the_limits_as_litellm_orders_its_hooks() {
    let raw = upstream();
    let gw = start(&raw);
    let blocked = chat("project falcon plans", json!({}));
    let clean = chat("lunch plans", json!({}));
    let chat_as = |key: &str, body: &Value| call(&gw, key, "/v1/chat/completions", body);
    // pre_call: the block comes before the limiter, so two clean
    // requests still fit in rpm_limit 2.
    let pre = key_with(&gw, json!({"rpm_limit": 2, "guardrails": ["no-secrets"]}));
    assert_error(&chat_as(&pre, &blocked), 400);
    for _ in 0..2 {
        let resp = chat_as(&pre, &clean);
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    assert_error(&chat_as(&pre, &clean), 429);
    // during_call: admitted, counted, then refused; its parallel slot
    // is given back (a limit of 1 lets the next one in).
    let during = key_with(
        &gw,
        json!({"rpm_limit": 2, "max_parallel_requests": 1, "guardrails": ["falcon-during"]}),
    );
    let err = assert_error(&chat_as(&during, &blocked), 400);
    assert_eq!(
        err["message"],
        "Content blocked: keyword 'project falcon' detected"
    );
    let resp = chat_as(&during, &clean);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_error(&chat_as(&during, &clean), 429);
    // Over its rpm and blocked during the call: the limiter answers first.
    assert_error(&chat_as(&during, &blocked), 429);
    assert_eq!(raw.requests(), 3, "no blocked request reached the upstream");
    // A model the key may not use: the key check's refusal, not the block.
    let other = key_with(
        &gw,
        json!({"models": ["local-mock"], "guardrails": ["no-secrets"]}),
    );
    let refused = chat_as(&other, &clean);
    assert!(refused.status >= 400, "{}", refused.text());
    let resp = chat_as(&other, &blocked);
    assert_eq!(resp.status, refused.status, "{}", resp.text());
    assert_eq!(resp.json()["error"], refused.json()["error"]);
    assert_eq!(raw.requests(), 3);
}

#[test]
fn post_call_masks_whole_answers() {
    let raw = upstream();
    let gw = start(&raw);
    let body = chat("hello", json!({"guardrails": ["answer-mask"]}));
    let resp = call(&gw, MASTER_KEY, "/v1/chat/completions", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "write to [EMAIL_REDACTED] please"
    );
    // LiteLLM's header names every guardrail that ran: the request's, then
    // the default-on ones.
    assert_eq!(
        resp.header("x-litellm-applied-guardrails"),
        Some("answer-mask,pii-mask")
    );
    // Without it the answer is relayed as it came.
    let resp = call(
        &gw,
        MASTER_KEY,
        "/v1/chat/completions",
        &chat("hello", json!({})),
    );
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "write to bob@example.com please"
    );
    assert_eq!(
        resp.header("x-litellm-applied-guardrails"),
        Some("pii-mask")
    );
    // The in-process mock's answer too.
    let mut local = chat("hello", json!({"guardrails": ["answer-mask"]}));
    local["model"] = json!("local-mock");
    let resp = call(&gw, MASTER_KEY, "/v1/chat/completions", &local);
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "ask [EMAIL_REDACTED]"
    );
}

/// An upstream answering every request with an OpenAI chat stream whose
/// content comes in `pieces`, one SSE event (and one HTTP chunk) each,
/// then a usage chunk and `[DONE]`.
fn streaming_upstream(pieces: &[&str]) -> RawUpstream {
    let deltas: Vec<(Value, Value)> = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let finish = if i + 1 == pieces.len() {
                json!("stop")
            } else {
                Value::Null
            };
            (json!({"content": p}), finish)
        })
        .collect();
    sse_upstream(&deltas)
}

/// An upstream streaming one chat chunk per `(delta, finish_reason)`,
/// then a usage chunk and `[DONE]`.
fn sse_upstream(deltas: &[(Value, Value)]) -> RawUpstream {
    let mut events: Vec<String> = deltas
        .iter()
        .map(|(delta, finish)| {
            let chunk = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1,
                "model": "upstream-gpt", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            format!("data: {chunk}\n\n")
        })
        .collect();
    let usage = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "upstream-gpt",
        "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}});
    events.push(format!("data: {usage}\n\n"));
    events.push("data: [DONE]\n\n".to_string());
    let mut reply =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for e in &events {
        reply.extend_from_slice(format!("{:x}\r\n{e}\r\n", e.len()).as_bytes());
    }
    reply.extend_from_slice(b"0\r\n\r\n");
    RawUpstream::start(reply, false)
}

/// The `data:` payloads of an SSE body, JSON ones parsed (`[DONE]` as a
/// string).
fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| json!(d)))
        .collect()
}

/// The text an OpenAI chat stream's chunks carry, joined.
fn streamed_text(events: &[Value]) -> String {
    events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect()
}

#[test]
fn post_call_masks_a_stream_even_when_a_match_is_split_across_chunks() {
    let raw = streaming_upstream(&[
        "write to bob@exa",
        "mple.com about Project Fal",
        "con, ",
        "bye",
    ]);
    let gw = start(&raw);
    let body = chat(
        "hello",
        json!({"guardrails": ["answer-mask"], "stream": true}),
    );
    let resp = call(&gw, MASTER_KEY, "/v1/chat/completions", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.header("x-litellm-applied-guardrails"),
        Some("answer-mask,pii-mask")
    );
    let text = resp.text();
    let got = events(&text);
    assert_eq!(
        streamed_text(&got),
        "write to [EMAIL_REDACTED] about [KEYWORD_REDACTED], bye"
    );
    assert!(!text.contains("bob@") && !text.contains("Fal"), "{text}");
    assert_eq!(got.last(), Some(&json!("[DONE]")), "{text}");
    assert!(
        got.iter()
            .any(|e| e["choices"][0]["finish_reason"] == "stop"),
        "{text}"
    );
    // Without the guardrail the stream is relayed as it came.
    let plain = chat("hello", json!({"stream": true}));
    let text = call(&gw, MASTER_KEY, "/v1/chat/completions", &plain).text();
    assert_eq!(
        streamed_text(&events(&text)),
        "write to bob@example.com about Project Falcon, bye"
    );
}

/// OpenAI ends a choice with a chunk of no text (`"delta": {}` and its
/// `finish_reason`): what the window still holds goes out in that chunk,
/// masked, whether its delta is empty, has other members or has `content`
/// as `null`.
#[test]
fn post_call_releases_the_held_text_into_a_final_chunk_without_text() {
    for last in [
        json!({}),
        json!({"role": "assistant"}),
        json!({"content": null}),
    ] {
        let raw = sse_upstream(&[
            (
                json!({"role": "assistant", "content": "mail bob@exa"}),
                Value::Null,
            ),
            (json!({"content": "mple.com now"}), Value::Null),
            (last.clone(), json!("stop")),
        ]);
        let gw = start(&raw);
        let body = chat(
            "hello",
            json!({"guardrails": ["answer-mask"], "stream": true}),
        );
        let resp = call(&gw, MASTER_KEY, "/v1/chat/completions", &body);
        assert_eq!(resp.status, 200, "{}", resp.text());
        let text = resp.text();
        let got = events(&text);
        assert_eq!(
            streamed_text(&got),
            "mail [EMAIL_REDACTED] now",
            "{last}: {text}"
        );
        assert!(!text.contains("bob@"), "{text}");
        let end = got
            .iter()
            .find(|e| e["choices"][0]["finish_reason"] == "stop")
            .unwrap_or_else(|| panic!("{last}: no finish chunk in {text}"));
        assert_eq!(end["id"], "chatcmpl-s", "{text}");
        assert_eq!(got.last(), Some(&json!("[DONE]")), "{text}");
    }
}

#[test]
fn post_call_masks_an_anthropic_stream_and_the_in_process_mocks() {
    let raw = streaming_upstream(&["mail ann@exam", "ple.com now"]);
    let gw = start(&raw);
    let body = json!({"model": "gpt-4o", "max_tokens": 20, "stream": true, "guardrails": ["answer-mask"],
        "messages": [{"role": "user", "content": "hi"}]});
    let resp = call(&gw, MASTER_KEY, "/v1/messages", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let text = resp.text();
    let deltas: String = events(&text)
        .iter()
        .filter(|e| e["type"] == "content_block_delta")
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(deltas, "mail [EMAIL_REDACTED] now", "{text}");
    assert!(text.contains("event: message_stop"), "{text}");
    // The in-process mock's stream.
    let mut local = chat(
        "hello",
        json!({"guardrails": ["answer-mask"], "stream": true}),
    );
    local["model"] = json!("local-mock");
    let text = call(&gw, MASTER_KEY, "/v1/chat/completions", &local).text();
    assert_eq!(
        streamed_text(&events(&text)),
        "ask [EMAIL_REDACTED]",
        "{text}"
    );
}

#[test]
fn a_post_call_block_ends_a_stream_with_an_error_event() {
    let raw = streaming_upstream(&["fine so far. ssn 123-4", "5-6789 and more", " text"]);
    let gw = start(&raw);
    let body = chat(
        "hello",
        json!({"guardrails": ["answer-block"], "stream": true}),
    );
    let resp = call(&gw, MASTER_KEY, "/v1/chat/completions", &body);
    assert_eq!(resp.status, 200, "the head was sent: {}", resp.text());
    let text = resp.text();
    let got = events(&text);
    assert!(!text.contains("123-4"), "{text}");
    let n = got.len();
    assert!(n >= 2, "{text}");
    assert_eq!(got[n - 1], json!("[DONE]"), "{text}");
    let err = &got[n - 2]["error"];
    assert_eq!(
        err["message"], "Content blocked: us_ssn pattern detected",
        "{text}"
    );
    assert_eq!(err["code"], "400");
    assert_eq!(err["provider_specific_fields"]["pattern"], "us_ssn");
    assert!(!text.contains("more"), "nothing follows the block: {text}");
    // What was generated until the block is billed (its tokens counted),
    // and the row says the guardrail blocked the stream.
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    let row = e2e::eventually(
        "the stream's spend row",
        std::time::Duration::from_secs(10),
        || {
            let rows = gw.get(&format!("/spend/logs?request_id={call_id}")).json();
            rows.as_array().and_then(|r| r.first().cloned())
        },
    );
    assert!(row["completion_tokens"].as_i64().unwrap() > 0, "{row}");
    let runs = row["guardrail_information"].as_array().expect("runs");
    let block = runs
        .iter()
        .find(|r| r["guardrail_name"] == "answer-block")
        .expect("the stream's run");
    assert_eq!(block["guardrail_mode"], "post_call", "{row}");
    assert_eq!(block["guardrail_status"], "guardrail_intervened", "{row}");
    // An Anthropic client gets Anthropic's error event.
    let body = json!({"model": "gpt-4o", "max_tokens": 20, "stream": true, "guardrails": ["answer-block"],
        "messages": [{"role": "user", "content": "hi"}]});
    let text = call(&gw, MASTER_KEY, "/v1/messages", &body).text();
    assert!(text.contains("event: error"), "{text}");
    let err = events(&text)
        .into_iter()
        .find(|e| e["type"] == "error")
        .expect("an error event");
    assert_eq!(err["error"]["type"], "invalid_request_error");
    assert_eq!(
        err["error"]["message"],
        "Content blocked: us_ssn pattern detected"
    );
    assert!(
        !text.contains("123-4") && !text.contains("message_stop"),
        "{text}"
    );
}

#[test]
fn an_unknown_guardrail_name_is_a_400_naming_it() {
    let raw = upstream();
    let gw = start(&raw);
    let body = chat("hi", json!({"guardrails": ["nope"]}));
    let err = assert_error(&call(&gw, MASTER_KEY, "/v1/chat/completions", &body), 400);
    assert!(
        err["message"].as_str().unwrap().contains("'nope'"),
        "{err:?}"
    );
    assert_eq!(err["param"], "guardrails");
    assert_eq!(raw.requests(), 0);
}

#[test]
fn unsupported_guardrail_types_stop_start_up_naming_them() {
    for (kind, extra) in [("aporia", json!({})), ("guardrails_ai", json!({}))] {
        let mut config = base_config(free_port());
        let mut params = json!({"guardrail": kind, "mode": "pre_call"});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        config["guardrails"] = json!([{"guardrail_name": "corp-pii", "litellm_params": params}]);
        let mut gw = Gateway::spawn(&e2e::to_yaml(&config), &[], free_port(), &[]);
        let status = gw
            .wait_exit(std::time::Duration::from_secs(20))
            .expect("the gateway refuses the config and exits");
        assert!(!status.success());
        let out = gw.output();
        assert!(
            out.contains(&format!("`{kind}`")) && out.contains("corp-pii"),
            "{out}"
        );
    }
}

#[test]
fn post_call_masks_a_responses_answer_relayed_as_it_came() {
    let answer = r#"{"id":"resp_1","object":"response","status":"completed","model":"upstream-gpt","output":[{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"mail ann@example.com","annotations":[]}]}],"usage":{"input_tokens":3,"output_tokens":4,"total_tokens":7}}"#;
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
        answer.len()
    );
    let raw = RawUpstream::start(reply.into_bytes(), false);
    let gw = start(&raw);
    let body = json!({"model": "gpt-4o", "input": "hi", "guardrails": ["answer-mask"]});
    let resp = call(&gw, MASTER_KEY, "/v1/responses", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(
        sent(&raw).contains("/responses"),
        "passed through: {}",
        sent(&raw)
    );
    let got = resp.json();
    assert_eq!(got["object"], "response");
    assert_eq!(
        got["output"][0]["content"][0]["text"],
        "mail [EMAIL_REDACTED]"
    );
    assert_eq!(got["usage"]["output_tokens"], 4);
}

/// `call` on one kept-alive connection: the `local` cache is per core, and
/// one connection stays on one core.
fn call_on(conn: &mut e2e::Conn, key: &str, body: &Value) -> e2e::Response {
    let auth = format!("Bearer {key}");
    conn.roundtrip(&e2e::request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    ))
}

#[test]
fn a_cached_answer_never_skips_a_keys_post_call_guardrail() {
    let raw = upstream();
    let mut config = base_config(free_port());
    config["model_list"][0] = openai_model("gpt-4o", "dep-1", &raw.api_base(), json!({}));
    config["guardrails"] = guardrails();
    config["litellm_settings"] = json!({"cache": true, "cache_params": {"type": "local"}});
    let gw = Gateway::start_json(&config, &[]);
    let made = gw.post("/key/generate", &json!({"guardrails": ["answer-mask"]}));
    let key = made.json()["key"].as_str().unwrap().to_string();
    let body = chat("hello", json!({}));
    let mut conn = gw.connect();
    // The master key, no post_call guardrail: stored, then a hit.
    for _ in 0..2 {
        let resp = call_on(&mut conn, MASTER_KEY, &body);
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    assert_eq!(raw.requests(), 1, "the second answer is the cached one");
    // A key whose guardrails mask answers asks the same on the same core:
    // never the unchecked entry.
    let resp = call_on(&mut conn, &key, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "write to [EMAIL_REDACTED] please"
    );
    assert_eq!(raw.requests(), 2);
}

/// An upstream speaking the Responses API that streams one message whose
/// text comes in `pieces`, as OpenAI frames it: the text in deltas, then
/// whole in the done events and the final response, every event numbered
/// from 0.
fn responses_upstream(pieces: &[&str]) -> RawUpstream {
    let whole: String = pieces.concat();
    let item = |status: &str, text: &str| {
        json!({"id": "msg_1", "type": "message", "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
    };
    let mut evs = vec![
        (
            "response.created",
            json!({"response": {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}}),
        ),
        (
            "response.output_item.added",
            json!({"output_index": 0, "item": item("in_progress", "")}),
        ),
        (
            "response.content_part.added",
            json!({"item_id": "msg_1", "output_index": 0, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}),
        ),
    ];
    for p in pieces {
        evs.push((
            "response.output_text.delta",
            json!({"item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": p}),
        ));
    }
    evs.push((
        "response.output_text.done",
        json!({"item_id": "msg_1", "output_index": 0, "content_index": 0, "text": whole}),
    ));
    evs.push((
        "response.content_part.done",
        json!({"item_id": "msg_1", "output_index": 0, "content_index": 0,
        "part": {"type": "output_text", "text": whole, "annotations": []}}),
    ));
    evs.push((
        "response.output_item.done",
        json!({"output_index": 0, "item": item("completed", &whole)}),
    ));
    evs.push((
        "response.completed",
        json!({"response": {"id": "resp_1", "object": "response", "status": "completed",
        "model": "upstream-gpt", "output": [item("completed", &whole)],
        "usage": {"input_tokens": 3, "output_tokens": 9, "total_tokens": 12}}}),
    ));
    let mut reply =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for (i, (kind, mut data)) in evs.into_iter().enumerate() {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(i);
        let e = format!("event: {kind}\ndata: {data}\n\n");
        reply.extend_from_slice(format!("{:x}\r\n{e}\r\n", e.len()).as_bytes());
    }
    reply.extend_from_slice(b"0\r\n\r\n");
    RawUpstream::start(reply, false)
}

/// Asserts that every event of a Responses stream carries a
/// `sequence_number` one more than the event before it, from 0.
fn assert_numbered(got: &[Value], text: &str) {
    let numbers: Vec<Option<u64>> = got.iter().map(|e| e["sequence_number"].as_u64()).collect();
    let expected: Vec<Option<u64>> = (0..got.len() as u64).map(Some).collect();
    assert_eq!(numbers, expected, "{text}");
}

#[test]
fn post_call_masks_a_responses_stream_its_done_events_and_final_response() {
    let raw = responses_upstream(&[
        "write to bob@exa",
        "mple.com about Project Fal",
        "con, ",
        "bye",
    ]);
    let gw = start(&raw);
    let body =
        json!({"model": "gpt-4o", "input": "hi", "stream": true, "guardrails": ["answer-mask"]});
    let resp = call(&gw, MASTER_KEY, "/v1/responses", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let text = resp.text();
    assert!(!text.contains("bob@") && !text.contains("Fal"), "{text}");
    let got = events(&text);
    let deltas: String = got
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    let masked = "write to [EMAIL_REDACTED] about [KEYWORD_REDACTED], bye";
    assert_eq!(deltas, masked, "{text}");
    let done = got
        .iter()
        .find(|e| e["type"] == "response.output_text.done")
        .expect("done");
    assert_eq!(done["text"], masked);
    let completed = got
        .iter()
        .find(|e| e["type"] == "response.completed")
        .expect("completed");
    assert_eq!(
        completed["response"]["output"][0]["content"][0]["text"], masked,
        "{text}"
    );
    // The held text's delta, added before the done event, has a number
    // of its own: the events after it are renumbered.
    assert_numbered(&got, &text);
}

#[test]
fn a_responses_streams_events_stay_numbered_in_order_through_a_block() {
    let raw = responses_upstream(&["fine so far. ssn 123-4", "5-6789 and more", " text"]);
    let gw = start(&raw);
    let body =
        json!({"model": "gpt-4o", "input": "hi", "stream": true, "guardrails": ["answer-block"]});
    let resp = call(&gw, MASTER_KEY, "/v1/responses", &body);
    assert_eq!(resp.status, 200, "the head was sent: {}", resp.text());
    let text = resp.text();
    assert!(!text.contains("123-4"), "{text}");
    let got = events(&text);
    let last = got.last().expect("events");
    assert_eq!(last["type"], "error", "{text}");
    assert_eq!(last["message"], "Content blocked: us_ssn pattern detected");
    assert_numbered(&got, &text);
}
