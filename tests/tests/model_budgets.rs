//! A team's and a user's `model_max_budget` (LiteLLM's per-model budgets,
//! both of its forms: `{"m": 0.5}` and `{"m": {"budget_limit": 0.5,
//! "time_period": "1d"}}`), end to end on Postgres: the budget caps what all
//! of the team's (or the user's) keys spend on that model group, other
//! groups stay open, a key's own entry for the group takes the place of its
//! team's (as LiteLLM's `team_model_budget_entries`), the spend is kept in
//! the row's `model_spend`, and a `time_period` window starts afresh.

use e2e::{to_yaml, Gateway, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// Prices that make each mock request cost about a tenth of a cent.
const INPUT_COST: f64 = 0.00001;
const OUTPUT_COST: f64 = 0.0001;
/// Room for one or two requests of "priced".
const MODEL_BUDGET: f64 = 0.003;

fn start() -> (e2e::TestDb, Gateway) {
    let db = e2e::TestDb::create();
    let model = |name: &str| {
        json!({
            "model_name": name,
            "litellm_params": {
                "model": format!("mock/{name}"),
                "mock_response": "one two three four five six seven eight nine ten",
                "input_cost_per_token": INPUT_COST,
                "output_cost_per_token": OUTPUT_COST,
            },
        })
    };
    let config = json!({
        "model_list": [model("priced"), model("other")],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[("DATABASE_URL", db.url())]);
    (db, gw)
}

fn created(gw: &Gateway, path: &str, body: Value) -> Value {
    let resp = gw.post(path, &body);
    assert_eq!(resp.status, 200, "{path}: {}", resp.text());
    resp.json()
}

fn key_of(gw: &Gateway, fields: Value) -> String {
    created(gw, "/key/generate", fields)["key"]
        .as_str()
        .expect("key")
        .to_string()
}

fn chat(gw: &Gateway, key: &str, model: &str) -> (u16, Value) {
    let body =
        json!({"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let resp = gw.post_as(key, "/v1/chat/completions", &body);
    (resp.status, resp.json())
}

/// Sends requests for `model` with `key` until one is refused; returns how
/// many were admitted and the refusal.
fn until_refused(gw: &Gateway, key: &str, model: &str) -> (usize, Value) {
    for admitted in 0..50 {
        let (status, body) = chat(gw, key, model);
        if status != 200 {
            assert_eq!(status, 422, "{body}");
            assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");
            return (admitted, body);
        }
    }
    panic!("the per-model budget never refused");
}

#[test]
fn a_teams_model_max_budget_caps_that_model_over_all_its_keys() {
    let (_db, gw) = start();
    created(
        &gw,
        "/team/new",
        json!({"team_id": "t1", "model_max_budget":
            {"priced": {"budget_limit": MODEL_BUDGET, "time_period": "1d"}}}),
    );
    let first = key_of(&gw, json!({"team_id": "t1"}));
    let second = key_of(&gw, json!({"team_id": "t1"}));
    let (admitted, refusal) = until_refused(&gw, &first, "priced");
    assert!(admitted >= 1, "{refusal}");
    let message = refusal["error"]["message"].as_str().unwrap();
    assert!(message.contains("team model"), "{message}");
    assert_eq!(
        chat(&gw, &second, "priced").0,
        422,
        "the budget is the team's, over all its keys"
    );
    assert_eq!(chat(&gw, &second, "other").0, 200, "other groups stay open");
    let info = e2e::eventually("the team's model_spend", Duration::from_secs(5), || {
        let info = gw.get("/team/info?team_id=t1").json();
        info["team_info"]["model_spend"]["priced"]
            .as_f64()
            .is_some_and(|s| s > 0.0)
            .then_some(info)
    });
    let team = &info["team_info"];
    assert_eq!(
        team["model_max_budget"]["priced"]["budget_limit"], MODEL_BUDGET,
        "{info}"
    );
    let spent = team["model_spend"]["priced"].as_f64().unwrap();
    assert!(spent <= MODEL_BUDGET + 1e-9, "{info}");
    assert!(
        team["model_spend"]["other"].as_f64().unwrap_or(0.0) > 0.0,
        "spend is kept per group: {info}"
    );
}

#[test]
fn a_keys_own_entry_for_the_group_takes_the_place_of_its_teams() {
    let (_db, gw) = start();
    created(
        &gw,
        "/team/new",
        json!({"team_id": "t2", "model_max_budget": {"priced": MODEL_BUDGET}}),
    );
    let own = key_of(
        &gw,
        json!({"team_id": "t2", "model_max_budget": {"priced": 1.0}}),
    );
    for i in 0..6 {
        let (status, body) = chat(&gw, &own, "priced");
        assert_eq!(status, 200, "request {i}: {body}");
    }
    let plain = key_of(&gw, json!({"team_id": "t2"}));
    let (admitted, _) = until_refused(&gw, &plain, "priced");
    assert!(admitted <= 3, "the team's entry holds for keys without one");
}

#[test]
fn a_users_model_max_budget_caps_that_model_over_all_their_keys_until_cleared() {
    let (_db, gw) = start();
    created(
        &gw,
        "/user/new",
        json!({"user_id": "u1", "model_max_budget": {"priced": MODEL_BUDGET}}),
    );
    let first = key_of(&gw, json!({"user_id": "u1"}));
    let second = key_of(&gw, json!({"user_id": "u1"}));
    let (_, refusal) = until_refused(&gw, &first, "priced");
    let message = refusal["error"]["message"].as_str().unwrap();
    assert!(message.contains("user model"), "{message}");
    assert_eq!(chat(&gw, &second, "priced").0, 422, "{refusal}");
    assert_eq!(chat(&gw, &second, "other").0, 200);
    let info = gw.get("/user/info?user_id=u1").json();
    assert_eq!(
        info["user_info"]["model_max_budget"]["priced"], MODEL_BUDGET,
        "{info}"
    );

    let cleared = gw.post(
        "/user/update",
        &json!({"user_id": "u1", "model_max_budget": null}),
    );
    assert_eq!(cleared.status, 200, "{}", cleared.text());
    e2e::eventually("the cleared budget", Duration::from_secs(5), || {
        (chat(&gw, &second, "priced").0 == 200).then_some(())
    });
}

#[test]
fn a_model_budget_window_starts_afresh_when_its_time_period_ends() {
    let (_db, gw) = start();
    created(
        &gw,
        "/team/new",
        json!({"team_id": "t3", "model_max_budget":
            {"priced": {"budget_limit": MODEL_BUDGET, "time_period": "2s"}}}),
    );
    let key = key_of(&gw, json!({"team_id": "t3"}));
    until_refused(&gw, &key, "priced");
    e2e::eventually("a new window", Duration::from_secs(15), || {
        std::thread::sleep(Duration::from_millis(100));
        (chat(&gw, &key, "priced").0 == 200).then_some(())
    });
}

#[test]
fn a_bad_model_max_budget_is_refused_naming_the_field() {
    let (_db, gw) = start();
    for (path, body, param) in [
        (
            "/team/new",
            json!({"team_id": "t4", "model_max_budget": {"m": -1}}),
            "model_max_budget.m",
        ),
        (
            "/user/new",
            json!({"user_id": "u4", "model_max_budget": {"m": {"budget_limit": 1, "time_period": "soon"}}}),
            "model_max_budget.m.time_period",
        ),
    ] {
        let resp = gw.post(path, &body);
        assert_eq!(resp.status, 400, "{path}: {}", resp.text());
        assert_eq!(resp.json()["error"]["param"], param, "{}", resp.text());
    }
}

#[test]
fn an_end_users_model_max_budget_caps_that_model_for_requests_naming_them() {
    let (_db, gw) = start();
    created(
        &gw,
        "/customer/new",
        json!({"user_id": "cust-m", "model_max_budget":
            {"priced": {"budget_limit": MODEL_BUDGET, "time_period": "1d"}}}),
    );
    let key = key_of(&gw, json!({}));
    let as_end_user = |model: &str, user: &str| {
        let body = json!({"model": model, "max_tokens": 10, "user": user,
            "messages": [{"role": "user", "content": "hi"}]});
        let resp = gw.post_as(&key, "/v1/chat/completions", &body);
        (resp.status, resp.json())
    };
    let mut admitted = 0;
    let refusal = loop {
        let (status, body) = as_end_user("priced", "cust-m");
        if status != 200 {
            break body;
        }
        admitted += 1;
        assert!(admitted < 50, "the end user's model budget never refused");
    };
    assert!(admitted >= 1, "{refusal}");
    assert_eq!(refusal["error"]["type"], "budget_exceeded", "{refusal}");
    let message = refusal["error"]["message"].as_str().unwrap();
    assert!(message.contains("end user model"), "{message}");
    assert_eq!(
        as_end_user("other", "cust-m").0,
        200,
        "other groups stay open"
    );
    assert_eq!(
        as_end_user("priced", "someone-else").0,
        200,
        "the budget is the end user's"
    );
}

/// An organization's budget (the `max_budget` of its budget row) caps what
/// the keys of all its teams spend together, as LiteLLM's
/// `organization_max_budget_check`; raising it with `/organization/update`
/// lets them spend again at once.
#[test]
fn an_organizations_budget_caps_the_keys_of_all_its_teams() {
    let (_db, gw) = start();
    created(
        &gw,
        "/organization/new",
        json!({"organization_id": "org-b", "organization_alias": "B", "max_budget": MODEL_BUDGET}),
    );
    for team in ["ta", "tb"] {
        created(
            &gw,
            "/team/new",
            json!({"team_id": team, "organization_id": "org-b"}),
        );
    }
    let first = key_of(&gw, json!({"team_id": "ta"}));
    let second = key_of(&gw, json!({"team_id": "tb"}));
    let (admitted, refusal) = until_refused(&gw, &first, "priced");
    assert!(admitted >= 1, "{refusal}");
    let message = refusal["error"]["message"].as_str().unwrap();
    assert!(message.contains("organization"), "{message}");
    assert_eq!(
        chat(&gw, &second, "other").0,
        422,
        "the budget is the organization's, over all its teams and models"
    );
    let outside = key_of(&gw, json!({}));
    assert_eq!(chat(&gw, &outside, "priced").0, 200);

    created(
        &gw,
        "/organization/update",
        json!({"organization_id": "org-b", "max_budget": 1.0}),
    );
    assert_eq!(chat(&gw, &second, "priced").0, 200, "raised at once");
}

/// An organization's `rpm_limit` (its budget row's) counts the requests of
/// every key of every team in it together, as LiteLLM's `organization`
/// rate-limit descriptor: the third request in the minute is a 429 naming
/// the organization, whichever team's key sends it; a key outside it is
/// not counted.
#[test]
fn an_organizations_rpm_limit_counts_the_keys_of_all_its_teams() {
    let (_db, gw) = start();
    created(
        &gw,
        "/organization/new",
        json!({"organization_id": "org-r", "organization_alias": "R", "rpm_limit": 2}),
    );
    for team in ["ra", "rb"] {
        created(
            &gw,
            "/team/new",
            json!({"team_id": team, "organization_id": "org-r"}),
        );
    }
    let first = key_of(&gw, json!({"team_id": "ra"}));
    let second = key_of(&gw, json!({"team_id": "rb"}));
    assert_eq!(chat(&gw, &first, "priced").0, 200);
    assert_eq!(chat(&gw, &second, "other").0, 200);
    let (status, refusal) = chat(&gw, &first, "priced");
    assert_eq!(status, 429, "{refusal}");
    let message = refusal["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("organization"), "{message}");
    assert_eq!(
        chat(&gw, &second, "priced").0,
        429,
        "one count for the organization"
    );
    let outside = key_of(&gw, json!({}));
    assert_eq!(
        chat(&gw, &outside, "priced").0,
        200,
        "not in the organization"
    );
}
