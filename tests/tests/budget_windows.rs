//! Keys' and teams' `budget_limits`: several budget windows at once, each
//! with its own budget and period, as LiteLLM 1.110 enforces them
//! (`_virtual_key_multi_budget_check`, `_team_multi_budget_check`): a
//! request is refused with 422 `budget_exceeded` and LiteLLM's
//! "ExceededBudget: Key over 1d budget. Spend=$..., Limit=$..." once a
//! window is spent, whatever the other windows and `max_budget` say; a
//! team's window caps all its keys together; a window that ends starts over
//! from zero; the windows are stored in LiteLLM's `budget_limits` column
//! with the `reset_at` LiteLLM gives them; two replicas on one Redis share
//! a window.

use e2e::{assert_error, eventually, to_yaml, Gateway, PrivateRedis, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// A config whose one model costs about half a thousandth of a dollar a
/// request (and reserves about two).
fn config() -> Value {
    json!({
        "model_list": [{"model_name": "priced",
            "litellm_params": {"model": "mock/priced", "mock_response": "one two three",
                "input_cost_per_token": 0.00001, "output_cost_per_token": 0.0001}}],
        "general_settings": {"master_key": MASTER_KEY},
    })
}

fn chat(gw: &Gateway, key: &str) -> e2e::Response {
    let body = json!({"model": "priced", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    gw.post_as(key, "/v1/chat/completions", &body)
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

/// Sends requests until one is refused (at most `most`); returns how many
/// passed and the refusal's error object.
fn spend_until_refused(
    gw: &Gateway,
    key: &str,
    most: usize,
) -> (usize, serde_json::Map<String, Value>) {
    for passed in 0..most {
        let resp = chat(gw, key);
        if resp.status != 200 {
            return (passed, assert_error(&resp, 422));
        }
    }
    panic!("{most} requests passed; no window refused");
}

#[test]
fn a_keys_spent_window_refuses_with_litellms_message_and_names_its_duration() {
    let gw = Gateway::start_json(&config(), &[]);
    // A roomy week and a small day: the day refuses first.
    let key = key_of(
        &gw,
        json!({"max_budget": 100, "budget_limits": [
            {"budget_duration": "7d", "max_budget": 10},
            {"budget_duration": "1d", "max_budget": 0.006},
        ]}),
    );
    let (passed, error) = spend_until_refused(&gw, &key, 60);
    assert!(
        passed >= 1,
        "the window admits while it has room: {error:?}"
    );
    assert_eq!(error["type"], "budget_exceeded");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("ExceededBudget: Key over 1d budget. Spend=$"),
        "{message}"
    );
    assert!(message.contains("Limit=$0.01"), "{message}");

    // Stored as LiteLLM stores it: each window with the reset_at it gave it.
    let info = gw
        .get(&format!("/key/info?key={key}"))
        .expect_status(200)
        .json();
    let windows = info["info"]["budget_limits"]
        .as_array()
        .expect("budget_limits");
    assert_eq!(windows.len(), 2, "{info}");
    assert_eq!(windows[1]["budget_duration"], "1d");
    assert_eq!(windows[1]["max_budget"], 0.006);
    assert!(windows[1]["reset_at"].is_string(), "{info}");

    // Another key is not touched by this key's window.
    let other = key_of(&gw, json!({}));
    assert_eq!(chat(&gw, &other).status, 200);

    // Clearing the windows lets the key spend again (its max_budget stays).
    let resp = gw.post("/key/update", &json!({"key": key, "budget_limits": null}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(chat(&gw, &key).status, 200);
}

#[test]
fn a_teams_window_caps_all_its_keys_together() {
    let gw = Gateway::start_json(&config(), &[]);
    let team = created(
        &gw,
        "/team/new",
        json!({"team_id": "windowed", "budget_limits": [{"budget_duration": "1h", "max_budget": 0.006}]}),
    );
    assert_eq!(team["budget_limits"][0]["budget_duration"], "1h", "{team}");
    let a = key_of(&gw, json!({"team_id": "windowed"}));
    let b = key_of(&gw, json!({"team_id": "windowed"}));
    // Spent by both keys, in turn.
    let mut refusal = None;
    for i in 0..60 {
        let resp = chat(&gw, if i % 2 == 0 { &a } else { &b });
        if resp.status != 200 {
            refusal = Some(assert_error(&resp, 422));
            break;
        }
    }
    let error = refusal.expect("the team's window refused");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("ExceededBudget: Team=windowed over 1h budget. Spend=$"),
        "{message}"
    );
    for key in [&a, &b] {
        assert_eq!(
            chat(&gw, key).status,
            422,
            "every key of the team is refused"
        );
    }
}

#[test]
fn a_window_that_ends_starts_over_from_zero() {
    let gw = Gateway::start_json(&config(), &[]);
    let key = key_of(
        &gw,
        json!({"budget_limits": [{"budget_duration": "3s", "max_budget": 0.004}]}),
    );
    let (passed, _) = spend_until_refused(&gw, &key, 60);
    assert!(passed >= 1);
    eventually("the next window to admit", Duration::from_secs(15), || {
        (chat(&gw, &key).status == 200).then_some(())
    });
}

#[test]
fn malformed_windows_are_refused_naming_the_field() {
    let gw = Gateway::start_json(&config(), &[]);
    for (windows, field) in [
        (
            json!([{"max_budget": 1}]),
            "budget_limits[0].budget_duration",
        ),
        (
            json!([{"budget_duration": "soon", "max_budget": 1}]),
            "budget_limits[0].budget_duration",
        ),
        (
            json!([{"budget_duration": "1d", "max_budget": "lots"}]),
            "budget_limits[0].max_budget",
        ),
        (
            json!([{"budget_duration": "1d", "max_budget": -1}]),
            "budget_limits[0].max_budget",
        ),
        (
            json!([{"budget_duration": "1d", "max_budget": 1}, {"budget_duration": "1d", "max_budget": 2}]),
            "budget_limits[1].budget_duration",
        ),
    ] {
        for path in ["/key/generate", "/team/new"] {
            let resp = gw.post(path, &json!({"budget_limits": windows}));
            let error = assert_error(&resp, 400);
            assert_eq!(error["param"], field, "{path} {windows}: {error:?}");
        }
    }
}

#[test]
fn windows_live_in_litellms_column_and_two_replicas_share_one_window() {
    let db = TestDb::create();
    let redis = PrivateRedis::start();
    let url = redis.url();
    let envs = [("DATABASE_URL", db.url()), ("REDIS_URL", url.as_str())];
    let yaml = to_yaml(&config());
    let first = Gateway::start(&yaml, &envs);
    let second = Gateway::start(&yaml, &envs);
    let created = created(
        &first,
        "/key/generate",
        json!({"budget_limits": [{"budget_duration": "1d", "max_budget": 0.02}]}),
    );
    let (key, token) = (
        created["key"].as_str().unwrap().to_string(),
        created["token"].as_str().unwrap().to_string(),
    );
    let stored = db.query(&format!(
        r#"SELECT budget_limits->0->>'budget_duration', budget_limits->0->>'max_budget',
            budget_limits->0->>'reset_at' IS NOT NULL
           FROM "LiteLLM_VerificationToken" WHERE token = '{token}'"#
    ));
    assert_eq!(stored, "1d|0.02|t");
    // Alternating replicas: together they stay within one window.
    let mut passed = 0;
    for i in 0..150 {
        let gw = if i % 2 == 0 { &first } else { &second };
        let resp = chat(gw, &key);
        if resp.status != 200 {
            assert_error(&resp, 422);
            break;
        }
        passed += 1;
    }
    // Each request costs at least 0.00033: one window of 0.02 holds at
    // most 60 (two windows of their own would pass about 90).
    assert!((1..=60).contains(&passed), "{passed} requests passed");
    assert_eq!(chat(&first, &key).status, 422);
    assert_eq!(chat(&second, &key).status, 422);
}
