//! The management API on the real binary: keys, teams and users created,
//! changed and removed through LiteLLM's endpoints take effect on the very
//! next LLM request. Upstreams are the in-process `mock/` provider.

use std::time::Duration;

use e2e::{assert_error, chat_body, error_message, Gateway, Response, MASTER_KEY};
use serde_json::{json, Value};

fn mock_model(name: &str) -> Value {
    json!({
        "model_name": name,
        // Priced, so budgets apply (an unpriced model is refused to keys
        // with a budget).
        "litellm_params": {
            "model": format!("mock/{name}"),
            "mock_response": "hi",
            "input_cost_per_token": 0.000001,
            "output_cost_per_token": 0.000002,
        },
        "model_info": {"id": format!("{name}-1")},
    })
}

/// A gateway on a fresh Postgres database, so every management call runs
/// against LiteLLM's tables (the database outlives the gateway).
fn start() -> (e2e::TestDb, Gateway) {
    let db = e2e::TestDb::create();
    let gw = Gateway::start_json(
        &json!({
            "model_list": [mock_model("chat-fast"), mock_model("chat-deep")],
            "general_settings": {"master_key": MASTER_KEY},
        }),
        &[("DATABASE_URL", db.url())],
    );
    (db, gw)
}

/// A chat completion on `model` with `key`.
fn chat(gw: &Gateway, key: &str, model: &str) -> Response {
    gw.post_as(key, "/v1/chat/completions", &chat_body(model))
}

/// `POST path` as the master key, expecting 200.
fn admin(gw: &Gateway, path: &str, body: Value) -> Value {
    gw.post(path, &body).expect_status(200).json()
}

/// A new key with `body`'s settings; returns the whole answer.
fn generate(gw: &Gateway, body: Value) -> Value {
    admin(gw, "/key/generate", body)
}

fn key_of(answer: &Value) -> String {
    answer["key"]
        .as_str()
        .unwrap_or_else(|| panic!("no key in {answer}"))
        .to_string()
}

#[test]
fn generated_key_works_and_has_litellm_shape() {
    let (_db, gw) = start();
    let answer = generate(
        &gw,
        json!({"key_alias": "ci", "max_budget": 10, "metadata": {"app": "e2e"}}),
    );
    let key = key_of(&answer);
    assert!(key.starts_with("sk-") && key.len() >= 25, "{answer}");
    assert_eq!(
        answer["key_name"],
        format!("sk-...{}", &key[key.len() - 4..])
    );
    let token = answer["token"].as_str().unwrap();
    assert_eq!(token.len(), 64, "token is the sha256 hex: {answer}");
    assert_eq!(answer["token_id"], token);
    assert_eq!(
        (
            &answer["key_alias"],
            &answer["max_budget"],
            &answer["metadata"]["app"]
        ),
        (&json!("ci"), &json!(10.0), &json!("e2e"))
    );
    assert!(answer["expires"].is_null(), "{answer}");

    let body = chat(&gw, &key, "chat-fast").expect_status(200).json();
    assert_eq!(body["choices"][0]["message"]["content"], "hi", "{body}");
}

#[test]
fn key_info_never_shows_another_plain_key() {
    let (_db, gw) = start();
    let a = generate(&gw, json!({"key_alias": "a"}));
    let b = generate(&gw, json!({"key_alias": "b"}));
    let (key_a, key_b) = (key_of(&a), key_of(&b));

    let resp = gw.get(&format!("/key/info?key={key_a}")).expect_status(200);
    let info = resp.json();
    assert_eq!(info["key"], key_a.as_str());
    assert_eq!(info["info"]["key_alias"], "a");
    assert!(info["info"].get("token").is_none(), "{info}");
    assert!(!resp.text().contains(&key_b), "{info}");

    let by_hash = gw.get(&format!("/key/info?key={}", b["token"].as_str().unwrap()));
    let text = by_hash.expect_status(200).text();
    assert!(!text.contains(&key_b) && !text.contains(&key_a), "{text}");

    let listed = gw.get("/key/list?size=100").expect_status(200).json();
    let text = listed.to_string();
    assert!(!text.contains(&key_a) && !text.contains(&key_b), "{text}");
    assert_eq!(listed["total_count"], 2, "{listed}");

    assert_error(&gw.get("/key/info?key=sk-never-issued"), 404);
}

#[test]
fn key_models_restrict_access() {
    let (_db, gw) = start();
    let key = key_of(&generate(&gw, json!({"models": ["chat-fast"]})));
    chat(&gw, &key, "chat-fast").expect_status(200);
    let err = assert_error(&chat(&gw, &key, "chat-deep"), 403);
    assert_eq!(err["type"], "key_model_access_denied", "{err:?}");
    let msg = error_message(&err);
    assert!(
        msg.contains("chat-fast") && msg.contains("chat-deep"),
        "{msg}"
    );
}

#[test]
fn a_keys_allowed_routes_bind_as_in_litellm() {
    let (db, gw) = start();
    // A path allows itself and what is under it, nothing else (LiteLLM
    // checks the path as called: `/v1/...` is another route).
    let key = key_of(&generate(
        &gw,
        json!({"allowed_routes": ["/chat/completions", "/v1/models"]}),
    ));
    gw.post_as(&key, "/chat/completions", &chat_body("chat-fast"))
        .expect_status(200);
    let err = assert_error(&chat(&gw, &key, "chat-fast"), 403);
    assert_eq!(err["type"], "auth_error", "{err:?}");
    assert_eq!(
        error_message(&err),
        "Virtual key is not allowed to call this route. Only allowed to call routes: ['/chat/completions', '/v1/models']. Tried to call route: /v1/chat/completions"
    );
    let auth = format!("Bearer {key}");
    let get = |path: &str| gw.call("GET", path, &[("Authorization", &auth)], b"");
    get("/v1/models").expect_status(200);
    assert_error(&get("/models"), 403);
    let info = gw
        .get(&format!("/key/info?key={key}"))
        .expect_status(200)
        .json();
    assert_eq!(
        info["info"]["allowed_routes"],
        json!(["/chat/completions", "/v1/models"])
    );

    // A route group of LiteLLM's: every LLM route, nothing else.
    admin(
        &gw,
        "/key/update",
        json!({"key": key, "allowed_routes": ["llm_api_routes"]}),
    );
    chat(&gw, &key, "chat-fast").expect_status(200);
    get("/models").expect_status(200);
    assert_error(&get("/health/readiness/details"), 403);
    // A misspelt group is refused, naming the field, and changes nothing.
    let bad = gw.post(
        "/key/update",
        &json!({"key": key, "allowed_routes": ["llm_routes"]}),
    );
    let err = assert_error(&bad, 400);
    assert!(error_message(&err).contains("allowed_routes"), "{err:?}");
    chat(&gw, &key, "chat-fast").expect_status(200);
    // An empty list allows every route again.
    admin(
        &gw,
        "/key/update",
        json!({"key": key, "allowed_routes": []}),
    );
    get("/health/readiness/details").expect_status(200);

    // The list is LiteLLM's column: a restart reads it back from Postgres.
    admin(
        &gw,
        "/key/update",
        json!({"key": key, "allowed_routes": ["/chat/completions"]}),
    );
    drop(gw);
    let gw = Gateway::start_json(
        &json!({
            "model_list": [mock_model("chat-fast")],
            "general_settings": {"master_key": MASTER_KEY},
        }),
        &[("DATABASE_URL", db.url())],
    );
    assert_error(&chat(&gw, &key, "chat-fast"), 403);
    gw.post_as(&key, "/chat/completions", &chat_body("chat-fast"))
        .expect_status(200);
}

#[test]
fn block_and_unblock_take_effect_at_once() {
    let (_db, gw) = start();
    let key = key_of(&generate(&gw, json!({})));
    chat(&gw, &key, "chat-fast").expect_status(200);

    let blocked = admin(&gw, "/key/block", json!({"key": key}));
    assert_eq!(blocked["blocked"], true, "{blocked}");
    assert_error(&chat(&gw, &key, "chat-fast"), 401);

    admin(&gw, "/key/unblock", json!({"key": key}));
    chat(&gw, &key, "chat-fast").expect_status(200);
}

#[test]
fn deleted_key_is_refused() {
    let (_db, gw) = start();
    let answer = generate(&gw, json!({}));
    let key = key_of(&answer);
    chat(&gw, &key, "chat-fast").expect_status(200);

    let deleted = admin(&gw, "/key/delete", json!({"keys": [key]}));
    assert_eq!(deleted["deleted_keys"], json!([key]));
    assert_error(&chat(&gw, &key, "chat-fast"), 401);
    assert_error(&gw.post("/key/delete", &json!({"keys": [key]})), 404);
}

#[test]
fn regenerated_key_replaces_the_old_one() {
    let (_db, gw) = start();
    let old = key_of(&generate(&gw, json!({"models": ["chat-fast"]})));
    chat(&gw, &old, "chat-fast").expect_status(200);

    let answer = admin(&gw, &format!("/key/{old}/regenerate"), json!({}));
    let new = key_of(&answer);
    assert_ne!(new, old);
    assert_eq!(
        answer["models"],
        json!(["chat-fast"]),
        "settings kept: {answer}"
    );
    assert_error(&chat(&gw, &old, "chat-fast"), 401);
    chat(&gw, &new, "chat-fast").expect_status(200);

    let again = admin(
        &gw,
        "/key/regenerate",
        json!({"key": new, "new_key": "sk-chosen-1"}),
    );
    assert_eq!(again["key"], "sk-chosen-1");
    assert_error(&chat(&gw, &new, "chat-fast"), 401);
    chat(&gw, "sk-chosen-1", "chat-fast").expect_status(200);
}

#[test]
fn expired_key_is_refused() {
    let (_db, gw) = start();
    let answer = generate(&gw, json!({"duration": "1s"}));
    assert!(answer["expires"].is_string(), "{answer}");
    let key = key_of(&answer);
    let refused = e2e::eventually("the key to expire", Duration::from_secs(5), || {
        let resp = chat(&gw, &key, "chat-fast");
        (resp.status != 200).then_some(resp)
    });
    let err = assert_error(&refused, 401);
    assert!(error_message(&err).contains("Expired"), "{err:?}");
}

#[test]
fn updates_take_effect_on_the_next_request() {
    let (_db, gw) = start();
    let key = key_of(&generate(&gw, json!({"models": ["chat-fast"]})));
    assert_error(&chat(&gw, &key, "chat-deep"), 403);

    let updated = admin(
        &gw,
        "/key/update",
        json!({"key": key, "models": ["chat-fast", "chat-deep"]}),
    );
    assert_eq!(
        updated["models"],
        json!(["chat-fast", "chat-deep"]),
        "{updated}"
    );
    chat(&gw, &key, "chat-deep").expect_status(200);

    // Spend above the budget refuses; raising the budget admits again.
    admin(
        &gw,
        "/key/update",
        json!({"key": key, "spend": 2.0, "max_budget": 1.0}),
    );
    assert_error(&chat(&gw, &key, "chat-deep"), 422);
    admin(&gw, "/key/update", json!({"key": key, "max_budget": 100}));
    chat(&gw, &key, "chat-deep").expect_status(200);
    let info = gw
        .get(&format!("/key/info?key={key}"))
        .expect_status(200)
        .json();
    assert_eq!(info["info"]["max_budget"], 100.0, "{info}");
}

#[test]
fn blocked_team_refuses_its_keys() {
    let (_db, gw) = start();
    let team = admin(
        &gw,
        "/team/new",
        json!({"team_alias": "blue", "max_budget": 5}),
    );
    let team_id = team["team_id"].as_str().unwrap().to_string();
    let key = key_of(&generate(&gw, json!({"team_id": team_id})));
    chat(&gw, &key, "chat-fast").expect_status(200);

    let blocked = admin(&gw, "/team/block", json!({"team_id": team_id}));
    assert_eq!(blocked["blocked"], true, "{blocked}");
    assert_error(&chat(&gw, &key, "chat-fast"), 401);
    admin(&gw, "/team/unblock", json!({"team_id": team_id}));
    chat(&gw, &key, "chat-fast").expect_status(200);

    let info = gw
        .get(&format!("/team/info?team_id={team_id}"))
        .expect_status(200)
        .json();
    assert_eq!(info["team_info"]["team_alias"], "blue", "{info}");
    assert_eq!(info["keys"].as_array().map(Vec::len), Some(1), "{info}");

    let err = assert_error(
        &gw.post("/key/generate", &json!({"team_id": "no-such-team"})),
        400,
    );
    assert_eq!(err["param"], "team_id", "{err:?}");
}

#[test]
fn team_models_restrict_its_keys_until_updated() {
    let (_db, gw) = start();
    let team = admin(
        &gw,
        "/team/new",
        json!({"team_id": "red", "models": ["chat-fast"]}),
    );
    assert_eq!(team["team_id"], "red");
    let key = key_of(&generate(&gw, json!({"team_id": "red"})));
    assert_error(&chat(&gw, &key, "chat-deep"), 403);
    admin(&gw, "/team/update", json!({"team_id": "red", "models": []}));
    chat(&gw, &key, "chat-deep").expect_status(200);

    admin(&gw, "/team/delete", json!({"team_ids": ["red"]}));
    assert_error(&chat(&gw, &key, "chat-fast"), 401);
    assert_error(&gw.get("/team/info?team_id=red"), 404);
}

#[test]
fn only_admins_manage() {
    let (_db, gw) = start();
    let plain = key_of(&generate(&gw, json!({})));
    let err = assert_error(&gw.post_as(&plain, "/key/generate", &json!({})), 403);
    assert_eq!(err["type"], "auth_error", "{err:?}");
    assert_error(
        &gw.post_as("sk-not-a-key", "/key/generate", &json!({})),
        401,
    );

    let admin_key = key_of(&generate(&gw, json!({"metadata": {"role": "admin"}})));
    let made = gw
        .post_as(&admin_key, "/key/generate", &json!({}))
        .expect_status(200);
    chat(&gw, &key_of(&made.json()), "chat-fast").expect_status(200);
}

#[test]
fn bad_fields_are_named() {
    let (_db, gw) = start();
    for (path, body, field) in [
        ("/key/generate", json!({"max_budget": "lots"}), "max_budget"),
        ("/key/generate", json!({"modles": ["x"]}), "modles"),
        ("/key/generate", json!({"duration": "soon"}), "duration"),
        ("/key/generate", json!({"key": "not-sk"}), "key"),
        ("/key/update", json!({"models": []}), "key"),
        (
            "/team/new",
            json!({"members_with_roles": [{"user_id": "u", "role": "boss"}]}),
            "members_with_roles[0].role",
        ),
        ("/user/new", json!({"user_role": "king"}), "user_role"),
    ] {
        let err = assert_error(&gw.post(path, &body), 400);
        assert_eq!(err["param"], field, "{path} {body}: {err:?}");
    }
    let err = assert_error(&gw.get("/key/list?page=zero"), 400);
    assert_eq!(err["param"], "page", "{err:?}");
    let err = assert_error(&gw.get("/spend/logs?start_date=yesterday"), 400);
    assert_eq!(err["param"], "start_date", "{err:?}");
}

#[test]
fn new_user_gets_a_working_key() {
    let (_db, gw) = start();
    admin(&gw, "/team/new", json!({"team_id": "green"}));
    let user = admin(
        &gw,
        "/user/new",
        json!({"user_id": "alice", "user_email": "alice@example.com", "models": ["chat-fast"], "teams": ["green"]}),
    );
    assert_eq!(user["user_id"], "alice", "{user}");
    let key = key_of(&user);
    chat(&gw, &key, "chat-fast").expect_status(200);
    assert_error(&chat(&gw, &key, "chat-deep"), 403);

    let info = gw.get("/user/info?user_id=alice").expect_status(200).json();
    assert_eq!(
        info["user_info"]["user_email"], "alice@example.com",
        "{info}"
    );
    assert_eq!(info["keys"][0]["token"], user["token"], "{info}");
    assert_eq!(info["teams"][0]["team_id"], "green", "{info}");
    let team = gw.get("/team/info?team_id=green").expect_status(200).json();
    assert_eq!(team["team_info"]["members"], json!(["alice"]), "{team}");
    let listed = gw.get("/key/list?user_id=alice").expect_status(200).json();
    assert_eq!(listed["keys"], json!([user["token"]]), "{listed}");

    admin(
        &gw,
        "/user/update",
        json!({"user_id": "alice", "models": []}),
    );
    chat(&gw, &key, "chat-deep").expect_status(200);
    let deleted = admin(&gw, "/user/delete", json!({"user_ids": ["alice"]}));
    assert_eq!(deleted["deleted_users"], json!(["alice"]));
    assert_error(&chat(&gw, &key, "chat-fast"), 401);
}

#[test]
fn spend_endpoints_answer() {
    let (_db, gw) = start();
    let global = gw.get("/global/spend").expect_status(200).json();
    assert!(global["spend"].is_number(), "{global}");
    let key = key_of(&generate(&gw, json!({})));
    let logs = gw
        .get(&format!(
            "/spend/logs?api_key={key}&start_date=2020-01-01&end_date=2100-01-01"
        ))
        .expect_status(200)
        .json();
    assert!(logs.is_array(), "{logs}");
}

/// Keys declared in `gateway_settings.virtual_keys` work without the
/// management API, with their model restrictions, and are listed hashed.
#[test]
fn keys_declared_in_the_config_authenticate() {
    let config = serde_json::json!({
        "model_list": [
            {"model_name": "allowed", "litellm_params": {"model": "mock/a"}},
            {"model_name": "other", "litellm_params": {"model": "mock/b"}},
        ],
        "general_settings": {"master_key": e2e::MASTER_KEY},
        "gateway_settings": {"virtual_keys": [{"key": "os.environ/DECLARED_KEY", "models": ["allowed"]}]},
    });
    let gw = e2e::Gateway::start(
        &e2e::to_yaml(&config),
        &[("DECLARED_KEY", "sk-declared-e2e-1")],
    );
    let chat = |model: &str| {
        let body =
            serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        gw.call(
            "POST",
            "/v1/chat/completions",
            &[("Authorization", "Bearer sk-declared-e2e-1")],
            body.to_string().as_bytes(),
        )
    };
    assert_eq!(chat("allowed").status, 200);
    let denied = chat("other");
    assert_eq!(denied.status, 403, "{}", denied.text());
    let list = gw.get("/key/list").text();
    assert!(
        !list.contains("sk-declared-e2e-1"),
        "keys are listed hashed: {list}"
    );
}

/// Out-of-range numbers, durations and dates in admin bodies and queries are
/// a 400 naming the field, and the process lives on: before issue 10, a
/// `/key/generate` with `{"duration": "100000000d"}` overflowed chrono and
/// exited the gateway.
#[test]
fn hostile_admin_numbers_are_refused_and_the_gateway_lives() {
    let gw = Gateway::start_json(
        &json!({
            "model_list": [mock_model("chat-fast")],
            "general_settings": {"master_key": MASTER_KEY},
        }),
        &[],
    );
    for (path, body, field) in [
        (
            "/key/generate",
            json!({"duration": "100000000d"}),
            "duration",
        ),
        (
            "/key/generate",
            json!({"budget_duration": "9223372036854775807s"}),
            "budget_duration",
        ),
        ("/key/generate", json!({"max_budget": 1e300}), "max_budget"),
        ("/key/generate", json!({"soft_budget": -1}), "soft_budget"),
        ("/key/generate", json!({"spend": 1e12}), "spend"),
        ("/key/generate", json!({"tpm_limit": i64::MAX}), "tpm_limit"),
        ("/key/generate", json!({"rpm_limit": -1}), "rpm_limit"),
        ("/key/generate", json!({"rpm_limit": 2.5}), "rpm_limit"),
        (
            "/key/generate",
            json!({"model_rpm_limit": {"chat-fast": u64::MAX}}),
            "model_rpm_limit.chat-fast",
        ),
        (
            "/key/generate",
            json!({"model_max_budget": {"chat-fast": -3}}),
            "model_max_budget.chat-fast",
        ),
        (
            "/team/new",
            json!({"budget_duration": "100000000d"}),
            "budget_duration",
        ),
        ("/team/new", json!({"max_budget": 1e10}), "max_budget"),
        ("/user/new", json!({"duration": "100000000d"}), "duration"),
        (
            "/user/new",
            json!({"max_parallel_requests": -1}),
            "max_parallel_requests",
        ),
        (
            "/model/new",
            json!({"model_name": "m", "litellm_params": {"model": "mock/m", "timeout": 1e300}}),
            "litellm_params.timeout",
        ),
        (
            "/model/new",
            json!({"model_name": "m", "litellm_params": {"model": "mock/m", "mock_latency_ms": u64::MAX}}),
            "litellm_params.mock_latency_ms",
        ),
    ] {
        let err = assert_error(&gw.post(path, &body), 400);
        assert_eq!(err["param"], field, "{path} {body}: {err:?}");
    }
    // `1e400` is valid JSON syntax but no f64: still named.
    let resp = gw.call(
        "POST",
        "/key/generate",
        &[("Authorization", &format!("Bearer {MASTER_KEY}"))],
        br#"{"max_budget": 1e400}"#,
    );
    assert_eq!(assert_error(&resp, 400)["param"], "max_budget");
    let err = assert_error(&gw.get("/spend/logs?end_date=%2B262143-12-31"), 400);
    assert_eq!(err["param"], "end_date", "{err:?}");

    let key = key_of(&generate(
        &gw,
        json!({"duration": "36525d", "budget_duration": "1mo"}),
    ));
    chat(&gw, &key, "chat-fast").expect_status(200);
}

/// `/spend/logs` answers one page at a time (issue 10): one call cannot
/// pull the whole table.
#[test]
fn spend_logs_come_a_page_at_a_time() {
    let gw = Gateway::start_json(
        &json!({
            "model_list": [mock_model("chat-fast")],
            "general_settings": {"master_key": MASTER_KEY},
        }),
        &[],
    );
    let key = key_of(&generate(&gw, json!({})));
    for _ in 0..3 {
        chat(&gw, &key, "chat-fast").expect_status(200);
    }
    let page = |query: &str| -> Vec<Value> {
        let logs = gw
            .get(&format!("/spend/logs?api_key={key}{query}"))
            .expect_status(200)
            .json();
        logs.as_array()
            .unwrap_or_else(|| panic!("not a list: {logs}"))
            .clone()
    };
    e2e::eventually("three spend rows", Duration::from_secs(10), || {
        (page("").len() == 3).then_some(())
    });
    let first = page("&page_size=2");
    let second = page("&page=2&page_size=2");
    assert_eq!((first.len(), second.len()), (2, 1));
    assert_ne!(first[1]["request_id"], second[0]["request_id"]);
    assert_eq!(page("&limit=1").len(), 1);
    assert!(page("&page=3&page_size=2").is_empty());
    for (query, param) in [
        ("page_size=100000", "page_size"),
        ("page=0", "page"),
        ("page=9223372036854775807&page_size=1000", "page"),
        ("limit=-1", "limit"),
    ] {
        let err = assert_error(&gw.get(&format!("/spend/logs?{query}")), 400);
        assert_eq!(err["param"], param, "{query}: {err:?}");
    }
}

/// `/v1/models` lists only what the calling key may use (issue 10): its
/// allowed groups and its aliases of them, never the others.
#[test]
fn models_lists_only_what_the_key_may_use() {
    let gw = Gateway::start_json(
        &json!({
            "model_list": [mock_model("chat-fast"), mock_model("chat-deep")],
            "general_settings": {"master_key": MASTER_KEY},
        }),
        &[],
    );
    let key = key_of(&generate(
        &gw,
        json!({"models": ["chat-fast"], "aliases": {"quick": "chat-fast", "deep": "chat-deep"}}),
    ));
    let get = |path: &str| {
        gw.call(
            "GET",
            path,
            &[("Authorization", &format!("Bearer {key}"))],
            b"",
        )
    };
    let listed = get("/v1/models").expect_status(200).json();
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data in {listed}"))
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["chat-fast", "quick"], "{listed}");
    get("/models/chat-fast").expect_status(200);
    assert_error(&get("/v1/models/chat-deep"), 404);
    assert_error(&get("/v1/models/deep"), 404);
    let all = gw.get("/v1/models").expect_status(200).json();
    assert_eq!(all["data"].as_array().map(Vec::len), Some(2), "{all}");
}

/// Every date, number and id of a management query string or body is
/// checked before it reaches the store: a 400 in LiteLLM's error shape
/// naming the parameter, never the database's 5xx (issue 35), on the
/// Postgres store and the memory store alike.
#[test]
fn management_input_is_checked_before_it_reaches_the_store() {
    let (db, with_db) = start();
    let memory = Gateway::start_json(
        &json!({
            "model_list": [mock_model("chat-fast")],
            "general_settings": {"master_key": MASTER_KEY},
        }),
        &[],
    );
    let long = "x".repeat(2000);
    let queries: Vec<(String, &str)> = [
        (
            "/spend/logs?start_date=-262143-01-01&end_date=2026-01-01",
            "start_date",
        ),
        (
            "/spend/logs?start_date=2026-01-01&end_date=10000-01-01",
            "end_date",
        ),
        ("/spend/logs?start_date=0000-12-31", "start_date"),
        ("/spend/logs?user_id=a%00b", "user_id"),
        ("/spend/logs?request_id=%00", "request_id"),
        ("/spend/logs?api_key=sk-%00", "api_key"),
        ("/spend/logs?page=-1", "page"),
        ("/key/info?key=sk-%00", "key"),
        ("/key/list?user_id=%00", "user_id"),
        ("/key/list?team_id=t%00", "team_id"),
        ("/key/list?key_alias=%00", "key_alias"),
        ("/key/list?page=0", "page"),
        ("/key/list?size=100000", "size"),
        ("/key/list?page=99999999999999999999999", "page"),
        ("/team/info?team_id=t%00", "team_id"),
        ("/team/list?user_id=u%00", "user_id"),
        ("/user/info?user_id=u%00", "user_id"),
        ("/user/list?page=0", "page"),
        ("/user/list?page_size=-3", "page_size"),
        ("/user/list?user_ids=a,b%00", "user_ids"),
        ("/customer/info?end_user_id=%00", "end_user_id"),
        ("/customer/list?page=-1", "page"),
        ("/customer/list?search=%00", "search"),
        ("/organization/info?organization_id=%00", "organization_id"),
        ("/organization/list?org_id=%00", "org_id"),
        ("/budget/settings?budget_id=%00", "budget_id"),
        ("/model/info?litellm_model_id=%00", "litellm_model_id"),
        ("/spend/logs?limit=0", "limit"),
        ("/spend/logs?page_size=5&limit=5", "limit"),
        ("/spend/logs?start_date=2026-02-30", "start_date"),
        ("/spend/logs?unknown=1", "unknown"),
        ("/global/spend?start_date=1", "start_date"),
        ("/gateway/logs?page_size=0", "page_size"),
        ("/gateway/logs?page_token=%00", "page_token"),
        ("/model_group/info?model_group=%00", "model_group"),
        ("/budget/list?page=1", "page"),
        (
            "/user/daily/activity?start_date=2026-13-01&end_date=2026-01-01",
            "start_date",
        ),
        ("/team/daily/activity?start_date=2026-01-01", "end_date"),
        (
            "/team/daily/activity?start_date=2026-01-02&end_date=2026-01-01",
            "end_date",
        ),
        (
            "/team/daily/activity?start_date=0001-01-01&end_date=9999-12-31",
            "end_date",
        ),
        (
            "/organization/daily/activity?start_date=2026-01-01&end_date=2026-01-02&page=0",
            "page",
        ),
        (
            "/customer/daily/activity?start_date=2026-01-01&end_date=2026-01-02&page_size=1001",
            "page_size",
        ),
        (
            "/end_user/daily/activity?start_date=2026-01-01&end_date=2026-01-02&page=99999999999999999999",
            "page",
        ),
        (
            "/end_user/daily/activity?start_date=2026-01-01&end_date=2026-01-02&page=100000000",
            "page",
        ),
        (
            "/tag/daily/activity?start_date=2026-01-01&end_date=2026-01-02&bogus=1",
            "bogus",
        ),
        (
            "/user/daily/activity?start_date=2026-01-01&end_date=2026-01-02&timezone=99999",
            "timezone",
        ),
        (
            "/user/daily/activity?start_date=2026-01-01&end_date=2026-01-02&include_current_utc_day=maybe",
            "include_current_utc_day",
        ),
        (
            "/team/daily/activity?start_date=2026-01-01&end_date=2026-01-02&team_ids=a,%00",
            "team_ids",
        ),
        (
            "/team/daily/activity?start_date=2026-01-01&end_date=2026-01-02&api_key=sk-%00",
            "api_key",
        ),
    ]
    .into_iter()
    .map(|(q, p)| (q.to_string(), p))
    .chain([(format!("/spend/logs?team_id={long}"), "team_id")])
    .collect();
    for gw in [&with_db, &memory] {
        for (query, param) in &queries {
            let err = assert_error(&gw.get(query), 400);
            assert_eq!(err["param"], *param, "{query}: {err:?}");
            assert!(
                err["message"].is_string() && err["type"].is_string(),
                "{err:?}"
            );
        }
        for (path, body, param) in [
            ("/team/new", json!({"team_alias": "a\u{0}b"}), "team_alias"),
            (
                "/key/generate",
                json!({"metadata": {"k\u{0}": 1}}),
                "metadata",
            ),
            ("/user/new", json!({"user_id": "u\u{0}"}), "user_id"),
            (
                "/budget/new",
                json!({"budget_id": "b1", "budget_reset_at": "+200000-01-01T00:00:00"}),
                "budget_reset_at",
            ),
        ] {
            let err = assert_error(&gw.post(path, &body), 400);
            assert_eq!(err["param"], param, "{path} {body}: {err:?}");
        }
        // The good forms still answer.
        gw.get("/spend/logs?start_date=0001-01-01&end_date=9999-12-31")
            .expect_status(200);
        gw.get("/key/list?page=1&size=100").expect_status(200);
        gw.get(
            "/team/daily/activity?start_date=2026-01-01&end_date=2026-01-02&page=2&page_size=1000",
        )
        .expect_status(200);
        gw.get("/global/spend").expect_status(200);
    }
    drop(db);
}

/// `/key/list` pages in Postgres (the console's Keys page with 100,000
/// keys reads one page, not the table): newest first, ties by token, the
/// pages together are every key once, filters by user, team and alias
/// (together too) with exact totals, a page past the end is empty.
#[test]
fn key_list_pages_in_postgres_newest_first_with_filters() {
    let (db, gw) = start();
    db.query(
        r#"INSERT INTO "LiteLLM_VerificationToken" (token, key_alias, user_id, team_id, created_at)
           SELECT 'page-' || lpad(i::text, 3, '0'), 'alias-' || i, 'user-' || (i % 3),
                  CASE WHEN i % 2 = 0 THEN 'even' END,
                  TIMESTAMP '2026-01-01' + make_interval(mins => i / 2)
           FROM generate_series(1, 30) AS i"#,
    );
    let page = |query: &str| {
        gw.get(&format!("/key/list?{query}"))
            .expect_status(200)
            .json()
    };
    let tokens = |answer: &Value| -> Vec<String> {
        answer["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect()
    };
    // Newest first; keys made in the same minute by token.
    let mut expected: Vec<(i64, String)> = (1..=30)
        .map(|i| (-(i / 2), format!("page-{i:03}")))
        .collect();
    expected.sort();
    let expected: Vec<String> = expected.into_iter().map(|(_, t)| t).collect();
    let mut all = Vec::new();
    for n in 1..=5 {
        let answer = page(&format!("page={n}&size=7"));
        assert_eq!(answer["total_count"], 30, "{answer}");
        assert_eq!(answer["total_pages"], 5);
        assert_eq!(answer["current_page"], n);
        all.extend(tokens(&answer));
    }
    assert_eq!(all, expected);
    let past = page("page=6&size=7");
    assert_eq!((tokens(&past).len(), &past["total_count"]), (0, &json!(30)));

    let even = page("team_id=even&size=100");
    assert_eq!(even["total_count"], 15, "{even}");
    let both = page("team_id=even&user_id=user-0&size=2&page=2&return_full_object=true");
    assert_eq!(both["total_count"], 5, "{both}");
    assert_eq!(both["total_pages"], 3);
    let keys = both["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    assert!(keys
        .iter()
        .all(|k| k["team_id"] == "even" && k["user_id"] == "user-0"));
    let alias = page("key_alias=alias-17&return_full_object=true");
    assert_eq!(alias["total_count"], 1);
    assert_eq!(alias["keys"][0]["token"], "page-017");
    assert_eq!(page("key_alias=nobody")["total_count"], 0);
}
