//! A team member's own budget, as LiteLLM 1.110.2 keeps and enforces it:
//! `max_budget_in_team` and `budget_duration` on `/team/member_add` and
//! `/team/member_update` go to a `LiteLLM_BudgetTable` row the member's
//! `LiteLLM_TeamMembership.budget_id` names; the member's keys in the team
//! are refused (422 "Budget has been exceeded! User=<u> in Team=<t> ...")
//! once what the member spent in the team reaches it, whatever the team's
//! default member budget says; the spend is zeroed when the row's period
//! ends. Members named by `user_email` alone are found or made, and a team
//! LiteLLM made (its roster in `members_with_roles` alone, memberships
//! linked to budget rows) is read as LiteLLM reads it.

use e2e::{assert_error, error_message, eventually, Gateway, PrivateRedis, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

fn config() -> Value {
    json!({
        "model_list": [{"model_name": "priced",
            "litellm_params": {"model": "mock/priced", "mock_response": "one two three",
                "input_cost_per_token": 0.00001, "output_cost_per_token": 0.0001}},
            {"model_name": "other",
            "litellm_params": {"model": "mock/other", "mock_response": "one two three",
                "input_cost_per_token": 0.00001, "output_cost_per_token": 0.0001}}],
        "general_settings": {"master_key": MASTER_KEY},
    })
}

/// A gateway on the in-memory store and one on Postgres.
fn gateways() -> Vec<(&'static str, Option<TestDb>, Gateway)> {
    let memory = Gateway::start_json(&config(), &[]);
    let db = TestDb::create();
    let postgres = Gateway::start_json(&config(), &[("DATABASE_URL", db.url())]);
    vec![("memory", None, memory), ("postgres", Some(db), postgres)]
}

fn ok(resp: e2e::Response) -> Value {
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()
}

fn chat(gw: &Gateway, key: &str) -> e2e::Response {
    chat_with(gw, key, "priced")
}

fn chat_with(gw: &Gateway, key: &str, model: &str) -> e2e::Response {
    let body = json!({"model": model, "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    gw.post_as(key, "/v1/chat/completions", &body)
}

/// A key of `user` in team `t1`.
fn key_of(gw: &Gateway, user: &str) -> String {
    let key = ok(gw.post("/key/generate", &json!({"user_id": user, "team_id": "t1"})));
    key["key"].as_str().unwrap().to_string()
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
fn a_members_own_budget_in_the_team_is_enforced_and_changed_in_place() {
    for (store, _db, gw) in gateways() {
        // A generous team default: alice's own budget takes its place.
        ok(gw.post(
            "/team/new",
            &json!({"team_id": "t1", "team_member_budget": 100}),
        ));
        for user in ["alice", "bob"] {
            ok(gw.post("/user/new", &json!({"user_id": user})));
        }
        let added = ok(gw.post(
            "/team/member_add",
            &json!({"team_id": "t1", "member": {"user_id": "alice", "role": "user"},
                "max_budget_in_team": 0.006}),
        ));
        let membership = &added["updated_team_memberships"][0];
        assert_eq!(membership["user_id"], "alice", "{store}: {added}");
        assert_eq!(
            membership["litellm_budget_table"]["max_budget"], 0.006,
            "{store}: {added}"
        );
        ok(gw.post(
            "/team/member_add",
            &json!({"team_id": "t1", "member": {"user_id": "bob", "role": "user"}}),
        ));
        let (alice, bob) = (key_of(&gw, "alice"), key_of(&gw, "bob"));

        let (passed, err) = spend_until_refused(&gw, &alice);
        assert!(passed >= 1, "{store}: {err:?}");
        assert_eq!(err["type"], "budget_exceeded", "{store}");
        assert!(
            error_message(&err)
                .starts_with("Budget has been exceeded! User=alice in Team=t1 Current cost: ")
                && error_message(&err).contains("Max budget: 0.006"),
            "{store}: {err:?}"
        );
        for _ in 0..passed + 1 {
            assert_eq!(
                chat(&gw, &bob).status,
                200,
                "{store}: bob is held to the default"
            );
        }

        // Raised on /team/member_update: the same row, alice admitted again.
        let updated = ok(gw.post(
            "/team/member_update",
            &json!({"team_id": "t1", "user_id": "alice", "max_budget_in_team": 1}),
        ));
        assert_eq!(updated["max_budget_in_team"], 1.0, "{store}: {updated}");
        assert_eq!(chat(&gw, &alice).status, 200, "{store}");
        let rows = ok(gw.get("/budget/list"));
        let own: Vec<&Value> = rows
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["max_budget"] == 1.0)
            .collect();
        assert_eq!(own.len(), 1, "{store}: written in place: {rows}");

        // Bob is on the team's default row: his change gets him a copy of
        // it, the default (and every other member on it) untouched.
        ok(gw.post(
            "/team/member_update",
            &json!({"team_id": "t1", "user_id": "bob", "max_budget_in_team": 0.5}),
        ));
        let rows = ok(gw.get("/budget/list"));
        let maxes: Vec<&Value> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["max_budget"])
            .collect();
        assert!(
            maxes.contains(&&json!(100.0)) && maxes.contains(&&json!(0.5)),
            "{store}: {rows}"
        );

        // Lowered through /budget/update on the row: the cached key follows.
        let id = own[0]["budget_id"].as_str().unwrap();
        ok(gw.post(
            "/budget/update",
            &json!({"budget_id": id, "max_budget": 0.001}),
        ));
        let err = assert_error(&chat(&gw, &alice), 422);
        assert!(
            error_message(&err).contains("Max budget: 0.001"),
            "{store}: {err:?}"
        );
    }
}

#[test]
fn a_members_spend_in_the_team_resets_when_its_budget_duration_ends() {
    for (store, _db, gw) in gateways() {
        ok(gw.post("/team/new", &json!({"team_id": "t1"})));
        ok(gw.post("/user/new", &json!({"user_id": "alice"})));
        let added = ok(gw.post(
            "/team/member_add",
            &json!({"team_id": "t1", "member": {"user_id": "alice"},
                "max_budget_in_team": 0.003, "budget_duration": "2s"}),
        ));
        let row = &added["updated_team_memberships"][0]["litellm_budget_table"];
        assert_eq!(row["budget_duration"], "2s", "{store}: {added}");
        let alice = key_of(&gw, "alice");
        spend_until_refused(&gw, &alice);
        // Once the period ends, the spend is zeroed and requests pass again.
        eventually("the member budget's reset", Duration::from_secs(15), || {
            (chat(&gw, &alice).status == 200).then_some(())
        });
    }
}

#[test]
fn a_team_and_membership_litellm_made_are_read_as_litellm_reads_them() {
    let db = TestDb::create();
    let gw = Gateway::start_json(&config(), &[("DATABASE_URL", db.url())]);
    ok(gw.post("/team/new", &json!({"team_id": "t1"})));
    ok(gw.post(
        "/user/new",
        &json!({"user_id": "alice", "user_email": "alice@example.com"}),
    ));
    // As LiteLLM writes them: the roster in members_with_roles alone, the
    // membership linked to its own budget row, its spend already over it.
    db.query(
        r#"UPDATE "LiteLLM_TeamTable" SET members = '{}', members_with_roles =
            '[{"role": "user", "user_id": "alice", "user_email": "alice@example.com"}]'
            WHERE team_id = 't1'"#,
    );
    db.query(
        r#"INSERT INTO "LiteLLM_BudgetTable" (budget_id, max_budget, created_by, updated_by)
            VALUES ('alice-in-t1', 0.5, 'admin', 'admin')"#,
    );
    db.query(
        r#"INSERT INTO "LiteLLM_TeamMembership" (user_id, team_id, spend, budget_id)
            VALUES ('alice', 't1', 0.75, 'alice-in-t1')"#,
    );
    let alice = key_of(&gw, "alice");
    let err = assert_error(&chat(&gw, &alice), 422);
    assert_eq!(
        error_message(&err),
        "Budget has been exceeded! User=alice in Team=t1 Current cost: 0.75, Max budget: 0.5",
        "{err:?}"
    );

    // The member LiteLLM added can be updated here.
    ok(gw.post(
        "/team/member_update",
        &json!({"team_id": "t1", "user_id": "alice", "max_budget_in_team": 1}),
    ));
    assert_eq!(chat(&gw, &alice).status, 200);
}

#[test]
fn members_named_by_email_alone_are_found_or_made() {
    for (store, _db, gw) in gateways() {
        ok(gw.post("/team/new", &json!({"team_id": "t1"})));
        ok(gw.post(
            "/user/new",
            &json!({"user_id": "carol", "user_email": "carol@example.com"}),
        ));
        let added = ok(gw.post(
            "/team/member_add",
            &json!({"team_id": "t1", "member": {"user_email": "carol@example.com", "role": "user"}}),
        ));
        assert_eq!(
            added["updated_users"][0]["user_id"], "carol",
            "{store}: {added}"
        );
        let info = ok(gw.get("/user/info?user_id=carol"));
        assert!(
            info["user_info"]["teams"].to_string().contains("t1"),
            "{store}: {info}"
        );

        // Unknown email: a new user is made with it.
        let added = ok(gw.post(
            "/team/member_add",
            &json!({"team_id": "t1", "member": [{"user_email": "dan@example.com"}]}),
        ));
        let dan = added["updated_users"][0].clone();
        assert_eq!(dan["user_email"], "dan@example.com", "{store}: {added}");
        let dan_id = dan["user_id"].as_str().expect("a user id").to_string();
        assert!(!dan_id.is_empty(), "{store}");
        let roster = added["members_with_roles"].to_string();
        assert!(roster.contains(&dan_id), "{store}: {added}");
        let info = ok(gw.get(&format!("/user/info?user_id={dan_id}")));
        assert!(
            info["user_info"]["teams"].to_string().contains("t1"),
            "{store}: {info}"
        );

        // /team/new adds its members_with_roles the same way.
        let made = ok(gw.post(
            "/team/new",
            &json!({"team_id": "t2", "members_with_roles":
                [{"user_email": "carol@example.com", "role": "admin"}]}),
        ));
        assert_eq!(
            made["members_with_roles"],
            json!([{"user_id": "carol", "user_email": "carol@example.com", "role": "admin"}]),
            "{store}: {made}"
        );

        // Two users with one email: LiteLLM's 400.
        for id in ["e1", "e2"] {
            ok(gw.post(
                "/user/new",
                &json!({"user_id": id, "user_email": "twice@example.com"}),
            ));
        }
        let resp = gw.post(
            "/team/member_add",
            &json!({"team_id": "t1", "member": {"user_email": "twice@example.com"}}),
        );
        let err = assert_error(&resp, 400);
        assert!(
            error_message(&err).contains("Multiple users with this email found in db"),
            "{store}: {err:?}"
        );
    }
}

#[test]
fn team_update_answers_the_roster_litellm_stored() {
    let db = TestDb::create();
    let gw = Gateway::start_json(&config(), &[("DATABASE_URL", db.url())]);
    ok(gw.post("/team/new", &json!({"team_id": "t1"})));
    // LiteLLM keeps its roster in members_with_roles alone.
    db.query(
        r#"UPDATE "LiteLLM_TeamTable" SET members = '{}', members_with_roles =
            '[{"role": "admin", "user_id": "alice", "user_email": "alice@example.com"},
              {"role": "user", "user_id": "bob", "user_email": null}]'
            WHERE team_id = 't1'"#,
    );
    let updated = ok(gw.post("/team/update", &json!({"team_id": "t1", "max_budget": 50})));
    assert_eq!(updated["team_id"], "t1", "{updated}");
    assert_eq!(
        updated["data"]["members_with_roles"],
        json!([{"role": "admin", "user_id": "alice", "user_email": "alice@example.com"},
               {"role": "user", "user_id": "bob", "user_email": null}]),
        "{updated}"
    );
}

#[test]
fn a_teams_member_model_budgets_hold_each_member_apart_per_model() {
    for (store, _db, gw) in gateways() {
        ok(gw.post(
            "/team/new",
            &json!({"team_id": "t1", "team_member_model_max_budget":
                {"priced": {"budget_limit": 0.006, "time_period": "1d"}}}),
        ));
        // Kept as LiteLLM keeps it: the team's member budget row.
        let team = ok(gw.get("/team/info?team_id=t1"))["team_info"].clone();
        let id = team["metadata"]["team_member_budget_id"].clone();
        let rows = ok(gw.post("/budget/info", &json!({"budgets": [id]})));
        assert_eq!(
            rows[0]["model_max_budget"]["priced"]["budget_limit"], 0.006,
            "{store}: {rows}"
        );
        for user in ["alice", "bob"] {
            ok(gw.post("/user/new", &json!({"user_id": user})));
            ok(gw.post(
                "/team/member_add",
                &json!({"team_id": "t1", "member": {"user_id": user}}),
            ));
        }
        let (alice, bob) = (key_of(&gw, "alice"), key_of(&gw, "bob"));
        let (passed, err) = spend_until_refused(&gw, &alice);
        assert!(passed >= 1, "{store}: {err:?}");
        assert_eq!(err["type"], "budget_exceeded", "{store}");
        assert!(
            error_message(&err).starts_with(
                "LiteLLM Team Member: user=alice, team=t1, exceeded budget for model=priced"
            ),
            "{store}: {err:?}"
        );
        // Another model is not capped; bob's budget for it is his own.
        assert_eq!(chat_with(&gw, &alice, "other").status, 200, "{store}");
        for _ in 0..passed {
            assert_eq!(chat(&gw, &bob).status, 200, "{store}");
        }
    }
}

#[test]
fn two_replicas_share_a_members_budgets_through_redis() {
    let db = TestDb::create();
    let redis = PrivateRedis::start();
    let url = redis.url();
    let envs = [("DATABASE_URL", db.url()), ("REDIS_URL", url.as_str())];
    let first = Gateway::start_json(&config(), &envs);
    let second = Gateway::start_json(&config(), &envs);
    ok(first.post(
        "/team/new",
        &json!({"team_id": "t1", "team_member_model_max_budget":
            {"other": {"budget_limit": 0.02, "time_period": "1d"}}}),
    ));
    ok(first.post("/user/new", &json!({"user_id": "alice"})));
    ok(first.post(
        "/team/member_add",
        &json!({"team_id": "t1", "member": {"user_id": "alice"}, "max_budget_in_team": 0.02}),
    ));
    let alice = key_of(&first, "alice");
    // Each request costs at least 0.0004: one budget of 0.02 holds at most
    // 50 (two budgets of their own would pass about twice as many).
    for model in ["priced", "other"] {
        let mut passed = 0;
        for i in 0..150 {
            let gw = if i % 2 == 0 { &first } else { &second };
            let resp = chat_with(gw, &alice, model);
            if resp.status != 200 {
                assert_error(&resp, 422);
                break;
            }
            passed += 1;
        }
        assert!(
            (1..=50).contains(&passed),
            "{model}: {passed} requests passed"
        );
        assert_eq!(chat_with(&first, &alice, model).status, 422, "{model}");
        assert_eq!(chat_with(&second, &alice, model).status, 422, "{model}");
        if model == "priced" {
            // The member budget is spent: raised for the per-model round.
            ok(first.post(
                "/team/member_update",
                &json!({"team_id": "t1", "user_id": "alice", "max_budget_in_team": 100}),
            ));
            eventually(
                "the raise on the second replica",
                Duration::from_secs(10),
                || (chat_with(&second, &alice, "other").status == 200).then_some(()),
            );
        }
    }
}

#[test]
fn members_spend_resets_with_the_teams_member_budget_duration() {
    for (store, _db, gw) in gateways() {
        ok(gw.post("/team/new", &json!({"team_id": "t1"})));
        ok(gw.post("/user/new", &json!({"user_id": "alice"})));
        ok(gw.post(
            "/team/member_add",
            &json!({"team_id": "t1", "member": {"user_id": "alice"}}),
        ));
        // Set after alice joined: she is linked to the team's row, as
        // LiteLLM backfills its members.
        ok(gw.post(
            "/team/update",
            &json!({"team_id": "t1", "team_member_budget": 0.003,
                "team_member_budget_duration": "2s"}),
        ));
        let alice = key_of(&gw, "alice");
        let (_, err) = spend_until_refused(&gw, &alice);
        assert!(
            error_message(&err).contains("User=alice in Team=t1"),
            "{store}: {err:?}"
        );
        eventually(
            "the team member budget's reset",
            Duration::from_secs(15),
            || (chat(&gw, &alice).status == 200).then_some(()),
        );
    }
}

/// Adds `user` to team `t1` (with `extra` fields on the add) and makes a
/// key of theirs in it.
fn member_with_key(gw: &Gateway, user: &str, extra: Value) -> String {
    ok(gw.post("/user/new", &json!({"user_id": user})));
    let mut add = json!({"team_id": "t1", "member": {"user_id": user, "role": "user"}});
    for (k, v) in extra.as_object().unwrap() {
        add[k] = v.clone();
    }
    ok(gw.post("/team/member_add", &add));
    key_of(gw, user)
}

/// `/team/member_update` for `user` in `t1` with `fields`: the answer.
fn member_update(gw: &Gateway, user: &str, fields: Value) -> Value {
    let mut body = json!({"team_id": "t1", "user_id": user});
    for (k, v) in fields.as_object().unwrap() {
        body[k] = v.clone();
    }
    ok(gw.post("/team/member_update", &body))
}

/// Sends requests for `model` until one is refused with a 429; the refusal.
fn until_rate_limited(gw: &Gateway, key: &str, model: &str) -> (usize, String) {
    for passed in 0..20 {
        let resp = chat_with(gw, key, model);
        if resp.status != 200 {
            return (passed, error_message(&assert_error(&resp, 429)).to_string());
        }
    }
    panic!("20 requests passed; the member's rate limit never refused");
}

/// A member's own `rpm_limit`, `tpm_limit`, `allowed_models`,
/// `temp_budget_increase`/`temp_budget_expiry` and `model_max_budget`,
/// set on `/team/member_update` (and `allowed_models` on
/// `/team/member_add`), are enforced as LiteLLM 1.110.2 enforces them:
/// the limits on the member's `team_member` counter (its own row taking
/// the place of the team's member defaults), the models with LiteLLM's
/// 403 `team_model_access_denied`, the increase added to the member's
/// budget until its expiry, the per-model budgets in their windows.
#[test]
fn a_members_own_limits_are_enforced() {
    for (store, _db, gw) in gateways() {
        ok(gw.post(
            "/team/new",
            &json!({"team_id": "t1", "team_member_rpm_limit": 5}),
        ));

        // rpm: alice's own 2 in place of the team's 5; bob keeps the 5.
        let alice = member_with_key(&gw, "alice", json!({}));
        let bob = member_with_key(&gw, "bob", json!({}));
        let answer = member_update(&gw, "alice", json!({"rpm_limit": 2}));
        assert_eq!(answer["rpm_limit"], 2, "{store}: {answer}");
        let (passed, message) = until_rate_limited(&gw, &alice, "priced");
        assert_eq!(passed, 2, "{store}: {message}");
        assert!(
            message.starts_with("Rate limit exceeded for team_member: t1:alice. Limit type: requests. Current limit: 2"),
            "{store}: {message}"
        );
        let (passed, _) = until_rate_limited(&gw, &bob, "priced");
        assert_eq!(passed, 5, "{store}: bob is held to the team's default");

        // tpm: a member's own token limit on the same counter.
        let carol = member_with_key(&gw, "carol", json!({}));
        member_update(&gw, "carol", json!({"tpm_limit": 1}));
        let (passed, message) = until_rate_limited(&gw, &carol, "priced");
        assert!(passed <= 1, "{store}: {passed} passed");
        assert!(
            message
                .starts_with("Rate limit exceeded for team_member: t1:carol. Limit type: tokens"),
            "{store}: {message}"
        );

        // allowed_models, given on the add: other models are LiteLLM's 403.
        let dave = member_with_key(&gw, "dave", json!({"allowed_models": ["other"]}));
        let err = assert_error(&chat_with(&gw, &dave, "priced"), 403);
        assert_eq!(err["type"], "team_model_access_denied", "{store}: {err:?}");
        assert_eq!(err["param"], "model", "{store}");
        assert_eq!(
            error_message(&err),
            "The requested model 'priced' is not available for this API key, or the model name is invalid. Check the models available to you and try again.",
            "{store}"
        );
        assert_eq!(chat_with(&gw, &dave, "other").status, 200, "{store}");
        // An empty list lifts the restriction (the team's models apply).
        member_update(&gw, "dave", json!({"allowed_models": []}));
        assert_eq!(chat_with(&gw, &dave, "priced").status, 200, "{store}");
        member_update(&gw, "dave", json!({"allowed_models": ["other"]}));
        assert_error(&chat_with(&gw, &dave, "priced"), 403);

        // temp_budget_increase: added to the member's budget until its expiry.
        let erin = member_with_key(&gw, "erin", json!({"max_budget_in_team": 0.003}));
        spend_until_refused(&gw, &erin);
        let answer = member_update(
            &gw,
            "erin",
            json!({"temp_budget_increase": 1, "temp_budget_expiry": "2999-01-01T00:00:00Z"}),
        );
        assert_eq!(answer["temp_budget_increase"], 1.0, "{store}: {answer}");
        assert_eq!(chat(&gw, &erin).status, 200, "{store}: raised");
        member_update(
            &gw,
            "erin",
            json!({"temp_budget_increase": 1, "temp_budget_expiry": "2020-01-01T00:00:00Z"}),
        );
        let err = assert_error(&chat(&gw, &erin), 422);
        assert!(
            error_message(&err).contains("User=erin in Team=t1")
                && error_message(&err).contains("Max budget: 0.003"),
            "{store}: an expired increase adds nothing: {err:?}"
        );

        // model_max_budget: the member's own cap per model, in its window.
        let frank = member_with_key(&gw, "frank", json!({}));
        let answer = member_update(
            &gw,
            "frank",
            json!({"model_max_budget": {"priced": {"budget_limit": 0.003, "time_period": "1d"}}}),
        );
        assert_eq!(
            answer["model_max_budget"]["priced"]["max_budget"], 0.003,
            "{store}: {answer}"
        );
        let (passed, err) = spend_until_refused(&gw, &frank);
        assert!(passed >= 1, "{store}: {err:?}");
        assert!(
            error_message(&err).starts_with(
                "LiteLLM Team Member: user=frank, team=t1, exceeded budget for model=priced"
            ),
            "{store}: {err:?}"
        );
        assert_eq!(chat_with(&gw, &frank, "other").status, 200, "{store}");
    }
}

/// What LiteLLM refuses on `/team/member_update` is a 400 naming the field.
#[test]
fn bad_member_limits_are_refused_naming_the_field() {
    let gw = Gateway::start_json(&config(), &[]);
    ok(gw.post("/team/new", &json!({"team_id": "t1"})));
    ok(gw.post("/user/new", &json!({"user_id": "alice"})));
    ok(gw.post(
        "/team/member_add",
        &json!({"team_id": "t1", "member": {"user_id": "alice"}}),
    ));
    for (fields, param, says) in [
        (
            json!({"temp_budget_increase": 1}),
            "temp_budget_expiry",
            "must be set together",
        ),
        (
            json!({"temp_budget_expiry": "2999-01-01T00:00:00Z"}),
            "temp_budget_increase",
            "must be set together",
        ),
        (
            json!({"temp_budget_increase": -1, "temp_budget_expiry": "2999-01-01T00:00:00Z"}),
            "temp_budget_increase",
            "non-negative",
        ),
        (
            json!({"temp_budget_increase": 1, "temp_budget_expiry": "soon"}),
            "temp_budget_expiry",
            "not a valid datetime",
        ),
        (json!({"rpm_limit": -1}), "rpm_limit", ""),
        (json!({"tpm_limit": "many"}), "tpm_limit", ""),
        (json!({"allowed_models": "priced"}), "allowed_models", ""),
        (
            json!({"model_max_budget": {"priced": {"budget_limit": 1}}}),
            "model_max_budget",
            "requires a budget_duration",
        ),
        (
            json!({"model_max_budget": {"priced": {"budget_limit": -1, "time_period": "1d"}}}),
            "model_max_budget",
            "non-negative finite number",
        ),
        (
            json!({"model_max_budget": {"priced": {"budget_limit": 1, "time_period": "1d", "rpm_limit": 3}}}),
            "model_max_budget",
            "not enforced on a team",
        ),
        (
            json!({"model_max_budget": {" ": {"budget_limit": 1, "time_period": "1d"}}}),
            "model_max_budget",
            "non-empty model names",
        ),
    ] {
        let mut body = json!({"team_id": "t1", "user_id": "alice"});
        for (k, v) in fields.as_object().unwrap() {
            body[k] = v.clone();
        }
        let err = assert_error(&gw.post("/team/member_update", &body), 400);
        assert_eq!(err["param"], param, "{fields}: {err:?}");
        assert!(error_message(&err).contains(says), "{fields}: {err:?}");
    }
}

/// A membership LiteLLM made with its own limits (a budget row with
/// `rpm_limit`, `allowed_models`, `max_budget` and a live
/// `temp_budget_increase`) is held to all of them.
#[test]
fn a_membership_litellm_made_with_limits_is_held_to_them() {
    let db = TestDb::create();
    let gw = Gateway::start_json(&config(), &[("DATABASE_URL", db.url())]);
    ok(gw.post("/team/new", &json!({"team_id": "t1"})));
    ok(gw.post("/user/new", &json!({"user_id": "alice"})));
    db.query(
        r#"UPDATE "LiteLLM_TeamTable" SET members = '{}', members_with_roles =
            '[{"role": "user", "user_id": "alice", "user_email": null}]'
            WHERE team_id = 't1'"#,
    );
    // Spend 0.75 over a cap of 0.5, raised by 1 until tomorrow.
    db.query(
        r#"INSERT INTO "LiteLLM_BudgetTable" (budget_id, max_budget, rpm_limit, allowed_models,
              temp_budget_increase, temp_budget_expiry, created_by, updated_by)
            VALUES ('alice-in-t1', 0.5, 2, ARRAY['other'], 1, now() + interval '1 day',
              'admin', 'admin')"#,
    );
    db.query(
        r#"INSERT INTO "LiteLLM_TeamMembership" (user_id, team_id, spend, budget_id)
            VALUES ('alice', 't1', 0.75, 'alice-in-t1')"#,
    );
    let alice = key_of(&gw, "alice");
    let err = assert_error(&chat_with(&gw, &alice, "priced"), 403);
    assert_eq!(err["type"], "team_model_access_denied", "{err:?}");
    let (passed, message) = until_rate_limited(&gw, &alice, "other");
    assert_eq!(passed, 2, "{message}");
    assert!(
        message.starts_with("Rate limit exceeded for team_member: t1:alice"),
        "{message}"
    );
    // An increase ends at its expiry without a change of the row: bob's
    // (0.75 spent of 0.5, raised by 1 for a few seconds) is admitted, then
    // refused once the expiry passes.
    ok(gw.post("/user/new", &json!({"user_id": "bob"})));
    db.query(
        r#"INSERT INTO "LiteLLM_BudgetTable" (budget_id, max_budget, temp_budget_increase,
              temp_budget_expiry, created_by, updated_by)
            VALUES ('bob-in-t1', 0.5, 1, now() + interval '8 seconds', 'admin', 'admin')"#,
    );
    db.query(
        r#"INSERT INTO "LiteLLM_TeamMembership" (user_id, team_id, spend, budget_id)
            VALUES ('bob', 't1', 0.75, 'bob-in-t1')"#,
    );
    let bob = key_of(&gw, "bob");
    assert_eq!(chat_with(&gw, &bob, "other").status, 200);
    eventually("bob's increase to end", Duration::from_secs(30), || {
        (chat_with(&gw, &bob, "other").status == 422).then_some(())
    });

    // The increase ended: 0.75 is over the 0.5 again.
    db.query(
        r#"UPDATE "LiteLLM_BudgetTable" SET temp_budget_expiry = now() - interval '1 second',
              rpm_limit = NULL WHERE budget_id = 'alice-in-t1'"#,
    );
    ok(gw.post(
        "/team/update",
        &json!({"team_id": "t1", "metadata": {"touched": 1}}),
    ));
    let err = eventually("the ended increase", Duration::from_secs(10), || {
        let resp = chat_with(&gw, &alice, "other");
        (resp.status == 422).then(|| assert_error(&resp, 422))
    });
    // 0.75 and what the two requests above cost.
    assert!(
        error_message(&err)
            .starts_with("Budget has been exceeded! User=alice in Team=t1 Current cost: 0.75")
            && error_message(&err).ends_with(", Max budget: 0.5"),
        "{err:?}"
    );
}

/// A team's `default_team_member_models` (LiteLLM's column) is the
/// `allowed_models` of a member added without models of its own.
#[test]
fn a_teams_default_member_models_restrict_new_members() {
    for (store, _db, gw) in gateways() {
        let team = ok(gw.post(
            "/team/new",
            &json!({"team_id": "t1", "default_team_member_models": ["other"]}),
        ));
        assert_eq!(
            team["default_team_member_models"],
            json!(["other"]),
            "{store}: {team}"
        );
        let alice = member_with_key(&gw, "alice", json!({}));
        let err = assert_error(&chat_with(&gw, &alice, "priced"), 403);
        assert_eq!(err["type"], "team_model_access_denied", "{store}: {err:?}");
        assert_eq!(chat_with(&gw, &alice, "other").status, 200, "{store}");
        // A member's own models take the default's place.
        let bob = member_with_key(&gw, "bob", json!({"allowed_models": ["priced"]}));
        assert_eq!(chat_with(&gw, &bob, "priced").status, 200, "{store}");
        assert_error(&chat_with(&gw, &bob, "other"), 403);
        // Cleared on the team: members added later are not restricted.
        ok(gw.post(
            "/team/update",
            &json!({"team_id": "t1", "default_team_member_models": []}),
        ));
        let info = ok(gw.get("/team/info?team_id=t1"));
        assert_eq!(
            info["team_info"]["default_team_member_models"],
            json!([]),
            "{store}: {info}"
        );
        let carol = member_with_key(&gw, "carol", json!({}));
        assert_eq!(chat_with(&gw, &carol, "priced").status, 200, "{store}");
    }
}

/// A team's `model_aliases` (kept in LiteLLM's `LiteLLM_ModelTable` row
/// the team's `model_id` names) apply to its keys: a name they map is
/// served by its group, and is the team's to call even when the team's
/// `models` do not list it; the group itself is not granted by it.
#[test]
fn a_teams_model_aliases_apply_to_its_keys() {
    for (store, db, gw) in gateways() {
        let team = ok(gw.post(
            "/team/new",
            &json!({"team_id": "t1", "models": ["priced"], "model_aliases": {"cheap": "other"}}),
        ));
        assert_eq!(
            team["model_aliases"],
            json!({"cheap": "other"}),
            "{store}: {team}"
        );
        let alice = member_with_key(&gw, "alice", json!({}));
        let resp = chat_with(&gw, &alice, "cheap");
        assert_eq!(resp.status, 200, "{store}: {}", resp.text());
        assert_eq!(
            resp.header("x-litellm-model-group"),
            Some("other"),
            "{store}"
        );
        assert_error(&chat_with(&gw, &alice, "other"), 403);
        assert_eq!(chat_with(&gw, &alice, "priced").status, 200, "{store}");
        // Changed on /team/update: the new map applies.
        ok(gw.post(
            "/team/update",
            &json!({"team_id": "t1", "model_aliases": {"cheap": "priced"}}),
        ));
        let resp = chat_with(&gw, &alice, "cheap");
        assert_eq!(
            resp.header("x-litellm-model-group"),
            Some("priced"),
            "{store}"
        );
        let err = assert_error(
            &gw.post(
                "/team/update",
                &json!({"team_id": "t1", "model_aliases": {"a": 1}}),
            ),
            400,
        );
        assert_eq!(err["param"], "model_aliases", "{store}");
        if let Some(db) = db {
            // Where LiteLLM keeps them, as LiteLLM writes them too (a JSON
            // string): read back on a team LiteLLM made.
            let kept = db.query(
                r#"SELECT m.aliases::text FROM "LiteLLM_ModelTable" m
                   JOIN "LiteLLM_TeamTable" t ON t.model_id = m.id WHERE t.team_id = 't1'"#,
            );
            assert!(kept.contains(r#""cheap": "priced""#), "{kept}");
            ok(gw.post("/team/new", &json!({"team_id": "t2"})));
            db.query(
                r#"WITH m AS (INSERT INTO "LiteLLM_ModelTable" (aliases, created_by, updated_by)
                     VALUES (to_jsonb('{"quick": "other"}'::text), 'admin', 'admin') RETURNING id)
                   UPDATE "LiteLLM_TeamTable" SET model_id = (SELECT id FROM m) WHERE team_id = 't2'"#,
            );
            let key = ok(gw.post("/key/generate", &json!({"team_id": "t2"})));
            let resp = chat_with(&gw, key["key"].as_str().unwrap(), "quick");
            assert_eq!(
                resp.header("x-litellm-model-group"),
                Some("other"),
                "{}",
                resp.text()
            );
        }
    }
}
