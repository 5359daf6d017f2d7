//! A key's temporary budget increase, as LiteLLM applies it
//! (`_update_key_budget_with_temp_budget_increase`): `temp_budget_increase`
//! is added to the key's `max_budget` while `temp_budget_expiry` is in the
//! future, and the key is refused again once it has passed, without any
//! change of the key's row.

use e2e::{assert_error, eventually, Gateway, MASTER_KEY};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn start() -> Gateway {
    let config = json!({
        "model_list": [{"model_name": "priced",
            "litellm_params": {"model": "mock/priced", "mock_response": "one two three",
                "input_cost_per_token": 0.00001, "output_cost_per_token": 0.0001}}],
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start_json(&config, &[])
}

fn chat(gw: &Gateway, key: &str) -> e2e::Response {
    let body = json!({"model": "priced", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    gw.post_as(key, "/v1/chat/completions", &body)
}

fn update(gw: &Gateway, fields: Value) {
    let resp = gw.post("/key/update", &fields);
    assert_eq!(resp.status, 200, "{}", resp.text());
}

/// A naive ISO 8601 UTC time `secs` seconds from now (Python's
/// `datetime.isoformat()` of a naive time, as LiteLLM's UI sends it).
fn iso_in(secs: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let t = now + secs;
    let (days, rest) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[test]
fn a_temporary_increase_admits_until_its_expiry() {
    let gw = start();
    let resp = gw.post("/key/generate", &json!({"max_budget": 0.0001}));
    let key = resp.json()["key"].as_str().unwrap().to_string();
    let refused = chat(&gw, &key);
    assert_eq!(assert_error(&refused, 422)["type"], "budget_exceeded");

    update(
        &gw,
        json!({"key": key, "temp_budget_increase": 1, "temp_budget_expiry": iso_in(3600)}),
    );
    assert_eq!(chat(&gw, &key).status, 200, "raised for an hour");

    update(
        &gw,
        json!({"key": key, "temp_budget_increase": 1, "temp_budget_expiry": iso_in(-60)}),
    );
    assert_eq!(
        chat(&gw, &key).status,
        422,
        "an expired increase adds nothing"
    );

    // An increase that runs out while the key is cached: refused from then on.
    update(
        &gw,
        json!({"key": key, "temp_budget_increase": 1, "temp_budget_expiry": iso_in(2)}),
    );
    assert_eq!(chat(&gw, &key).status, 200);
    eventually("the increase to expire", Duration::from_secs(10), || {
        (chat(&gw, &key).status == 422).then_some(())
    });
}
