//! The OpenAI-compatible API surface: chat (plain and streamed), completions,
//! embeddings, models, paths without `/v1`, health and the three auth headers.

use std::time::Instant;

use e2e::config::{add_model, UPSTREAM_KEY};
use e2e::{base_config, chat_body, openai_model, request, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};

fn start() -> (MockServer, Gateway) {
    let mock = MockServer::start(&[]);
    let gw = Gateway::start_json(&base_config(mock.port()), &[]);
    (mock, gw)
}

fn assert_usage(body: &Value) {
    let usage = &body["usage"];
    for field in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert!(
            usage[field].as_u64().is_some(),
            "usage.{field} missing in {body}"
        );
    }
}

#[test]
fn chat_through_openai_compatible_upstream() {
    let mock = MockServer::start(&[]);
    // Hand-written YAML in the LiteLLM format, comments and all.
    let config = format!(
        r#"# e2e: one OpenAI-compatible deployment
model_list:
  - model_name: gpt-4o                 # the model group clients ask for
    litellm_params:
      model: openai/upstream-gpt       # provider/upstream-model
      api_base: http://127.0.0.1:{port}/v1
      api_key: {UPSTREAM_KEY}
      timeout: 5
      extra_headers: {{x-mock-latency-ms: "0"}}
    model_info: {{id: dep-1}}
general_settings:
  master_key: {MASTER_KEY}
"#,
        port = mock.port()
    );
    let gw = Gateway::start(&config, &[]);

    let resp = gw.post("/v1/chat/completions", &chat_body("gpt-4o"));
    let body = resp.clone().expect_status(200).json();
    assert_eq!(body["model"], "upstream-gpt", "model not rewritten: {body}");
    assert_eq!(body["object"], "chat.completion", "{body}");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant", "{body}");
    assert!(
        body["choices"][0]["message"]["content"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "no content in {body}"
    );
    assert_usage(&body);

    let header = |name: &str| {
        resp.header(name)
            .unwrap_or_else(|| panic!("missing header {name}; headers {:?}", resp.headers))
            .to_string()
    };
    assert!(!header("x-litellm-call-id").is_empty());
    assert_eq!(header("x-litellm-model-group"), "gpt-4o");
    assert_eq!(header("x-litellm-model-id"), "dep-1");
    assert!(
        header("x-litellm-model-api-base").contains(&format!("127.0.0.1:{}", mock.port())),
        "x-litellm-model-api-base = {}",
        header("x-litellm-model-api-base")
    );
    for name in [
        "x-litellm-response-duration-ms",
        "x-litellm-overhead-duration-ms",
    ] {
        let v = header(name);
        assert!(
            v.parse::<f64>().is_ok_and(|ms| ms >= 0.0),
            "{name} is not a duration in ms: {v:?}"
        );
    }
    assert!(!header("x-litellm-version").is_empty());

    // The upstream saw the deployment's key, not the client's.
    let stats = mock.stats();
    assert!(
        stats["by_key"].get(UPSTREAM_KEY).is_some(),
        "mock did not receive Bearer {UPSTREAM_KEY}: {stats}"
    );
    assert!(
        stats["by_key"].get(MASTER_KEY).is_none(),
        "the client's key leaked upstream: {stats}"
    );
}

#[test]
fn chat_through_builtin_mock_provider() {
    let (_mock, gw) = start();
    let resp = gw.post("/v1/chat/completions", &chat_body("local-mock"));
    let body = resp.clone().expect_status(200).json();
    assert_eq!(
        body["choices"][0]["message"]["content"], "Hello from the mock",
        "{body}"
    );
    assert_eq!(resp.header("x-litellm-model-group"), Some("local-mock"));
    assert_eq!(resp.header("x-litellm-model-id"), Some("local-1"));
    assert!(resp.header("x-litellm-call-id").is_some());
}

#[test]
fn streaming_chat_is_incremental_and_ends_with_done() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model(
            "gpt-4o-slow",
            "dep-slow",
            &mock.api_base(),
            json!({"extra_headers": {"x-mock-chunk-delay-ms": "100", "x-mock-completion-tokens": "10"}}),
        ),
    );
    let gw = Gateway::start_json(&config, &[]);

    let mut body = chat_body("gpt-4o-slow");
    body["stream"] = json!(true);
    let auth = format!("Bearer {MASTER_KEY}");
    let mut conn = gw.connect();
    let started = Instant::now();
    conn.send(&request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    ));
    let head = conn.read_head().expect("response head");
    assert_eq!(head.status, 200, "{head:?}");
    assert!(
        head.header("content-type")
            .is_some_and(|v| v.starts_with("text/event-stream")),
        "{head:?}"
    );
    assert!(
        head.header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked")),
        "stream is not chunked: {head:?}"
    );
    assert_eq!(head.header("x-litellm-model-group"), Some("gpt-4o-slow"));
    assert_eq!(head.header("x-litellm-model-id"), Some("dep-slow"));

    let events = conn.sse(&head).collect_timed().expect("read events");
    let (last, last_at) = events.last().cloned().expect("no events");
    assert_eq!(last, "[DONE]", "stream must end with [DONE]");
    let mut text = String::new();
    for (data, _) in &events[..events.len() - 1] {
        let chunk: Value = serde_json::from_str(data)
            .unwrap_or_else(|e| panic!("event is not JSON ({e}): {data}"));
        assert_eq!(chunk["object"], "chat.completion.chunk", "{chunk}");
        assert_eq!(chunk["model"], "upstream-gpt", "{chunk}");
        if let Some(s) = chunk["choices"][0]["delta"]["content"].as_str() {
            text.push_str(s);
        }
    }
    assert!(!text.is_empty(), "no delta content in {events:?}");
    assert!(events.len() >= 4, "too few events: {events:?}");

    // Relayed as they arrive: the first event well before the last.
    let first = events[0].1.duration_since(started);
    let total = last_at.duration_since(started);
    assert!(
        first < total / 2,
        "first event after {first:?} of {total:?}: the stream was buffered"
    );
}

#[test]
fn text_completions() {
    let (_mock, gw) = start();
    let resp = gw.post(
        "/v1/completions",
        &json!({"model": "gpt-4o", "prompt": "Say hello", "max_tokens": 5}),
    );
    let body = resp.clone().expect_status(200).json();
    assert_eq!(body["model"], "upstream-gpt", "{body}");
    assert_eq!(body["object"], "text_completion", "{body}");
    assert!(body["choices"][0]["text"].is_string(), "{body}");
    assert_usage(&body);
    assert_eq!(resp.header("x-litellm-model-group"), Some("gpt-4o"));
}

#[test]
fn embeddings() {
    let (_mock, gw) = start();
    let resp = gw.post(
        "/v1/embeddings",
        &json!({"model": "gpt-4o", "input": ["first text", "second text"]}),
    );
    let body = resp.clone().expect_status(200).json();
    assert_eq!(body["object"], "list", "{body}");
    assert_eq!(body["model"], "upstream-gpt", "{body}");
    let data = body["data"].as_array().expect("data array");
    assert_eq!(data.len(), 2, "one embedding per input: {body}");
    for (i, item) in data.iter().enumerate() {
        assert_eq!(item["index"], i, "{body}");
        let vector = item["embedding"].as_array().expect("embedding array");
        assert!(
            !vector.is_empty() && vector.iter().all(Value::is_number),
            "{body}"
        );
    }
    assert!(body["usage"]["prompt_tokens"].is_u64(), "{body}");
    assert_eq!(resp.header("x-litellm-model-group"), Some("gpt-4o"));
}

#[test]
fn models_list_and_lookup() {
    let (_mock, gw) = start();
    let body = gw.get("/v1/models").expect_status(200).json();
    assert_eq!(body["object"], "list", "{body}");
    let data = body["data"].as_array().expect("data array");
    let ids: Vec<&str> = data.iter().filter_map(|m| m["id"].as_str()).collect();
    assert!(ids.contains(&"gpt-4o"), "{body}");
    assert!(ids.contains(&"local-mock"), "{body}");
    assert!(data.iter().all(|m| m["object"] == "model"), "{body}");

    let one = gw.get("/v1/models/gpt-4o").expect_status(200).json();
    assert_eq!(one["id"], "gpt-4o", "{one}");
    assert_eq!(one["object"], "model", "{one}");

    let missing = gw.get("/v1/models/no-such-model");
    e2e::assert_error(&missing, 404);
}

#[test]
fn paths_without_v1_prefix() {
    let (_mock, gw) = start();
    let chat = gw.post("/chat/completions", &chat_body("gpt-4o"));
    assert_eq!(chat.expect_status(200).json()["model"], "upstream-gpt");
    let completion = gw.post(
        "/completions",
        &json!({"model": "gpt-4o", "prompt": "Say hello"}),
    );
    assert!(completion.expect_status(200).json()["choices"][0]["text"].is_string());
    let emb = gw.post("/embeddings", &json!({"model": "gpt-4o", "input": "x"}));
    assert!(emb.expect_status(200).json()["data"][0]["embedding"].is_array());
    let models = gw.get("/models").expect_status(200).json();
    assert_eq!(models["object"], "list");
    let one = gw.get("/models/local-mock").expect_status(200).json();
    assert_eq!(one["id"], "local-mock");
    e2e::assert_error(&gw.get("/models/no-such-model"), 404);
}

#[test]
fn health_endpoints_need_no_auth() {
    let (_mock, gw) = start();
    for path in ["/health/liveliness", "/health/readiness"] {
        let resp = gw.call("GET", path, &[], b"");
        assert_eq!(resp.status, 200, "{path}: {}", resp.text());
    }
}

#[test]
fn auth_by_each_header() {
    let (_mock, gw) = start();
    let bearer = format!("Bearer {MASTER_KEY}");
    let body = chat_body("local-mock").to_string();
    for (name, value) in [
        ("Authorization", bearer.as_str()),
        ("api-key", MASTER_KEY),
        ("x-api-key", MASTER_KEY),
    ] {
        let resp = gw.call(
            "POST",
            "/v1/chat/completions",
            &[(name, value), ("Content-Type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(resp.status, 200, "auth via {name}: {}", resp.text());
        assert_eq!(
            resp.json()["choices"][0]["message"]["content"],
            "Hello from the mock"
        );
    }
}
