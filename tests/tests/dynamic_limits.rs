//! LiteLLM's `rpm_limit_type: dynamic` on a key (issue 35,
//! `parallel_request_limiter_v3._get_enforced_limit`): the key's rpm limit
//! binds only while a deployment of the group it asks for has failed more
//! than once (`DYNAMIC_RATE_LIMIT_ERROR_THRESHOLD_PER_MINUTE`) this minute.

use e2e::{assert_error, openai_model, Gateway, MASTER_KEY};
use serde_json::{json, Value};

fn chat(gw: &Gateway, key: &str, model: &str) -> u16 {
    let body = json!({"model": model, "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}]});
    gw.post_as(key, "/v1/chat/completions", &body).status
}

fn key(gw: &Gateway, fields: Value) -> String {
    let made = gw.post("/key/generate", &fields).expect_status(200).json();
    made["key"].as_str().expect("key").to_string()
}

#[test]
fn a_dynamic_rpm_limit_binds_only_while_the_group_fails() {
    // Nothing listens on the broken deployment's port: every call fails.
    let dead = format!("http://127.0.0.1:{}/v1", e2e::free_port());
    let config = json!({
        "model_list": [
            {"model_name": "healthy", "litellm_params": {"model": "mock/h", "mock_response": "ok"}},
            openai_model("broken", "broken-1", &dead, json!({})),
        ],
        "router_settings": {"num_retries": 0},
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start_json(&config, &[]);
    // Without the type, a limit of 1 a minute refuses the second request.
    let fixed = key(&gw, json!({"rpm_limit": 1}));
    assert_eq!(chat(&gw, &fixed, "healthy"), 200);
    assert_eq!(chat(&gw, &fixed, "healthy"), 429);
    // Dynamic: not enforced while the group is healthy.
    let dynamic = key(&gw, json!({"rpm_limit": 1, "rpm_limit_type": "dynamic"}));
    for _ in 0..3 {
        assert_eq!(chat(&gw, &dynamic, "healthy"), 200);
    }
    // On the failing group: two failures pass the threshold, then the
    // limit binds: one more request is admitted (and fails), the next is
    // refused by the limit.
    let statuses: Vec<u16> = (0..3).map(|_| chat(&gw, &dynamic, "broken")).collect();
    assert!(
        statuses.iter().all(|s| *s != 200 && *s != 429),
        "upstream failures, no refusal yet: {statuses:?}"
    );
    let body = json!({"model": "broken", "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}]});
    let err = assert_error(&gw.post_as(&dynamic, "/v1/chat/completions", &body), 429);
    assert!(
        err["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Rate limit exceeded"),
        "{err:?}"
    );
}
