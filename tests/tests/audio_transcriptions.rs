//! `POST /v1/audio/transcriptions` (also `/audio/transcriptions`): a
//! multipart form forwarded as received (only the `model` field's value
//! replaced, the content type and its boundary kept) to OpenAI and Azure
//! OpenAI deployments of the faithful mock (OpenAI's form checks and
//! answer shapes); spend rows with call type `atranscription`, per second
//! of audio the answer reports (`duration`, `usage.seconds`) or per token
//! for the token-priced transcribers, as LiteLLM prices them; the body
//! bounded by `max_request_size_mb`; budgets and rate limits as on chat;
//! clear 400s for malformed forms and unserved providers.

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

const BOUNDARY: &str = "----gateway-test-7MA4YWxkTrZu0gW";

fn start(mock: &MockServer) -> Gateway {
    let config = json!({
        "model_list": [
            {"model_name": "whisper", "litellm_params": {"model": "openai/whisper-1", "api_key": "sk-up", "api_base": mock.api_base()}},
            {"model_name": "transcriber", "litellm_params": {"model": "openai/gpt-4o-transcribe", "api_key": "sk-up", "api_base": mock.api_base()}},
            {"model_name": "whisper-azure", "litellm_params": {"model": "azure/whisper", "api_key": "az-key", "api_version": "2024-06-01", "api_base": format!("http://127.0.0.1:{}", mock.port())}},
            {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-x", "api_key": "k", "api_base": mock.api_base()}},
        ],
        "general_settings": {"master_key": MASTER_KEY, "max_request_size_mb": 1},
    });
    Gateway::start(&to_yaml(&config), &[])
}

/// A form with `fields` and, when given, a file part of `len` bytes.
fn form(fields: &[(&str, &str)], file: Option<(&str, usize)>) -> Vec<u8> {
    let mut body = Vec::new();
    if let Some((name, len)) = file {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: audio/wav\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(b"RIFF");
        body.extend((4..len).map(|i| (i % 251) as u8));
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

fn transcribe(gw: &Gateway, path: &str, key: &str, body: &[u8]) -> e2e::Response {
    let auth = format!("Bearer {key}");
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    gw.call(
        "POST",
        path,
        &[("Authorization", &auth), ("Content-Type", &content_type)],
        body,
    )
}

fn spend_row(gw: &Gateway, resp: &e2e::Response) -> Value {
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    e2e::eventually("the spend row", Duration::from_secs(5), || {
        let rows = gw.get(&format!("/spend/logs?request_id={call_id}")).json();
        rows.as_array().and_then(|r| r.first().cloned())
    })
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn transcriptions_forward_the_form_and_bill_seconds_or_tokens() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock);
    let path = "/v1/audio/transcriptions";

    // 48,000 bytes: three seconds of the mock's audio.
    let body = form(
        &[("model", "whisper"), ("response_format", "verbose_json")],
        Some(("talk.wav", 48_000)),
    );
    let resp = transcribe(&gw, path, MASTER_KEY, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let answer = resp.json();
    assert_eq!(answer["text"], "mock transcript of talk.wav");
    assert_eq!(answer["duration"], 3.0);
    let row = spend_row(&gw, &resp);
    assert_eq!(row["call_type"], "atranscription");
    assert_eq!(row["model"], "whisper-1");
    // whisper-1: LiteLLM bills output_cost_per_second, 0.0001.
    let spent = row["spend"].as_f64().unwrap();
    assert!(close(spent, 3.0 * 0.0001), "{spent}");

    // `json`: the seconds from OpenAI's duration usage; without /v1.
    let body = form(&[("model", "whisper")], Some(("talk.mp3", 40_000)));
    let resp = transcribe(&gw, "/audio/transcriptions", MASTER_KEY, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["usage"]["seconds"], 3);
    let spent = spend_row(&gw, &resp)["spend"].as_f64().unwrap();
    assert!(close(spent, 3.0 * 0.0001), "{spent}");

    // Token-priced transcriber: its reported tokens at its token prices.
    let body = form(&[("model", "transcriber")], Some(("talk.wav", 32_000)));
    let resp = transcribe(&gw, path, MASTER_KEY, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let usage = resp.json()["usage"].clone();
    let want = usage["input_tokens"].as_f64().unwrap() * 2.5e-6
        + usage["output_tokens"].as_f64().unwrap() * 1e-5;
    let spent = spend_row(&gw, &resp)["spend"].as_f64().unwrap();
    assert!(close(spent, want), "{spent} != {want}");

    // Azure: the deployment's URL, the key in api-key.
    let body = form(
        &[
            ("model", "whisper-azure"),
            ("response_format", "verbose_json"),
        ],
        Some(("talk.wav", 16_000)),
    );
    let resp = transcribe(&gw, path, MASTER_KEY, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let spent = spend_row(&gw, &resp)["spend"].as_f64().unwrap();
    assert!(close(spent, 0.0001), "azure/whisper one second: {spent}");

    // Plain text answers pass through as they are.
    let body = form(
        &[("model", "whisper"), ("response_format", "text")],
        Some(("talk.wav", 100)),
    );
    let resp = transcribe(&gw, path, MASTER_KEY, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.text(), "mock transcript of talk.wav\n");

    // The upstream's own checks reach the client as its error.
    let body = form(&[("model", "whisper")], Some(("notes.txt", 100)));
    let err = e2e::assert_error(&transcribe(&gw, path, MASTER_KEY, &body), 400);
    assert!(
        e2e::error_message(&err).contains("Invalid file format"),
        "{err:?}"
    );

    // Refused by the gateway, never reaching the upstream.
    let upstream_calls = mock.stats()["received"].clone();
    let no_model = form(&[], Some(("talk.wav", 100)));
    let err = e2e::assert_error(&transcribe(&gw, path, MASTER_KEY, &no_model), 400);
    assert_eq!(err["param"], "model");
    let no_file = form(&[("model", "whisper")], None);
    let err = e2e::assert_error(&transcribe(&gw, path, MASTER_KEY, &no_file), 400);
    assert_eq!(err["param"], "file");
    let cut = &form(&[("model", "whisper")], Some(("talk.wav", 100)))[..60];
    e2e::assert_error(&transcribe(&gw, path, MASTER_KEY, cut), 400);
    let json_body = json!({"model": "whisper", "file": "x"}).to_string();
    let auth = format!("Bearer {MASTER_KEY}");
    let resp = gw.call(
        "POST",
        path,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        json_body.as_bytes(),
    );
    let err = e2e::assert_error(&resp, 400);
    assert!(
        e2e::error_message(&err).contains("multipart/form-data"),
        "{err:?}"
    );
    let body = form(&[("model", "claude")], Some(("talk.wav", 100)));
    let err = e2e::assert_error(&transcribe(&gw, path, MASTER_KEY, &body), 400);
    assert!(
        e2e::error_message(&err)
            .contains("provider anthropic does not serve /audio/transcriptions"),
        "{err:?}"
    );
    let big = form(&[("model", "whisper")], Some(("talk.wav", 2 << 20)));
    e2e::assert_error(&transcribe(&gw, path, MASTER_KEY, &big), 413);
    e2e::assert_error(&transcribe(&gw, path, "sk-wrong", &body), 401);
    assert_eq!(
        mock.stats()["received"],
        upstream_calls,
        "refused requests never reach the upstream"
    );
}

#[test]
fn budgets_and_rate_limits_apply_to_transcriptions() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock);
    let key = |fields: Value| {
        let resp = gw.post("/key/generate", &fields);
        assert_eq!(resp.status, 200, "{}", resp.text());
        resp.json()["key"].as_str().unwrap().to_string()
    };
    let path = "/v1/audio/transcriptions";
    // Ten seconds cost 0.001: the first call passes the 0.0005 budget (a
    // transcription's length is unknown until answered), the next is refused.
    let budgeted = key(json!({"max_budget": 0.0005}));
    let body = form(&[("model", "whisper")], Some(("talk.wav", 160_000)));
    let first = transcribe(&gw, path, &budgeted, &body);
    assert_eq!(first.status, 200, "{}", first.text());
    let spend = e2e::eventually("the key's spend", Duration::from_secs(5), || {
        let info = gw.get(&format!("/key/info?key={budgeted}")).json();
        let spend = info["info"]["spend"].as_f64()?;
        (spend > 0.0).then_some(spend)
    });
    assert!(close(spend, 0.001), "{spend}");
    let err = e2e::assert_error(&transcribe(&gw, path, &budgeted, &body), 422);
    assert!(
        e2e::error_message(&err).contains("Budget has been exceeded"),
        "{err:?}"
    );

    let limited = key(json!({"rpm_limit": 1}));
    let small = form(&[("model", "whisper")], Some(("talk.wav", 100)));
    assert_eq!(transcribe(&gw, path, &limited, &small).status, 200);
    e2e::assert_error(&transcribe(&gw, path, &limited, &small), 429);
}

#[test]
fn translations_forward_the_form_and_bill_the_seconds_reported() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock);
    let path = "/v1/audio/translations";
    // verbose_json: the duration (three seconds of the mock's audio).
    let body = form(
        &[("model", "whisper"), ("response_format", "verbose_json")],
        Some(("talk.wav", 48_000)),
    );
    let resp = transcribe(&gw, path, MASTER_KEY, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let answer = resp.json();
    assert_eq!(answer["text"], "mock translation of talk.wav");
    assert_eq!(
        answer["task"], "translate",
        "the upstream's translation API"
    );
    let row = spend_row(&gw, &resp);
    assert_eq!(row["call_type"], "atranscription");
    let spent = row["spend"].as_f64().unwrap();
    assert!(close(spent, 3.0 * 0.0001), "{spent}");
    // Azure, without /v1.
    let body = form(
        &[
            ("model", "whisper-azure"),
            ("response_format", "verbose_json"),
        ],
        Some(("talk.wav", 16_000)),
    );
    let resp = transcribe(&gw, "/audio/translations", MASTER_KEY, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["task"], "translate");
    // `json` reports no length: relayed, costs nothing (as LiteLLM's).
    let body = form(&[("model", "whisper")], Some(("talk.mp3", 100)));
    let resp = transcribe(&gw, path, MASTER_KEY, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json(), json!({"text": "mock translation of talk.mp3"}));
    // The upstream's refusals reach the client: a transcription-only
    // field, a model without translations.
    let body = form(
        &[("model", "whisper"), ("language", "de")],
        Some(("talk.wav", 100)),
    );
    let err = e2e::assert_error(&transcribe(&gw, path, MASTER_KEY, &body), 400);
    assert!(e2e::error_message(&err).contains("language"), "{err:?}");
    let body = form(&[("model", "transcriber")], Some(("talk.wav", 100)));
    e2e::assert_error(&transcribe(&gw, path, MASTER_KEY, &body), 400);
    // A malformed form never reaches the upstream; other providers: 400.
    let err = e2e::assert_error(&transcribe(&gw, path, MASTER_KEY, b"--nope"), 400);
    assert!(!e2e::error_message(&err).is_empty());
    let body = form(&[("model", "claude")], Some(("talk.wav", 100)));
    e2e::assert_error(&transcribe(&gw, path, MASTER_KEY, &body), 400);
}
