//! Providers and client formats end to end: Azure OpenAI and Anthropic
//! deployments on the faithful mocks (`loadgen mock` checks Azure's
//! `api-version` and `api-key`, Anthropic's `x-api-key`,
//! `anthropic-version`, `max_tokens` and unknown fields), and Anthropic's
//! `/v1/messages` served by Anthropic deployments (passed through) and by
//! OpenAI ones (translated), with limits, fallbacks and Anthropic's error
//! shape.

use e2e::{openai_model, to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};

/// The key the Anthropic deployments send upstream.
const ANTHROPIC_KEY: &str = "sk-ant-upstream";
/// The key the Azure deployments send upstream.
const AZURE_KEY: &str = "azure-upstream-key";

fn azure(group: &str, id: &str, mock: &MockServer, extra: Value) -> Value {
    let mut params = json!({
        "model": "azure/my-gpt-deployment",
        "api_base": format!("http://127.0.0.1:{}", mock.port()),
        "api_key": AZURE_KEY,
        "api_version": "2024-10-21",
        "timeout": 10,
    });
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    json!({"model_name": group, "litellm_params": params, "model_info": {"id": id}})
}

fn anthropic(group: &str, id: &str, mock: &MockServer, extra: Value) -> Value {
    let mut params = json!({
        "model": "anthropic/claude-3-5-sonnet-20241022",
        "api_base": format!("http://127.0.0.1:{}", mock.port()),
        "api_key": ANTHROPIC_KEY,
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

/// `POST /v1/messages` with `x-api-key`, as the Anthropic SDK sends it.
fn messages(gw: &Gateway, key: &str, path: &str, body: &Value) -> e2e::http::Response {
    gw.call(
        "POST",
        path,
        &[
            ("x-api-key", key),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

/// The events of an SSE body: (`event:` name, data as JSON or a string).
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

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

fn requests_by_key(mock: &MockServer, key: &str) -> u64 {
    mock.stats()["by_key"][key]["requests"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn azure_chat_stream_and_embeddings_keep_azures_extras() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![
            azure("az", "az-1", &mock, json!({})),
            azure("az-emb", "az-2", &mock, json!({"model": "azure/emb"})),
        ],
        json!({}),
    );
    let resp = chat(&gw, json!({"model": "az", "messages": user("hi")}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["prompt_filter_results"][0]["prompt_index"], 0);
    assert_eq!(
        body["choices"][0]["content_filter_results"]["hate"]["filtered"],
        false
    );
    assert_eq!(
        requests_by_key(&mock, AZURE_KEY),
        1,
        "the key went in api-key"
    );

    let resp = chat(
        &gw,
        json!({"model": "az", "messages": user("hi"), "stream": true}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let evs = events(&resp.text());
    assert_eq!(
        evs[0].1["choices"],
        json!([]),
        "Azure's leading chunk passes"
    );
    assert!(evs[0].1["prompt_filter_results"].is_array());
    assert_eq!(evs.last().unwrap().1, json!("[DONE]"));
    assert!(
        evs.iter()
            .all(|(_, v)| v.get("usage").is_none_or(Value::is_null)),
        "the usage chunk the gateway asked for is not relayed"
    );

    let resp = gw.post(
        "/v1/embeddings",
        &json!({"model": "az-emb", "input": ["a", "b"], "encoding_format": "base64"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp.json()["data"][1]["embedding"].is_string());
}

#[test]
fn azure_content_filter_refusals_are_content_policy_errors() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![
            azure("guarded", "az-g", &mock, json!({})),
            azure("plain", "az-p", &mock, json!({})),
            local("safe", "a safe answer"),
        ],
        json!({"router_settings": {"content_policy_fallbacks": [{"guarded": ["safe"]}]}}),
    );
    let prompt = user("please mock-content-filter this");
    let resp = chat(&gw, json!({"model": "guarded", "messages": prompt}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "a safe answer"
    );
    assert_eq!(resp.header("x-litellm-attempted-fallbacks"), Some("1"));

    let resp = chat(&gw, json!({"model": "plain", "messages": prompt}));
    let err = e2e::assert_error(&resp, 400);
    assert!(
        e2e::error_message(&err).contains("content policy violation"),
        "{err:?}"
    );
}

#[test]
fn anthropic_serves_chat_completions_whole_streamed_and_with_tools() {
    let mock = MockServer::start(&["--completion-tokens", "4"]);
    let gw = start(
        vec![anthropic(
            "claude",
            "ant-1",
            &mock,
            json!({"extra_headers": {"x-mock-cache-read-tokens": "7"}}),
        )],
        json!({}),
    );
    let resp = chat(
        &gw,
        json!({"model": "claude", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "temperature": 0.1, "n": 1}),
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
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 7);
    assert_eq!(requests_by_key(&mock, ANTHROPIC_KEY), 1);

    let resp = chat(
        &gw,
        json!({"model": "claude", "messages": user("hi"), "stream": true, "stream_options": {"include_usage": true}}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
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
    assert!(evs
        .iter()
        .any(|(_, v)| v["choices"][0]["finish_reason"] == "tool_calls"));

    let format = json!({"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object", "properties": {"city": {"type": "string"}}}}});
    let resp = chat(
        &gw,
        json!({"model": "claude", "messages": user("weather?"), "response_format": format}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let choice = &resp.json()["choices"][0];
    assert_eq!(choice["message"]["content"], "{\"city\":\"mock\"}");
    assert_eq!(choice["finish_reason"], "stop");
}

#[test]
fn anthropic_rate_limits_overloads_and_long_prompts_take_their_paths() {
    let mock = MockServer::start(&[]);
    let limited = json!({"extra_headers": {"x-mock-status": "429", "x-mock-retry-after": "7"}});
    let overloaded = json!({"extra_headers": {"x-mock-status": "529"}});
    let gw = start(
        vec![
            anthropic("limited", "ant-429", &mock, limited),
            anthropic("busy", "ant-529", &mock, overloaded),
            anthropic("claude", "ant-ok", &mock, json!({})),
            local("bigger", "from the bigger model"),
            local("spare", "from the spare"),
        ],
        json!({"router_settings": {
            "num_retries": 1, "retry_after": 0,
            "fallbacks": [{"busy": ["spare"]}],
            "context_window_fallbacks": [{"claude": ["bigger"]}],
        }}),
    );
    let resp = chat(
        &gw,
        json!({"model": "limited", "messages": user("hi"), "num_retries": 0}),
    );
    let err = e2e::assert_error(&resp, 429);
    assert_eq!(err["type"], "rate_limit_error");
    assert_eq!(resp.header("retry-after"), Some("7"));

    let resp = chat(&gw, json!({"model": "busy", "messages": user("hi")}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "from the spare"
    );
    assert_eq!(
        resp.header("x-litellm-attempted-retries"),
        Some("1"),
        "529 is retried"
    );

    let resp = chat(
        &gw,
        json!({"model": "claude", "messages": user("mock-context-window")}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "from the bigger model"
    );
}

#[test]
fn messages_pass_through_to_anthropic_with_the_deployments_key() {
    let mock = MockServer::start(&["--completion-tokens", "3"]);
    let gw = start(
        vec![anthropic("claude", "ant-1", &mock, json!({}))],
        json!({}),
    );
    let body =
        json!({"model": "claude", "max_tokens": 100, "system": "be brief", "messages": user("hi")});
    let resp = messages(&gw, MASTER_KEY, "/v1/messages", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let msg = resp.json();
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["model"], "claude-3-5-sonnet-20241022");
    assert_eq!(msg["content"][0]["text"], "lorem ipsum dolor");
    assert_eq!(requests_by_key(&mock, ANTHROPIC_KEY), 1);
    assert_eq!(
        requests_by_key(&mock, MASTER_KEY),
        0,
        "never the client's key"
    );

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let resp = messages(&gw, MASTER_KEY, "/messages", &streamed);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let names: Vec<String> = events(&resp.text()).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.first().map(String::as_str), Some("message_start"));
    assert_eq!(names.last().map(String::as_str), Some("message_stop"));
    assert!(names.iter().any(|n| n == "ping"), "{names:?}");

    let resp = messages(
        &gw,
        MASTER_KEY,
        "/v1/messages/count_tokens",
        &json!({"model": "claude", "messages": user("abcdefgh")}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json(), json!({"input_tokens": 2}));

    // Anthropic's own refusal passes in Anthropic's shape.
    let resp = messages(
        &gw,
        MASTER_KEY,
        "/v1/messages",
        &json!({"model": "claude", "messages": user("hi")}),
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert_eq!(resp.json()["type"], "error");
    assert_eq!(
        resp.json()["error"]["message"],
        "max_tokens: Field required"
    );
}

#[test]
fn messages_to_an_openai_deployment_are_translated_both_ways() {
    let mock = MockServer::start(&["--completion-tokens", "3"]);
    let gw = start(
        vec![openai_model("gpt-4o", "oa-1", &mock.api_base(), json!({}))],
        json!({}),
    );
    let body = json!({"model": "gpt-4o", "max_tokens": 100, "system": [{"type": "text", "text": "be brief"}], "messages": user("hi")});
    let resp = messages(&gw, MASTER_KEY, "/v1/messages", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let msg = resp.json();
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["role"], "assistant");
    assert_eq!(
        msg["content"][0],
        json!({"type": "text", "text": "lorem ipsum dolor"})
    );
    assert_eq!(msg["stop_reason"], "end_turn");
    assert_eq!(msg["usage"]["output_tokens"], 3);

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let resp = messages(&gw, MASTER_KEY, "/v1/messages", &streamed);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let evs = events(&resp.text());
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(evs[6].1["usage"]["output_tokens"], 3);
    assert_eq!(evs[6].1["delta"]["stop_reason"], "end_turn");

    let resp = messages(
        &gw,
        MASTER_KEY,
        "/v1/messages/count_tokens",
        &json!({"model": "gpt-4o", "messages": user("abcdefgh")}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json(), json!({"input_tokens": 2}));
}

#[test]
fn messages_errors_take_anthropics_shape_and_limits_apply() {
    let gw = start(
        vec![local("m", "hello")],
        json!({"gateway_settings": {"virtual_keys": [{"key": "sk-one-per-minute", "rpm_limit": 1}]}}),
    );
    let body = json!({"model": "m", "max_tokens": 10, "messages": user("hi")});
    let resp = messages(&gw, "sk-not-a-key", "/v1/messages", &body);
    assert_eq!(resp.status, 401, "{}", resp.text());
    assert_eq!(resp.json()["type"], "error");
    assert_eq!(resp.json()["error"]["type"], "authentication_error");

    let resp = messages(&gw, "sk-one-per-minute", "/v1/messages", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["content"][0]["text"], "hello");
    let resp = messages(&gw, "sk-one-per-minute", "/v1/messages", &body);
    assert_eq!(resp.status, 429, "{}", resp.text());
    assert_eq!(resp.json()["error"]["type"], "rate_limit_error");

    let resp = messages(
        &gw,
        MASTER_KEY,
        "/v1/messages",
        &json!({"model": "nope", "max_tokens": 1, "messages": []}),
    );
    assert_eq!(resp.status, 400);
    assert_eq!(resp.json()["error"]["type"], "invalid_request_error");
    let resp = messages(
        &gw,
        MASTER_KEY,
        "/v1/messages",
        &json!({"model": "m", "messages": "hi"}),
    );
    assert_eq!(resp.status, 400);
    assert_eq!(resp.json()["type"], "error");
}
