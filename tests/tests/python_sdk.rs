//! The official OpenAI and Anthropic Python SDKs against the gateway
//! (`tests/python/test_openai_sdk.py`, `tests/python/test_anthropic_sdk.py`):
//! OpenAI's SDK (chat, streaming, embeddings, `responses.create` passed through or bridged) to
//! an OpenAI-compatible, an Azure, an Anthropic, a Bedrock, a Gemini and
//! Vertex AI (Gemini, Claude) deployments, embeddings on each provider's
//! own API; Anthropic's SDK on `/v1/messages` to an Anthropic deployment and
//! Claude on Vertex AI (passed through), an OpenAI one, a Bedrock one, a
//! Gemini one and Gemini on Vertex AI (translated).

use std::time::Duration;

use e2e::config::add_model;
use e2e::{base_config, openai_model, Gateway, MockServer, MASTER_KEY};
use serde_json::json;

/// Runs `tests/python/<script>` with `envs`; panics with its output (and the
/// gateway's) unless it exits 0 within two minutes.
fn run_script(script: &str, envs: &[(&str, String)], gw: &Gateway) {
    let mut all: Vec<(&str, &str)> = vec![("GATEWAY_MASTER_KEY", MASTER_KEY)];
    all.extend(envs.iter().map(|(k, v)| (*k, v.as_str())));
    let run = e2e::python::run_script(script, &all, Duration::from_secs(120));
    let output = run.output;
    println!("{output}");
    let hint = if output.contains("No module named") {
        "\n(the interpreter lacks the openai or anthropic package: run scripts/test.sh)"
    } else {
        ""
    };
    match run.status {
        Some(s) => assert!(
            s.success(),
            "{script} checks failed ({s}) with {envs:?}:\n{output}{hint}\n{}",
            gw.output()
        ),
        None => panic!("{script} timed out after 120 s:\n{output}"),
    }
}

/// A gateway on one mock with an OpenAI-compatible (`gpt-4o`), an
/// embeddings, an Azure (`azure-gpt`, `azure-embed`), an Anthropic
/// (`claude`), Bedrock, Gemini and Vertex AI (Gemini, embeddings, Claude)
/// groups.
fn gateway(mock: &MockServer) -> Gateway {
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model(
            "text-embedding-3-small",
            "dep-embed",
            &mock.api_base(),
            json!({"model": "openai/upstream-embed"}),
        ),
    );
    let bare = format!("http://127.0.0.1:{}", mock.port());
    for (group, model) in [
        ("azure-gpt", "azure/gpt-4o-deployment"),
        ("azure-embed", "azure/embed-deployment"),
    ] {
        add_model(
            &mut config,
            json!({"model_name": group, "litellm_params": {
                "model": model, "api_base": bare, "api_key": "azure-key", "api_version": "2024-10-21",
            }}),
        );
    }
    add_model(
        &mut config,
        json!({"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-20250514", "api_base": bare, "api_key": "sk-ant-upstream",
        }}),
    );
    add_model(
        &mut config,
        json!({"model_name": "bedrock-claude", "litellm_params": {
            "model": "bedrock/converse/anthropic.claude-3-5-sonnet-20240620-v1:0",
            "aws_bedrock_runtime_endpoint": bare,
            "aws_access_key_id": "AKIDMOCK",
            "aws_secret_access_key": "mock-aws-secret-access-key",
            "aws_region_name": "us-east-1",
        }}),
    );
    for (group, model) in [
        ("gemini-flash", "gemini/gemini-2.0-flash"),
        ("gemini-embed", "gemini/text-embedding-004"),
    ] {
        add_model(
            &mut config,
            json!({"model_name": group, "litellm_params": {
                "model": model, "api_base": bare, "api_key": "mock-gemini-api-key",
            }}),
        );
    }
    add_model(
        &mut config,
        json!({"model_name": "bedrock-embed", "litellm_params": {
            "model": "bedrock/cohere.embed-english-v3",
            "aws_bedrock_runtime_endpoint": bare,
            "aws_access_key_id": "AKIDMOCK",
            "aws_secret_access_key": "mock-aws-secret-access-key",
            "aws_region_name": "us-east-1",
        }}),
    );
    // The mock's service account, its tokens from the mock's token endpoint.
    let key = include_str!("../../loadgen/src/mock/api/vertex/service_account.json").replace(
        "https://oauth2.googleapis.com/token",
        &format!("{bare}/token"),
    );
    for (group, model) in [
        ("vertex-gemini", "vertex_ai/gemini-2.0-flash"),
        ("vertex-embed", "vertex_ai/text-embedding-005"),
        ("vertex-claude", "vertex_ai/claude-sonnet-4@20250514"),
    ] {
        add_model(
            &mut config,
            json!({"model_name": group, "litellm_params": {
                "model": model, "api_base": bare, "vertex_credentials": key,
            }}),
        );
    }
    Gateway::start_json(&config, &[])
}

#[test]
fn openai_python_sdk() {
    let mock = MockServer::start(&[]);
    let gw = gateway(&mock);
    let base_url = format!("http://127.0.0.1:{}/v1", gw.port());
    for (model, embeddings) in [
        ("gpt-4o", "text-embedding-3-small"),
        ("azure-gpt", "azure-embed"),
        ("claude", "text-embedding-3-small"),
        ("bedrock-claude", "bedrock-embed"),
        ("gemini-flash", "gemini-embed"),
        ("vertex-gemini", "vertex-embed"),
        ("vertex-claude", "text-embedding-3-small"),
    ] {
        run_script(
            "test_openai_sdk.py",
            &[
                ("GATEWAY_BASE_URL", base_url.clone()),
                ("GATEWAY_MODEL", model.to_string()),
                ("GATEWAY_EMBEDDING_MODEL", embeddings.to_string()),
            ],
            &gw,
        );
    }
}

#[test]
fn anthropic_python_sdk() {
    let mock = MockServer::start(&[]);
    let gw = gateway(&mock);
    let base_url = format!("http://127.0.0.1:{}", gw.port());
    for (model, tools) in [
        ("claude", "1"),
        ("gpt-4o", "0"),
        ("bedrock-claude", "1"),
        ("gemini-flash", "1"),
        ("vertex-gemini", "1"),
        ("vertex-claude", "1"),
    ] {
        run_script(
            "test_anthropic_sdk.py",
            &[
                ("GATEWAY_BASE_URL", base_url.clone()),
                ("GATEWAY_MODEL", model.to_string()),
                ("GATEWAY_TOOLS", tools.to_string()),
            ],
            &gw,
        );
    }
}

#[test]
fn openai_python_sdk_cache_controls() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    config["litellm_settings"] = json!({"cache": true, "cache_params": {"type": "local"}});
    let gw = Gateway::start_json(&config, &[]);
    let base_url = format!("http://127.0.0.1:{}/v1", gw.port());
    run_script(
        "test_openai_cache.py",
        &[
            ("GATEWAY_BASE_URL", base_url),
            ("GATEWAY_MODEL", "gpt-4o".to_string()),
        ],
        &gw,
    );
    // The hit and the played-back stream made no upstream call.
    assert_eq!(mock.stats()["requests"], 2);
}

#[test]
fn sdk_streams_through_the_response_cache() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        json!({"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-3-5-sonnet-20241022",
            "api_base": format!("http://127.0.0.1:{}", mock.port()), "api_key": "sk-ant-upstream",
        }}),
    );
    config["litellm_settings"] = json!({"cache": true, "cache_params": {"type": "local"}});
    // One core: the local cache of every connection the SDKs open.
    let mut gw = Gateway::spawn(
        &e2e::to_yaml(&config),
        &[],
        e2e::free_port(),
        &["--workers", "1"],
    );
    gw.wait_ready(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("gateway did not start: {e}"));
    run_script(
        "test_sdk_cache_streams.py",
        &[
            (
                "GATEWAY_BASE_URL",
                format!("http://127.0.0.1:{}", gw.port()),
            ),
            ("GATEWAY_ANTHROPIC_MODEL", "claude".to_string()),
            ("GATEWAY_OPENAI_MODEL", "gpt-4o".to_string()),
        ],
        &gw,
    );
    // Each streamed miss made the only upstream call of its API; the
    // whole answers and the played-back streams made none.
    assert_eq!(mock.stats()["requests"], 2);
}

/// The OpenAI and Anthropic SDKs see a guardrail's block as LiteLLM's
/// clients do (a `BadRequestError` with LiteLLM's body; in a stream, the
/// error the SDK raises on the stream's error event) and its masks in
/// whole and streamed answers (`tests/python/test_sdk_guardrails.py`).
#[test]
fn sdks_see_guardrail_blocks_and_masks() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    config["model_list"][1]["litellm_params"]["mock_response"] =
        json!("write to carol@example.org today");
    add_model(
        &mut config,
        json!({"model_name": "local-ssn", "litellm_params": {
            "model": "mock/ssn", "mock_response": "your ssn is 123-45-6789 ok"}}),
    );
    config["guardrails"] = json!([
        {"guardrail_name": "no-secrets", "litellm_params": {
            "guardrail": "litellm_content_filter", "mode": "pre_call", "default_on": true,
            "blocked_words": [{"keyword": "Project Falcon", "action": "BLOCK"}]}},
        {"guardrail_name": "answer-mask", "litellm_params": {
            "guardrail": "litellm_content_filter", "mode": "post_call", "default_on": true,
            "patterns": [{"pattern_type": "prebuilt", "pattern_name": "email", "action": "MASK"}]}},
        {"guardrail_name": "answer-block", "litellm_params": {
            "guardrail": "litellm_content_filter", "mode": "post_call",
            "patterns": [{"pattern_type": "prebuilt", "pattern_name": "us_ssn", "action": "BLOCK"}]}},
    ]);
    let gw = Gateway::start_json(&config, &[]);
    run_script(
        "test_sdk_guardrails.py",
        &[
            (
                "GATEWAY_BASE_URL",
                format!("http://127.0.0.1:{}", gw.port()),
            ),
            ("GATEWAY_MASK_MODEL", "local-mock".to_string()),
            ("GATEWAY_SSN_MODEL", "local-ssn".to_string()),
        ],
        &gw,
    );
    assert_eq!(mock.stats()["requests"], 0, "the mocks are in process");
}
