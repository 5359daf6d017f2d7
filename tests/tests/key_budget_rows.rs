//! A key's `budget_id`: the `/budget/new` row it links fills in the budget
//! and limits the key leaves unset (`max_budget`, `soft_budget`,
//! `tpm_limit`, `rpm_limit`, `model_max_budget`), as LiteLLM 1.110's
//! `UserAPIKeyAuth` fills them from the `litellm_budget_table_*` columns of
//! its key view; `/budget/update` on the row reaches the keys at once; the
//! link lives in LiteLLM's `budget_id` column and a key update never
//! writes the shared row.

use e2e::{assert_error, to_yaml, Gateway, TestDb, MASTER_KEY};
use serde_json::{json, Value};

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

fn key_of(gw: &Gateway, fields: Value) -> String {
    ok(gw.post("/key/generate", &fields))["key"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Requests until one is refused (at most 60); how many passed and the
/// refusal's status.
fn passes(gw: &Gateway, key: &str) -> (usize, u16) {
    for passed in 0..60 {
        let resp = chat(gw, key);
        if resp.status != 200 {
            return (passed, resp.status);
        }
    }
    (60, 200)
}

fn check_budget_row_applies(gw: &Gateway) {
    ok(gw.post(
        "/budget/new",
        &json!({"budget_id": "small", "max_budget": 0.006}),
    ));
    let key = key_of(gw, json!({"budget_id": "small"}));
    let info = ok(gw.get(&format!("/key/info?key={key}")));
    assert_eq!(info["info"]["budget_id"], "small", "{info}");
    let (passed, status) = passes(gw, &key);
    assert!((1..60).contains(&passed), "{passed}");
    assert_eq!(status, 422, "the row's max_budget refused");
    // Raised on the row: the key is admitted again.
    ok(gw.post(
        "/budget/update",
        &json!({"budget_id": "small", "max_budget": 10}),
    ));
    assert_eq!(chat(gw, &key).status, 200);
    // A key's own max_budget wins over the row's.
    ok(gw.post(
        "/budget/new",
        &json!({"budget_id": "tiny", "max_budget": 0.000001}),
    ));
    let own = key_of(gw, json!({"budget_id": "tiny", "max_budget": 10}));
    assert_eq!(chat(gw, &own).status, 200);
}

#[test]
fn a_keys_budget_row_fills_in_its_budget_and_limits() {
    let gw = Gateway::start_json(&config(), &[]);
    check_budget_row_applies(&gw);
    ok(gw.post("/budget/new", &json!({"budget_id": "slow", "rpm_limit": 2})));
    let key = key_of(&gw, json!({"budget_id": "slow"}));
    assert_eq!(chat(&gw, &key).status, 200);
    assert_eq!(chat(&gw, &key).status, 200);
    assert_error(&chat(&gw, &key), 429);

    let unknown = gw.post("/key/generate", &json!({"budget_id": "nope"}));
    assert_eq!(assert_error(&unknown, 400)["param"], "budget_id");
    let both = gw.post(
        "/key/generate",
        &json!({"budget_id": "slow", "soft_budget": 1}),
    );
    assert_eq!(assert_error(&both, 400)["param"], "soft_budget");
}

#[test]
fn the_link_lives_in_litellms_column_and_key_updates_leave_the_row_alone() {
    let db = TestDb::create();
    let gw = Gateway::start(&to_yaml(&config()), &[("DATABASE_URL", db.url())]);
    check_budget_row_applies(&gw);
    ok(gw.post(
        "/budget/new",
        &json!({"budget_id": "shared", "soft_budget": 0.5, "max_budget": 5}),
    ));
    let created = ok(gw.post("/key/generate", &json!({"budget_id": "shared"})));
    let token = created["token"].as_str().unwrap().to_string();
    let key = created["key"].as_str().unwrap().to_string();
    ok(gw.post("/key/update", &json!({"key": key, "key_alias": "renamed"})));
    let row = db.query(&format!(
        r#"SELECT k.budget_id, b.soft_budget FROM "LiteLLM_VerificationToken" k
           JOIN "LiteLLM_BudgetTable" b ON b.budget_id = k.budget_id WHERE k.token = '{token}'"#
    ));
    assert_eq!(row, "shared|0.5", "the shared row's soft budget is kept");
    // Unlinked: the key's own limits only.
    ok(gw.post("/key/update", &json!({"key": key, "budget_id": null})));
    let linked = db.query(&format!(
        r#"SELECT coalesce(budget_id, 'none') FROM "LiteLLM_VerificationToken" WHERE token = '{token}'"#
    ));
    assert_eq!(linked, "none");
}
