//! The router on real sockets: retries across deployments, fallbacks with a
//! record of every attempt, no retry after the first streamed byte,
//! cooldowns, and region constraints that fail closed.

use e2e::{chat_body, openai_model, to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// An OpenAI-compatible deployment on the mock, asking it for `upstream`.
fn deployment(group: &str, id: &str, api_base: &str, upstream: &str, extra: Value) -> Value {
    let mut entry = openai_model(group, id, api_base, extra);
    entry["litellm_params"]["model"] = json!(format!("openai/{upstream}"));
    entry
}

/// An api_base nothing listens on.
fn dead_base() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/v1")
}

fn start(models: Vec<Value>, router_settings: Value) -> Gateway {
    let config = json!({
        "model_list": models,
        "router_settings": router_settings,
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start(&to_yaml(&config), &[])
}

fn chat(gw: &Gateway, model: &str) -> e2e::http::Response {
    gw.post("/v1/chat/completions", &chat_body(model))
}

fn served_by_model(mock: &MockServer, upstream: &str) -> u64 {
    mock.stats()["by_model"][upstream]["requests"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn a_dead_deployment_is_retried_on_a_healthy_one() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![
            deployment("chat", "dead", &dead_base(), "dead-model", json!({})),
            deployment("chat", "alive", &mock.api_base(), "alive-model", json!({})),
        ],
        json!({"num_retries": 2, "retry_after": 0}),
    );
    for _ in 0..10 {
        let resp = chat(&gw, "chat");
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.header("x-litellm-model-id"), Some("alive"));
    }
    assert_eq!(served_by_model(&mock, "alive-model"), 10);
}

#[test]
fn a_dead_primary_falls_back_and_both_attempts_are_recorded() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![
            deployment("chat-deep", "deep", &dead_base(), "deep-model", json!({})),
            deployment(
                "chat-fast",
                "fast",
                &mock.api_base(),
                "fast-model",
                json!({}),
            ),
        ],
        json!({"num_retries": 0, "fallbacks": [{"chat-deep": ["chat-fast"]}]}),
    );
    let mut call_ids = Vec::new();
    for _ in 0..10 {
        let resp = chat(&gw, "chat-deep");
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.header("x-litellm-model-group"), Some("chat-fast"));
        assert_eq!(resp.header("x-litellm-attempted-fallbacks"), Some("1"));
        call_ids.push(resp.header("x-litellm-call-id").unwrap().to_string());
    }
    for call_id in call_ids {
        let rows = e2e::eventually("both attempts' rows", Duration::from_secs(5), || {
            let rows = gw.get(&format!("/spend/logs?request_id={call_id}")).json();
            (rows.as_array().map_or(0, Vec::len) >= 2).then_some(rows)
        });
        let rows = rows.as_array().expect("rows");
        assert_eq!(rows.len(), 2, "one row per attempt: {rows:?}");
        let failed = rows
            .iter()
            .find(|r| r["model_group"] == "chat-deep")
            .expect("the failed primary's row");
        assert_eq!(failed["status"], "failure");
        assert_eq!(failed["error_class"], "api_connection");
        assert_eq!(failed["model_id"], "deep");
        let served = rows
            .iter()
            .find(|r| r["model_group"] == "chat-fast")
            .expect("the fallback's row");
        assert_eq!(served["status"], "success");
        assert_eq!(served["attempt"], 2);
    }
}

#[test]
fn nothing_is_retried_after_the_first_streamed_byte() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![
            deployment(
                "chat",
                "breaks",
                &mock.api_base(),
                "breaks",
                json!({"extra_headers": {"x-mock-fault": "close-mid-body"}}),
            ),
            deployment("backup", "backup", &mock.api_base(), "backup", json!({})),
        ],
        json!({"num_retries": 3, "fallbacks": [{"chat": ["backup"]}]}),
    );
    let mut body = chat_body("chat");
    body["stream"] = json!(true);
    let auth = format!("Bearer {MASTER_KEY}");
    let mut conn = gw.connect();
    conn.send(&e2e::request(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", &auth)],
        body.to_string().as_bytes(),
    ));
    let head = conn.read_head().expect("response head");
    assert_eq!(head.status, 200);
    let mut events = Vec::new();
    let mut sse = conn.sse(&head);
    while let Ok(Some(event)) = sse.next_event() {
        events.push(event);
    }
    assert!(!events.is_empty(), "some events arrived before the cut");
    assert!(
        !events.iter().any(|e| e.contains("[DONE]")),
        "the stream was cut, not completed elsewhere: {events:?}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        served_by_model(&mock, "backup"),
        0,
        "no fallback after bytes reached the client"
    );
}

#[test]
fn a_rate_limited_deployment_cools_down_and_traffic_moves() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![
            deployment(
                "chat",
                "limited",
                &mock.api_base(),
                "limited",
                json!({"extra_headers": {"x-mock-status": "429"}}),
            ),
            deployment("chat", "healthy", &mock.api_base(), "healthy", json!({})),
        ],
        json!({"num_retries": 2, "retry_after": 0, "cooldown_time": 30}),
    );
    for _ in 0..20 {
        let resp = chat(&gw, "chat");
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.header("x-litellm-model-id"), Some("healthy"));
    }
    let stats = mock.stats();
    let limited_calls = stats["requests"].as_u64().unwrap() - served_by_model(&mock, "healthy");
    assert!(
        limited_calls <= 1,
        "the 429 deployment kept getting traffic: {stats}"
    );
}

#[test]
fn a_region_constraint_fails_closed_when_no_deployment_is_in_region() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![
            deployment(
                "chat",
                "us-1",
                &mock.api_base(),
                "us-model",
                json!({"region_name": "us"}),
            ),
            deployment(
                "chat",
                "eu-1",
                &mock.api_base(),
                "eu-model",
                json!({"region_name": "eu"}),
            ),
            deployment(
                "us-only",
                "us-2",
                &mock.api_base(),
                "us-model",
                json!({"region_name": "us"}),
            ),
            deployment(
                "eu-backup",
                "eu-2",
                &mock.api_base(),
                "eu-model",
                json!({"region_name": "eu"}),
            ),
        ],
        json!({"fallbacks": [{"us-only": ["eu-backup"]}]}),
    );
    let key = gw
        .post("/key/generate", &json!({"allowed_model_region": "eu"}))
        .json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let call = |model: &str| {
        let auth = format!("Bearer {key}");
        gw.call(
            "POST",
            "/v1/chat/completions",
            &[("Authorization", &auth)],
            chat_body(model).to_string().as_bytes(),
        )
    };
    for _ in 0..10 {
        let resp = call("chat");
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(
            resp.header("x-litellm-model-id"),
            Some("eu-1"),
            "only the eu deployment is eligible"
        );
        assert_eq!(resp.header("x-litellm-model-region"), Some("eu"));
    }
    let resp = call("us-only");
    assert_eq!(
        resp.status,
        200,
        "the in-region fallback serves: {}",
        resp.text()
    );
    assert_eq!(resp.header("x-litellm-model-id"), Some("eu-2"));

    let strict = start(
        vec![deployment(
            "us-only",
            "us-2",
            &mock.api_base(),
            "us-model",
            json!({"region_name": "us"}),
        )],
        json!({}),
    );
    let key = strict
        .post("/key/generate", &json!({"allowed_model_region": "eu"}))
        .json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let auth = format!("Bearer {key}");
    let before = mock.stats()["received"].as_u64().unwrap();
    let resp = strict.call(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", &auth)],
        chat_body("us-only").to_string().as_bytes(),
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    let message = resp.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("us-only") && message.contains("eu"),
        "{message}"
    );
    assert_eq!(
        mock.stats()["received"].as_u64().unwrap(),
        before,
        "nothing was served out of region"
    );
}

#[test]
fn per_request_fallbacks_and_num_retries_from_the_body() {
    let mock = MockServer::start(&[]);
    let gw = start(
        vec![
            deployment("chat-deep", "deep", &dead_base(), "deep-model", json!({})),
            deployment(
                "chat-fast",
                "fast",
                &mock.api_base(),
                "fast-model",
                json!({}),
            ),
        ],
        json!({"num_retries": 0}),
    );
    let mut body = chat_body("chat-deep");
    body["fallbacks"] = json!(["chat-fast"]);
    body["num_retries"] = json!(0);
    let resp = gw.post("/v1/chat/completions", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("x-litellm-model-group"), Some("chat-fast"));
    assert_eq!(served_by_model(&mock, "fast-model"), 1);

    let resp = gw.post("/v1/chat/completions", &chat_body("chat-deep"));
    assert_eq!(
        resp.status,
        502,
        "without fallbacks the dead primary fails: {}",
        resp.text()
    );

    let mut bad = chat_body("chat-deep");
    bad["fallbacks"] = json!("chat-fast");
    let resp = gw.post("/v1/chat/completions", &bad);
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert_eq!(resp.json()["error"]["param"], "fallbacks");
}
