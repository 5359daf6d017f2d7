//! Client errors and upstream error statuses, each in the
//! `{"error":{"message","type","param","code"}}` shape.

use e2e::config::add_model;
use e2e::{
    assert_error, base_config, chat_body, error_message, openai_model, Gateway, MockServer,
    MASTER_KEY,
};
use serde_json::json;

fn start() -> (MockServer, Gateway) {
    let mock = MockServer::start(&[]);
    let gw = Gateway::start_json(&base_config(mock.port()), &[]);
    (mock, gw)
}

fn post_raw(gw: &Gateway, auth: Option<(&str, &str)>, body: &[u8]) -> e2e::Response {
    let mut headers = vec![("Content-Type", "application/json")];
    headers.extend(auth);
    gw.call("POST", "/v1/chat/completions", &headers, body)
}

#[test]
fn missing_key_is_401() {
    let (_mock, gw) = start();
    let body = chat_body("gpt-4o").to_string();
    let err = assert_error(&post_raw(&gw, None, body.as_bytes()), 401);
    assert!(
        error_message(&err).contains("No api key passed in"),
        "{err:?}"
    );
}

#[test]
fn wrong_key_is_401_auth_error() {
    let (_mock, gw) = start();
    let body = chat_body("gpt-4o").to_string();
    for (name, value) in [
        ("Authorization", "Bearer sk-wrong"),
        ("x-api-key", "sk-wrong"),
    ] {
        let err = assert_error(&post_raw(&gw, Some((name, value)), body.as_bytes()), 401);
        assert_eq!(err["type"], "auth_error", "via {name}: {err:?}");
    }
}

#[test]
fn unknown_model_is_400() {
    let (_mock, gw) = start();
    let resp = gw.post("/v1/chat/completions", &chat_body("no-such-model"));
    let err = assert_error(&resp, 400);
    assert!(
        error_message(&err).contains("Invalid model name passed in model=no-such-model"),
        "{err:?}"
    );
}

#[test]
fn malformed_json_is_400_with_position() {
    let (_mock, gw) = start();
    let auth = format!("Bearer {MASTER_KEY}");
    let body = b"{\n  \"model\": \"gpt-4o\",\n  \"messages\": [\n}\n";
    let err = assert_error(&post_raw(&gw, Some(("Authorization", &auth)), body), 400);
    let msg = error_message(&err);
    assert!(
        msg.contains("line") && msg.contains("column"),
        "message should name the position: {msg:?}"
    );
}

#[test]
fn missing_messages_is_400_with_param() {
    let (_mock, gw) = start();
    let resp = gw.post("/v1/chat/completions", &json!({"model": "gpt-4o"}));
    let err = assert_error(&resp, 400);
    assert_eq!(err["param"], "messages", "{err:?}");
}

#[test]
fn upstream_4xx_status_and_message_pass_through() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model(
            "upstream-404",
            "dep-404",
            &mock.api_base(),
            json!({"extra_headers": {
                "x-mock-status": "404",
                "x-mock-error-message": "The model `upstream-gpt` does not exist",
            }}),
        ),
    );
    let gw = Gateway::start_json(&config, &[]);
    let resp = gw.post("/v1/chat/completions", &chat_body("upstream-404"));
    let err = assert_error(&resp, 404);
    assert!(
        error_message(&err).contains("The model `upstream-gpt` does not exist"),
        "{err:?}"
    );
}

#[test]
fn upstream_5xx_status_and_message_pass_through() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model(
            "upstream-500",
            "dep-500",
            &mock.api_base(),
            json!({"extra_headers": {
                "x-mock-status": "500",
                "x-mock-error-message": "mock internal failure 7f3a",
            }}),
        ),
    );
    let gw = Gateway::start_json(&config, &[]);
    let resp = gw.post("/v1/chat/completions", &chat_body("upstream-500"));
    let err = assert_error(&resp, 500);
    assert!(
        error_message(&err).contains("mock internal failure 7f3a"),
        "{err:?}"
    );
}
