//! LiteLLM's roles as they gate the management API, with the keys of users
//! of each role: a `proxy_admin_viewer` reads everything and changes
//! nothing; any key reads its own key, its own user, its teams and the
//! models it may use, never another's (isolation tested both ways); an
//! `internal_user` generates keys for itself only, an
//! `internal_user_viewer` none.

use e2e::{to_yaml, Gateway, MASTER_KEY};
use serde_json::{json, Value};

fn start() -> Gateway {
    let model = |name: &str| {
        json!({"model_name": name,
            "litellm_params": {"model": format!("mock/{name}"), "mock_response": "hi"}})
    };
    let config = json!({
        "model_list": [model("open"), model("closed")],
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start(&to_yaml(&config), &[])
}

fn ok(resp: e2e::Response) -> Value {
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()
}

/// A user of `role` and a key of theirs (in `team`, when given).
fn user_key(gw: &Gateway, user: &str, role: &str, team: Option<&str>) -> String {
    ok(gw.post("/user/new", &json!({"user_id": user, "user_role": role})));
    if let Some(team) = team {
        ok(gw.post(
            "/team/member_add",
            &json!({"team_id": team, "member": {"user_id": user, "role": "user"}}),
        ));
    }
    let mut fields = json!({"user_id": user, "models": ["open"]});
    if let Some(team) = team {
        fields["team_id"] = json!(team);
    }
    ok(gw.post("/key/generate", &fields))["key"]
        .as_str()
        .unwrap()
        .to_string()
}

fn get_as(gw: &Gateway, key: &str, path: &str) -> e2e::Response {
    let auth = format!("Bearer {key}");
    gw.call("GET", path, &[("Authorization", &auth)], b"")
}

#[test]
fn a_proxy_admin_viewer_reads_everything_and_changes_nothing() {
    let gw = start();
    ok(gw.post("/team/new", &json!({"team_id": "t1"})));
    let viewer = user_key(&gw, "viewer", "proxy_admin_viewer", None);
    let other = user_key(&gw, "someone", "internal_user", Some("t1"));
    for path in [
        "/user/info?user_id=someone",
        "/team/info?team_id=t1",
        "/team/list",
        "/user/list",
        "/key/list",
        "/spend/logs",
    ] {
        assert_eq!(get_as(&gw, &viewer, path).status, 200, "{path}");
    }
    let info = ok(get_as(&gw, &viewer, &format!("/key/info?key={other}")));
    assert_eq!(info["info"]["user_id"], "someone", "{info}");
    for (path, body) in [
        ("/team/new", json!({"team_id": "t2"})),
        ("/key/generate", json!({})),
        (
            "/user/update",
            json!({"user_id": "someone", "max_budget": 1}),
        ),
    ] {
        let resp = gw.post_as(&viewer, path, &body);
        assert_eq!(resp.status, 403, "{path}: {}", resp.text());
    }
}

#[test]
fn a_key_reads_its_own_key_user_teams_and_models_and_nobody_elses() {
    let gw = start();
    ok(gw.post("/team/new", &json!({"team_id": "ta"})));
    ok(gw.post("/team/new", &json!({"team_id": "tb"})));
    let alice = user_key(&gw, "alice", "internal_user", Some("ta"));
    let bob = user_key(&gw, "bob", "internal_user", Some("tb"));
    for (me, my_user, my_team, them, their_user, their_team) in [
        (&alice, "alice", "ta", &bob, "bob", "tb"),
        (&bob, "bob", "tb", &alice, "alice", "ta"),
    ] {
        let own = ok(get_as(&gw, me, "/key/info"));
        assert_eq!(own["info"]["user_id"], my_user, "{own}");
        assert_eq!(get_as(&gw, me, &format!("/key/info?key={me}")).status, 200);
        assert_eq!(
            get_as(&gw, me, &format!("/key/info?key={them}")).status,
            403,
            "{my_user} reads {their_user}'s key"
        );
        let user = ok(get_as(&gw, me, &format!("/user/info?user_id={my_user}")));
        assert_eq!(user["user_id"], my_user, "{user}");
        assert_eq!(
            ok(get_as(&gw, me, "/user/info"))["user_id"],
            my_user,
            "its own user when none is named"
        );
        assert_eq!(
            get_as(&gw, me, &format!("/user/info?user_id={their_user}")).status,
            403
        );
        assert_eq!(
            get_as(&gw, me, &format!("/team/info?team_id={my_team}")).status,
            200
        );
        assert_eq!(
            get_as(&gw, me, &format!("/team/info?team_id={their_team}")).status,
            403
        );
    }
    let models = ok(get_as(&gw, &alice, "/model/info"));
    let names: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["model_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["open"], "only the models the key may use: {models}");
    assert_eq!(get_as(&gw, &alice, "/team/list").status, 403);
}

#[test]
fn an_internal_user_generates_keys_for_itself_only_and_a_viewer_none() {
    let gw = start();
    ok(gw.post("/team/new", &json!({"team_id": "tc"})));
    let carol = user_key(&gw, "carol", "internal_user", Some("tc"));
    let made = ok(gw.post_as(&carol, "/key/generate", &json!({"key_alias": "mine"})));
    assert_eq!(made["user_id"], "carol", "{made}");
    let in_team = gw.post_as(&carol, "/key/generate", &json!({"team_id": "tc"}));
    assert_eq!(in_team.status, 200, "{}", in_team.text());
    for body in [
        json!({"user_id": "dave"}),
        json!({"team_id": "not-hers"}),
        json!({"metadata": {"role": "admin"}}),
        json!({"disable_global_guardrails": true}),
        json!({"metadata": {"disable_global_guardrails": true}}),
    ] {
        let resp = gw.post_as(&carol, "/key/generate", &body);
        assert_eq!(resp.status, 403, "{body}: {}", resp.text());
    }
    let erin = user_key(&gw, "erin", "internal_user_viewer", None);
    let resp = gw.post_as(&erin, "/key/generate", &json!({}));
    assert_eq!(resp.status, 403, "{}", resp.text());
}
