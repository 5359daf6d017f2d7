//! Gemini (AI Studio) deployments end to end on the faithful mock
//! (`loadgen mock` checks the API key, `alt=sse`, the contents' rules and
//! unknown fields, answers in Gemini's shapes): chat completions whole,
//! streamed and with tools, Anthropic's `/v1/messages` translated, a wrong
//! key, rate limits and long prompts.

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};

/// The mock's API key (`loadgen/src/mock/api/gemini.rs`).
const KEY: &str = "mock-gemini-api-key";

fn gemini(group: &str, id: &str, mock: &MockServer, extra: Value) -> Value {
    let mut params = json!({
        "model": "gemini/gemini-2.0-flash",
        "api_base": format!("http://127.0.0.1:{}", mock.port()),
        "api_key": KEY,
        "timeout": 10,
    });
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    json!({"model_name": group, "litellm_params": params, "model_info": {"id": id}})
}

fn local(group: &str, reply: &str) -> Value {
    json!({"model_name": group, "litellm_params": {"model": "mock/local", "mock_response": reply}})
}

fn start(models: Vec<Value>, extra: Value) -> Gateway {
    let mut config = json!({
        "model_list": models,
        "general_settings": {"master_key": MASTER_KEY},
    });
    if let (Some(c), Value::Object(extra)) = (config.as_object_mut(), extra) {
        c.extend(extra);
    }
    Gateway::start(&to_yaml(&config), &[])
}

fn chat(gw: &Gateway, body: Value) -> e2e::http::Response {
    gw.post("/v1/chat/completions", &body)
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// The data of each SSE event, as JSON (or a string for `[DONE]`).
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = String::new();
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            let value = serde_json::from_str(&data).unwrap_or(Value::String(data));
            (name, value)
        })
        .collect()
}

#[test]
fn gemini_serves_chat_completions_whole_streamed_and_with_tools() {
    let mock = MockServer::start(&["--completion-tokens", "4"]);
    let gw = start(vec![gemini("claude", "gm-1", &mock, json!({}))], json!({}));
    let resp = chat(
        &gw,
        json!({"model": "claude", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "temperature": 0.1, "max_tokens": 50}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "lorem ipsum dolor sit"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["completion_tokens"], 4);
    assert_eq!(body["model"], "gemini-2.0-flash");

    let resp = chat(
        &gw,
        json!({"model": "claude", "messages": user("hi"), "stream": true, "stream_options": {"include_usage": true}}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream")));
    let evs = events(&resp.text());
    let text: String = evs
        .iter()
        .filter_map(|(_, v)| v["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "lorem ipsum dolor sit");
    let usage = evs
        .iter()
        .find_map(|(_, v)| v.get("usage").filter(|u| u.is_object()))
        .expect("usage chunk");
    assert_eq!(usage["completion_tokens"], 4);
    assert_eq!(evs.last().unwrap().1, json!("[DONE]"));

    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let resp = chat(
        &gw,
        json!({"model": "claude", "messages": user("weather?"), "tools": tools, "tool_choice": "required"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let choice = &resp.json()["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "mock"}));

    let resp = chat(
        &gw,
        json!({"model": "claude", "messages": user("weather?"), "tools": tools, "tool_choice": "required", "stream": true}),
    );
    let evs = events(&resp.text());
    let args: String = evs
        .iter()
        .filter_map(|(_, v)| {
            v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"city": "mock"})
    );

    // Anthropic's Messages API, through the internal form.
    let resp = gw.call(
        "POST",
        "/v1/messages",
        &[
            ("x-api-key", MASTER_KEY),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
        ],
        json!({"model": "claude", "max_tokens": 20, "messages": user("hi")})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let msg = resp.json();
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["content"][0]["text"], "lorem ipsum dolor sit");
    assert_eq!(msg["usage"]["output_tokens"], 4);
}

#[test]
fn gemini_wrong_keys_rate_limits_and_long_prompts_take_their_paths() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![
            gemini(
                "wrong-key",
                "gm-bad",
                &mock,
                json!({"api_key": "not-the-key"}),
            ),
            gemini(
                "throttled",
                "gm-429",
                &mock,
                json!({"extra_headers": {"x-mock-status": "429"}}),
            ),
            gemini("claude", "gm-ok", &mock, json!({})),
            local("bigger", "from the bigger model"),
        ],
        json!({"router_settings": {
            "num_retries": 0, "retry_after": 0,
            "context_window_fallbacks": [{"claude": ["bigger"]}],
        }}),
    );
    let resp = chat(&gw, json!({"model": "wrong-key", "messages": user("hi")}));
    let err = e2e::assert_error(&resp, 400);
    assert!(
        err["message"]
            .as_str()
            .is_some_and(|m| m.contains("API key not valid")),
        "{err:?}"
    );

    let resp = chat(&gw, json!({"model": "throttled", "messages": user("hi")}));
    let err = e2e::assert_error(&resp, 429);
    assert_eq!(err["type"], "RESOURCE_EXHAUSTED");

    let resp = chat(
        &gw,
        json!({"model": "claude", "messages": user("mock-context-window")}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "from the bigger model"
    );

    let resp = chat(
        &gw,
        json!({"model": "claude", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]}),
    );
    e2e::assert_error(&resp, 400);
}

#[test]
fn gemini_embeddings_use_batch_embed_contents() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![gemini(
            "embed",
            "gm-embed",
            &mock,
            json!({"model": "gemini/text-embedding-004"}),
        )],
        json!({}),
    );
    let resp = gw.post(
        "/v1/embeddings",
        &json!({"model": "embed", "input": ["one", "two"], "dimensions": 8}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["object"], "list");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["index"], 1);
    assert_eq!(data[1]["embedding"].as_array().unwrap().len(), 8);
    assert!(body["usage"].is_object());
    let resp = gw.post(
        "/v1/embeddings",
        &json!({"model": "embed", "input": [[1, 2, 3]]}),
    );
    e2e::assert_error(&resp, 400);
    assert_eq!(mock.stats()["requests"], 1);
}
