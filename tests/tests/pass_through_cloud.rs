//! LiteLLM's `/vertex_ai/*` and `/bedrock/*` pass-through routes end to
//! end on the faithful mock: the Vertex AI paths need a Google token the
//! mock's token endpoint granted for the mock's service account and its
//! project (the gateway fetches the token with the `use_in_pass_through`
//! deployment's key and puts its project and location in the path), the
//! Bedrock paths a SigV4 signature the mock recomputes with its secret
//! (the gateway signs each call). The caller's virtual key is checked and
//! never forwarded; usage is charged on generateContent and Converse.

use e2e::{to_yaml, Gateway, MockServer, Response, MASTER_KEY};
use serde_json::{json, Value};
use std::io::Write;

/// The mock's service account (`loadgen/src/mock/api/vertex/`).
const KEY_FILE: &str = include_str!("../../loadgen/src/mock/api/vertex/service_account.json");
/// The mock's AWS secret (`loadgen/src/mock/api/bedrock.rs`).
const AWS_SECRET: &str = "mock-aws-secret-access-key";

fn new_key(gw: &Gateway) -> String {
    let resp = gw.post("/key/generate", &json!({}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["key"].as_str().unwrap().to_string()
}

fn call(gw: &Gateway, key: &str, path: &str, body: &Value) -> Response {
    let auth = format!("Bearer {key}");
    gw.call(
        "POST",
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

#[test]
fn vertex_ai_route_adds_the_google_token_and_the_deployments_project() {
    let mock = MockServer::start(&["--completion-tokens", "4"]);
    let mut key_file = tempfile::NamedTempFile::new().unwrap();
    key_file
        .write_all(
            KEY_FILE
                .replace(
                    "https://oauth2.googleapis.com/token",
                    &format!("http://127.0.0.1:{}/token", mock.port()),
                )
                .as_bytes(),
        )
        .unwrap();
    let config = json!({
        "model_list": [{
            "model_name": "gemini",
            "litellm_params": {
                "model": "vertex_ai/gemini-2.0-flash",
                "api_base": format!("http://127.0.0.1:{}", mock.port()),
                "vertex_credentials": key_file.path().to_str().unwrap(),
                "vertex_location": "us-central1",
                "use_in_pass_through": true,
            },
        }],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let key = new_key(&gw);
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]});
    // The path names another project: the deployment's replaces it (the
    // mock refuses any project but its account's).
    let resp = call(
        &gw,
        &key,
        "/vertex_ai/v1/projects/someone-else/locations/us-central1/publishers/google/models/gemini-2.0-flash:generateContent",
        &body,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let answer = resp.json();
    assert!(answer["candidates"][0]["content"].is_object(), "{answer}");
    let usage = &answer["usageMetadata"];
    let (prompt, output) = (
        usage["promptTokenCount"].as_u64().unwrap(),
        usage["candidatesTokenCount"].as_u64().unwrap(),
    );
    assert_eq!(output, 4);
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(row["call_type"], "pass_through_endpoint", "{row}");
    assert_eq!(row["custom_llm_provider"], "vertex_ai");
    assert_eq!(row["model"], "gemini-2.0-flash");
    // gemini-2.0-flash: 1.5e-7 USD an input token, 6e-7 an output token.
    let expected = prompt as f64 * 1.5e-7 + output as f64 * 6e-7;
    assert!(
        (row["spend"].as_f64().unwrap() - expected).abs() < 1e-12,
        "{row}"
    );
    // A path without project and location gets the deployment's; a
    // streamed method gets alt=sse.
    let resp = call(
        &gw,
        &key,
        "/vertex-ai/v1/publishers/google/models/gemini-2.0-flash:streamGenerateContent",
        &body,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream")));
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(row["completion_tokens"].as_u64(), Some(4), "{row}");
    // Without a virtual key nothing reaches Google.
    let resp = gw.call(
        "POST",
        "/vertex_ai/v1/publishers/google/models/gemini-2.0-flash:generateContent",
        &[],
        body.to_string().as_bytes(),
    );
    assert_eq!(resp.status, 401, "{}", resp.text());
}

#[test]
fn bedrock_route_signs_each_call_and_charges_converse() {
    let mock = MockServer::start(&["--completion-tokens", "3"]);
    let endpoint = format!("http://127.0.0.1:{}", mock.port());
    let config = json!({
        "model_list": [],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let env = [
        ("AWS_ACCESS_KEY_ID", "AKIDMOCK"),
        ("AWS_SECRET_ACCESS_KEY", AWS_SECRET),
        ("AWS_REGION_NAME", "us-east-1"),
        ("AWS_BEDROCK_RUNTIME_ENDPOINT", endpoint.as_str()),
    ];
    let gw = Gateway::start(&to_yaml(&config), &env);
    let key = new_key(&gw);
    let body = json!({"messages": [{"role": "user", "content": [{"text": "hello"}]}], "inferenceConfig": {"maxTokens": 50}});
    let path = "/bedrock/model/anthropic.claude-3-5-haiku-20241022-v1:0/converse";
    let resp = call(&gw, &key, path, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let answer = resp.json();
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    let (input, output) = (
        answer["usage"]["inputTokens"].as_u64().unwrap(),
        answer["usage"]["outputTokens"].as_u64().unwrap(),
    );
    assert_eq!(output, 3);
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(row["custom_llm_provider"], "bedrock", "{row}");
    assert_eq!(row["model"], "anthropic.claude-3-5-haiku-20241022-v1:0");
    // Claude 3.5 Haiku on Bedrock: 8e-7 USD an input token, 4e-6 an output token.
    let expected = input as f64 * 8e-7 + output as f64 * 4e-6;
    assert!(
        (row["spend"].as_f64().unwrap() - expected).abs() < 1e-12,
        "{row}"
    );
    // The stream is relayed in Bedrock's binary framing and charged too.
    let resp = call(
        &gw,
        &key,
        "/bedrock/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream",
        &body,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(
        resp.header("content-type")
            .is_some_and(|c| c.starts_with("application/vnd.amazon.eventstream")),
        "{:?}",
        resp.headers
    );
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(row["completion_tokens"].as_u64(), Some(3), "{row}");

    // A wrong secret fails the mock's signature check, relayed as it is.
    let wrong = Gateway::start(
        &to_yaml(&config),
        &[
            ("AWS_ACCESS_KEY_ID", "AKIDMOCK"),
            ("AWS_SECRET_ACCESS_KEY", "not-the-secret"),
            ("AWS_BEDROCK_RUNTIME_ENDPOINT", endpoint.as_str()),
        ],
    );
    let key = new_key(&wrong);
    let resp = call(&wrong, &key, path, &body);
    assert_eq!(resp.status, 403, "{}", resp.text());
    assert!(resp.text().contains("signature"), "{}", resp.text());
}
