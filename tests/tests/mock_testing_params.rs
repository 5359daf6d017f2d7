//! LiteLLM's mock testing request parameters (`mock_testing_fallbacks`,
//! `mock_timeout`, ...): refused unless
//! `general_settings.dangerously_allow_mock_testing_request_params` is on
//! (off by default), as LiteLLM's proxy refuses them, so a test asking for
//! a synthetic failure never reads a normal success as a passing test.
//! With the switch on each does what it does in LiteLLM: a synthetic
//! failure of the requested group (no upstream call) that takes the
//! fallback path of its kind, a 429, a timeout, a delay; `mock_response`
//! is answered by the picked deployment and charged at its price.

use e2e::{assert_error, error_message, to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

fn config(general: serde_json::Value) -> String {
    let mut general_settings = json!({"master_key": MASTER_KEY});
    if let (Some(all), serde_json::Value::Object(more)) =
        (general_settings.as_object_mut(), general)
    {
        all.extend(more);
    }
    to_yaml(&json!({
        "model_list": [{
            "model_name": "m",
            "litellm_params": {"model": "mock/m", "mock_response": "hello"},
        }],
        "general_settings": general_settings,
    }))
}

fn post(gw: &Gateway, path: &str, body: serde_json::Value) -> e2e::Response {
    let auth = format!("Bearer {MASTER_KEY}");
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

#[test]
fn mock_testing_params_are_refused_as_litellm_refuses_them_by_default() {
    let gw = Gateway::start(&config(json!({})), &[]);
    let messages = json!([{"role": "user", "content": "hi"}]);
    for (path, mut body) in [
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": messages}),
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 5, "messages": messages}),
        ),
    ] {
        assert_eq!(post(&gw, path, body.clone()).status, 200, "{path}");
        body["mock_testing_fallbacks"] = json!(true);
        body["mock_timeout"] = json!(true);
        let resp = post(&gw, path, body);
        assert_eq!(resp.status, 400, "{path}: {}", resp.text());
        // OpenAI's error shape on OpenAI routes, Anthropic's on Messages.
        let message = resp.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            message.contains(
                "Mock testing request params are disabled on this proxy: mock_testing_fallbacks, mock_timeout"
            ),
            "{path}: {message}"
        );
        if path == "/v1/chat/completions" {
            let err = assert_error(&resp, 400);
            assert_eq!(err["param"], "mock_testing_fallbacks", "{err:?}");
            assert!(error_message(&err).contains("mock_timeout"));
        }
    }
}

/// A gateway with the switch on: `primary` on the mock upstream (never
/// called while its failure is mocked), `backup` on the in-process mock,
/// each fallback kind from `primary` to `backup`, no retries.
fn allowed(mock: &MockServer, fallbacks: bool) -> Gateway {
    let primary = e2e::openai_model("primary", "p-1", &mock.api_base(), json!({"timeout": 1}));
    let mut config = json!({
        "model_list": [primary, {
            "model_name": "backup",
            "litellm_params": {"model": "mock/b", "mock_response": "from backup"},
        }],
        "router_settings": {"num_retries": 0},
        "general_settings": {
            "master_key": MASTER_KEY,
            "dangerously_allow_mock_testing_request_params": true,
        },
    });
    if fallbacks {
        for kind in [
            "fallbacks",
            "context_window_fallbacks",
            "content_policy_fallbacks",
        ] {
            config["router_settings"][kind] = json!([{"primary": ["backup"]}]);
        }
    }
    Gateway::start(&to_yaml(&config), &[])
}

fn chat(gw: &Gateway, extra: Value) -> e2e::Response {
    let mut body = json!({"model": "primary", "messages": [{"role": "user", "content": "hi"}]});
    if let (Some(b), Value::Object(extra)) = (body.as_object_mut(), extra) {
        b.extend(extra);
    }
    post(gw, "/v1/chat/completions", body)
}

fn upstream_calls(mock: &MockServer) -> u64 {
    mock.stats()["requests"].as_u64().unwrap_or(0)
}

#[test]
fn each_mocked_failure_takes_its_own_fallback_path_without_an_upstream_call() {
    let mock = MockServer::start(&[]);
    let gw = allowed(&mock, true);
    for flag in [
        "mock_testing_fallbacks",
        "mock_testing_context_fallbacks",
        "mock_testing_content_policy_fallbacks",
    ] {
        let resp = chat(&gw, json!({flag: true}));
        assert_eq!(resp.status, 200, "{flag}: {}", resp.text());
        assert_eq!(
            resp.json()["choices"][0]["message"]["content"],
            "from backup",
            "{flag}"
        );
        assert_eq!(
            resp.header("x-litellm-attempted-fallbacks"),
            Some("1"),
            "{flag}"
        );
    }
    // A string reads as a boolean for the fallback flags, as in LiteLLM.
    let resp = chat(&gw, json!({"mock_testing_fallbacks": "true"}));
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "from backup"
    );
    assert_eq!(upstream_calls(&mock), 0);
    // Without the flags the primary answers, and the flags never reach it.
    let resp = chat(&gw, json!({"mock_testing_fallbacks": false}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_ne!(
        resp.json()["choices"][0]["message"]["content"],
        "from backup"
    );
    assert_eq!(upstream_calls(&mock), 1);
}

#[test]
fn without_fallbacks_each_mocked_failure_is_its_error() {
    let mock = MockServer::start(&[]);
    let gw = allowed(&mock, false);
    for (flag, status) in [
        ("mock_testing_fallbacks", 500),
        ("mock_testing_context_fallbacks", 400),
        ("mock_testing_content_policy_fallbacks", 400),
        ("mock_testing_rate_limit_error", 429),
    ] {
        let resp = chat(&gw, json!({flag: true}));
        let err = assert_error(&resp, status);
        assert!(
            error_message(&err).contains("This is a mock exception for model=primary"),
            "{flag}: {err:?}"
        );
    }
    let resp = chat(&gw, json!({"mock_testing_rate_limit_error": true}));
    assert_eq!(assert_error(&resp, 429)["type"], "rate_limit_error");
    assert_eq!(upstream_calls(&mock), 0);
}

#[test]
fn mock_timeout_fails_with_the_deployments_timeout_and_mock_delay_is_bounded() {
    let mock = MockServer::start(&[]);
    let gw = allowed(&mock, false);
    let resp = chat(&gw, json!({"mock_timeout": true}));
    assert_eq!(resp.status, 408, "{}", resp.text());
    assert_eq!(upstream_calls(&mock), 0);
    for bad in [json!(-1), json!(61), json!("soon")] {
        let resp = chat(&gw, json!({"mock_delay": bad, "mock_response": "x"}));
        assert_eq!(assert_error(&resp, 400)["param"], "mock_delay", "{bad}");
    }
    let resp = chat(&gw, json!({"mock_delay": 0.05, "mock_response": "late"}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["choices"][0]["message"]["content"], "late");
}

const INPUT_COST: f64 = 0.000_01;
const OUTPUT_COST: f64 = 0.000_03;

#[test]
fn mock_response_answers_without_an_upstream_call_and_is_charged_as_litellm_charges_it() {
    let mock = MockServer::start(&[]);
    let db = e2e::TestDb::create();
    let config = json!({
        "model_list": [e2e::openai_model("priced", "p-1", &mock.api_base(), json!({
            "input_cost_per_token": INPUT_COST,
            "output_cost_per_token": OUTPUT_COST,
        }))],
        "router_settings": {"num_retries": 0},
        "general_settings": {
            "master_key": MASTER_KEY,
            "dangerously_allow_mock_testing_request_params": true,
        },
    });
    let gw = Gateway::start(&to_yaml(&config), &[("DATABASE_URL", db.url())]);
    let resp = gw.post("/key/generate", &json!({}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let key = resp.json()["key"].as_str().expect("key").to_string();
    let auth = format!("Bearer {key}");
    let send = |body: Value| {
        gw.call(
            "POST",
            "/v1/chat/completions",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.to_string().as_bytes(),
        )
    };
    let messages = json!([{"role": "user", "content": "what is the answer?"}]);
    let resp = send(json!({"model": "priced", "messages": messages, "mock_response": "forty-two"}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["choices"][0]["message"]["content"], "forty-two");
    // LiteLLM's mock completion: the admitted prompt count, 20 completion tokens.
    let usage = &body["usage"];
    assert_eq!(usage["completion_tokens"], 20);
    let prompt = usage["prompt_tokens"].as_u64().expect("prompt tokens");
    assert!(prompt > 0, "{usage}");
    assert_eq!(usage["total_tokens"], prompt + 20);
    // Streamed too.
    let resp = send(
        json!({"model": "priced", "messages": messages, "mock_response": "forty-two", "stream": true}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let text: String = resp
        .text()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(text, "forty-two");
    assert_eq!(upstream_calls(&mock), 0);
    // Both charged at the deployment's price.
    let expected = 2.0 * (prompt as f64 * INPUT_COST + 20.0 * OUTPUT_COST);
    let spend = e2e::eventually("the key's spend", Duration::from_secs(10), || {
        let info = gw.get(&format!("/key/info?key={key}")).json();
        let spend = info["info"]["spend"].as_f64()?;
        ((spend - expected).abs() < 1e-9).then_some(spend)
    });
    assert!((spend - expected).abs() < 1e-9);
    // A mocked failure leaves its attempt's row, charged nothing.
    let resp = send(
        json!({"model": "priced", "messages": messages, "mock_testing_rate_limit_error": true}),
    );
    assert_eq!(resp.status, 429, "{}", resp.text());
    let row = e2e::eventually("the mocked failure's row", Duration::from_secs(10), || {
        let row = db.query(
            r#"SELECT status, spend, model_group FROM "LiteLLM_SpendLogs" WHERE status = 'failure'"#,
        );
        (!row.is_empty()).then_some(row)
    });
    assert_eq!(row, "failure|0|priced");
}

#[test]
fn mock_response_with_the_switch_off_is_passed_on_as_before() {
    let mock = MockServer::start(&[]);
    let config = json!({
        "model_list": [e2e::openai_model("primary", "p-1", &mock.api_base(), json!({}))],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let resp = chat(&gw, json!({"mock_response": "canned"}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_ne!(resp.json()["choices"][0]["message"]["content"], "canned");
    assert_eq!(upstream_calls(&mock), 1);
}

#[test]
fn a_key_allowed_client_mock_responses_gets_them_with_the_switch_off() {
    let mock = MockServer::start(&[]);
    let db = e2e::TestDb::create();
    let config = json!({
        "model_list": [e2e::openai_model("primary", "p-1", &mock.api_base(), json!({}))],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[("DATABASE_URL", db.url())]);
    let key_with = |metadata: Value| {
        let resp = gw.post("/key/generate", &json!({"metadata": metadata}));
        assert_eq!(resp.status, 200, "{}", resp.text());
        resp.json()["key"].as_str().expect("key").to_string()
    };
    let send = |key: &str| {
        let auth = format!("Bearer {key}");
        let body = json!({"model": "primary", "messages": [{"role": "user", "content": "hi"}], "mock_response": "canned"});
        gw.call(
            "POST",
            "/v1/chat/completions",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.to_string().as_bytes(),
        )
    };
    // LiteLLM's key metadata flag: answered without an upstream call.
    let allowed = key_with(json!({"allow_client_mock_response": true}));
    let resp = send(&allowed);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["choices"][0]["message"]["content"], "canned");
    assert_eq!(upstream_calls(&mock), 0);
    // Another key's request goes upstream as before.
    let plain = key_with(json!({}));
    let resp = send(&plain);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_ne!(resp.json()["choices"][0]["message"]["content"], "canned");
    assert_eq!(upstream_calls(&mock), 1);
}

#[test]
fn mock_response_is_answered_in_each_clients_format() {
    let mock = MockServer::start(&[]);
    let gw = allowed(&mock, false);
    let messages = json!([{"role": "user", "content": "hi"}]);
    let resp = post(
        &gw,
        "/v1/messages",
        json!({"model": "primary", "max_tokens": 50, "messages": messages, "mock_response": "canned"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["content"][0]["text"], "canned", "{body}");
    assert_eq!(body["usage"]["output_tokens"], 20, "{body}");
    let resp = post(
        &gw,
        "/v1/responses",
        json!({"model": "primary", "input": "hi", "mock_response": "canned"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["output"][0]["content"][0]["text"], "canned", "{body}");
    assert_eq!(body["usage"]["output_tokens"], 20, "{body}");
    assert_eq!(upstream_calls(&mock), 0);
}
