//! `openai_moderation` and `bedrock` guardrails (issue 37) against the real
//! gateway and the faithful mock provider: OpenAI's moderation endpoint
//! (which demands a bearer key and flags `mock-flagged`) and Bedrock's
//! ApplyGuardrail API (which recomputes the SigV4 signature with the
//! mock's secret, blocks `mock-guardrail-block` and anonymizes e-mail
//! addresses). A scripted upstream records what reached the model.

use e2e::{assert_error, base_config, free_port, openai_model, Gateway, MockServer, RawUpstream};
use serde_json::{json, Value};

/// The secret access key the mock's SigV4 check signs with.
const AWS_SECRET: &str = "mock-aws-secret-access-key";

/// An upstream answering every call with an OpenAI chat answer `text`.
fn upstream(text: &str) -> RawUpstream {
    let answer = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "upstream-gpt",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}})
    .to_string();
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
        answer.len()
    );
    RawUpstream::start(reply.into_bytes(), false)
}

fn start(raw: &RawUpstream, guardrails: Vec<Value>) -> Gateway {
    let mut config = base_config(free_port());
    config["model_list"][0] = openai_model("gpt-4o", "dep-1", &raw.api_base(), json!({}));
    config["guardrails"] = Value::Array(guardrails);
    Gateway::start_json(&config, &[])
}

fn guardrail(name: &str, params: Value) -> Value {
    json!({"guardrail_name": name, "litellm_params": params})
}

fn chat(gw: &Gateway, messages: Value, guardrails: Value) -> e2e::Response {
    gw.post(
        "/v1/chat/completions",
        &json!({"model": "gpt-4o", "guardrails": guardrails, "messages": messages}),
    )
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

fn sent(raw: &RawUpstream) -> String {
    String::from_utf8_lossy(&raw.last_request()).into_owned()
}

#[test]
fn openai_moderation_refuses_a_flagged_prompt_or_answer_as_litellm_does() {
    let mock = MockServer::start(&[]);
    let raw = upstream("here is mock-flagged text");
    let moderation = |mode: &str| {
        json!({"guardrail": "openai_moderation", "mode": mode, "api_key": "sk-mod",
            "api_base": mock.api_base()})
    };
    let gw = start(
        &raw,
        vec![
            guardrail("mod-in", moderation("pre_call")),
            guardrail("mod-out", moderation("post_call")),
        ],
    );
    // A flagged prompt: LiteLLM's 400 with the violated categories, and no
    // upstream call.
    let err = assert_error(
        &chat(&gw, user("you are mock-flagged"), json!(["mod-in"])),
        400,
    );
    assert_eq!(err["message"], "Violated OpenAI moderation policy");
    let detail = &err["provider_specific_fields"];
    assert_eq!(detail["error"], "Violated OpenAI moderation policy");
    assert_eq!(
        detail["moderation_result"]["violated_categories"],
        json!(["harassment"])
    );
    assert!(detail["moderation_result"]["category_scores"]["harassment"].as_f64() > Some(0.5));
    assert_eq!(raw.requests(), 0);
    // Only the last run of user messages is moderated (LiteLLM's
    // get_last_user_message): an old flagged turn passes.
    let history = json!([
        {"role": "user", "content": "mock-flagged long ago"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "a clean question"},
    ]);
    let resp = chat(&gw, history, json!(["mod-in"]));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("x-litellm-applied-guardrails"), Some("mod-in"));
    assert_eq!(raw.requests(), 1);
    // post_call: the answer is moderated and refused.
    let err = assert_error(&chat(&gw, user("hello"), json!(["mod-out"])), 400);
    assert_eq!(err["message"], "Violated OpenAI moderation policy");
    // The calls carried the configured key as a bearer token.
    let stats = mock.stats();
    assert_eq!(stats["by_key"]["sk-mod"]["requests"], 3, "{stats}");
}

#[test]
fn openai_moderation_failures_refuse_and_a_missing_key_stops_start_up() {
    let raw = upstream("fine");
    let down = format!("http://127.0.0.1:{}/v1", free_port());
    let params = json!({"guardrail": "openai_moderation", "mode": "pre_call",
        "api_key": "sk-mod", "api_base": down, "timeout": 5});
    let gw = start(&raw, vec![guardrail("mod", params)]);
    let err = assert_error(&chat(&gw, user("hello"), json!(["mod"])), 500);
    let message = err["message"].as_str().unwrap();
    assert!(message.starts_with("OpenAI Moderation failed"), "{message}");
    assert!(message.contains("'mod'"), "{message}");
    assert_eq!(raw.requests(), 0);

    let mut config = base_config(free_port());
    config["guardrails"] = json!([guardrail("mod", json!({"guardrail": "openai_moderation"}))]);
    let mut gw = Gateway::spawn(
        &e2e::to_yaml(&config),
        &[("OPENAI_API_KEY", "")],
        free_port(),
        &[],
    );
    let status = gw
        .wait_exit(std::time::Duration::from_secs(20))
        .expect("the gateway refuses the config and exits");
    assert!(!status.success());
    let out = gw.output();
    assert!(
        out.contains("OPENAI_API_KEY") && out.contains("\"mod\""),
        "{out}"
    );
}

fn bedrock(mock: &MockServer, mode: &str, secret: &str) -> Value {
    json!({"guardrail": "bedrock", "mode": mode, "guardrailIdentifier": "gr-corp",
        "guardrailVersion": "DRAFT", "aws_access_key_id": "AKIDMOCK",
        "aws_secret_access_key": secret, "aws_region_name": "us-east-1",
        "aws_bedrock_runtime_endpoint": format!("http://127.0.0.1:{}", mock.port())})
}

#[test]
fn bedrock_guardrail_signs_its_calls_masks_and_blocks() {
    let mock = MockServer::start(&[]);
    let raw = upstream("write to bob@example.com soon");
    let gw = start(
        &raw,
        vec![
            guardrail("bedrock-in", bedrock(&mock, "pre_call", AWS_SECRET)),
            guardrail("bedrock-out", bedrock(&mock, "post_call", AWS_SECRET)),
            guardrail(
                "bedrock-badkey",
                bedrock(&mock, "pre_call", "not-the-secret"),
            ),
        ],
    );
    // Anonymized: the model sees Bedrock's masked text.
    let resp = chat(&gw, user("mail alice@corp.io today"), json!(["bedrock-in"]));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(sent(&raw).contains("mail {EMAIL} today"), "{}", sent(&raw));
    assert!(!sent(&raw).contains("alice@corp.io"));
    // Blocked: LiteLLM's 400 with the guardrail's message, no upstream call.
    let calls = raw.requests();
    let err = assert_error(
        &chat(
            &gw,
            user("please mock-guardrail-block this"),
            json!(["bedrock-in"]),
        ),
        400,
    );
    assert_eq!(err["message"], "Violated guardrail policy");
    let detail = &err["provider_specific_fields"];
    assert_eq!(
        detail["bedrock_guardrail_response"],
        "Sorry, the model cannot answer this question."
    );
    assert_eq!(detail["guardrailIdentifier"], "gr-corp");
    assert_eq!(detail["guardrailVersion"], "DRAFT");
    assert_eq!(raw.requests(), calls);
    // post_call: the answer is masked (source OUTPUT).
    let resp = chat(&gw, user("hello"), json!(["bedrock-out"]));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "write to {EMAIL} soon"
    );
    // A wrong secret: the mock refuses the signature, the request fails
    // closed (LiteLLM's `Bedrock guardrail failed`) and reaches no model.
    let calls = raw.requests();
    let err = assert_error(&chat(&gw, user("hello"), json!(["bedrock-badkey"])), 500);
    let message = err["message"].as_str().unwrap();
    assert!(message.starts_with("Bedrock guardrail failed"), "{message}");
    assert!(message.contains("403"), "{message}");
    assert_eq!(raw.requests(), calls);
}

#[test]
fn bedrock_guardrail_without_its_identifier_or_keys_stops_start_up() {
    for (params, named) in [
        (
            json!({"guardrail": "bedrock", "guardrailVersion": "1",
            "aws_access_key_id": "a", "aws_secret_access_key": "s"}),
            "guardrailIdentifier",
        ),
        (
            json!({"guardrail": "bedrock", "guardrailIdentifier": "g", "guardrailVersion": "1"}),
            "aws_access_key_id",
        ),
    ] {
        let mut config = base_config(free_port());
        config["guardrails"] = json!([guardrail("corp-bedrock", params)]);
        let env = [("AWS_ACCESS_KEY_ID", ""), ("AWS_SECRET_ACCESS_KEY", "")];
        let mut gw = Gateway::spawn(&e2e::to_yaml(&config), &env, free_port(), &[]);
        let status = gw
            .wait_exit(std::time::Duration::from_secs(20))
            .expect("the gateway refuses the config and exits");
        assert!(!status.success());
        let out = gw.output();
        assert!(out.contains(named) && out.contains("corp-bedrock"), "{out}");
    }
}
