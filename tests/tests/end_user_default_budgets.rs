//! End users' default budgets (issue 35), as LiteLLM 1.110 applies them
//! (`proxy/auth/auth_checks.py`: `get_key_end_user_budget_id`,
//! `resolve_default_end_user_budget`, `_apply_default_budget_to_end_user`):
//! an end user (the body's `user`) with no budget row of its own is held
//! to its key's `end_user_budget_id` row, else to the proxy-wide
//! `litellm_settings.max_end_user_budget_id` row: that row's `max_budget`
//! against the end user's own spend (LiteLLM's 422 "ExceededBudget: End
//! User=... over budget"), and its `rpm_limit`. Only a proxy admin may set
//! the field (403), and it must name a budget row (400).

use e2e::{assert_error, error_message, Gateway, Response, TestDb, MASTER_KEY};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// Prices that make each mock request cost about a tenth of a cent.
const INPUT_COST: f64 = 0.00001;
const OUTPUT_COST: f64 = 0.0001;

fn config(litellm_settings: Value) -> Value {
    json!({
        "model_list": [{
            "model_name": "priced",
            "litellm_params": {
                "model": "mock/priced",
                "mock_response": "one two three four five six seven eight nine ten",
                "input_cost_per_token": INPUT_COST,
                "output_cost_per_token": OUTPUT_COST,
            },
        }],
        "litellm_settings": litellm_settings,
        "general_settings": {"master_key": MASTER_KEY},
    })
}

/// A gateway on the in-memory store, and one on a fresh Postgres database
/// (which outlives it).
fn gateways(litellm_settings: Value) -> Vec<(&'static str, Option<TestDb>, Gateway)> {
    let config = config(litellm_settings);
    let memory = Gateway::start_json(&config, &[]);
    let db = TestDb::create();
    let postgres = Gateway::start_json(&config, &[("DATABASE_URL", db.url())]);
    vec![("memory", None, memory), ("postgres", Some(db), postgres)]
}

/// A chat request with `key` on behalf of end user `user`.
fn chat(gw: &Gateway, key: &str, user: &str) -> Response {
    let body = json!({"model": "priced", "max_tokens": 10, "user": user,
        "messages": [{"role": "user", "content": "hi"}]});
    gw.post_as(key, "/v1/chat/completions", &body)
}

fn admin(gw: &Gateway, path: &str, body: Value) -> Value {
    gw.post(path, &body).expect_status(200).json()
}

/// A new key with `fields`; its plain value.
fn key(gw: &Gateway, fields: Value) -> String {
    let made = admin(gw, "/key/generate", fields);
    made["key"].as_str().expect("key").to_string()
}

/// Sends chats for `user` until one is refused; the refusal, after at
/// least one was served.
fn spend_until_refused(gw: &Gateway, key: &str, user: &str, store: &str) -> Map<String, Value> {
    let mut served = 0;
    loop {
        let resp = chat(gw, key, user);
        if resp.status != 200 {
            assert!(served >= 1, "{store}: {user} refused before spending");
            return assert_error(&resp, 422);
        }
        served += 1;
        assert!(served < 10, "{store}: {user} never refused");
    }
}

fn assert_end_user_refusal(err: &Map<String, Value>, user: &str, store: &str) {
    assert_eq!(err["type"], "budget_exceeded", "{store}: {err:?}");
    let prefix = format!("ExceededBudget: End User={user} over budget. Spend=");
    assert!(error_message(err).starts_with(&prefix), "{store}: {err:?}");
}

#[test]
fn a_keys_end_user_budget_id_holds_each_of_its_end_users_to_that_row() {
    for (store, _db, gw) in gateways(json!({})) {
        admin(
            &gw,
            "/budget/new",
            json!({"budget_id": "per-customer", "max_budget": 0.003}),
        );
        let capped = key(&gw, json!({"end_user_budget_id": "per-customer"}));
        let info = gw
            .get(&format!("/key/info?key={capped}"))
            .expect_status(200)
            .json();
        assert_eq!(
            info["info"]["metadata"]["end_user_budget_id"], "per-customer",
            "{store}: kept in metadata, where LiteLLM keeps it: {info}"
        );
        let err = spend_until_refused(&gw, &capped, "alice", store);
        assert_end_user_refusal(&err, "alice", store);
        // Each end user has its own spend against the row.
        assert_eq!(chat(&gw, &capped, "bob").status, 200, "{store}");
        // A key naming no default does not hold alice (LiteLLM's too).
        let open = key(&gw, json!({}));
        assert_eq!(chat(&gw, &open, "alice").status, 200, "{store}");
        // An end user with a budget row of its own is held to that one.
        admin(
            &gw,
            "/customer/new",
            json!({"user_id": "carol", "max_budget": 1.0}),
        );
        for _ in 0..6 {
            assert_eq!(chat(&gw, &capped, "carol").status, 200, "{store}");
        }
        // The key's row raised through /budget/update admits alice again.
        admin(
            &gw,
            "/budget/update",
            json!({"budget_id": "per-customer", "max_budget": 1.0}),
        );
        assert_eq!(chat(&gw, &capped, "alice").status, 200, "{store}");
        // Cleared (an empty id), the key holds nobody.
        admin(
            &gw,
            "/key/update",
            json!({"key": capped, "end_user_budget_id": ""}),
        );
        admin(
            &gw,
            "/budget/update",
            json!({"budget_id": "per-customer", "max_budget": 0.0}),
        );
        assert_eq!(chat(&gw, &capped, "alice").status, 200, "{store}");
    }
}

#[test]
fn the_default_rows_rpm_limit_applies_to_each_end_user() {
    for (store, _db, gw) in gateways(json!({})) {
        admin(
            &gw,
            "/budget/new",
            json!({"budget_id": "slow", "rpm_limit": 2}),
        );
        // Given in metadata, as LiteLLM stores it.
        let k = key(&gw, json!({"metadata": {"end_user_budget_id": "slow"}}));
        assert_eq!(chat(&gw, &k, "dave").status, 200, "{store}");
        assert_eq!(chat(&gw, &k, "dave").status, 200, "{store}");
        let err = assert_error(&chat(&gw, &k, "dave"), 429);
        assert!(
            error_message(&err).starts_with("Rate limit exceeded for end_user: dave."),
            "{store}: {err:?}"
        );
        assert_eq!(chat(&gw, &k, "erin").status, 200, "{store}");
    }
}

#[test]
fn the_proxy_wide_default_applies_where_the_key_names_none() {
    let settings = json!({"max_end_user_budget_id": "everyone"});
    for (store, _db, gw) in gateways(settings) {
        // The row may be made after start-up.
        let master = MASTER_KEY;
        assert_eq!(chat(&gw, master, "early").status, 200, "{store}");
        admin(
            &gw,
            "/budget/new",
            json!({"budget_id": "everyone", "max_budget": 0.003}),
        );
        let err = spend_until_refused(&gw, master, "frank", store);
        assert_end_user_refusal(&err, "frank", store);
        // A key's own default wins over the proxy-wide one.
        admin(
            &gw,
            "/budget/new",
            json!({"budget_id": "generous", "max_budget": 1.0}),
        );
        let generous = key(&gw, json!({"end_user_budget_id": "generous"}));
        for _ in 0..6 {
            assert_eq!(chat(&gw, &generous, "grace").status, 200, "{store}");
        }
        // A key's row deleted since: the proxy-wide one applies again.
        admin(&gw, "/budget/delete", json!({"id": "generous"}));
        let err = assert_error(&chat(&gw, &generous, "grace"), 422);
        assert_end_user_refusal(&err, "grace", store);
    }
}

#[test]
fn end_user_budget_id_is_checked_as_litellm_checks_it() {
    for (store, _db, gw) in gateways(json!({})) {
        // A budget row that does not exist: LiteLLM's 400.
        for body in [
            json!({"end_user_budget_id": "nope"}),
            json!({"metadata": {"end_user_budget_id": "nope"}}),
        ] {
            let err = assert_error(&gw.post("/key/generate", &body), 400);
            assert!(
                error_message(&err).ends_with("end_user_budget_id=nope does not match any budget."),
                "{store}: {err:?}"
            );
            assert_eq!(err["param"], "end_user_budget_id", "{store}");
        }
        // Only a proxy admin sets it: LiteLLM's 403 for anyone else.
        admin(&gw, "/budget/new", json!({"budget_id": "b1"}));
        admin(
            &gw,
            "/user/new",
            json!({"user_id": "worker", "user_role": "internal_user"}),
        );
        let own = key(&gw, json!({"user_id": "worker"}));
        let refused = gw.post_as(&own, "/key/generate", &json!({"end_user_budget_id": "b1"}));
        let err = assert_error(&refused, 403);
        assert_eq!(
            error_message(&err),
            "Only proxy admins can set end_user_budget_id on a key.",
            "{store}: {err:?}"
        );
        // Without it, the same caller still makes its own keys.
        let made = gw.post_as(&own, "/key/generate", &json!({}));
        assert_eq!(made.status, 200, "{store}: {}", made.text());
    }
}

#[test]
fn two_replicas_sharing_redis_keep_a_default_budget_end_user_within_it() {
    let db = TestDb::create();
    let redis = e2e::PrivateRedis::start();
    let mut config = config(json!({"max_end_user_budget_id": "tier"}));
    config["gateway_settings"] = json!({"rate_limits": {"redis_timeout_ms": 2000}});
    let url = redis.url();
    let env = [("DATABASE_URL", db.url()), ("REDIS_URL", url.as_str())];
    let first = Gateway::start_json(&config, &env);
    let budget = 0.01;
    admin(
        &first,
        "/budget/new",
        json!({"budget_id": "tier", "max_budget": budget}),
    );
    let replicas = [first, Gateway::start_json(&config, &env)];
    let spent: f64 = std::thread::scope(|s| {
        let senders: Vec<_> = (0..8)
            .map(|i| {
                let gw = &replicas[i % 2];
                s.spawn(move || {
                    let (mut costs, mut refusals) = (0.0, 0);
                    for _ in 0..40 {
                        let resp = chat(gw, MASTER_KEY, "shared");
                        match resp.status {
                            200 => {
                                refusals = 0;
                                let usage = &resp.json()["usage"];
                                costs += usage["prompt_tokens"].as_f64().unwrap() * INPUT_COST
                                    + usage["completion_tokens"].as_f64().unwrap() * OUTPUT_COST;
                            }
                            422 => {
                                refusals += 1;
                                if refusals == 3 {
                                    break;
                                }
                                std::thread::sleep(Duration::from_millis(60));
                            }
                            other => panic!("unexpected {other}: {}", resp.text()),
                        }
                    }
                    costs
                })
            })
            .collect();
        senders.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert!(spent > 0.0, "nothing admitted");
    assert!(
        spent <= budget + 1e-9,
        "two replicas overshot the default budget: spent {spent} of {budget}"
    );
}

/// One end user reached through two keys whose default rows differ has
/// one spend (its `LiteLLM_EndUserTable.spend`), held on each request to
/// the row of the key it came through, as LiteLLM's
/// `_apply_default_budget_to_end_user` grafts the key's row on a copy
/// per request: spend under the generous key counts against the tight
/// key's row, and the tight key's row never caps the generous key.
#[test]
fn an_end_user_under_two_keys_spends_once_against_each_keys_row() {
    for (store, _db, gw) in gateways(json!({})) {
        admin(
            &gw,
            "/budget/new",
            json!({"budget_id": "tight", "max_budget": 0.003}),
        );
        admin(
            &gw,
            "/budget/new",
            json!({"budget_id": "roomy", "max_budget": 1.0}),
        );
        let tight = key(&gw, json!({"end_user_budget_id": "tight"}));
        let roomy = key(&gw, json!({"end_user_budget_id": "roomy"}));
        // Served under the roomy row past what the tight row allows.
        for _ in 0..5 {
            assert_eq!(chat(&gw, &roomy, "ivan").status, 200, "{store}");
        }
        // The same spend is over the tight row.
        let err = assert_error(&chat(&gw, &tight, "ivan"), 422);
        assert_end_user_refusal(&err, "ivan", store);
        // And the roomy key still serves ivan, in turn with the tight one.
        for _ in 0..2 {
            assert_eq!(chat(&gw, &roomy, "ivan").status, 200, "{store}");
            assert_eq!(chat(&gw, &tight, "ivan").status, 422, "{store}");
        }
        // Another end user of the tight key has its own spend.
        assert_eq!(chat(&gw, &tight, "judy").status, 200, "{store}");
    }
}

/// The proxy-wide default row's `budget_duration` resets the spend of the
/// end users riding it when its period ends, as LiteLLM's reset job
/// resets the end users without a budget row of their own with it.
#[test]
fn the_proxy_wide_default_rows_period_resets_its_end_users() {
    let settings = json!({"max_end_user_budget_id": "daily"});
    for (store, _db, gw) in gateways(settings) {
        admin(
            &gw,
            "/budget/new",
            json!({"budget_id": "daily", "max_budget": 0.003, "budget_duration": "5s"}),
        );
        let err = spend_until_refused(&gw, MASTER_KEY, "kate", store);
        assert_end_user_refusal(&err, "kate", store);
        // Refused until the period ends, then served again.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let resp = chat(&gw, MASTER_KEY, "kate");
            if resp.status == 200 {
                break;
            }
            assert_error(&resp, 422);
            assert!(
                std::time::Instant::now() < deadline,
                "{store}: kate was never reset"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
