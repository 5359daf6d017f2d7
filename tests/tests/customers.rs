//! End users ("customers", issue 16): `/customer/*` in LiteLLM's shapes,
//! and the body's `user` looked up on every request: a blocked end user
//! refused and admitted again once unblocked, one over its budget refused
//! after spending, its rpm limit applied, its spend added. Every test runs
//! on the in-memory store and on LiteLLM's tables in Postgres.

use e2e::{assert_error, error_message, Gateway, Response, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// Prices that make each mock request cost about a tenth of a cent.
const INPUT_COST: f64 = 0.00001;
const OUTPUT_COST: f64 = 0.0001;

/// A gateway on the in-memory store, and one on a fresh Postgres database
/// (which outlives it).
fn gateways() -> Vec<(&'static str, Option<TestDb>, Gateway)> {
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
        "general_settings": {"master_key": MASTER_KEY},
    });
    let memory = Gateway::start_json(&config, &[]);
    let db = TestDb::create();
    let postgres = Gateway::start_json(&config, &[("DATABASE_URL", db.url())]);
    vec![("memory", None, memory), ("postgres", Some(db), postgres)]
}

/// A chat request on behalf of end user `user`, with the master key.
fn chat(gw: &Gateway, user: &str) -> Response {
    let body = json!({"model": "priced", "max_tokens": 10, "user": user,
        "messages": [{"role": "user", "content": "hi"}]});
    let auth = format!("Bearer {MASTER_KEY}");
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

fn admin(gw: &Gateway, path: &str, body: Value) -> Value {
    gw.post(path, &body).expect_status(200).json()
}

fn info(gw: &Gateway, id: &str) -> Response {
    gw.get(&format!("/customer/info?end_user_id={id}"))
}

#[test]
fn customer_endpoints_answer_in_litellm_shapes() {
    for (store, _db, gw) in gateways() {
        let made = admin(
            &gw,
            "/customer/new",
            json!({"user_id": "cust-1", "alias": "First", "max_budget": 5.0, "rpm_limit": 50,
                "budget_duration": "30d", "allowed_model_region": "eu"}),
        );
        assert_eq!(made["user_id"], "cust-1", "{store}: {made}");
        assert_eq!(
            (&made["alias"], &made["blocked"], &made["spend"]),
            (&json!("First"), &json!(false), &json!(0.0)),
            "{store}: {made}"
        );
        assert_eq!(made["allowed_model_region"], "eu", "{store}: {made}");
        assert_eq!(made["models"], json!([]), "{store}: {made}");
        let budget = &made["litellm_budget_table"];
        assert_eq!(budget["max_budget"], 5.0, "{store}: {made}");
        assert_eq!(budget["rpm_limit"], 50, "{store}: {made}");
        assert_eq!(budget["budget_duration"], "30d", "{store}: {made}");
        assert!(budget["budget_reset_at"].is_string(), "{store}: {made}");
        assert_eq!(made["budget_id"], budget["budget_id"], "{store}: {made}");
        assert!(made["budget_id"].is_string(), "{store}: {made}");

        // A duplicate id, LiteLLM's 400.
        let err = assert_error(
            &gw.post("/customer/new", &json!({"user_id": "cust-1"})),
            400,
        );
        assert_eq!(
            error_message(&err),
            "Customer already exists, passed user_id=cust-1. Please pass a new user_id.",
            "{store}"
        );
        assert_eq!(err["param"], "user_id", "{store}");

        // Info, under both names; an unknown id, LiteLLM's 404.
        let got = info(&gw, "cust-1").expect_status(200).json();
        assert_eq!(got, made, "{store}");
        let old_name = gw
            .get("/end_user/info?end_user_id=cust-1")
            .expect_status(200)
            .json();
        assert_eq!(old_name["user_id"], "cust-1", "{store}");
        let err = assert_error(&info(&gw, "nobody"), 404);
        assert_eq!(
            error_message(&err),
            "End User Id=nobody does not exist in db",
            "{store}"
        );
        assert_eq!(
            (&err["type"], &err["param"]),
            (&json!("not_found"), &json!("end_user_id")),
            "{store}"
        );

        // Update: the given fields change, the budget row is changed in
        // place, the others are kept.
        let updated = admin(
            &gw,
            "/customer/update",
            json!({"user_id": "cust-1", "alias": "Renamed", "max_budget": 7.5}),
        );
        assert_eq!(updated["alias"], "Renamed", "{store}: {updated}");
        assert_eq!(
            updated["litellm_budget_table"]["max_budget"], 7.5,
            "{store}"
        );
        assert_eq!(updated["litellm_budget_table"]["rpm_limit"], 50, "{store}");
        assert_eq!(updated["budget_id"], made["budget_id"], "{store}");
        assert_eq!(updated["allowed_model_region"], "eu", "{store}");
        let err = assert_error(
            &gw.post(
                "/customer/update",
                &json!({"user_id": "nobody", "alias": "x"}),
            ),
            404,
        );
        assert_eq!(
            error_message(&err),
            "End User Id=nobody does not exist in db",
            "{store}"
        );

        // One without a budget gets a budget row on its first budget field.
        admin(&gw, "/customer/new", json!({"user_id": "cust-2"}));
        let plain = info(&gw, "cust-2").expect_status(200).json();
        assert!(plain["budget_id"].is_null(), "{store}: {plain}");
        let budgeted = admin(
            &gw,
            "/customer/update",
            json!({"user_id": "cust-2", "tpm_limit": 1000}),
        );
        assert_eq!(
            budgeted["litellm_budget_table"]["tpm_limit"], 1000,
            "{store}"
        );
        assert!(budgeted["budget_id"].is_string(), "{store}: {budgeted}");

        // An existing budget row linked by id; an unknown one refused.
        admin(
            &gw,
            "/customer/new",
            json!({"user_id": "cust-3", "budget_id": made["budget_id"]}),
        );
        let linked = info(&gw, "cust-3").expect_status(200).json();
        assert_eq!(linked["litellm_budget_table"]["max_budget"], 7.5, "{store}");
        let err = assert_error(
            &gw.post(
                "/customer/new",
                &json!({"user_id": "cust-4", "budget_id": "no-such-budget"}),
            ),
            400,
        );
        assert_eq!(err["param"], "budget_id", "{store}");

        // List by id, searched, paged.
        let all = gw.get("/customer/list").expect_status(200).json();
        let ids: Vec<&str> = all
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["user_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["cust-1", "cust-2", "cust-3"], "{store}: {all}");
        let found = gw
            .get("/customer/list?search=RENAMED")
            .expect_status(200)
            .json();
        assert_eq!(found.as_array().unwrap().len(), 1, "{store}: {found}");
        assert_eq!(found[0]["user_id"], "cust-1", "{store}");
        let second = gw
            .get("/customer/list?page=2&page_size=2")
            .expect_status(200)
            .json();
        assert_eq!(second[0]["user_id"], "cust-3", "{store}: {second}");
        let err = assert_error(&gw.get("/customer/list?page_size=101"), 400);
        assert_eq!(err["param"], "page_size", "{store}");

        // Delete: none when one is missing (LiteLLM's 404), else all.
        let err = assert_error(
            &gw.post(
                "/customer/delete",
                &json!({"user_ids": ["cust-2", "ghost"]}),
            ),
            404,
        );
        assert_eq!(
            error_message(&err),
            "End User Id(s)=ghost do not exist in db",
            "{store}"
        );
        info(&gw, "cust-2").expect_status(200);
        let deleted = admin(&gw, "/customer/delete", json!({"user_ids": ["cust-2"]}));
        assert_eq!(deleted["deleted_customers"], 1, "{store}: {deleted}");
        assert_eq!(
            deleted["message"], "Successfully deleted customers with ids: ['cust-2']",
            "{store}"
        );
        assert_error(&info(&gw, "cust-2"), 404);
    }
}

#[test]
fn bad_customer_fields_are_named_and_litellm_fields_accepted() {
    for (store, _db, gw) in gateways() {
        for (body, field) in [
            (json!({"alias": "no id"}), "user_id"),
            (json!({"user_id": ""}), "user_id"),
            (json!({"user_id": "c", "max_budget": -1}), "max_budget"),
            (json!({"user_id": "c", "rpm_limit": -1}), "rpm_limit"),
            (json!({"user_id": "c", "tpm_limit": 1e20}), "tpm_limit"),
            (json!({"user_id": "c", "soft_budget": 1e12}), "soft_budget"),
            (
                json!({"user_id": "c", "budget_duration": "soon"}),
                "budget_duration",
            ),
            (
                json!({"user_id": "c", "allowed_model_region": "mars"}),
                "allowed_model_region",
            ),
            (
                json!({"user_id": "c", "default_model": "not-served"}),
                "default_model",
            ),
            (
                json!({"user_id": "c", "max_budget": 1, "budget_id": "b"}),
                "budget_id",
            ),
            (json!({"user_id": "c", "max_budgett": 1}), "max_budgett"),
            (
                json!({"user_id": "c", "metadata": "not an object"}),
                "metadata",
            ),
            (
                json!({"user_id": "c", "alias": "x".repeat(20_000)}),
                "alias",
            ),
        ] {
            let resp = gw.post("/customer/new", &body);
            let err = assert_error(&resp, 400);
            assert_eq!(err["param"], field, "{store}: {body}");
        }
        // What LiteLLM's request types declare is accepted (and ignored).
        let made = admin(
            &gw,
            "/customer/new",
            json!({"user_id": "c", "metadata": {"plan": "pro"}, "tpd_limit": null,
                "object_permission": {"vector_stores": []}, "allowed_region": "eu",
                "default_model": "priced", "models": ["priced"]}),
        );
        assert_eq!(made["default_model"], "priced", "{store}: {made}");
        // A tokens-per-day limit (LiteLLM charges batches to it) is not
        // enforced here: refused, naming it.
        let resp = gw.post("/customer/new", &json!({"user_id": "d", "tpd_limit": 10}));
        assert_eq!(assert_error(&resp, 400)["param"], "tpd_limit", "{store}");
        assert_eq!(made["models"], json!(["priced"]), "{store}: {made}");
        let err = assert_error(&gw.post("/customer/block", &json!({"user_ids": []})), 400);
        assert_eq!(err["param"], "user_ids", "{store}");
    }
}

#[test]
fn a_blocked_end_user_is_refused_until_unblocked() {
    for (store, _db, gw) in gateways() {
        assert_eq!(chat(&gw, "eu-blocked").status, 200, "{store}");
        // Blocking an id with no row yet creates it, as LiteLLM's upsert.
        let blocked = admin(
            &gw,
            "/customer/block",
            json!({"user_ids": ["eu-blocked", "never-seen"]}),
        );
        let rows = blocked["blocked_users"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{store}: {blocked}");
        assert!(
            rows.iter().all(|r| r["blocked"] == true),
            "{store}: {blocked}"
        );
        for user in ["eu-blocked", "never-seen"] {
            let err = assert_error(&chat(&gw, user), 400);
            assert_eq!(
                error_message(&err),
                format!("User blocked from making LLM API Calls. User={user}"),
                "{store}"
            );
        }
        assert_eq!(chat(&gw, "someone-else").status, 200, "{store}");

        let unblocked = admin(
            &gw,
            "/customer/unblock",
            json!({"user_ids": ["eu-blocked"]}),
        );
        assert_eq!(
            unblocked,
            json!({"blocked_users": ["never-seen"]}),
            "{store}"
        );
        assert_eq!(chat(&gw, "eu-blocked").status, 200, "{store}");
        assert_eq!(
            assert_error(&chat(&gw, "never-seen"), 400)["type"],
            "invalid_request_error",
            "{store}"
        );
        // /customer/update's `blocked` takes effect too.
        admin(
            &gw,
            "/customer/update",
            json!({"user_id": "never-seen", "blocked": false}),
        );
        assert_eq!(chat(&gw, "never-seen").status, 200, "{store}");
    }
}

#[test]
fn an_end_user_over_budget_is_refused_after_spending() {
    for (store, _db, gw) in gateways() {
        admin(
            &gw,
            "/customer/new",
            json!({"user_id": "thrifty", "max_budget": 0.003}),
        );
        let mut served = 0;
        let refusal = loop {
            let resp = chat(&gw, "thrifty");
            if resp.status != 200 {
                break resp;
            }
            served += 1;
            assert!(served < 10, "{store}: never refused");
        };
        assert!(served >= 1, "{store}: refused before spending");
        let err = assert_error(&refusal, 422);
        assert_eq!(err["type"], "budget_exceeded", "{store}");
        assert!(
            error_message(&err).starts_with("ExceededBudget: End User=thrifty over budget. Spend="),
            "{store}: {err:?}"
        );
        // Others are not affected.
        assert_eq!(chat(&gw, "lavish").status, 200, "{store}");
        // The spend reaches the end user's row, added, never overwritten.
        let spend = e2e::eventually("the end user's spend", Duration::from_secs(10), || {
            let spend = info(&gw, "thrifty").expect_status(200).json()["spend"]
                .as_f64()
                .unwrap();
            (spend > 0.0).then_some(spend)
        });
        assert!(spend <= 0.003 + 1e-9, "{store}: overspent {spend}");
        // An end user without a row gets one with its spend, as in LiteLLM.
        e2e::eventually("the new end user's row", Duration::from_secs(10), || {
            let resp = info(&gw, "lavish");
            (resp.status == 200 && resp.json()["spend"].as_f64() > Some(0.0)).then_some(())
        });
        // A raised budget admits it again, without a restart.
        admin(
            &gw,
            "/customer/update",
            json!({"user_id": "thrifty", "max_budget": 1.0}),
        );
        assert_eq!(chat(&gw, "thrifty").status, 200, "{store}");
    }
}

#[test]
fn an_end_users_rpm_limit_applies_to_it_alone() {
    for (store, _db, gw) in gateways() {
        admin(
            &gw,
            "/customer/new",
            json!({"user_id": "chatty", "rpm_limit": 2}),
        );
        assert_eq!(chat(&gw, "chatty").status, 200, "{store}");
        assert_eq!(chat(&gw, "chatty").status, 200, "{store}");
        let err = assert_error(&chat(&gw, "chatty"), 429);
        assert!(
            error_message(&err).starts_with("Rate limit exceeded for end_user: chatty."),
            "{store}: {err:?}"
        );
        assert_eq!(chat(&gw, "quiet").status, 200, "{store}");
        // Raised through the API, it admits again at once.
        admin(
            &gw,
            "/customer/update",
            json!({"user_id": "chatty", "rpm_limit": 100}),
        );
        assert_eq!(chat(&gw, "chatty").status, 200, "{store}");
    }
}

#[test]
fn a_budget_row_changed_through_budget_update_reaches_its_end_users() {
    // In Postgres `/budget/update` edits the row `/customer/new` made (in
    // memory an end user's budget rows are its own: README).
    let (store, _db, gw) = gateways().pop().expect("the Postgres gateway");
    assert_eq!(store, "postgres");
    admin(
        &gw,
        "/customer/new",
        json!({"user_id": "row-reader", "rpm_limit": 1}),
    );
    assert_eq!(chat(&gw, "row-reader").status, 200);
    assert_error(&chat(&gw, "row-reader"), 429);
    let row = info(&gw, "row-reader").expect_status(200).json();
    let budget_id = row["budget_id"].as_str().expect("budget_id").to_string();
    admin(
        &gw,
        "/budget/update",
        json!({"budget_id": budget_id, "rpm_limit": 100}),
    );
    // The end user's cached limits follow the row at once.
    assert_eq!(chat(&gw, "row-reader").status, 200);
}

#[test]
fn an_end_users_budget_period_resets_its_spend() {
    for (store, _db, gw) in gateways() {
        admin(
            &gw,
            "/customer/new",
            json!({"user_id": "monthly", "max_budget": 0.003, "budget_duration": "2s"}),
        );
        let mut served = 0;
        while chat(&gw, "monthly").status == 200 {
            served += 1;
            assert!(served < 10, "{store}: never refused");
        }
        // Once the period ends, the spend is zeroed and requests pass again.
        e2e::eventually("the budget period's reset", Duration::from_secs(15), || {
            (chat(&gw, "monthly").status == 200).then_some(())
        });
        let row = info(&gw, "monthly").expect_status(200).json();
        assert!(
            row["litellm_budget_table"]["budget_reset_at"].is_string(),
            "{store}: the next reset is scheduled: {row}"
        );
    }
}

#[test]
fn concurrent_updates_of_one_end_user_keep_every_field() {
    for (store, _db, gw) in gateways() {
        admin(
            &gw,
            "/customer/new",
            json!({"user_id": "busy", "max_budget": 1.0}),
        );
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..20 {
                    admin(
                        &gw,
                        "/customer/update",
                        json!({"user_id": "busy", "alias": format!("alias-{i}")}),
                    );
                }
            });
            s.spawn(|| {
                for i in 0..20 {
                    admin(
                        &gw,
                        "/customer/update",
                        json!({"user_id": "busy", "rpm_limit": 100 + i}),
                    );
                }
            });
        });
        let row = info(&gw, "busy").expect_status(200).json();
        assert_eq!(row["alias"], "alias-19", "{store}: {row}");
        assert_eq!(
            row["litellm_budget_table"]["rpm_limit"], 119,
            "{store}: {row}"
        );
        assert_eq!(
            row["litellm_budget_table"]["max_budget"], 1.0,
            "{store}: {row}"
        );
    }
}

#[test]
fn a_change_made_on_one_replica_reaches_the_other() {
    let db = TestDb::create();
    let config = json!({
        "model_list": [{
            "model_name": "priced",
            "litellm_params": {"model": "mock/priced", "mock_response": "hi",
                "input_cost_per_token": INPUT_COST, "output_cost_per_token": OUTPUT_COST},
        }],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let a = Gateway::start_json(&config, &[("DATABASE_URL", db.url())]);
    let b = Gateway::start_json(&config, &[("DATABASE_URL", db.url())]);
    assert_eq!(chat(&b, "roaming").status, 200);
    admin(&a, "/customer/block", json!({"user_ids": ["roaming"]}));
    e2e::eventually(
        "the block to reach the other replica",
        Duration::from_secs(10),
        || (chat(&b, "roaming").status == 400).then_some(()),
    );
    admin(&a, "/customer/unblock", json!({"user_ids": ["roaming"]}));
    e2e::eventually(
        "the unblock to reach the other replica",
        Duration::from_secs(10),
        || (chat(&b, "roaming").status == 200).then_some(()),
    );
}

/// The cost of an answered request, from its usage.
fn cost_of(body: &Value) -> f64 {
    let usage = &body["usage"];
    usage["prompt_tokens"].as_f64().expect("prompt_tokens") * INPUT_COST
        + usage["completion_tokens"]
            .as_f64()
            .expect("completion_tokens")
            * OUTPUT_COST
}

#[test]
fn two_replicas_sharing_redis_keep_an_end_user_within_its_budget() {
    let db = TestDb::create();
    let redis = e2e::PrivateRedis::start();
    let config = json!({
        "model_list": [{
            "model_name": "priced",
            "litellm_params": {"model": "mock/priced", "mock_latency_ms": 30,
                "mock_response": "one two three four five six seven eight nine ten",
                "input_cost_per_token": INPUT_COST, "output_cost_per_token": OUTPUT_COST},
        }],
        "general_settings": {"master_key": MASTER_KEY},
        // A reservation Redis answers after its deadline falls back to the
        // process's own counters (each replica alone): on a loaded machine
        // 100 ms is too short for what this test checks.
        "gateway_settings": {"rate_limits": {"redis_timeout_ms": 2000}},
    });
    let url = redis.url();
    let env = [("DATABASE_URL", db.url()), ("REDIS_URL", url.as_str())];
    let first = Gateway::start_json(&config, &env);
    let budget = 0.01;
    admin(
        &first,
        "/customer/new",
        json!({"user_id": "shared", "max_budget": budget}),
    );
    // The second replica starts knowing the end user is restricted (a
    // replica that has not heard of the change yet serves the id as an
    // unrestricted one, as LiteLLM's cache does: not what this test is
    // about).
    let replicas = [first, Gateway::start_json(&config, &env)];
    // Each replica alone would admit about the whole budget; together they
    // must not pass it. Senders stop after three refusals in a row.
    let spent: f64 = std::thread::scope(|s| {
        let senders: Vec<_> = (0..8)
            .map(|i| {
                let gw = &replicas[i % 2];
                s.spawn(move || {
                    let (mut costs, mut refusals) = (0.0, 0);
                    for _ in 0..40 {
                        let resp = chat(gw, "shared");
                        match resp.status {
                            200 => {
                                refusals = 0;
                                costs += cost_of(&resp.json());
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
        "two replicas overshot the end user's budget: spent {spent} of {budget}"
    );
    let hash = "{budget:end_user:shared}";
    e2e::eventually(
        "the end user's counter in Redis",
        Duration::from_secs(5),
        || match redis.command(&["HGET", hash, "reserved"]) {
            e2e::redis::Reply::Bulk(Some(v)) if v == "0" => Some(()),
            _ => None,
        },
    );
}

#[test]
fn an_end_users_region_limits_the_deployments_that_serve_it() {
    for (store, _db, gw) in gateways() {
        admin(
            &gw,
            "/customer/new",
            json!({"user_id": "european", "allowed_model_region": "eu"}),
        );
        // The only deployment has no region: none may serve this end user.
        let err = assert_error(&chat(&gw, "european"), 400);
        assert!(
            error_message(&err).contains("allowed region"),
            "{store}: {err:?}"
        );
        assert_eq!(chat(&gw, "anywhere").status, 200, "{store}");
    }
}
