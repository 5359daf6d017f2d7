//! Cohere deployments end to end on the faithful mock (`loadgen mock`
//! checks the Bearer key, the v2 paths, `model`, Cohere's own fields,
//! `input_type` for v3 embedding models, and answers in Cohere's shapes
//! and named SSE events): chat whole, streamed and with tools, OpenAI's
//! Responses API and Anthropic's
//! `/v1/messages` translated, embeddings (float and base64), spend from
//! the billed units, a wrong key, a rate limit and a long prompt.

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};

/// The mock's API key (`loadgen/src/mock/api/cohere.rs`).
const KEY: &str = "mock-cohere-api-key";

fn cohere(group: &str, id: &str, model: &str, mock: &MockServer, extra: Value) -> Value {
    let mut params = json!({
        "model": model,
        "api_base": format!("http://127.0.0.1:{}/v2/chat", mock.port()),
        "api_key": KEY,
        "timeout": 10,
    });
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    json!({"model_name": group, "litellm_params": params, "model_info": {"id": id}})
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

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// The data of each SSE event, as JSON (or a string for `[DONE]`).
fn events(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let data: String = e.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
            serde_json::from_str(&data).unwrap_or(Value::String(data))
        })
        .collect()
}

#[test]
fn cohere_serves_chat_whole_streamed_with_tools_and_as_messages() {
    let mock = MockServer::start(&["--completion-tokens", "4"]);
    let gw = start(
        vec![cohere(
            "command",
            "co-1",
            "cohere/command-r-08-2024",
            &mock,
            json!({}),
        )],
        json!({}),
    );
    let resp = gw.post(
        "/v1/chat/completions",
        &json!({"model": "command", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}], "temperature": 0.1, "top_p": 0.9, "stop": ["END"], "max_tokens": 50}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    let body = resp.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "lorem ipsum dolor sit"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let usage = &body["usage"];
    assert_eq!(usage["completion_tokens"], 4);
    // The billed units (the mock's template tokens are not billed).
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 0 && prompt < 64, "{usage}");
    let row = gw.spend_row(&call_id);
    let expected = prompt as f64 * 1.5e-7 + 4.0 * 6e-7;
    assert!(
        (row["spend"].as_f64().unwrap() - expected).abs() < 1e-12,
        "{row}"
    );
    assert_eq!(row["custom_llm_provider"], "cohere");

    let resp = gw.post(
        "/v1/chat/completions",
        &json!({"model": "command", "messages": user("hi"), "stream": true, "stream_options": {"include_usage": true}}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream")));
    let evs = events(&resp.text());
    let text: String = evs
        .iter()
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "lorem ipsum dolor sit");
    let usage = evs
        .iter()
        .find_map(|v| v.get("usage").filter(|u| u.is_object()))
        .expect("usage chunk");
    assert_eq!(usage["completion_tokens"], 4);
    assert_eq!(evs.last().unwrap(), &json!("[DONE]"));

    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let resp = gw.post(
        "/v1/chat/completions",
        &json!({"model": "command", "messages": user("weather?"), "tools": tools, "tool_choice": "required"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let choice = &resp.json()["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    assert_eq!(call["function"]["arguments"], "{\"city\":\"mock\"}");
    // The tool's answer goes back as a tool turn, streamed this time.
    let resp = gw.post(
        "/v1/chat/completions",
        &json!({"model": "command", "stream": true, "tools": tools, "messages": [
            {"role": "user", "content": "weather? mock-tool-use"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
        ]}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let evs = events(&resp.text());
    let args: String = evs
        .iter()
        .filter_map(|v| v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(args, "{\"city\":\"mock\"}");
    assert!(evs
        .iter()
        .any(|v| v["choices"][0]["finish_reason"] == "tool_calls"));

    let resp = gw.call(
        "POST",
        "/v1/messages",
        &[
            ("x-api-key", MASTER_KEY),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
        ],
        json!({"model": "command", "max_tokens": 20, "messages": user("hi")})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let msg = resp.json();
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["content"][0]["text"], "lorem ipsum dolor sit");
    assert_eq!(msg["usage"]["output_tokens"], 4);

    // OpenAI's Responses API, bridged through chat completions.
    let resp = gw.post(
        "/v1/responses",
        &json!({"model": "command", "input": "hi", "instructions": "be brief"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["object"], "response");
    assert_eq!(
        body["output"][0]["content"][0]["text"],
        "lorem ipsum dolor sit"
    );
    assert_eq!(body["usage"]["output_tokens"], 4);
    let resp = gw.post(
        "/v1/responses",
        &json!({"model": "command", "input": "hi", "stream": true}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let text = resp.text();
    assert!(text.contains("response.output_text.delta"), "{text}");
    assert!(text.contains("response.completed"), "{text}");
}

#[test]
fn cohere_embeddings_take_input_types_and_encodings() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![cohere(
            "embed",
            "co-e",
            "cohere/embed-english-v3.0",
            &mock,
            json!({}),
        )],
        json!({}),
    );
    let resp = gw.post(
        "/v1/embeddings",
        &json!({"model": "embed", "input": ["first text", "second"], "input_type": "search_query"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    let body = resp.json();
    assert_eq!(body["object"], "list");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["index"], 1);
    assert_eq!(data[0]["embedding"].as_array().unwrap().len(), 8);
    let tokens = body["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(tokens > 0);
    let row = gw.spend_row(&call_id);
    assert!(
        (row["spend"].as_f64().unwrap() - tokens as f64 * 1e-7).abs() < 1e-12,
        "{row}"
    );

    // The OpenAI SDK's default: base64 vectors (little-endian f32s).
    let resp = gw.post(
        "/v1/embeddings",
        &json!({"model": "embed", "input": "one", "encoding_format": "base64"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let b64 = resp.json()["data"][0]["embedding"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(b64.len(), 44, "8 f32s: {b64}");

    let resp = gw.post(
        "/v1/embeddings",
        &json!({"model": "embed", "input": "x", "input_type": "bogus"}),
    );
    let err = e2e::assert_error(&resp, 400);
    assert_eq!(err["param"], "input_type");
}

#[test]
fn cohere_errors_take_their_classes() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![
            cohere(
                "wrong-key",
                "co-bad",
                "cohere/command-r",
                &mock,
                json!({"api_key": "nope"}),
            ),
            cohere(
                "throttled",
                "co-429",
                "cohere/command-r",
                &mock,
                json!({"extra_headers": {"x-mock-status": "429"}}),
            ),
            cohere("command", "co-ok", "cohere/command-r", &mock, json!({})),
            json!({"model_name": "bigger", "litellm_params": {"model": "mock/local", "mock_response": "from the bigger model"}}),
        ],
        json!({"router_settings": {
            "num_retries": 0, "retry_after": 0,
            "context_window_fallbacks": [{"command": ["bigger"]}],
        }}),
    );
    let resp = gw.post(
        "/v1/chat/completions",
        &json!({"model": "wrong-key", "messages": user("hi")}),
    );
    let err = e2e::assert_error(&resp, 401);
    assert_eq!(err["message"], "invalid api token");
    let resp = gw.post(
        "/v1/chat/completions",
        &json!({"model": "throttled", "messages": user("hi")}),
    );
    e2e::assert_error(&resp, 429);
    let resp = gw.post(
        "/v1/chat/completions",
        &json!({"model": "command", "messages": user("mock-context-window")}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "from the bigger model"
    );
}

#[test]
fn rerank_is_served_on_cohere_with_spend_per_search_unit_and_key_limits() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![
            cohere("reranker", "co-r", "cohere/rerank-v3.5", &mock, json!({})),
            json!({"model_name": "chatty", "litellm_params": {"model": "openai/gpt-4o", "api_key": "k", "api_base": mock.api_base()}}),
        ],
        json!({}),
    );
    let mut docs: Vec<String> = (0..120).map(|i| format!("document number {i}")).collect();
    docs[42] = "Paris is the capital of France".into();
    let body = json!({"model": "reranker", "query": "capital of France", "documents": docs, "top_n": 2, "return_documents": false});
    let resp = gw.post("/v1/rerank", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    let answer = resp.json();
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["index"], 42);
    assert!(
        results[0]["relevance_score"].as_f64().unwrap()
            > results[1]["relevance_score"].as_f64().unwrap()
    );
    assert_eq!(answer["meta"]["billed_units"]["search_units"], 2);
    let row = gw.spend_row(&call_id);
    assert!(
        (row["spend"].as_f64().unwrap() - 2.0 * 0.002).abs() < 1e-12,
        "two search units at rerank-v3.5's 0.002: {row}"
    );
    assert_eq!(row["call_type"], "arerank");

    // LiteLLM's other paths, and documents given as objects.
    for path in ["/rerank", "/v2/rerank"] {
        let resp = gw.post(
            path,
            &json!({"model": "reranker", "query": "q", "documents": [{"text": "a"}, "b"]}),
        );
        assert_eq!(resp.status, 200, "{path}: {}", resp.text());
        assert_eq!(resp.json()["results"].as_array().unwrap().len(), 2);
    }

    let err = e2e::assert_error(
        &gw.post(
            "/v1/rerank",
            &json!({"model": "reranker", "documents": ["a"]}),
        ),
        400,
    );
    assert_eq!(err["param"], "query");
    // A stream would dodge the search units' spend: refused.
    let err = e2e::assert_error(
        &gw.post(
            "/v1/rerank",
            &json!({"model": "reranker", "query": "q", "documents": ["a"], "stream": true}),
        ),
        400,
    );
    assert_eq!(err["param"], "stream");
    let err = e2e::assert_error(
        &gw.post(
            "/v1/rerank",
            &json!({"model": "chatty", "query": "q", "documents": ["a"]}),
        ),
        400,
    );
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("does not serve /rerank"),
        "{err:?}"
    );
    let resp = gw.call(
        "POST",
        "/v1/rerank",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    e2e::assert_error(&resp, 401);

    // A key's limits apply as on every LLM route.
    let key = gw.post(
        "/key/generate",
        &json!({"rpm_limit": 1, "models": ["reranker"]}),
    );
    assert_eq!(key.status, 200, "{}", key.text());
    let key = key.json()["key"].as_str().unwrap().to_string();
    let auth = format!("Bearer {key}");
    let rerank = || {
        gw.call(
            "POST",
            "/v1/rerank",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            json!({"model": "reranker", "query": "q", "documents": ["a"]})
                .to_string()
                .as_bytes(),
        )
    };
    assert_eq!(rerank().status, 200);
    e2e::assert_error(&rerank(), 429);
}
