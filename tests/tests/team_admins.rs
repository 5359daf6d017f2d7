//! LiteLLM's team-admin and org-admin rights on the management API, with
//! the keys of such users: a team `admin` member manages its team's members
//! and keys (and only its team's), not the team's settings; an `org_admin`
//! manages the teams of its organization, settings included, creates teams
//! in it and manages its members, never another organization's (LiteLLM's
//! `TeamAccess.allows(TEAM_OR_ORG_ADMIN)`, `_check_key_admin_access`,
//! `verify_org_access`, with its 403 messages).

use e2e::{assert_error, error_message, Gateway, Response, MASTER_KEY};
use serde_json::{json, Value};

fn start() -> Gateway {
    let config = json!({
        "model_list": [{"model_name": "open",
            "litellm_params": {"model": "mock/open", "mock_response": "hi"}}],
        "general_settings": {"master_key": MASTER_KEY},
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

fn get_as(gw: &Gateway, key: &str, path: &str) -> Response {
    let auth = format!("Bearer {key}");
    gw.call("GET", path, &[("Authorization", &auth)], b"")
}

/// An `internal_user` and a key of theirs.
fn user_key(gw: &Gateway, user: &str) -> String {
    ok(gw.post(
        "/user/new",
        &json!({"user_id": user, "user_role": "internal_user"}),
    ));
    let key = ok(gw.post("/key/generate", &json!({"user_id": user})));
    key["key"].as_str().unwrap().to_string()
}

fn add_member(gw: &Gateway, team: &str, user: &str, role: &str) {
    ok(gw.post(
        "/team/member_add",
        &json!({"team_id": team, "member": {"user_id": user, "role": role}}),
    ));
}

const NO_TEAM: &str = "You do not have access to this team";

#[test]
fn a_team_admin_manages_its_teams_members_and_keys_and_no_others() {
    let gw = start();
    ok(gw.post("/team/new", &json!({"team_id": "t1"})));
    ok(gw.post("/team/new", &json!({"team_id": "t2"})));
    let alice = user_key(&gw, "alice");
    let bob = user_key(&gw, "bob");
    user_key(&gw, "carol");
    add_member(&gw, "t1", "alice", "admin");
    add_member(&gw, "t1", "bob", "user");
    add_member(&gw, "t2", "alice", "user");

    // Members: its own team only; a plain member has no such right.
    let carol = json!({"team_id": "t1", "member": {"user_id": "carol", "role": "user"}});
    refused(&gw.post_as(&bob, "/team/member_add", &carol), "");
    ok(gw.post_as(&alice, "/team/member_add", &carol));
    let into_t2 = json!({"team_id": "t2", "member": {"user_id": "carol", "role": "user"}});
    refused(&gw.post_as(&alice, "/team/member_add", &into_t2), NO_TEAM);
    ok(gw.post_as(
        &alice,
        "/team/member_update",
        &json!({"team_id": "t1", "user_id": "carol", "role": "admin"}),
    ));
    ok(gw.post_as(
        &alice,
        "/team/member_delete",
        &json!({"team_id": "t1", "user_id": "carol"}),
    ));
    refused(
        &gw.post_as(
            &alice,
            "/team/member_delete",
            &json!({"team_id": "t2", "user_id": "alice"}),
        ),
        NO_TEAM,
    );

    // Keys of its team, for its members.
    let made = ok(gw.post_as(
        &alice,
        "/key/generate",
        &json!({"team_id": "t1", "user_id": "bob", "max_budget": 5}),
    ));
    let bobs = made["key"].as_str().unwrap().to_string();
    let outsider = gw.post_as(
        &alice,
        "/key/generate",
        &json!({"team_id": "t1", "user_id": "carol"}),
    );
    assert_eq!(assert_error(&outsider, 400)["param"], "user_id");
    refused(
        &gw.post_as(
            &alice,
            "/key/generate",
            &json!({"team_id": "t2", "user_id": "bob"}),
        ),
        NO_TEAM,
    );
    refused(
        &gw.post_as(
            &alice,
            "/key/generate",
            &json!({"team_id": "t1", "metadata": {"role": "admin"}}),
        ),
        "metadata.role",
    );
    ok(gw.post_as(
        &alice,
        "/key/update",
        &json!({"key": bobs, "max_budget": 7}),
    ));
    let info = ok(get_as(&gw, &alice, &format!("/key/info?key={bobs}")));
    assert_eq!(info["info"]["max_budget"], 7.0, "{info}");
    let listed = ok(get_as(
        &gw,
        &alice,
        "/key/list?team_id=t1&return_full_object=true",
    ));
    assert!(
        listed.to_string().contains("\"user_id\":\"bob\""),
        "{listed}"
    );
    ok(gw.post_as(&alice, "/key/block", &json!({"key": bobs})));
    ok(gw.post_as(&alice, "/key/unblock", &json!({"key": bobs})));

    // Not a key of t2's, nor one without a team; bob may not touch his own team key's budget.
    let t2_key = ok(gw.post("/key/generate", &json!({"team_id": "t2"})))["key"]
        .as_str()
        .unwrap()
        .to_string();
    refused(
        &gw.post_as(
            &alice,
            "/key/update",
            &json!({"key": t2_key, "max_budget": 1}),
        ),
        "Only proxy admins, team admins, or org admins can call /key/update",
    );
    refused(
        &gw.post_as(&alice, "/key/delete", &json!({"keys": [bob]})),
        "Only proxy admins, team admins, or org admins can call /key/delete",
    );
    refused(
        &gw.post_as(
            &bob,
            "/key/update",
            &json!({"key": bobs, "max_budget": 100}),
        ),
        "",
    );
    // Another team's keys: only the caller's own (none there) are listed.
    let t2_listed = ok(get_as(&gw, &alice, "/key/list?team_id=t2"));
    assert_eq!(t2_listed["total_count"], 0, "{t2_listed}");

    // The team's settings stay the proxy admin's.
    refused(
        &gw.post_as(
            &alice,
            "/team/update",
            &json!({"team_id": "t1", "max_budget": 1}),
        ),
        "Team admins on this proxy cannot edit team settings",
    );
    ok(gw.post_as(&alice, "/key/delete", &json!({"keys": [bobs]})));
    ok(gw.post_as(&alice, "/team/block", &json!({"team_id": "t1"})));
    refused(
        &gw.post_as(&alice, "/team/block", &json!({"team_id": "t2"})),
        NO_TEAM,
    );
}

#[test]
fn an_org_admin_manages_the_teams_and_members_of_its_organization_only() {
    let gw = start();
    for org in ["o1", "o2"] {
        ok(gw.post(
            "/organization/new",
            &json!({"organization_id": org, "organization_alias": org}),
        ));
    }
    ok(gw.post(
        "/team/new",
        &json!({"team_id": "t3", "organization_id": "o1"}),
    ));
    ok(gw.post(
        "/team/new",
        &json!({"team_id": "t4", "organization_id": "o2"}),
    ));
    let oscar = user_key(&gw, "oscar");
    user_key(&gw, "pat");
    ok(gw.post(
        "/organization/member_add",
        &json!({"organization_id": "o1", "member": [{"user_id": "oscar", "role": "org_admin"}]}),
    ));

    ok(gw.post_as(
        &oscar,
        "/team/update",
        &json!({"team_id": "t3", "max_budget": 9}),
    ));
    assert_eq!(
        ok(gw.get("/team/info?team_id=t3"))["team_info"]["max_budget"],
        9.0
    );
    refused(
        &gw.post_as(
            &oscar,
            "/team/update",
            &json!({"team_id": "t4", "max_budget": 9}),
        ),
        NO_TEAM,
    );
    refused(
        &gw.post_as(
            &oscar,
            "/team/update",
            &json!({"team_id": "t3", "organization_id": "o2"}),
        ),
        "You do not have access to this organization",
    );
    ok(gw.post_as(
        &oscar,
        "/team/member_add",
        &json!({"team_id": "t3", "member": {"user_id": "pat", "role": "user"}}),
    ));
    ok(get_as(&gw, &oscar, "/team/info?team_id=t3"));
    ok(gw.post_as(
        &oscar,
        "/key/generate",
        &json!({"team_id": "t3", "user_id": "pat"}),
    ));

    ok(gw.post_as(
        &oscar,
        "/team/new",
        &json!({"team_id": "t5", "organization_id": "o1"}),
    ));
    refused(
        &gw.post_as(
            &oscar,
            "/team/new",
            &json!({"team_id": "t6", "organization_id": "o2"}),
        ),
        "You do not have access to this organization",
    );
    refused(
        &gw.post_as(&oscar, "/team/new", &json!({"team_id": "t7"})),
        "",
    );

    let info = ok(get_as(&gw, &oscar, "/organization/info?organization_id=o1"));
    assert_eq!(info["organization_id"], "o1", "{info}");
    refused(
        &get_as(&gw, &oscar, "/organization/info?organization_id=o2"),
        "You do not have access to this organization",
    );
    ok(gw.post_as(
        &oscar,
        "/organization/member_add",
        &json!({"organization_id": "o1", "member": [{"user_id": "pat", "role": "internal_user"}]}),
    ));
    refused(
        &gw.post_as(
            &oscar,
            "/organization/member_add",
            &json!({"organization_id": "o2", "member": [{"user_id": "pat", "role": "internal_user"}]}),
        ),
        "You do not have access to this organization",
    );
}
