//! LiteLLM's mock testing request parameters (`mock_testing_fallbacks`,
//! `mock_timeout`, ...): its proxy refuses them unless
//! `general_settings.dangerously_allow_mock_testing_request_params` is on
//! (off by default), so a test asking for a synthetic failure never reads a
//! normal success as a passing test. This gateway does not implement them:
//! they are refused as LiteLLM refuses them with the switch off, on every
//! LLM route, and the switch itself stops start-up.

use e2e::{assert_error, error_message, to_yaml, Gateway, MASTER_KEY};
use serde_json::json;
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

#[test]
fn the_switch_that_would_allow_them_stops_start_up() {
    let mut gw = Gateway::spawn(
        &config(json!({"dangerously_allow_mock_testing_request_params": true})),
        &[],
        e2e::free_port(),
        &[],
    );
    assert!(
        gw.wait_exit(Duration::from_secs(10))
            .is_some_and(|s| !s.success()),
        "start-up must fail"
    );
    assert!(
        gw.output()
            .contains("general_settings.dangerously_allow_mock_testing_request_params"),
        "{}",
        gw.output()
    );
}
