//! LiteLLM config features operators rely on (issue 16):
//! `router_settings.model_group_alias` (hidden aliases too), tag-based
//! routing, and `general_settings.allowed_routes`. Upstreams are the
//! in-process `mock/` provider, each deployment answering its own text.

use e2e::{assert_error, error_message, Gateway, Response, MASTER_KEY};
use serde_json::{json, Value};

fn mock(group: &str, id: &str, reply: &str, extra: Value) -> Value {
    let mut params = json!({"model": format!("mock/{id}"), "mock_response": reply});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    json!({"model_name": group, "litellm_params": params, "model_info": {"id": id}})
}

/// A chat completion with `body`'s extra fields, as `key`.
fn chat_as(gw: &Gateway, key: &str, model: &str, extra: Value) -> Response {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let auth = format!("Bearer {key}");
    gw.call(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

fn reply(resp: Response) -> String {
    let body = resp.expect_status(200).json();
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no content: {body}"))
        .to_string()
}

fn model_ids(gw: &Gateway, key: &str) -> Vec<String> {
    let auth = format!("Bearer {key}");
    let body = gw
        .call("GET", "/v1/models", &[("Authorization", &auth)], b"")
        .expect_status(200)
        .json();
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn model_group_aliases_route_and_hidden_ones_are_not_listed() {
    let gw = Gateway::start_json(
        &json!({
            "model_list": [
                mock("chat-fast", "fast-1", "fast", json!({})),
                mock("chat-deep", "deep-1", "deep", json!({})),
            ],
            "router_settings": {"model_group_alias": {
                "gpt-4": "chat-fast",
                "internal": {"model": "chat-deep", "hidden": true},
                "shown": {"model": "chat-deep", "hidden": false},
            }},
            "general_settings": {"master_key": MASTER_KEY},
        }),
        &[],
    );
    assert_eq!(reply(chat_as(&gw, MASTER_KEY, "gpt-4", json!({}))), "fast");
    assert_eq!(
        reply(chat_as(&gw, MASTER_KEY, "internal", json!({}))),
        "deep"
    );
    let listed = model_ids(&gw, MASTER_KEY);
    assert!(
        listed.contains(&"gpt-4".to_string()) && listed.contains(&"shown".to_string()),
        "{listed:?}"
    );
    assert!(!listed.contains(&"internal".to_string()), "{listed:?}");

    // A key may list the alias or the group it serves.
    let key = gw
        .post("/key/generate", &json!({"models": ["gpt-4"]}))
        .expect_status(200)
        .json();
    let key = key["key"].as_str().unwrap();
    assert_eq!(reply(chat_as(&gw, key, "gpt-4", json!({}))), "fast");
    assert_error(&chat_as(&gw, key, "chat-deep", json!({})), 403);
    assert_error(&chat_as(&gw, key, "internal", json!({})), 403);
    assert_eq!(model_ids(&gw, key), ["gpt-4"]);
}

#[test]
fn tag_filtering_routes_by_the_request_tags_with_a_default() {
    let gw = Gateway::start_json(
        &json!({
            "model_list": [
                mock("tagged", "paid-1", "paid", json!({"tags": ["paid"]})),
                mock("tagged", "free-1", "free", json!({"tags": ["free", "trial"]})),
                mock("tagged", "default-1", "default", json!({"tags": ["default"]})),
                mock("strict", "a-1", "a", json!({"tags": ["a"]})),
                mock("strict", "b-1", "b", json!({})),
            ],
            "router_settings": {"enable_tag_filtering": true},
            "general_settings": {"master_key": MASTER_KEY},
        }),
        &[],
    );
    for _ in 0..6 {
        assert_eq!(
            reply(chat_as(
                &gw,
                MASTER_KEY,
                "tagged",
                json!({"tags": ["paid"]})
            )),
            "paid"
        );
        let meta = json!({"metadata": {"tags": ["trial"]}});
        assert_eq!(reply(chat_as(&gw, MASTER_KEY, "tagged", meta)), "free");
        assert_eq!(
            reply(chat_as(&gw, MASTER_KEY, "tagged", json!({}))),
            "default"
        );
        let unknown = json!({"tags": ["enterprise"]});
        assert_eq!(
            reply(chat_as(&gw, MASTER_KEY, "tagged", unknown)),
            "default"
        );
        assert_eq!(
            reply(chat_as(&gw, MASTER_KEY, "strict", json!({"tags": ["a"]}))),
            "a"
        );
    }
    // A key's tags (and its team's) route its requests too.
    let key = gw
        .post("/key/generate", &json!({"tags": ["paid"]}))
        .expect_status(200)
        .json();
    let key = key["key"].as_str().unwrap();
    let team = json!({"team_id": "free-team", "tags": ["free"]});
    gw.post("/team/new", &team).expect_status(200);
    let member = gw
        .post("/key/generate", &json!({"team_id": "free-team"}))
        .expect_status(200)
        .json();
    let member = member["key"].as_str().unwrap();
    for _ in 0..4 {
        assert_eq!(reply(chat_as(&gw, key, "tagged", json!({}))), "paid");
        assert_eq!(reply(chat_as(&gw, member, "tagged", json!({}))), "free");
    }
    // No deployment carries the tag and none is `default`: LiteLLM's 401.
    let err = assert_error(
        &chat_as(&gw, MASTER_KEY, "strict", json!({"tags": ["zzz"]})),
        401,
    );
    assert!(
        error_message(&err).contains("tags configuration"),
        "{err:?}"
    );
    let err = assert_error(
        &chat_as(&gw, MASTER_KEY, "tagged", json!({"tags": "paid"})),
        400,
    );
    assert_eq!(err["param"], "tags", "{err:?}");
}

#[test]
fn without_tag_filtering_tags_are_read_and_not_used() {
    let gw = Gateway::start_json(
        &json!({
            "model_list": [mock("solo", "only-1", "only", json!({"tags": ["x"]}))],
            "general_settings": {"master_key": MASTER_KEY},
        }),
        &[],
    );
    assert_eq!(
        reply(chat_as(&gw, MASTER_KEY, "solo", json!({"tags": ["y"]}))),
        "only"
    );
}

#[test]
fn allowed_routes_forbid_every_other_path() {
    let gw = Gateway::start_json(
        &json!({
            "model_list": [mock("chat-fast", "fast-1", "fast", json!({}))],
            "general_settings": {
                "master_key": MASTER_KEY,
                "allowed_routes": ["/v1/chat/completions", "/key/generate"],
            },
        }),
        &[],
    );
    assert_eq!(
        reply(chat_as(&gw, MASTER_KEY, "chat-fast", json!({}))),
        "fast"
    );
    gw.post("/key/generate", &json!({})).expect_status(200);
    for path in ["/v1/models", "/key/list", "/chat/completions"] {
        let err = assert_error(&gw.get(path), 403);
        assert_eq!(
            error_message(&err),
            format!("Access forbidden: Route {path} not allowed"),
            "{err:?}"
        );
    }
    gw.call("GET", "/health/liveliness", &[], b"")
        .expect_status(200);
}

#[test]
fn new_teams_take_litellm_default_team_params() {
    let gw = Gateway::start_json(
        &json!({
            "model_list": [mock("chat-fast", "fast-1", "fast", json!({}))],
            "litellm_settings": {
                "default_team_settings": [
                    {"team_id": "legacy", "max_budget": 3, "success_callback": ["langfuse"]},
                ],
                "default_team_params": {"budget_duration": "30d", "rpm_limit": 7},
            },
            "general_settings": {"master_key": MASTER_KEY},
        }),
        &[],
    );
    let team = gw.post("/team/new", &json!({})).expect_status(200).json();
    assert_eq!(
        (
            &team["max_budget"],
            &team["budget_duration"],
            &team["rpm_limit"],
            &team["tpm_limit"]
        ),
        (&json!(3.0), &json!("30d"), &json!(7), &Value::Null),
        "{team}"
    );
    let own = gw
        .post(
            "/team/new",
            &json!({"max_budget": 9, "budget_duration": null, "rpm_limit": 1}),
        )
        .expect_status(200)
        .json();
    assert_eq!(
        (
            &own["max_budget"],
            &own["budget_duration"],
            &own["rpm_limit"]
        ),
        (&json!(9.0), &Value::Null, &json!(1)),
        "{own}"
    );
}

/// Starts the gateway on `config` and expects it to refuse: a non-zero exit
/// within 20 s; returns what it printed.
fn refused_output(config: &Value) -> String {
    let yaml = e2e::to_yaml(config);
    let mut gw = Gateway::spawn(&yaml, &[], e2e::free_port(), &[]);
    let status = gw
        .wait_exit(std::time::Duration::from_secs(20))
        .expect("the gateway refuses the config and exits");
    assert!(!status.success(), "{}", gw.output());
    gw.output()
}

#[test]
fn settings_litellm_acts_on_and_the_gateway_does_not_are_named_at_start_up() {
    let base = || {
        json!({
            "model_list": [mock("chat-fast", "fast-1", "fast", json!({}))],
            "general_settings": {"master_key": MASTER_KEY},
        })
    };
    // What would change what reaches a model or who may spend: refused.
    for (section, key, value) in [
        (
            "litellm_settings",
            "guardrails",
            json!([{"pii": {"callbacks": ["presidio"]}}]),
        ),
        ("litellm_settings", "max_end_user_budget", json!(100)),
        (
            "general_settings",
            "custom_auth",
            json!("custom_auth.user_api_key_auth"),
        ),
        ("litellm_settings", "callbacks", json!(["hide_secrets"])),
    ] {
        let mut config = base();
        config[section][key] = value;
        let out = refused_output(&config);
        assert!(out.contains(&format!("{section}.{key}")), "{key}: {out}");
    }
    // What only changes logging or tuning: served, with a warning naming it.
    let mut config = base();
    config["litellm_settings"] = json!({"set_verbose": true, "success_callback": ["langfuse"]});
    let gw = Gateway::start_json(&config, &[]);
    chat_as(&gw, MASTER_KEY, "chat-fast", json!({})).expect_status(200);
    let out = gw.output();
    assert!(out.contains("litellm_settings.set_verbose"), "{out}");
    assert!(out.contains("`langfuse`"), "{out}");
}
