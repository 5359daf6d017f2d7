//! Drop-in gaps of issue 35, each beside what LiteLLM 1.110.2 does:
//! LiteLLM's reserved `user_api_key_*` metadata names never reach a
//! Messages or Responses upstream (its proxy deletes a client's before it
//! sets its own); a config's `prompts` (LiteLLM's prompt management, which
//! rewrites requests naming a `prompt_id`) stops start-up; key and team
//! fields LiteLLM acts on and this gateway does not are refused when set,
//! never stored unenforced.

use e2e::{assert_error, to_yaml, Gateway, RawUpstream, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// An upstream answering every request with `answer` as JSON.
fn upstream(answer: &Value) -> RawUpstream {
    let answer = answer.to_string();
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
        answer.len()
    );
    RawUpstream::start(reply.into_bytes(), false)
}

/// The JSON body of the last request `raw` read.
fn last_body(raw: &RawUpstream) -> Value {
    let bytes = raw.last_request();
    let at = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a request head");
    serde_json::from_slice(&bytes[at + 4..]).expect("a JSON body")
}

#[test]
fn reserved_metadata_names_never_reach_messages_or_responses_upstreams() {
    let claude = upstream(&json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
        "stop_sequence": null, "usage": {"input_tokens": 5, "output_tokens": 2},
    }));
    let gpt = upstream(&json!({
        "id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
        "model": "gpt-4o", "output": [{"type": "message", "id": "msg_1", "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": "hi", "annotations": []}]}],
        "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
    }));
    let config = json!({
        "model_list": [
            {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-x", "api_key": "k", "api_base": claude.api_base()}},
            {"model_name": "gpt", "litellm_params": {"model": "openai/gpt-4o", "api_key": "k", "api_base": gpt.api_base()}},
        ],
        "router_settings": {"num_retries": 0},
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let metadata = json!({
        "user_id": "u-1",
        "user_api_key_hash": "spoofed",
        "user_api_key_team_id": "someone-elses-team",
        "user_api_key_user_id": "admin",
    });
    let resp = gw.post(
        "/v1/messages",
        &json!({"model": "claude", "max_tokens": 5, "metadata": metadata,
                "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let sent = last_body(&claude);
    assert_eq!(sent["metadata"], json!({"user_id": "u-1"}), "{sent}");

    let mut metadata = metadata;
    metadata["note"] = json!("kept");
    let resp = gw.post(
        "/v1/responses",
        &json!({"model": "gpt", "input": "hi", "metadata": metadata}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let sent = last_body(&gpt);
    assert_eq!(
        sent["metadata"],
        json!({"user_id": "u-1", "note": "kept"}),
        "{sent}"
    );
}

/// LiteLLM's `prompts:` list makes a request's `prompt_id` select a
/// template that changes the messages (and model) sent upstream; this
/// gateway has no prompt management, so a config with one is refused
/// naming it (it used to start with a warning and drop `prompt_id`).
/// Without it LiteLLM ignores `prompt_id`, and so does the gateway.
#[test]
fn a_configs_prompts_stop_start_up_and_prompt_id_is_otherwise_ignored() {
    let mut config = json!({
        "model_list": [{"model_name": "m", "litellm_params": {"model": "mock/m", "mock_response": "hello"}}],
        "general_settings": {"master_key": MASTER_KEY},
        "prompts": [{"prompt_id": "greet", "litellm_params": {"prompt_integration": "dotprompt", "prompt_id": "greet"}}],
    });
    let mut gw = Gateway::spawn(&to_yaml(&config), &[], e2e::free_port(), &[]);
    let status = gw
        .wait_exit(Duration::from_secs(20))
        .expect("the gateway exits");
    assert!(!status.success());
    let out = gw.output();
    assert!(
        out.contains("prompts") && out.contains("prompt_id"),
        "{out}"
    );

    config.as_object_mut().expect("object").remove("prompts");
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let body = json!({"model": "m", "prompt_id": "greet",
                      "messages": [{"role": "user", "content": "hi"}]});
    let resp = gw.post("/v1/chat/completions", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
}

/// Key and team fields LiteLLM 1.110.2 acts on when serving requests or
/// managing keys, which this gateway does not: a 400 naming the field
/// when set to something (they used to be accepted and ignored); unset,
/// `null` or empty (LiteLLM's UI sends `router_settings: {}`) they pass.
#[test]
fn fields_litellm_acts_on_are_refused_when_set() {
    let config = json!({
        "model_list": [{"model_name": "m", "litellm_params": {"model": "mock/m", "mock_response": "hello"}}],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let refused = [
        (
            "/key/generate",
            json!({"router_settings": {"num_retries": 3}}),
            "router_settings",
        ),
        (
            "/key/generate",
            json!({"budget_fallbacks": {"m": ["m2"]}}),
            "budget_fallbacks",
        ),
        (
            "/key/generate",
            json!({"enable_prompt_caching": true}),
            "enable_prompt_caching",
        ),
        (
            "/key/generate",
            json!({"metadata": {"enable_prompt_caching": true}}),
            "metadata.enable_prompt_caching",
        ),
        (
            "/key/generate",
            json!({"config": {"model_list": []}}),
            "config",
        ),
        (
            "/key/generate",
            json!({"permissions": {"pii_masking": true}}),
            "permissions",
        ),
        (
            "/team/new",
            json!({"router_settings": {"fallbacks": []}}),
            "router_settings",
        ),
        (
            "/team/new",
            json!({"team_member_permissions": ["/key/generate"]}),
            "team_member_permissions",
        ),
    ];
    for (path, body, field) in refused {
        let err = assert_error(&gw.post(path, &body), 400);
        assert_eq!(err["param"], field, "{path} {body}: {err:?}");
        let message = e2e::error_message(&err);
        assert!(message.contains("leave it unset"), "{message}");
    }
    let accepted = [
        (
            "/key/generate",
            json!({"router_settings": {}, "config": {}, "permissions": {}, "budget_fallbacks": {},
                   "enable_prompt_caching": false}),
        ),
        (
            "/team/new",
            json!({"router_settings": {}, "team_member_permissions": ["/key/info", "/key/health"],
                   "team_member_key_duration": "30d"}),
        ),
    ];
    for (path, body) in accepted {
        let resp = gw.post(path, &body);
        assert_eq!(resp.status, 200, "{path} {body}: {}", resp.text());
    }
    let made = gw.post("/team/new", &json!({})).expect_status(200).json();
    let team = made["team_id"].as_str().expect("team id");
    let err = assert_error(
        &gw.post(
            "/team/update",
            &json!({"team_id": team, "router_settings": {"model_group_alias": {"a": "m"}}}),
        ),
        400,
    );
    assert_eq!(err["param"], "router_settings", "{err:?}");
}
