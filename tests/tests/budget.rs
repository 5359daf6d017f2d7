//! Budgets and spend: exact admission under a concurrent burst, a bounded
//! sequential overshoot, recovery by raising the budget, resetting spend or a
//! budget period, soft-budget alerts, and one spend row per request.

use e2e::{to_yaml, Gateway, MASTER_KEY};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Prices that make each mock request cost about a tenth of a cent.
const INPUT_COST: f64 = 0.00001;
const OUTPUT_COST: f64 = 0.0001;
/// The mock's reply: ten words, ten completion tokens.
const REPLY: &str = "one two three four five six seven eight nine ten";

/// A gateway on a fresh Postgres database (which outlives it), so spend and
/// budgets go through LiteLLM's tables.
fn start() -> (e2e::TestDb, Gateway) {
    let db = e2e::TestDb::create();
    let config = json!({
        "model_list": [{
            "model_name": "priced",
            "litellm_params": {
                "model": "mock/priced",
                "mock_response": REPLY,
                "input_cost_per_token": INPUT_COST,
                "output_cost_per_token": OUTPUT_COST,
            },
        }, {
            "model_name": "slow-priced",
            "litellm_params": {
                "model": "mock/slow",
                "mock_response": REPLY,
                "mock_latency_ms": 200,
                "input_cost_per_token": INPUT_COST,
                "output_cost_per_token": OUTPUT_COST,
            },
        }],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[("DATABASE_URL", db.url())]);
    (db, gw)
}

fn generate(gw: &Gateway, fields: Value) -> String {
    let resp = gw.post("/key/generate", &fields);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["key"]
        .as_str()
        .expect("key in response")
        .to_string()
}

fn chat(gw: &Gateway, key: &str, model: &str) -> (u16, Value) {
    let body =
        json!({"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let auth = format!("Bearer {key}");
    let resp = gw.call(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    );
    (resp.status, resp.json())
}

/// The key's spend as the store records it now.
fn key_spend(gw: &Gateway, key: &str) -> f64 {
    let info = gw.get(&format!("/key/info?key={key}"));
    assert_eq!(info.status, 200, "{}", info.text());
    info.json()["info"]["spend"].as_f64().expect("spend")
}

/// The key's recorded spend once the writer has flushed `expected` (or what
/// it holds after 5 s, for the caller's assertion to report).
fn settled_spend(gw: &Gateway, key: &str, expected: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let spend = key_spend(gw, key);
        if (spend - expected).abs() < 1e-9 || Instant::now() > deadline {
            return spend;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cost_of(resp: &Value) -> f64 {
    let usage = &resp["usage"];
    usage["prompt_tokens"].as_f64().unwrap() * INPUT_COST
        + usage["completion_tokens"].as_f64().unwrap() * OUTPUT_COST
}

#[test]
fn sequential_spend_never_passes_the_budget() {
    let (_db, gw) = start();
    let budget = 0.01;
    let key = generate(&gw, json!({"max_budget": budget}));
    let mut spent = 0.0;
    let mut admitted = 0;
    loop {
        let (status, body) = chat(&gw, &key, "priced");
        if status != 200 {
            assert_eq!(status, 422, "{body}");
            assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");
            break;
        }
        admitted += 1;
        spent += cost_of(&body);
        assert!(admitted < 100, "the budget never refused");
    }
    let recorded = settled_spend(&gw, &key, spent);
    assert!(
        (recorded - spent).abs() < 1e-9,
        "store says {recorded}, responses say {spent}"
    );
    assert!(
        recorded <= budget + 1e-9,
        "sequential overshoot: spent {recorded} of {budget}"
    );
    assert!(
        admitted >= 5,
        "only {admitted} admitted: reservations are too pessimistic"
    );
    let body = json!({"model": "priced", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let worst_case = body.to_string().len() as f64 * INPUT_COST + 10.0 * OUTPUT_COST;
    assert!(
        budget - recorded < worst_case,
        "refused with room for another request's worst case: {} left, {worst_case} needed",
        budget - recorded
    );
}

#[test]
fn a_concurrent_burst_cannot_overshoot() {
    let (_db, gw) = start();
    let budget = 0.01;
    let key = generate(&gw, json!({"max_budget": budget}));
    let results: Vec<(u16, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..32)
            .map(|_| s.spawn(|| chat(&gw, &key, "slow-priced")))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok: Vec<&Value> = results
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, b)| b)
        .collect();
    let refused = results.iter().filter(|(s, _)| *s == 422).count();
    assert_eq!(ok.len() + refused, 32, "unexpected statuses: {results:?}");
    assert!(
        refused > 0 && !ok.is_empty(),
        "{} admitted, {refused} refused",
        ok.len()
    );
    let spent: f64 = ok.iter().map(|b| cost_of(b)).sum();
    let recorded = settled_spend(&gw, &key, spent);
    assert!(
        (recorded - spent).abs() < 1e-9,
        "store says {recorded}, responses say {spent}"
    );
    assert!(
        recorded <= budget + 1e-9,
        "burst overshoot: spent {recorded} of {budget}"
    );
}

#[test]
fn raising_the_budget_or_resetting_spend_restores_access_at_once() {
    let (_db, gw) = start();
    let key = generate(&gw, json!({"max_budget": 0.003}));
    let mut spent = 0.0;
    let refusal = loop {
        let (status, body) = chat(&gw, &key, "priced");
        if status != 200 {
            break (status, body);
        }
        spent += cost_of(&body);
    };
    assert_eq!(refusal.0, 422, "{}", refusal.1);
    let again = chat(&gw, &key, "priced");
    assert_eq!(again.0, 422, "refused once, refused again: {}", again.1);

    let resp = gw.post("/key/update", &json!({"key": key, "max_budget": 1.0}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let (status, body) = chat(&gw, &key, "priced");
    assert_eq!(status, 200, "raising max_budget must restore access");
    spent += cost_of(&body);

    let resp = gw.post("/key/update", &json!({"key": key, "max_budget": 0.003}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(chat(&gw, &key, "priced").0, 422);
    // A reset zeroes the spend recorded so far: let what was spent land first.
    settled_spend(&gw, &key, spent);
    let resp = gw.post("/key/update", &json!({"key": key, "spend": 0.0}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        chat(&gw, &key, "priced").0,
        200,
        "resetting spend must restore access"
    );
    assert!(
        e2e::eventually("spend after the reset", Duration::from_secs(5), || {
            Some(key_spend(&gw, &key)).filter(|s| *s > 0.0)
        }) > 0.0,
        "spend after the reset is counted again"
    );
}

#[test]
fn a_budget_period_resets_spend() {
    let (_db, gw) = start();
    let key = generate(&gw, json!({"max_budget": 0.003, "budget_duration": "2s"}));
    while chat(&gw, &key, "priced").0 == 200 {}
    let exhausted = Instant::now();
    let mut restored = None;
    while exhausted.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(200));
        if chat(&gw, &key, "priced").0 == 200 {
            restored = Some(exhausted.elapsed());
            break;
        }
    }
    assert!(
        restored.is_some(),
        "spend never reset after budget_duration 2s"
    );
}

#[test]
fn crossing_the_soft_budget_raises_an_alert_before_the_hard_refusal() {
    let (_db, gw) = start();
    let key = generate(
        &gw,
        json!({"max_budget": 1.0, "soft_budget": 0.002, "key_alias": "alerting-key"}),
    );
    for _ in 0..3 {
        assert_eq!(chat(&gw, &key, "priced").0, 200);
    }
    let out = e2e::eventually("the soft-budget alert line", Duration::from_secs(5), || {
        let out = gw.output();
        out.contains("soft budget crossed").then_some(out)
    });
    let alerts: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("soft budget crossed"))
        .collect();
    assert_eq!(alerts.len(), 1, "expected one alert line:\n{out}");
    assert!(alerts[0].contains("alerting-key"), "{}", alerts[0]);
    assert!(!alerts[0].contains(&key), "the alert must not log the key");
}

#[test]
fn every_request_leaves_one_spend_row_with_its_cost() {
    let (_db, gw) = start();
    let key = generate(&gw, json!({}));
    let auth = format!("Bearer {key}");
    let body = json!({"model": "priced", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let resp = gw.call(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", &auth)],
        body.to_string().as_bytes(),
    );
    assert_eq!(resp.status, 200);
    let call_id = resp
        .header("x-litellm-call-id")
        .expect("call id")
        .to_string();
    let cost = cost_of(&resp.json());
    let rows = e2e::eventually("the spend row", Duration::from_secs(5), || {
        let logs = gw.get(&format!("/spend/logs?request_id={call_id}"));
        assert_eq!(logs.status, 200, "{}", logs.text());
        let rows = logs.json();
        rows.as_array()
            .is_some_and(|r| !r.is_empty())
            .then_some(rows)
    });
    let rows = rows.as_array().expect("array of rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row["model_group"], "priced");
    assert_eq!(row["status"], "success");
    assert!(
        (row["spend"].as_f64().unwrap() - cost).abs() < 1e-12,
        "{row}"
    );
    assert_eq!(row["completion_tokens"], 10);
    assert!(
        !row.to_string().contains(&key),
        "spend logs hold the hash, never the key"
    );
}

#[test]
fn a_per_model_budget_refuses_only_that_model() {
    let (_db, gw) = start();
    let key = generate(
        &gw,
        json!({"max_budget": 1.0, "model_max_budget": {"priced": {"budget_limit": 0.003}}}),
    );
    let mut admitted = 0;
    loop {
        let (status, body) = chat(&gw, &key, "priced");
        if status != 200 {
            assert_eq!(status, 422, "{body}");
            assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");
            assert!(
                body["error"]["message"].as_str().unwrap().contains("model"),
                "{body}"
            );
            break;
        }
        admitted += 1;
        assert!(admitted < 100, "the model budget never refused");
    }
    assert!(admitted >= 1);
    assert_eq!(
        chat(&gw, &key, "slow-priced").0,
        200,
        "other models keep the key's budget"
    );
    let info = e2e::eventually("model_spend", Duration::from_secs(5), || {
        let info = gw.get(&format!("/key/info?key={key}")).json();
        info["info"]["model_spend"]["priced"]
            .is_number()
            .then_some(info)
    });
    let per_model = info["info"]["model_spend"]["priced"]
        .as_f64()
        .expect("model_spend recorded");
    assert!(per_model > 0.0 && per_model <= 0.003 + 1e-9, "{info}");
}

/// `default_estimated_output_tokens` (the key's, its team's or
/// `litellm_settings`') sizes the reservation of a request without
/// `max_tokens` instead of the model's whole output cap, so a small budget
/// admits requests while spend is under it, as LiteLLM does (issue 35).
#[test]
fn default_estimated_output_tokens_sizes_the_reservation_of_a_request_without_max_tokens() {
    let config = |litellm_settings: Value| {
        to_yaml(&json!({
            "model_list": [{
                "model_name": "capped",
                "litellm_params": {
                    "model": "mock/capped",
                    "mock_response": REPLY,
                    "input_cost_per_token": INPUT_COST,
                    "output_cost_per_token": OUTPUT_COST,
                },
                // The whole cap costs 10 USD.
                "model_info": {"max_output_tokens": 100_000},
            }],
            "general_settings": {"master_key": MASTER_KEY},
            "litellm_settings": litellm_settings,
        }))
    };
    let uncapped = |gw: &Gateway, key: &str| {
        let body = json!({"model": "capped", "messages": [{"role": "user", "content": "hi"}]});
        let resp = gw.call(
            "POST",
            "/v1/chat/completions",
            &[("Authorization", &format!("Bearer {key}"))],
            body.to_string().as_bytes(),
        );
        (resp.status, resp.json())
    };
    let gw = Gateway::start(&config(json!({})), &[]);
    // Without an estimate the worst case (the whole cap) does not fit.
    let plain = generate(&gw, json!({"max_budget": 0.05}));
    let (status, body) = uncapped(&gw, &plain);
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("default_estimated_output_tokens") && message.contains("max_tokens"),
        "{message}"
    );
    // The key's estimate: admitted while spend is under the budget.
    let estimated = generate(
        &gw,
        json!({"max_budget": 0.05, "default_estimated_output_tokens": 20}),
    );
    let (status, body) = uncapped(&gw, &estimated);
    assert_eq!(status, 200, "{body}");
    // Per model, over the key-wide value.
    let per_model = generate(
        &gw,
        json!({"max_budget": 0.05, "default_estimated_output_tokens": 1_000_000,
               "default_estimated_output_tokens_per_model": {"capped": 20}}),
    );
    assert_eq!(uncapped(&gw, &per_model).0, 200);
    // The team's, for a key that sets none.
    let team = gw.post(
        "/team/new",
        &json!({"team_id": "t-est", "default_estimated_output_tokens": 20}),
    );
    assert_eq!(team.status, 200, "{}", team.text());
    let member = generate(&gw, json!({"max_budget": 0.05, "team_id": "t-est"}));
    assert_eq!(uncapped(&gw, &member).0, 200);
    // Not a positive integer: a 400 naming it.
    for bad in [json!(0), json!(-5), json!("many")] {
        let resp = gw.post(
            "/key/generate",
            &json!({"default_estimated_output_tokens": bad}),
        );
        assert_eq!(resp.status, 400, "{}", resp.text());
        assert_eq!(
            resp.json()["error"]["param"],
            "default_estimated_output_tokens"
        );
    }
    drop(gw);
    // litellm_settings' value applies to every key.
    let gw = Gateway::start(&config(json!({"default_estimated_output_tokens": 20})), &[]);
    let plain = generate(&gw, json!({"max_budget": 0.05}));
    assert_eq!(uncapped(&gw, &plain).0, 200);
}
