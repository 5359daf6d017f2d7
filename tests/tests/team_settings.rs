//! Two team settings as LiteLLM 1.110 applies them:
//! - `general_settings.team_admin_editable_team_fields`: a team `admin`
//!   member may change the granted settings of its team on `/team/update`
//!   (values compared with the stored team, so a setting resent unchanged
//!   is no change), never a metadata key the proxy controls, and may raise
//!   `max_budget` only with `raise_max_budget` (LiteLLM's
//!   `team_admin_edit_verdict` and `_check_team_budget_update_authority`,
//!   with its 403 messages);
//! - a team's `require_trace_id`: its keys' LLM requests without a trace id
//!   (an `x-litellm-trace-id` or `x-<vendor>-session-id` header, a W3C
//!   `traceparent`, the body's `litellm_trace_id` or `metadata.trace_id`)
//!   are refused with LiteLLM's 400, and only a proxy admin may set it.

use e2e::{assert_error, error_message, Gateway, Response, MASTER_KEY};
use serde_json::{json, Value};

fn start(general: Value) -> Gateway {
    let mut settings = json!({"master_key": MASTER_KEY});
    for (k, v) in general.as_object().unwrap() {
        settings[k] = v.clone();
    }
    let config = json!({
        "model_list": [{"model_name": "open",
            "litellm_params": {"model": "mock/open", "mock_response": "hi"}}],
        "general_settings": settings,
    });
    Gateway::start_json(&config, &[])
}

fn ok(resp: Response) -> Value {
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()
}

fn refused(resp: &Response, message: &str) {
    let err = assert_error(resp, 403);
    assert!(error_message(&err).contains(message), "{err:?}");
}

/// A team with `alice` as its admin member; alice's key.
fn team_with_admin(gw: &Gateway, team: Value) -> String {
    ok(gw.post("/team/new", &team));
    ok(gw.post(
        "/user/new",
        &json!({"user_id": "alice", "user_role": "internal_user"}),
    ));
    ok(gw.post(
        "/team/member_add",
        &json!({"team_id": team["team_id"], "member": {"user_id": "alice", "role": "admin"}}),
    ));
    let key = ok(gw.post("/key/generate", &json!({"user_id": "alice"})));
    key["key"].as_str().unwrap().to_string()
}

fn team_info(gw: &Gateway, id: &str) -> Value {
    ok(gw.get(&format!("/team/info?team_id={id}")))["team_info"].clone()
}

#[test]
fn a_team_admin_changes_only_the_granted_settings() {
    let gw =
        start(json!({"team_admin_editable_team_fields": ["tpm_limit", "max_budget", "metadata"]}));
    let alice = team_with_admin(
        &gw,
        json!({"team_id": "t1", "max_budget": 10, "rpm_limit": 5, "models": ["open"],
            "metadata": {"note": "a"}, "tags": ["x"]}),
    );
    let update = |body: Value| gw.post_as(&alice, "/team/update", &body);

    ok(update(json!({"team_id": "t1", "tpm_limit": 1000})));
    assert_eq!(team_info(&gw, "t1")["tpm_limit"], 1000);
    // Resent unchanged: not a change, so not refused.
    ok(update(
        json!({"team_id": "t1", "rpm_limit": 5, "models": ["open"]}),
    ));
    refused(
        &update(json!({"team_id": "t1", "rpm_limit": 6})),
        "Team admins on this proxy do not have permission to update 'rpm_limit'. Ask a proxy admin to add it under Settings > UI > Team admin editable fields.",
    );
    refused(
        &update(json!({"team_id": "t1", "models": ["open", "other"]})),
        "permission to update 'models'",
    );
    // Metadata: its own keys yes, the proxy's no.
    ok(update(
        json!({"team_id": "t1", "metadata": {"note": "b", "tags": ["x"]}}),
    ));
    assert_eq!(team_info(&gw, "t1")["metadata"]["note"], "b");
    refused(
        &update(json!({"team_id": "t1", "metadata": {"note": "b"}})),
        "Team metadata key 'tags' is a proxy setting that team admins cannot add, change or remove in team settings.",
    );
    refused(
        &update(json!({"team_id": "t1", "guardrails": ["g"]})),
        "Team metadata key 'guardrails' is a proxy setting",
    );
    // max_budget: lowered yes; raised or removed no (no raise_max_budget).
    ok(update(json!({"team_id": "t1", "max_budget": 5})));
    assert_eq!(team_info(&gw, "t1")["max_budget"], 5.0);
    refused(
        &update(json!({"team_id": "t1", "max_budget": 50})),
        "Only a proxy admin can raise a team's max_budget. Team's current max_budget=5.0, requested=50.0.",
    );
    refused(
        &update(json!({"team_id": "t1", "max_budget": null})),
        "Only a proxy admin can remove a team's max_budget.",
    );
    // The proxy admin is not bound by any of it.
    ok(gw.post(
        "/team/update",
        &json!({"team_id": "t1", "rpm_limit": 6, "max_budget": 50}),
    ));
}

#[test]
fn raise_max_budget_lets_a_team_admin_raise_it_and_nothing_granted_means_no_edit() {
    let gw = start(json!({"team_admin_editable_team_fields": ["max_budget", "raise_max_budget"]}));
    let alice = team_with_admin(&gw, json!({"team_id": "t1", "max_budget": 10}));
    ok(gw.post_as(
        &alice,
        "/team/update",
        &json!({"team_id": "t1", "max_budget": 20}),
    ));
    assert_eq!(team_info(&gw, "t1")["max_budget"], 20.0);

    let plain = start(json!({}));
    let alice = team_with_admin(&plain, json!({"team_id": "t1", "max_budget": 10}));
    refused(
        &plain.post_as(
            &alice,
            "/team/update",
            &json!({"team_id": "t1", "max_budget": 5}),
        ),
        "Team admins on this proxy cannot edit team settings",
    );
}

fn chat(gw: &Gateway, key: &str, headers: &[(&str, &str)], body: Value) -> Response {
    let auth = format!("Bearer {key}");
    let mut all = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    all.extend_from_slice(headers);
    gw.call(
        "POST",
        "/v1/chat/completions",
        &all,
        body.to_string().as_bytes(),
    )
}

#[test]
fn a_team_requiring_a_trace_id_refuses_its_keys_requests_without_one() {
    let gw = start(json!({}));
    ok(gw.post(
        "/team/new",
        &json!({"team_id": "traced", "require_trace_id": true}),
    ));
    let key = ok(gw.post("/key/generate", &json!({"team_id": "traced"})))["key"]
        .as_str()
        .unwrap()
        .to_string();
    let body = json!({"model": "open", "messages": [{"role": "user", "content": "hi"}]});
    let with = |extra: Value| {
        let mut b = body.clone();
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };

    let resp = chat(&gw, &key, &[], body.clone());
    let err = assert_error(&resp, 400);
    assert_eq!(
        error_message(&err),
        "Team 'traced' requires a trace ID on every LLM, MCP and agent request. Send an x-litellm-trace-id header. LLM requests can also send a W3C traceparent header or set metadata.trace_id in the body."
    );
    assert_eq!(err["type"], "bad_request_error");
    assert_eq!(err["param"], "trace_id");

    for (headers, extra) in [
        (vec![("x-litellm-trace-id", "t-1")], json!({})),
        (
            vec![(
                "x-claude-code-session-id",
                "e96634a3-fa28-4083-b354-55542e2dca01",
            )],
            json!({}),
        ),
        (
            vec![(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            )],
            json!({}),
        ),
        (vec![], json!({"litellm_trace_id": "t-2"})),
        (vec![], json!({"metadata": {"trace_id": "t-3"}})),
    ] {
        let resp = chat(&gw, &key, &headers, with(extra.clone()));
        assert_eq!(resp.status, 200, "{headers:?} {extra}: {}", resp.text());
    }
    for (headers, extra) in [
        // Too short for a session id; an all-zero trace; an empty one.
        (vec![("x-claude-code-session-id", "abc")], json!({})),
        (
            vec![(
                "traceparent",
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            )],
            json!({}),
        ),
        (vec![], json!({"metadata": {"trace_id": ""}})),
    ] {
        let resp = chat(&gw, &key, &headers, with(extra.clone()));
        assert_eq!(resp.status, 400, "{headers:?} {extra}: {}", resp.text());
    }

    // A key of another team, and the master key, need none.
    ok(gw.post("/team/new", &json!({"team_id": "free"})));
    let other = ok(gw.post("/key/generate", &json!({"team_id": "free"})))["key"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(chat(&gw, &other, &[], body.clone()).status, 200);
    assert_eq!(chat(&gw, MASTER_KEY, &[], body.clone()).status, 200);

    // Cleared by the proxy admin: served again.
    ok(gw.post(
        "/team/update",
        &json!({"team_id": "traced", "require_trace_id": false}),
    ));
    assert_eq!(chat(&gw, &key, &[], body).status, 200);
}

#[test]
fn only_a_proxy_admin_sets_require_trace_id() {
    let gw = start(json!({"team_admin_editable_team_fields": ["metadata", "tpm_limit"]}));
    ok(gw.post(
        "/organization/new",
        &json!({"organization_id": "o1", "organization_alias": "o1"}),
    ));
    let alice = team_with_admin(&gw, json!({"team_id": "t1", "organization_id": "o1"}));
    refused(
        &gw.post_as(
            &alice,
            "/team/update",
            &json!({"team_id": "t1", "require_trace_id": true}),
        ),
        "Team metadata key 'require_trace_id' is a proxy setting",
    );
    // An org admin manages the team's settings, but not this one.
    ok(gw.post(
        "/user/new",
        &json!({"user_id": "olga", "user_role": "internal_user"}),
    ));
    ok(gw.post(
        "/organization/member_add",
        &json!({"organization_id": "o1", "member": [{"user_id": "olga", "role": "org_admin"}]}),
    ));
    let olga = ok(gw.post("/key/generate", &json!({"user_id": "olga"})))["key"]
        .as_str()
        .unwrap()
        .to_string();
    ok(gw.post_as(
        &olga,
        "/team/update",
        &json!({"team_id": "t1", "tpm_limit": 7}),
    ));
    refused(
        &gw.post_as(
            &olga,
            "/team/update",
            &json!({"team_id": "t1", "require_trace_id": true}),
        ),
        "Only proxy admins can set `require_trace_id` on a team.",
    );
    refused(
        &gw.post_as(
            &olga,
            "/team/new",
            &json!({"team_id": "t2", "organization_id": "o1", "require_trace_id": true}),
        ),
        "Only proxy admins can set `require_trace_id` on a team.",
    );
    ok(gw.post(
        "/team/update",
        &json!({"team_id": "t1", "require_trace_id": true}),
    ));
    assert_eq!(team_info(&gw, "t1")["metadata"]["require_trace_id"], true);
}

#[test]
fn a_team_admin_changes_granted_member_defaults_compared_with_their_budget_row() {
    let gw = start(json!({"team_admin_editable_team_fields": ["team_member_budget"]}));
    let alice = team_with_admin(
        &gw,
        json!({"team_id": "t1", "team_member_budget": 1, "team_member_rpm_limit": 5}),
    );
    // The rpm limit resent unchanged is no change; the budget is granted.
    ok(gw.post_as(
        &alice,
        "/team/update",
        &json!({"team_id": "t1", "team_member_budget": 2, "team_member_rpm_limit": 5}),
    ));
    let id = team_info(&gw, "t1")["metadata"]["team_member_budget_id"].clone();
    let rows = ok(gw.post("/budget/info", &json!({"budgets": [id]})));
    assert_eq!(rows[0]["max_budget"], 2.0, "{rows}");
    assert_eq!(rows[0]["rpm_limit"], 5, "{rows}");
    refused(
        &gw.post_as(
            &alice,
            "/team/update",
            &json!({"team_id": "t1", "team_member_rpm_limit": 6}),
        ),
        "permission to update 'team_member_rpm_limit'",
    );
}
