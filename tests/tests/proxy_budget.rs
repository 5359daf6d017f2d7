//! LiteLLM's proxy-wide budget, `litellm_settings.max_budget` with
//! `budget_duration`, end to end: every LLM request counts against it (a
//! virtual key's and the master key's alike), its spend is kept on the user
//! row `litellm-proxy-budget` as LiteLLM keeps it, a request that no longer
//! fits is refused with LiteLLM's `budget_exceeded` (422) whoever sends it,
//! and the spend resets when its period ends. In memory and on Postgres.

use e2e::{assert_error, error_message, to_yaml, Gateway, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// Prices that make each mock request cost about half a tenth of a cent,
/// and reserve about two tenths (10 output tokens at most).
const INPUT_COST: f64 = 0.00001;
const OUTPUT_COST: f64 = 0.0001;
/// Room for two or three requests.
const MAX_BUDGET: f64 = 0.003;

/// A gateway with a priced mock model and the proxy-wide budget.
fn start(litellm: Value, database_url: Option<&str>) -> Gateway {
    let config = json!({
        "model_list": [{
            "model_name": "priced",
            "litellm_params": {
                "model": "mock/priced",
                "mock_response": "one two three four five",
                "input_cost_per_token": INPUT_COST,
                "output_cost_per_token": OUTPUT_COST,
            },
        }],
        "litellm_settings": litellm,
        "general_settings": {"master_key": MASTER_KEY},
    });
    let envs: Vec<(&str, &str)> = database_url
        .map(|u| ("DATABASE_URL", u))
        .into_iter()
        .collect();
    Gateway::start(&to_yaml(&config), &envs)
}

/// One chat request with `key`.
fn chat(gw: &Gateway, key: &str) -> e2e::Response {
    let body = json!({"model": "priced", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
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

/// The `litellm-proxy-budget` user row, as `/user/info` shows it.
fn proxy_row(gw: &Gateway) -> Value {
    let info = gw.get("/user/info?user_id=litellm-proxy-budget");
    assert_eq!(info.status, 200, "{}", info.text());
    info.json()["user_info"].clone()
}

/// Sends requests, a virtual key's and the master key's in turn, until one
/// is refused; returns the refusal and the cost of those served.
fn spend_until_refused(gw: &Gateway, key: &str) -> (e2e::Response, f64) {
    let mut served = 0.0;
    for i in 0..20 {
        let resp = chat(gw, if i % 2 == 0 { key } else { MASTER_KEY });
        if resp.status != 200 {
            return (resp, served);
        }
        let usage = &resp.json()["usage"];
        served += usage["prompt_tokens"].as_f64().unwrap() * INPUT_COST
            + usage["completion_tokens"].as_f64().unwrap() * OUTPUT_COST;
    }
    panic!("20 requests of about 0.0005 USD each fit a budget of {MAX_BUDGET}");
}

fn enforced_on_every_caller(database_url: Option<&str>) {
    let gw = start(
        json!({"max_budget": MAX_BUDGET, "budget_duration": "30d"}),
        database_url,
    );
    let row = proxy_row(&gw);
    assert_eq!(row["max_budget"], MAX_BUDGET, "{row}");
    assert_eq!(row["budget_duration"], "30d", "{row}");
    assert!(row["budget_reset_at"].is_string(), "{row}");
    // A key without a budget of its own.
    let key = gw.post("/key/generate", &json!({})).json()["key"]
        .as_str()
        .expect("key")
        .to_string();
    let (refused, served) = spend_until_refused(&gw, &key);
    assert!(served > 0.0, "the first requests fit");
    let err = assert_error(&refused, 422);
    assert_eq!(err["type"], "budget_exceeded", "{err:?}");
    assert!(
        error_message(&err).contains("proxy spend"),
        "{}",
        error_message(&err)
    );
    // Both callers are refused now.
    for caller in [key.as_str(), MASTER_KEY] {
        assert_error(&chat(&gw, caller), 422);
    }
    // The spend of every served request lands on the row.
    let spend = e2e::eventually("the proxy row's spend", Duration::from_secs(10), || {
        let spend = proxy_row(&gw)["spend"].as_f64()?;
        ((spend - served).abs() < 1e-9).then_some(spend)
    });
    assert!(spend <= MAX_BUDGET, "{spend}");
}

#[test]
fn the_proxy_budget_is_enforced_on_every_caller_in_memory() {
    enforced_on_every_caller(None);
}

#[test]
fn the_proxy_budget_is_enforced_on_every_caller_on_postgres() {
    let db = e2e::TestDb::create();
    enforced_on_every_caller(Some(db.url()));
}

/// A spent budget admits requests again once its period ends.
#[test]
fn the_proxy_budget_resets_when_its_period_ends() {
    let gw = start(
        json!({"max_budget": MAX_BUDGET, "budget_duration": "2s"}),
        None,
    );
    let (refused, _) = spend_until_refused(&gw, MASTER_KEY);
    assert_error(&refused, 422);
    e2e::eventually(
        "a request admitted in the next period",
        Duration::from_secs(15),
        || (chat(&gw, MASTER_KEY).status == 200).then_some(()),
    );
}

/// Without a budget above 0 nothing is counted, as in LiteLLM.
#[test]
fn a_zero_proxy_budget_is_no_budget() {
    let gw = start(json!({"max_budget": 0}), None);
    for _ in 0..8 {
        assert_eq!(chat(&gw, MASTER_KEY).status, 200);
    }
    assert_eq!(
        gw.get("/user/info?user_id=litellm-proxy-budget").status,
        404
    );
}
