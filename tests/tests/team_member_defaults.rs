//! A team's member defaults, as LiteLLM 1.110 keeps and applies them:
//! `team_member_budget`, `team_member_budget_duration`,
//! `team_member_rpm_limit` and `team_member_tpm_limit` on `/team/new` and
//! `/team/update` go to a `LiteLLM_BudgetTable` row the team names in
//! `metadata.team_member_budget_id`; each member's keys in the team are held
//! to that budget against what the member spent in the team
//! (`LiteLLM_TeamMembership.spend`; 422 "Budget has been exceeded!
//! User=<u> in Team=<t> ...") and to those limits on a counter per (team,
//! member) (LiteLLM's `team_member` descriptor, 429), each member apart.

use e2e::{assert_error, error_message, eventually, to_yaml, Gateway, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

fn config() -> Value {
    json!({
        "model_list": [{"model_name": "priced",
            "litellm_params": {"model": "mock/priced", "mock_response": "one two three",
                "input_cost_per_token": 0.00001, "output_cost_per_token": 0.0001}}],
        "general_settings": {"master_key": MASTER_KEY},
    })
}

fn ok(resp: e2e::Response) -> Value {
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()
}

fn chat(gw: &Gateway, key: &str) -> e2e::Response {
    let body = json!({"model": "priced", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    gw.post_as(key, "/v1/chat/completions", &body)
}

/// Team `t1` with `fields`, members alice and bob, and a key of each in it.
fn team_of_two(gw: &Gateway, fields: Value) -> (String, String) {
    let mut team = json!({"team_id": "t1"});
    for (k, v) in fields.as_object().unwrap() {
        team[k] = v.clone();
    }
    ok(gw.post("/team/new", &team));
    let mut keys = Vec::new();
    for user in ["alice", "bob"] {
        ok(gw.post("/user/new", &json!({"user_id": user})));
        ok(gw.post(
            "/team/member_add",
            &json!({"team_id": "t1", "member": {"user_id": user, "role": "user"}}),
        ));
        let key = ok(gw.post("/key/generate", &json!({"user_id": user, "team_id": "t1"})));
        keys.push(key["key"].as_str().unwrap().to_string());
    }
    (keys[0].clone(), keys[1].clone())
}

/// Sends requests until one is refused; how many passed and the refusal.
fn spend_until_refused(gw: &Gateway, key: &str) -> (usize, serde_json::Map<String, Value>) {
    for passed in 0..60 {
        let resp = chat(gw, key);
        if resp.status != 200 {
            return (passed, assert_error(&resp, 422));
        }
    }
    panic!("60 requests passed; the member budget never refused");
}

#[test]
fn each_member_is_held_to_the_teams_member_budget_apart() {
    let gw = Gateway::start_json(&config(), &[]);
    let (alice, bob) = team_of_two(&gw, json!({"team_member_budget": 0.006, "max_budget": 100}));
    // Kept as LiteLLM keeps it: a budget row the team names.
    let team = ok(gw.get("/team/info?team_id=t1"))["team_info"].clone();
    let budget_id = team["metadata"]["team_member_budget_id"]
        .as_str()
        .expect("team_member_budget_id")
        .to_string();
    let rows = ok(gw.post("/budget/info", &json!({"budgets": [budget_id]})));
    assert_eq!(rows[0]["max_budget"], 0.006, "{rows}");

    let (passed, err) = spend_until_refused(&gw, &alice);
    assert!(passed >= 1, "{err:?}");
    assert_eq!(err["type"], "budget_exceeded");
    assert!(
        error_message(&err)
            .starts_with("Budget has been exceeded! User=alice in Team=t1 Current cost: "),
        "{err:?}"
    );
    // Another key of alice's in the team shares her budget; bob has his own.
    let second = ok(gw.post(
        "/key/generate",
        &json!({"user_id": "alice", "team_id": "t1"}),
    ));
    assert_eq!(chat(&gw, second["key"].as_str().unwrap()).status, 422);
    assert_eq!(chat(&gw, &bob).status, 200, "bob's spend is his own");

    // Raised by the proxy admin: the same row, alice admitted again.
    ok(gw.post(
        "/team/update",
        &json!({"team_id": "t1", "team_member_budget": 1}),
    ));
    let team = ok(gw.get("/team/info?team_id=t1"))["team_info"].clone();
    assert_eq!(
        team["metadata"]["team_member_budget_id"],
        budget_id.as_str()
    );
    assert_eq!(chat(&gw, &alice).status, 200);
}

#[test]
fn member_rate_limits_count_per_member() {
    let gw = Gateway::start_json(&config(), &[]);
    let (alice, bob) = team_of_two(&gw, json!({"team_member_rpm_limit": 2}));
    assert_eq!(chat(&gw, &alice).status, 200);
    assert_eq!(chat(&gw, &alice).status, 200);
    let refused = chat(&gw, &alice);
    let err = assert_error(&refused, 429);
    assert!(
        error_message(&err).starts_with("Rate limit exceeded for team_member: t1:alice"),
        "{err:?}"
    );
    assert_eq!(chat(&gw, &bob).status, 200, "bob's counter is his own");
}

#[test]
fn a_members_spend_in_the_team_is_read_back_from_litellms_membership_row() {
    let db = TestDb::create();
    let yaml = to_yaml(&config());
    let envs = [("DATABASE_URL", db.url())];
    let gw = Gateway::start(&yaml, &envs);
    let (alice, _) = team_of_two(&gw, json!({"team_member_budget": 0.006}));
    spend_until_refused(&gw, &alice);
    // Written to alice's LiteLLM_TeamMembership row by the spend writer.
    let spent: f64 = eventually("alice's membership spend", Duration::from_secs(10), || {
        let out = db.query(
            r#"SELECT spend FROM "LiteLLM_TeamMembership" WHERE team_id = 't1' AND user_id = 'alice'"#,
        );
        out.parse::<f64>().ok().filter(|s| *s > 0.003)
    });
    // The rest of her spend is written at shutdown (a kill could lose the
    // last batch and leave her room on the restart).
    let mut gw = gw;
    gw.signal(libc::SIGTERM);
    assert!(
        gw.wait_exit(Duration::from_secs(20)).is_some(),
        "{}",
        gw.output()
    );
    assert!(spent < 0.006, "{spent}");
    // A gateway started afresh reads it: alice is refused at once.
    let gw = Gateway::start(&yaml, &envs);
    let err = assert_error(&chat(&gw, &alice), 422);
    assert!(
        error_message(&err).contains("User=alice in Team=t1"),
        "{err:?}"
    );
}
