//! `POST /v1/images/generations` (also `/images/generations`) on OpenAI and
//! Azure OpenAI deployments of the faithful mock (OpenAI's checks and
//! shapes, Azure's URL and `api-key`): answers relayed as they are, spend
//! rows with call type `aimage_generation` priced as LiteLLM prices them
//! (per token for `gpt-image` with usage, per pixel for Azure's DALL·E 3),
//! budgets and rate limits applied as on chat, and clear 400s for what is
//! not served.

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

fn start(mock: &MockServer) -> Gateway {
    let config = json!({
        "model_list": [
            {"model_name": "gpt-image", "litellm_params": {"model": "openai/gpt-image-1", "api_key": "sk-up", "api_base": mock.api_base()}},
            {"model_name": "dalle", "litellm_params": {"model": "azure/dall-e-3", "api_key": "az-key", "api_version": "2024-02-01", "api_base": format!("http://127.0.0.1:{}", mock.port())}},
            {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-x", "api_key": "k", "api_base": mock.api_base()}},
        ],
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start(&to_yaml(&config), &[])
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn images_are_generated_on_openai_and_azure_and_priced_as_litellm_does() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock);

    let resp = gw.post(
        "/v1/images/generations",
        &json!({"model": "gpt-image", "prompt": "a red fox in the snow", "n": 2, "quality": "low"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    let body = resp.json();
    assert_eq!(body["data"].as_array().unwrap().len(), 2, "{body}");
    assert!(body["data"][0]["b64_json"].is_string());
    let usage = &body["usage"];
    assert_eq!(usage["output_tokens"], 2 * 272);
    let row = gw.spend_row(&call_id);
    assert_eq!(row["call_type"], "aimage_generation");
    assert_eq!(row["model"], "gpt-image-1");
    let input = usage["input_tokens"].as_f64().unwrap();
    let want = input * 5e-6 + 544.0 * 4e-5;
    let spent = row["spend"].as_f64().unwrap();
    assert!(
        close(spent, want),
        "gpt-image-1 by token: {spent} != {want}"
    );
    assert_eq!(row["completion_tokens"], 544);

    let resp = gw.post(
        "/images/generations",
        &json!({"model": "dalle", "prompt": "a lighthouse", "size": "1792x1024", "quality": "hd"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    let body = resp.json();
    assert!(body["data"][0]["url"].is_string(), "{body}");
    assert!(body["data"][0]["revised_prompt"].is_string(), "{body}");
    let row = gw.spend_row(&call_id);
    assert_eq!(row["call_type"], "aimage_generation");
    // azure/hd/1792-x-1024/dall-e-3: 7.19343e-08 a pixel.
    let want = 7.19343e-08 * 1792.0 * 1024.0;
    let spent = row["spend"].as_f64().unwrap();
    assert!(close(spent, want), "dall-e-3 per pixel: {spent} != {want}");

    // The upstream's own checks reach the client as its error.
    let err = e2e::assert_error(
        &gw.post(
            "/v1/images/generations",
            &json!({"model": "dalle", "prompt": "x", "n": 2}),
        ),
        400,
    );
    assert!(
        e2e::error_message(&err).contains("n=1"),
        "dall-e-3 takes one image: {err:?}"
    );

    // Refused by the gateway, never reaching the upstream.
    let upstream_calls = mock.stats()["received"].clone();
    for (body, param) in [
        (json!({"model": "gpt-image"}), "prompt"),
        (json!({"model": "gpt-image", "prompt": 3}), "prompt"),
        (
            json!({"model": "gpt-image", "prompt": "x", "stream": true}),
            "stream",
        ),
        (
            json!({"model": "gpt-image", "prompt": "x", "size": 5}),
            "size",
        ),
    ] {
        let err = e2e::assert_error(&gw.post("/v1/images/generations", &body), 400);
        assert_eq!(err["param"], param, "{body}");
    }
    let err = e2e::assert_error(
        &gw.post(
            "/v1/images/generations",
            &json!({"model": "claude", "prompt": "x"}),
        ),
        400,
    );
    assert!(
        e2e::error_message(&err).contains("provider anthropic does not serve /images/generations"),
        "{err:?}"
    );
    let resp = gw.call(
        "POST",
        "/v1/images/generations",
        &[("Content-Type", "application/json")],
        json!({"model": "gpt-image", "prompt": "x"})
            .to_string()
            .as_bytes(),
    );
    e2e::assert_error(&resp, 401);
    assert_eq!(
        mock.stats()["received"],
        upstream_calls,
        "refused requests never reach the upstream"
    );
}

#[test]
fn budgets_and_rate_limits_apply_to_image_generations() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock);
    let key = |fields: Value| {
        let resp = gw.post("/key/generate", &fields);
        assert_eq!(resp.status, 200, "{}", resp.text());
        resp.json()["key"].as_str().unwrap().to_string()
    };
    // One hd 1792x1024 image costs 0.132: a second does not fit in 0.2.
    let budgeted = key(json!({"max_budget": 0.2}));
    let body =
        json!({"model": "dalle", "prompt": "a lighthouse", "size": "1792x1024", "quality": "hd"});
    let first = gw.post_as(&budgeted, "/v1/images/generations", &body);
    assert_eq!(first.status, 200, "{}", first.text());
    let err = e2e::assert_error(&gw.post_as(&budgeted, "/v1/images/generations", &body), 422);
    assert!(
        e2e::error_message(&err).contains("Budget has been exceeded"),
        "{err:?}"
    );
    let info = e2e::eventually("the key's spend", Duration::from_secs(5), || {
        let info = gw.get(&format!("/key/info?key={budgeted}")).json();
        let spend = info["info"]["spend"].as_f64()?;
        (spend > 0.0).then_some(spend)
    });
    assert!(close(info, 7.19343e-08 * 1792.0 * 1024.0), "{info}");

    let limited = key(json!({"rpm_limit": 1}));
    let cheap = json!({"model": "gpt-image", "prompt": "x", "quality": "low"});
    assert_eq!(
        gw.post_as(&limited, "/v1/images/generations", &cheap)
            .status,
        200
    );
    e2e::assert_error(&gw.post_as(&limited, "/v1/images/generations", &cheap), 429);
}
