//! LiteLLM's model access groups on the real binary: a deployment's
//! `model_info.access_groups` (in the config or given to `/model/new`)
//! and a key's or team's `models` naming one of them grant the models of
//! its deployments (wildcard groups too), and nothing else; `/v1/models`
//! lists the models, `only_model_access_groups=true` the groups, and
//! `/model_group/info` the models a group grants (LiteLLM's
//! `_check_model_access_helper`, `get_key_models`, `get_complete_model_list`).

use e2e::{assert_error, chat_body, Gateway, MASTER_KEY};
use serde_json::{json, Value};

fn model(name: &str, groups: &[&str]) -> Value {
    json!({"model_name": name,
        "litellm_params": {"model": if name.ends_with('*') { "mock/*".to_string() } else { format!("mock/{name}") }, "mock_response": "hi"},
        "model_info": {"access_groups": groups}})
}

fn start() -> Gateway {
    let config = json!({
        "model_list": [
            model("gpt-a", &["beta"]),
            model("gpt-b", &["beta", "gamma"]),
            model("gpt-c", &[]),
            model("wild/*", &["wildcards"]),
        ],
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start_json(&config, &[])
}

fn ok(resp: e2e::Response) -> Value {
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()
}

fn key(gw: &Gateway, fields: Value) -> String {
    ok(gw.post("/key/generate", &fields))["key"]
        .as_str()
        .unwrap()
        .to_string()
}

fn ids(gw: &Gateway, key: &str, path: &str, field: &str) -> Vec<String> {
    let auth = format!("Bearer {key}");
    let body = ok(gw.call("GET", path, &[("Authorization", &auth)], b""));
    body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{path}: {body}"))
        .iter()
        .map(|m| m[field].as_str().unwrap().to_string())
        .collect()
}

fn chat_status(gw: &Gateway, key: &str, model: &str) -> u16 {
    gw.post_as(key, "/v1/chat/completions", &chat_body(model))
        .status
}

#[test]
fn a_key_naming_an_access_group_may_use_its_models_and_no_other() {
    let gw = start();
    let beta = key(&gw, json!({"models": ["beta"]}));
    assert_eq!(chat_status(&gw, &beta, "gpt-a"), 200);
    assert_eq!(chat_status(&gw, &beta, "gpt-b"), 200);
    let denied = gw.post_as(&beta, "/v1/chat/completions", &chat_body("gpt-c"));
    let err = assert_error(&denied, 403);
    assert_eq!(err["type"], "key_model_access_denied", "{err:?}");
    // The group's name is no model to call.
    assert_ne!(chat_status(&gw, &beta, "beta"), 200);

    let wild = key(&gw, json!({"models": ["wildcards"]}));
    assert_eq!(chat_status(&gw, &wild, "wild/anything"), 200);
    assert_eq!(chat_status(&gw, &wild, "gpt-a"), 403);

    assert_eq!(
        ids(&gw, &beta, "/v1/models", "id"),
        ["gpt-a", "gpt-b"],
        "the group's models, never its name"
    );
    assert_eq!(
        ids(&gw, &beta, "/models?only_model_access_groups=True", "id"),
        ["beta"]
    );
    assert_eq!(
        ids(
            &gw,
            &beta,
            "/v1/models?include_model_access_groups=true",
            "id"
        ),
        ["gpt-a", "gpt-b", "beta"]
    );
    assert_eq!(
        ids(
            &gw,
            MASTER_KEY,
            "/v1/models?only_model_access_groups=true",
            "id"
        ),
        ["beta", "gamma", "wildcards"]
    );
    assert_eq!(
        ids(&gw, &beta, "/model_group/info", "model_group"),
        ["gpt-a", "gpt-b"]
    );
    let info = ok(gw.get("/model/info?litellm_model_id=").expect_status(200));
    assert!(
        info.to_string().contains("\"access_groups\":[\"beta\"]"),
        "{info}"
    );
}

#[test]
fn a_team_naming_an_access_group_narrows_its_keys_to_the_group() {
    let gw = start();
    ok(gw.post(
        "/team/new",
        &json!({"team_id": "t-gamma", "models": ["gamma"]}),
    ));
    let k = key(&gw, json!({"team_id": "t-gamma"}));
    assert_eq!(chat_status(&gw, &k, "gpt-b"), 200);
    let denied = gw.post_as(&k, "/v1/chat/completions", &chat_body("gpt-a"));
    assert_error(&denied, 403);
    assert_eq!(ids(&gw, &k, "/v1/models", "id"), ["gpt-b"]);
}

#[test]
fn a_model_added_at_run_time_joins_its_access_groups() {
    let gw = start();
    let beta = key(&gw, json!({"models": ["beta"]}));
    assert_eq!(chat_status(&gw, &beta, "late"), 403, "in no group yet");
    let bad = gw.post(
        "/model/new",
        &json!({"model_name": "late",
            "litellm_params": {"model": "mock/late", "mock_response": "hi"},
            "model_info": {"access_groups": "beta"}}),
    );
    let err = assert_error(&bad, 400);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("model_info.access_groups must be a list of strings"),
        "{err:?}"
    );
    ok(gw.post("/model/new", &model("late", &["beta"])));
    assert_eq!(chat_status(&gw, &beta, "late"), 200);
    assert_eq!(
        ids(&gw, &beta, "/v1/models", "id"),
        ["gpt-a", "gpt-b", "late"]
    );
}
