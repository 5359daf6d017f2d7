//! LiteLLM's `throttle_on_budget_exceeded` (issue 35,
//! `proxy/auth/budget_throttle.py`): a key that opted in, with an rpm or
//! tpm limit, is not refused once its own spend reaches its `max_budget`
//! but served at `litellm_settings.budget_exceeded_throttle_percentage` of
//! its limits; a key without the flag (or without a limit to scale) is
//! refused as before, and only a proxy admin may turn the flag on.

use e2e::{assert_error, error_message, Gateway, Response, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// Prices that make each mock request cost about a tenth of a cent.
const INPUT_COST: f64 = 0.00001;
const OUTPUT_COST: f64 = 0.0001;

fn gateways(percentage: Value) -> Vec<(&'static str, Option<TestDb>, Gateway)> {
    let config = json!({
        "model_list": [{
            "model_name": "priced",
            "litellm_params": {
                "model": "mock/priced",
                "mock_response": "one two three four five six seven eight nine ten",
                "input_cost_per_token": INPUT_COST,
                "output_cost_per_token": OUTPUT_COST,
            },
        }],
        "litellm_settings": {"budget_exceeded_throttle_percentage": percentage},
        "general_settings": {"master_key": MASTER_KEY},
    });
    let memory = Gateway::start_json(&config, &[]);
    let db = TestDb::create();
    let postgres = Gateway::start_json(&config, &[("DATABASE_URL", db.url())]);
    vec![("memory", None, memory), ("postgres", Some(db), postgres)]
}

fn chat(gw: &Gateway, key: &str) -> Response {
    let body = json!({"model": "priced", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    gw.post_as(key, "/v1/chat/completions", &body)
}

fn key(gw: &Gateway, fields: Value) -> String {
    let made = gw.post("/key/generate", &fields).expect_status(200).json();
    made["key"].as_str().expect("key").to_string()
}

/// The statuses of `n` chats in a row.
fn statuses(gw: &Gateway, key: &str, n: usize) -> Vec<u16> {
    (0..n).map(|_| chat(gw, key).status).collect()
}

#[test]
fn an_over_budget_key_that_opted_in_is_served_at_a_share_of_its_limits() {
    for (store, _db, gw) in gateways(json!(0.05)) {
        // About three requests' worth of budget; 100 rpm throttled to 5.
        let throttled = key(
            &gw,
            json!({"max_budget": 0.003, "rpm_limit": 100, "throttle_on_budget_exceeded": true}),
        );
        // Three requests spend the budget; two more fit the throttled rpm
        // (five in this minute), the sixth does not: a 429, not a 422.
        let got = statuses(&gw, &throttled, 5);
        assert_eq!(got, [200; 5], "{store}: served past its budget");
        let info = gw
            .get(&format!("/key/info?key={throttled}"))
            .expect_status(200)
            .json();
        assert_eq!(
            info["info"]["metadata"]["throttle_on_budget_exceeded"], true,
            "{store}: {info}"
        );
        let err = assert_error(&chat(&gw, &throttled), 429);
        assert!(
            error_message(&err).contains("Rate limit exceeded"),
            "{store}: {err:?}"
        );

        // The same key without the flag is refused at its budget.
        let plain = key(&gw, json!({"max_budget": 0.003, "rpm_limit": 100}));
        let got = statuses(&gw, &plain, 5);
        assert!(got.contains(&422), "{store}: {got:?}");
        // And so is one with the flag but no limit to scale down.
        let unlimited = key(
            &gw,
            json!({"max_budget": 0.003, "throttle_on_budget_exceeded": true}),
        );
        let got = statuses(&gw, &unlimited, 5);
        assert!(got.contains(&422), "{store}: {got:?}");
    }
}

#[test]
fn only_a_proxy_admin_turns_throttling_on() {
    for (store, _db, gw) in gateways(json!(0.5)) {
        gw.post(
            "/user/new",
            &json!({"user_id": "worker", "user_role": "internal_user"}),
        )
        .expect_status(200);
        let own = key(&gw, json!({"user_id": "worker"}));
        let refused = gw.post_as(
            &own,
            "/key/generate",
            &json!({"throttle_on_budget_exceeded": true}),
        );
        let err = assert_error(&refused, 403);
        assert_eq!(
            error_message(&err),
            "Only proxy admins can enable throttle_on_budget_exceeded on a key.",
            "{store}"
        );
        let made = gw.post_as(
            &own,
            "/key/generate",
            &json!({"throttle_on_budget_exceeded": false}),
        );
        assert_eq!(made.status, 200, "{store}: {}", made.text());
    }
}

#[test]
fn a_percentage_out_of_range_stops_start_up_naming_it() {
    for bad in [json!(0), json!(1.5), json!("half")] {
        let config = json!({
            "model_list": [{"model_name": "m", "litellm_params": {"model": "mock/m"}}],
            "litellm_settings": {"budget_exceeded_throttle_percentage": bad},
        });
        let yaml = e2e::to_yaml(&config);
        let mut gw = Gateway::spawn(&yaml, &[], e2e::free_port(), &[]);
        let status = gw
            .wait_exit(Duration::from_secs(20))
            .expect("the gateway exits");
        assert!(!status.success(), "{bad}");
        let out = gw.output();
        assert!(
            out.contains("litellm_settings.budget_exceeded_throttle_percentage"),
            "{bad}: {out}"
        );
    }
}

/// A throttled key's pass-through calls count on its own budget, as its
/// LLM calls do: once they spend it, the key is held to its throttled
/// limits there too (before, they were never counted on its budget, so
/// the key kept its whole rpm limit).
#[test]
fn pass_through_spend_brings_a_key_that_opted_in_to_its_throttled_limits() {
    let mock = e2e::MockServer::start(&["--completion-tokens", "1000"]);
    let config = json!({
        "model_list": [],
        "litellm_settings": {"budget_exceeded_throttle_percentage": 0.01},
        "general_settings": {"master_key": MASTER_KEY},
    });
    let base = format!("http://127.0.0.1:{}", mock.port());
    let gw = Gateway::start_json(
        &config,
        &[
            ("ANTHROPIC_API_BASE", base.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-upstream"),
        ],
    );
    // One call (1,000 output tokens of claude-haiku-4-5) spends the budget;
    // 100 rpm throttled to 1.
    let throttled = key(
        &gw,
        json!({"max_budget": 0.001, "rpm_limit": 100, "throttle_on_budget_exceeded": true}),
    );
    let body = json!({"model": "claude-haiku-4-5", "max_tokens": 2000,
        "messages": [{"role": "user", "content": "hi"}]});
    let call = || {
        gw.call(
            "POST",
            "/anthropic/v1/messages",
            &[
                ("x-api-key", throttled.as_str()),
                ("anthropic-version", "2023-06-01"),
                ("content-type", "application/json"),
            ],
            body.to_string().as_bytes(),
        )
        .status
    };
    let got: Vec<u16> = (0..6).map(|_| call()).collect();
    assert_eq!(got[0], 200, "{got:?}");
    // Past its budget at one request a minute: a 429 within six calls
    // (even if a minute turns between them), never its budget's 422.
    assert!(got.contains(&429), "{got:?}");
    assert!(!got.contains(&422), "{got:?}");
}
