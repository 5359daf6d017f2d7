//! `POST /v1/audio/speech` (also `/audio/speech`) on OpenAI and Azure
//! OpenAI deployments of the faithful mock (OpenAI's checks, chunked binary
//! audio of the asked format): the audio relayed as it arrives (chunked,
//! with the upstream's content type), spend rows with call type `aspeech`
//! at the price map's `input_cost_per_character` for the input's
//! characters that are not white space (LiteLLM's count), budgets and rate
//! limits as on chat, and clear 400s for what is not served.

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};

fn start(mock: &MockServer) -> Gateway {
    let config = json!({
        "model_list": [
            {"model_name": "tts", "litellm_params": {"model": "openai/tts-1", "api_key": "sk-up", "api_base": mock.api_base()}},
            {"model_name": "tts-azure", "litellm_params": {"model": "azure/tts-1", "api_key": "az-key", "api_version": "2025-03-01-preview", "api_base": format!("http://127.0.0.1:{}", mock.port())}},
            {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-x", "api_key": "k", "api_base": mock.api_base()}},
        ],
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start(&to_yaml(&config), &[])
}

#[test]
fn speech_is_relayed_as_audio_and_billed_per_character() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock);

    // 3000 characters: 192,000 bytes of audio in 47 pieces.
    let input = "word ".repeat(600);
    let resp = gw.post(
        "/v1/audio/speech",
        &json!({"model": "tts", "input": input, "voice": "alloy"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("content-type"), Some("audio/mpeg"));
    assert_eq!(
        resp.header("transfer-encoding"),
        Some("chunked"),
        "relayed as it arrives, not gathered first"
    );
    assert_eq!(resp.body.len(), 3000 * 64);
    assert!(resp.body.starts_with(b"ID3"));
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    let row = gw.spend_row(&call_id);
    assert_eq!(row["call_type"], "aspeech");
    assert_eq!(row["model"], "tts-1");
    // tts-1: 1.5e-5 a character; LiteLLM counts the 2400 that are not spaces.
    let spent = row["spend"].as_f64().unwrap();
    assert!((spent - 2400.0 * 1.5e-5).abs() < 1e-9, "{spent}");

    let resp = gw.post(
        "/audio/speech",
        &json!({"model": "tts-azure", "input": "Guten Tag", "voice": "nova", "response_format": "flac"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("content-type"), Some("audio/flac"));
    assert!(resp.body.starts_with(b"fLaC"));
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    let spent = row["spend"].as_f64().unwrap();
    assert!((spent - 8.0 * 1.5e-5).abs() < 1e-12, "azure/tts-1: {spent}");

    // The upstream's own checks reach the client as its error.
    let err = e2e::assert_error(
        &gw.post(
            "/v1/audio/speech",
            &json!({"model": "tts", "input": "hi", "voice": "bob"}),
        ),
        400,
    );
    assert!(e2e::error_message(&err).contains("'voice'"), "{err:?}");

    let upstream_calls = mock.stats()["received"].clone();
    for (body, param) in [
        (json!({"model": "tts", "voice": "alloy"}), "input"),
        (
            json!({"model": "tts", "input": ["a"], "voice": "alloy"}),
            "input",
        ),
        (
            json!({"model": "tts", "input": "a", "voice": "alloy", "stream": true}),
            "stream",
        ),
    ] {
        let err = e2e::assert_error(&gw.post("/v1/audio/speech", &body), 400);
        assert_eq!(err["param"], param, "{body}");
    }
    let err = e2e::assert_error(
        &gw.post(
            "/v1/audio/speech",
            &json!({"model": "claude", "input": "x", "voice": "alloy"}),
        ),
        400,
    );
    assert!(
        e2e::error_message(&err).contains("provider anthropic does not serve /audio/speech"),
        "{err:?}"
    );
    let resp = gw.call(
        "POST",
        "/v1/audio/speech",
        &[("Content-Type", "application/json")],
        json!({"model": "tts", "input": "x", "voice": "alloy"})
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
fn budgets_and_rate_limits_apply_to_speech() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock);
    let key = |fields: Value| {
        let resp = gw.post("/key/generate", &fields);
        assert_eq!(resp.status, 200, "{}", resp.text());
        resp.json()["key"].as_str().unwrap().to_string()
    };
    // 20 characters cost 0.0003: reserved whole, over a 0.0002 budget.
    let budgeted = key(json!({"max_budget": 0.0002}));
    let long = json!({"model": "tts", "input": "abcdefghijklmnopqrst", "voice": "alloy"});
    let err = e2e::assert_error(&gw.post_as(&budgeted, "/v1/audio/speech", &long), 422);
    assert!(
        e2e::error_message(&err).contains("Budget has been exceeded"),
        "{err:?}"
    );
    let short = json!({"model": "tts", "input": "abcde", "voice": "alloy"});
    assert_eq!(
        gw.post_as(&budgeted, "/v1/audio/speech", &short).status,
        200
    );

    let limited = key(json!({"rpm_limit": 1}));
    assert_eq!(gw.post_as(&limited, "/v1/audio/speech", &short).status, 200);
    e2e::assert_error(&gw.post_as(&limited, "/v1/audio/speech", &short), 429);
}

#[test]
fn post_call_guardrails_leave_generated_audio_streaming() {
    let mock = MockServer::start(&[]);
    let config = json!({
        "model_list": [
            {"model_name": "tts", "litellm_params": {"model": "openai/tts-1", "api_key": "sk-up", "api_base": mock.api_base()}},
        ],
        "guardrails": [{
            "guardrail_name": "answers",
            "litellm_params": {
                "guardrail": "litellm_content_filter",
                "mode": "post_call",
                "default_on": true,
                "blocked_words": [{"keyword": "project falcon", "action": "BLOCK"}],
            },
        }],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let resp = gw.post(
        "/v1/audio/speech",
        &json!({"model": "tts", "input": "word ".repeat(600), "voice": "alloy"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("transfer-encoding"), Some("chunked"));
    assert_eq!(resp.body.len(), 3000 * 64);
}
