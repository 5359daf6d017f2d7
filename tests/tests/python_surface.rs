//! The rest of the API surface through Python clients
//! (`tests/python/test_surface.py`): the official OpenAI SDK on Cohere chat,
//! streaming and embeddings, on moderations, image generation and edits, text to
//! speech, transcription and translation, httpx on `/v1/rerank`,
//! `/v2/rerank` and the `/anthropic/*` and `/gemini/*` pass-through routes,
//! against a gateway on the faithful mock.

use std::time::Duration;

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::json;

#[test]
fn openai_sdk_and_httpx_on_cohere_rerank_and_moderations() {
    let mock = MockServer::start(&["--completion-tokens", "4"]);
    let cohere = |group: &str, model: &str| {
        json!({"model_name": group, "litellm_params": {
            "model": model,
            "api_base": format!("http://127.0.0.1:{}", mock.port()),
            "api_key": "mock-cohere-api-key",
        }})
    };
    let config = json!({
        "model_list": [
            cohere("command", "cohere/command-r-08-2024"),
            cohere("embed", "cohere/embed-english-v3.0"),
            cohere("reranker", "cohere/rerank-v3.5"),
            {"model_name": "omni-moderation-latest", "litellm_params": {
                "model": "openai/omni-moderation-latest", "api_key": "sk-up", "api_base": mock.api_base(),
            }},
            {"model_name": "gpt-image", "litellm_params": {
                "model": "openai/gpt-image-1", "api_key": "sk-up", "api_base": mock.api_base(),
            }},
            {"model_name": "tts", "litellm_params": {
                "model": "openai/tts-1", "api_key": "sk-up", "api_base": mock.api_base(),
            }},
            {"model_name": "whisper", "litellm_params": {
                "model": "openai/whisper-1", "api_key": "sk-up", "api_base": mock.api_base(),
            }},
        ],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let upstream = format!("http://127.0.0.1:{}", mock.port());
    let gw = Gateway::start(
        &to_yaml(&config),
        &[
            ("ANTHROPIC_API_BASE", &upstream),
            ("ANTHROPIC_API_KEY", "sk-ant-upstream"),
            ("GEMINI_API_BASE", &upstream),
            ("GEMINI_API_KEY", "mock-gemini-api-key"),
        ],
    );
    let base_url = format!("http://127.0.0.1:{}/v1", gw.port());
    let run = e2e::python::run_script(
        "test_surface.py",
        &[
            ("GATEWAY_BASE_URL", &base_url),
            ("GATEWAY_MASTER_KEY", MASTER_KEY),
            ("GATEWAY_CHAT_MODEL", "command"),
            ("GATEWAY_EMBEDDING_MODEL", "embed"),
            ("GATEWAY_RERANK_MODEL", "reranker"),
            ("GATEWAY_MODERATION_MODEL", "omni-moderation-latest"),
            ("GATEWAY_IMAGE_MODEL", "gpt-image"),
            ("GATEWAY_SPEECH_MODEL", "tts"),
            ("GATEWAY_TRANSCRIBE_MODEL", "whisper"),
            ("GATEWAY_PASS_THROUGH", "1"),
        ],
        Duration::from_secs(120),
    );
    let text = run.output;
    let status = run
        .status
        .unwrap_or_else(|| panic!("test_surface.py timed out after 120 s:\n{text}"));
    assert!(status.success(), "{text}\n{}", gw.output());
    assert_eq!(text.matches("PASS ").count(), 11, "{text}");
}
