//! `POST /v1/moderations` (also `/moderations`) passed through to an
//! OpenAI-compatible deployment on the faithful mock (OpenAI's shape, the
//! `input` checks): flagged and clean inputs, a spend row with call type
//! `amoderation`, key auth and model access, and a clear 400 on a
//! provider without a moderation API.

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::json;
use std::time::Duration;

#[test]
fn moderations_pass_through_to_openai_deployments() {
    let mock = MockServer::start(&[]);
    let config = json!({
        "model_list": [
            {"model_name": "omni-moderation-latest", "litellm_params": {"model": "openai/omni-moderation-latest", "api_key": "sk-up", "api_base": mock.api_base()}},
            {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-x", "api_key": "k", "api_base": mock.api_base()}},
        ],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let resp = gw.post(
        "/v1/moderations",
        &json!({"model": "omni-moderation-latest", "input": ["a fine text", "mock-flagged words"]}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    let body = resp.json();
    assert_eq!(body["model"], "omni-moderation-latest");
    assert_eq!(body["results"][0]["flagged"], false);
    assert_eq!(body["results"][1]["flagged"], true);
    assert_eq!(body["results"][1]["categories"]["harassment"], true);
    let row = e2e::eventually("the spend row", Duration::from_secs(5), || {
        let rows = gw.get(&format!("/spend/logs?request_id={call_id}")).json();
        rows.as_array().and_then(|r| r.first().cloned())
    });
    assert_eq!(row["call_type"], "amoderation");
    assert_eq!(row["spend"], 0.0, "OpenAI's moderation is free: {row}");

    let resp = gw.post(
        "/moderations",
        &json!({"model": "omni-moderation-latest", "input": "hi"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());

    let err = e2e::assert_error(
        &gw.post(
            "/v1/moderations",
            &json!({"model": "omni-moderation-latest"}),
        ),
        400,
    );
    assert_eq!(err["param"], "input");
    let err = e2e::assert_error(
        &gw.post(
            "/v1/moderations",
            &json!({"model": "claude", "input": "hi"}),
        ),
        400,
    );
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("provider anthropic does not serve /moderations"),
        "{err:?}"
    );
    let resp = gw.call(
        "POST",
        "/v1/moderations",
        &[("Content-Type", "application/json")],
        json!({"model": "omni-moderation-latest", "input": "hi"})
            .to_string()
            .as_bytes(),
    );
    e2e::assert_error(&resp, 401);
    assert_eq!(
        mock.stats()["received"],
        2,
        "refused requests never reach the upstream"
    );
}
