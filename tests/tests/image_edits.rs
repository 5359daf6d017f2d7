//! `POST /v1/images/edits` (also `/images/edits`): OpenAI's image edit
//! API, a multipart form forwarded as received (only `model` replaced) to
//! `openai/` and `azure/` deployments of the faithful mock (OpenAI's form
//! checks: `image` parts of png/jpeg/webp, `prompt`, `dall-e-3` refused;
//! the generation answer shapes); spend rows with call type `aimage_edit`
//! priced as image generations are; clear 400s before the upstream for a
//! missing image or prompt, `stream`, an unserved provider; the prompt
//! checked by the guardrails.

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::json;

const BOUNDARY: &str = "----gateway-edit-Zq81bX";

fn start(mock: &MockServer) -> Gateway {
    let config = json!({
        "model_list": [
            {"model_name": "gpt-image", "litellm_params": {"model": "openai/gpt-image-1", "api_key": "sk-up", "api_base": mock.api_base()}},
            {"model_name": "dalle3", "litellm_params": {"model": "openai/dall-e-3", "api_key": "sk-up", "api_base": mock.api_base()}},
            {"model_name": "dalle-azure", "litellm_params": {"model": "azure/dall-e-2", "api_key": "az-key", "api_version": "2024-02-01", "api_base": format!("http://127.0.0.1:{}", mock.port())}},
            {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-x", "api_key": "k", "api_base": mock.api_base()}},
        ],
        "general_settings": {"master_key": MASTER_KEY},
        "guardrails": [
            {"guardrail_name": "no-falcon", "litellm_params": {
                "guardrail": "litellm_content_filter", "mode": "pre_call", "default_on": true,
                "blocked_words": [{"keyword": "Project Falcon", "action": "BLOCK", "description": "internal codename"}],
                "patterns": [{"pattern_type": "prebuilt", "pattern_name": "email", "action": "MASK"}]}},
        ],
    });
    Gateway::start(&to_yaml(&config), &[])
}

/// A form with `fields` and an image part per name in `images`.
fn form(fields: &[(&str, &str)], images: &[(&str, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (part, name) in images {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{part}\"; filename=\"{name}\"\r\nContent-Type: image/png\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR");
        body.extend_from_slice(b"\r\n");
    }
    for (name, value) in fields {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

fn edit(gw: &Gateway, path: &str, body: &[u8]) -> e2e::Response {
    let auth = format!("Bearer {MASTER_KEY}");
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    gw.call(
        "POST",
        path,
        &[("Authorization", &auth), ("Content-Type", &content_type)],
        body,
    )
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn images_are_edited_on_openai_and_azure_and_priced_as_generations() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock);
    let body = form(
        &[
            ("model", "gpt-image"),
            ("prompt", "add a red hat"),
            ("n", "2"),
            ("quality", "low"),
        ],
        &[("image[]", "cat.png"), ("image[]", "hat.webp")],
    );
    let resp = edit(&gw, "/v1/images/edits", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let answer = resp.json();
    assert_eq!(answer["data"].as_array().unwrap().len(), 2, "{answer}");
    assert!(answer["data"][0]["b64_json"].is_string());
    let usage = &answer["usage"];
    assert_eq!(usage["output_tokens"], 2 * 272);
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(row["call_type"], "aimage_edit");
    assert_eq!(row["model"], "gpt-image-1");
    let want = usage["input_tokens"].as_f64().unwrap() * 5e-6 + 544.0 * 4e-5;
    let spent = row["spend"].as_f64().unwrap();
    assert!(
        close(spent, want),
        "gpt-image-1 by token: {spent} != {want}"
    );

    // Azure, without /v1: the deployment's URL and api-key.
    let body = form(
        &[
            ("model", "dalle-azure"),
            ("prompt", "a lighthouse"),
            ("size", "512x512"),
        ],
        &[("image", "coast.png")],
    );
    let resp = edit(&gw, "/images/edits", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp.json()["data"][0]["url"].is_string(), "{}", resp.text());
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(row["call_type"], "aimage_edit");

    // The upstream's own refusal (dall-e-3 does not edit) reaches the client.
    let body = form(
        &[("model", "dalle3"), ("prompt", "x")],
        &[("image", "a.png")],
    );
    let err = e2e::assert_error(&edit(&gw, "/v1/images/edits", &body), 400);
    assert!(e2e::error_message(&err).contains("dall-e-3"), "{err:?}");
}

#[test]
fn bad_edit_forms_and_guarded_prompts_are_refused_before_the_upstream() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock);
    let before = mock.stats()["received"].clone();
    let path = "/v1/images/edits";
    for (body, param) in [
        (
            form(&[("model", "gpt-image"), ("prompt", "x")], &[]),
            "image",
        ),
        (
            form(&[("model", "gpt-image")], &[("image", "a.png")]),
            "prompt",
        ),
        (form(&[("prompt", "x")], &[("image", "a.png")]), "model"),
        (
            form(
                &[("model", "gpt-image"), ("prompt", "x"), ("stream", "true")],
                &[("image", "a.png")],
            ),
            "stream",
        ),
        (
            form(
                &[("model", "gpt-image"), ("prompt", "x"), ("n", "0")],
                &[("image", "a.png")],
            ),
            "n",
        ),
    ] {
        let err = e2e::assert_error(&edit(&gw, path, &body), 400);
        assert_eq!(err["param"], param, "{err:?}");
    }
    let err = e2e::assert_error(&edit(&gw, path, b"--broken"), 400);
    assert!(!e2e::error_message(&err).is_empty());
    let body = form(
        &[("model", "claude"), ("prompt", "x")],
        &[("image", "a.png")],
    );
    let err = e2e::assert_error(&edit(&gw, path, &body), 400);
    assert!(e2e::error_message(&err).contains("anthropic"), "{err:?}");
    // The guardrails read the prompt: a blocked word refuses it, and a
    // mask (which a form forwarded as received cannot carry) too.
    let body = form(
        &[
            ("model", "gpt-image"),
            ("prompt", "the Project Falcon logo"),
        ],
        &[("image", "a.png")],
    );
    let resp = edit(&gw, path, &body);
    assert!(resp.status >= 400 && resp.status < 500, "{}", resp.text());
    let body = form(
        &[
            ("model", "gpt-image"),
            ("prompt", "write bob@example.com on it"),
        ],
        &[("image", "a.png")],
    );
    let err = e2e::assert_error(&edit(&gw, path, &body), 400);
    assert_eq!(err["param"], "prompt", "{err:?}");
    assert_eq!(
        mock.stats()["received"],
        before,
        "a refusal reached the upstream"
    );
}
