//! Limits beyond the key's rows: an organization's per-model limits
//! (LiteLLM's `model_per_organization`, below), and a key's per-tag request
//! limits, as LiteLLM's `tag_per_key` descriptor
//! enforces them: `tag_rpm_limit` (kept in the key's `metadata`) gives each
//! tag it names its own counter `{key}:{tag}`, so requests carrying that tag
//! (`tags`, or `metadata.tags`) are refused past it with LiteLLM's 429, while
//! other tags and untagged requests fall to the key's own limits; a limit
//! that is no whole number is refused when the key is made.

use e2e::{assert_error, error_message, Gateway, MASTER_KEY};
use serde_json::{json, Value};

fn start() -> Gateway {
    let config = json!({
        "model_list": [{"model_name": "m",
            "litellm_params": {"model": "mock/m", "mock_response": "hi"}}],
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start_json(&config, &[])
}

fn chat(gw: &Gateway, key: &str, tags: Value) -> e2e::Response {
    let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    if !tags.is_null() {
        body["tags"] = tags;
    }
    gw.post_as(key, "/v1/chat/completions", &body)
}

#[test]
fn a_tag_with_a_limit_is_counted_apart_from_the_keys_other_requests() {
    let gw = start();
    let resp = gw.post(
        "/key/generate",
        &json!({"tag_rpm_limit": {"batch": 2, "bulk": 1}}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let key = resp.json()["key"].as_str().unwrap().to_string();

    assert_eq!(chat(&gw, &key, json!(["batch"])).status, 200);
    assert_eq!(chat(&gw, &key, json!(["batch", "batch"])).status, 200);
    let refused = chat(&gw, &key, json!(["batch"]));
    let err = assert_error(&refused, 429);
    assert!(
        error_message(&err).starts_with("Rate limit exceeded for tag_per_key: "),
        "{err:?}"
    );
    // Other tags and untagged requests are not held by that counter.
    for tags in [json!(["interactive"]), Value::Null] {
        assert_eq!(chat(&gw, &key, tags).status, 200);
    }
    assert_eq!(chat(&gw, &key, json!(["bulk"])).status, 200);
    assert_eq!(chat(&gw, &key, json!(["interactive", "bulk"])).status, 429);
    // `metadata.tags` carries them too.
    let body = json!({"model": "m", "metadata": {"tags": ["batch"]},
        "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(gw.post_as(&key, "/v1/chat/completions", &body).status, 429);

    // Another key's counters are its own.
    let other = gw.post("/key/generate", &json!({"tag_rpm_limit": {"batch": 1}}));
    let other = other.json()["key"].as_str().unwrap().to_string();
    assert_eq!(chat(&gw, &other, json!(["batch"])).status, 200);

    let bad = gw.post(
        "/key/generate",
        &json!({"tag_rpm_limit": {"batch": "lots"}}),
    );
    assert_eq!(assert_error(&bad, 400)["param"], "tag_rpm_limit.batch");
}

/// An organization's per-model limits (`model_rpm_limit` in its
/// `metadata`, LiteLLM's `model_per_organization`): one counter per model
/// shared by the keys of all its teams; other models are not held by it.
#[test]
fn an_organizations_per_model_limit_is_shared_by_the_keys_of_its_teams() {
    let config = json!({
        "model_list": [
            {"model_name": "m", "litellm_params": {"model": "mock/m", "mock_response": "hi"}},
            {"model_name": "n", "litellm_params": {"model": "mock/n", "mock_response": "hi"}},
        ],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start_json(&config, &[]);
    let ok = |resp: e2e::Response| {
        assert_eq!(resp.status, 200, "{}", resp.text());
        resp.json()
    };
    ok(gw.post(
        "/organization/new",
        &json!({"organization_id": "acme", "organization_alias": "Acme",
            "model_rpm_limit": {"m": 2}}),
    ));
    let mut keys = Vec::new();
    for team in ["red", "blue"] {
        ok(gw.post(
            "/team/new",
            &json!({"team_id": team, "organization_id": "acme"}),
        ));
        let key = ok(gw.post("/key/generate", &json!({"team_id": team})));
        keys.push(key["key"].as_str().unwrap().to_string());
    }
    let ask = |key: &str, model: &str| {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        gw.post_as(key, "/v1/chat/completions", &body)
    };
    assert_eq!(ask(&keys[0], "m").status, 200);
    assert_eq!(ask(&keys[1], "m").status, 200);
    let refused = ask(&keys[0], "m");
    let err = assert_error(&refused, 429);
    assert!(
        error_message(&err).starts_with("Rate limit exceeded for model_per_organization: acme:m"),
        "{err:?}"
    );
    assert_eq!(
        ask(&keys[1], "m").status,
        429,
        "shared by the other team's key"
    );
    assert_eq!(ask(&keys[1], "n").status, 200, "another model");
}
