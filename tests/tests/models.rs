//! Models at run time on the real binary: `/model/new`, `/model/update`,
//! `/model/delete` and `/model/info` take effect on the very next request,
//! a bad body changes nothing, secrets never show, and with Postgres a
//! model created through one replica serves on another at once (pushed by
//! notification, or read through on a miss), even when it was written
//! straight into LiteLLM's table.

use std::time::Duration;

use e2e::{assert_error, chat_body, Gateway, MockServer, Response, TestDb, MASTER_KEY};
use serde_json::{json, Value};

/// The upstream key the run-time models carry; it must never be shown.
const SECRET: &str = "sk-upstream-secret-4711";
/// The generous bound on how long a change may take to reach the other
/// replica (the expectation is milliseconds).
const PROPAGATION_BOUND: Duration = Duration::from_secs(2);

/// A config with one `mock/` group, `config-model` (id `config-1`).
fn config() -> Value {
    json!({
        "model_list": [{
            "model_name": "config-model",
            "litellm_params": {"model": "mock/c", "mock_response": "from the config"},
            "model_info": {"id": "config-1"},
        }],
        "general_settings": {"master_key": MASTER_KEY},
    })
}

/// A `/model/new` body: group `name` (id `id`) on the OpenAI-compatible
/// mock at `api_base`.
fn openai_entry(name: &str, id: &str, api_base: &str) -> Value {
    json!({
        "model_name": name,
        "litellm_params": {"model": "openai/upstream-gpt", "api_base": api_base, "api_key": SECRET},
        "model_info": {"id": id},
    })
}

/// A `/model/new` body on the in-process mock answering `reply`.
fn mock_entry(name: &str, id: &str, reply: &str) -> Value {
    json!({
        "model_name": name,
        "litellm_params": {"model": "mock/rt", "mock_response": reply, "api_key": SECRET},
        "model_info": {"id": id},
    })
}

fn chat(gw: &Gateway, model: &str) -> Response {
    gw.post("/v1/chat/completions", &chat_body(model))
}

/// The reply text of a successful chat completion.
fn reply(resp: Response) -> String {
    let body = resp.expect_status(200).json();
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no reply in {body}"))
        .to_string()
}

/// Asserts a 400 whose `param` is `field`.
fn assert_bad_field(resp: &Response, field: &str) {
    let err = assert_error(resp, 400);
    assert_eq!(err["param"], field, "{err:?}");
}

/// Asserts the answer to a request for an unknown model.
fn assert_unknown_model(resp: &Response) {
    let err = assert_error(resp, 400);
    assert_eq!(err["param"], "model", "{err:?}");
}

#[test]
fn a_created_model_serves_the_next_request_next_to_the_config_ones() {
    let mock = MockServer::start(&[]);
    let gw = Gateway::start_json(&config(), &[]);
    assert_unknown_model(&chat(&gw, "rt-model"));

    let base = mock.api_base();
    let created = gw
        .post("/model/new", &openai_entry("rt-model", "rt-1", &base))
        .expect_status(200);
    assert!(!created.text().contains(SECRET), "{}", created.text());
    assert_eq!(created.json()["model_id"], "rt-1");

    let resp = chat(&gw, "rt-model").expect_status(200);
    assert_eq!(resp.header("x-litellm-model-id"), Some("rt-1"));
    assert_eq!(resp.header("x-litellm-model-api-base"), Some(base.as_str()));
    assert_eq!(reply(chat(&gw, "config-model")), "from the config");
    let listed = gw.get("/v1/models").expect_status(200).json();
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["config-model", "rt-model"], "{listed}");

    // An id given twice, or the id of a config deployment, is a conflict.
    assert_error(&gw.post("/model/new", &mock_entry("x", "rt-1", "x")), 409);
    assert_error(
        &gw.post("/model/new", &mock_entry("x", "config-1", "x")),
        409,
    );
}

#[test]
fn an_update_takes_effect_and_a_bad_one_keeps_the_serving_deployment() {
    let (first, second) = (MockServer::start(&[]), MockServer::start(&[]));
    let gw = Gateway::start_json(&config(), &[]);
    let (base1, base2) = (first.api_base(), second.api_base());
    gw.post("/model/new", &openai_entry("rt-model", "rt-1", &base1))
        .expect_status(200);
    let served_by = |resp: Response| {
        let resp = resp.expect_status(200);
        resp.header("x-litellm-model-api-base").unwrap().to_string()
    };
    assert_eq!(served_by(chat(&gw, "rt-model")), base1);

    let update = json!({"litellm_params": {"api_base": base2}, "model_info": {"id": "rt-1"}});
    let answer = gw.post("/model/update", &update).expect_status(200).json();
    assert_eq!(answer["litellm_params"]["api_base"], base2.as_str());
    assert!(
        answer["litellm_params"].get("api_key").is_none(),
        "{answer}"
    );
    assert_eq!(served_by(chat(&gw, "rt-model")), base2);

    // Bad bodies: a 400 naming the field, and nothing changes.
    let bad =
        json!({"litellm_params": {"api_base": "ftp://nowhere"}, "model_info": {"id": "rt-1"}});
    assert_bad_field(&gw.post("/model/update", &bad), "litellm_params.api_base");
    let bad = json!({"litellm_params": {"rpm": "many"}, "model_info": {"id": "rt-1"}});
    assert_bad_field(&gw.post("/model/update", &bad), "litellm_params.rpm");
    assert_bad_field(
        &gw.post("/model/update", &json!({"litellm_params": {}})),
        "model_info.id",
    );
    assert_eq!(served_by(chat(&gw, "rt-model")), base2);

    let mut bad = openai_entry("rt-other", "rt-2", &base1);
    bad["litellm_params"]["model"] = json!("nope/x");
    assert_bad_field(&gw.post("/model/new", &bad), "litellm_params.model");
    assert_bad_field(
        &gw.post(
            "/model/new",
            &json!({"litellm_params": {"model": "mock/x"}}),
        ),
        "model_name",
    );
    assert_unknown_model(&chat(&gw, "rt-other"));
    assert_error(
        &gw.post(
            "/model/update",
            &json!({"litellm_params": {}, "model_info": {"id": "never"}}),
        ),
        404,
    );
    assert_error(
        &gw.post(
            "/model/update",
            &json!({"litellm_params": {}, "model_info": {"id": "config-1"}}),
        ),
        400,
    );
}

#[test]
fn a_deleted_model_is_an_unknown_model() {
    let gw = Gateway::start_json(&config(), &[]);
    gw.post("/model/new", &mock_entry("rt-model", "rt-1", "run time"))
        .expect_status(200);
    assert_eq!(reply(chat(&gw, "rt-model")), "run time");
    gw.post("/model/delete", &json!({"id": "rt-1"}))
        .expect_status(200);
    assert_unknown_model(&chat(&gw, "rt-model"));
    assert_error(&gw.post("/model/delete", &json!({"id": "rt-1"})), 404);
    assert_bad_field(&gw.post("/model/delete", &json!({"id": "config-1"})), "id");
    assert_eq!(reply(chat(&gw, "config-model")), "from the config");
}

#[test]
fn model_info_lists_every_deployment_without_secrets_and_changes_are_for_admins() {
    let gw = Gateway::start_json(&config(), &[]);
    gw.post("/model/new", &mock_entry("rt-model", "rt-1", "run time"))
        .expect_status(200);
    for path in ["/model/info", "/v1/model/info"] {
        let resp = gw.get(path).expect_status(200);
        assert!(!resp.text().contains(SECRET), "{}", resp.text());
        let data = resp.json()["data"].as_array().unwrap().clone();
        let by_id = |id: &str| {
            data.iter()
                .find(|d| d["model_info"]["id"] == id)
                .unwrap_or_else(|| panic!("no {id} in {data:?}"))
                .clone()
        };
        let rt = by_id("rt-1");
        assert_eq!(rt["model_name"], "rt-model");
        assert_eq!(rt["litellm_params"]["model"], "mock/rt");
        assert!(rt["litellm_params"].get("api_key").is_none(), "{rt}");
        assert_eq!(rt["model_info"]["db_model"], true);
        assert_eq!(by_id("config-1")["model_info"]["db_model"], false);
    }
    let one = gw
        .get("/model/info?litellm_model_id=rt-1")
        .expect_status(200)
        .json();
    assert_eq!(one["data"].as_array().unwrap().len(), 1, "{one}");
    assert_error(&gw.get("/model/info?litellm_model_id=never"), 404);

    let key = gw
        .post("/key/generate", &json!({}))
        .expect_status(200)
        .json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let auth = format!("Bearer {key}");
    // Any key reads the models it may use (LiteLLM's); changes are an
    // admin's.
    let as_user = gw.call("GET", "/model/info", &[("Authorization", &auth)], b"");
    assert_eq!(as_user.status, 200, "{}", as_user.text());
    assert!(!as_user.text().contains(SECRET), "{}", as_user.text());
    let body = mock_entry("x", "x-1", "x").to_string();
    let as_user = gw.call(
        "POST",
        "/model/new",
        &[("Authorization", &auth)],
        body.as_bytes(),
    );
    assert_error(&as_user, 403);
}

#[test]
fn a_model_created_through_one_replica_serves_on_another_at_once() {
    let db = TestDb::create();
    let a = Gateway::start_json(&config(), &[("DATABASE_URL", db.url())]);
    let b = Gateway::start_json(&config(), &[("DATABASE_URL", db.url())]);
    a.post("/model/new", &mock_entry("fleet-model", "fleet-1", "first"))
        .expect_status(200);
    assert_eq!(
        reply(chat(&b, "fleet-model")),
        "first",
        "B's very next request"
    );

    let update =
        json!({"litellm_params": {"mock_response": "second"}, "model_info": {"id": "fleet-1"}});
    a.post("/model/update", &update).expect_status(200);
    e2e::eventually("B serves the update", PROPAGATION_BOUND, || {
        (reply(chat(&b, "fleet-model")) == "second").then_some(())
    });

    a.post("/model/delete", &json!({"id": "fleet-1"}))
        .expect_status(200);
    e2e::eventually("B forgets the deleted model", PROPAGATION_BOUND, || {
        (chat(&b, "fleet-model").status == 400).then_some(())
    });
    assert_unknown_model(&chat(&b, "fleet-model"));
    assert_eq!(
        db.query(r#"SELECT count(*) FROM "LiteLLM_ProxyModelTable""#),
        "0"
    );
}

#[test]
fn a_model_written_straight_into_the_table_is_read_through_and_loaded_at_start() {
    let db = TestDb::create();
    let gw = Gateway::start_json(&config(), &[("DATABASE_URL", db.url())]);
    assert_unknown_model(&chat(&gw, "direct-model"));
    // No NOTIFY: only the read-through can find it (the earlier miss is
    // forgotten after the negative cache's 2 s).
    db.query(
        r#"INSERT INTO "LiteLLM_ProxyModelTable" (model_id, model_name, litellm_params, model_info)
           VALUES ('direct-1', 'direct-model', '{"model": "mock/d", "mock_response": "direct"}', '{"id": "direct-1"}')"#,
    );
    let served = e2e::eventually(
        "the read-through finds the row",
        Duration::from_secs(5),
        || {
            let resp = chat(&gw, "direct-model");
            (resp.status == 200).then_some(resp)
        },
    );
    assert_eq!(reply(served), "direct");

    // A replica started now serves it from the start (no request needed
    // for /model/info to list it).
    let later = Gateway::start_json(&config(), &[("DATABASE_URL", db.url())]);
    let info = later
        .get("/model/info?litellm_model_id=direct-1")
        .expect_status(200)
        .json();
    assert_eq!(info["data"][0]["model_name"], "direct-model", "{info}");
    assert_eq!(reply(chat(&later, "direct-model")), "direct");
}

/// `os.environ/NAME` in a `/model/*` body never resolves to the gateway's
/// own secrets (issue 10): an admin key could otherwise send them as the
/// `api_key` or a header to a host it chooses. Provider keys still resolve.
#[test]
fn os_environ_references_never_reach_the_gateways_secrets() {
    let gw = Gateway::start_json(
        &config(),
        &[
            ("LITELLM_MASTER_KEY", MASTER_KEY),
            ("LITELLM_SALT_KEY", "sk-salt-e2e"),
            ("REDIS_PASSWORD", "hunter2"),
            ("COPY_OF_THE_MASTER_KEY", MASTER_KEY),
            ("PROVIDER_KEY", "sk-provider-e2e"),
        ],
    );
    let entry = |id: &str, params: Value| {
        let mut litellm_params = json!({"model": "mock/rt", "mock_response": "ok"});
        for (k, v) in params.as_object().expect("params") {
            litellm_params[k] = v.clone();
        }
        json!({"model_name": "rt-env", "litellm_params": litellm_params, "model_info": {"id": id}})
    };
    for (params, field) in [
        (
            json!({"api_key": "os.environ/LITELLM_MASTER_KEY"}),
            "litellm_params.api_key",
        ),
        (
            json!({"api_key": "os.environ/LITELLM_SALT_KEY"}),
            "litellm_params.api_key",
        ),
        (
            json!({"api_key": "os.environ/DATABASE_URL"}),
            "litellm_params.api_key",
        ),
        (
            json!({"api_key": "os.environ/COPY_OF_THE_MASTER_KEY"}),
            "litellm_params.api_key",
        ),
        (
            json!({"extra_headers": {"x-leak": "os.environ/REDIS_PASSWORD"}}),
            "litellm_params.extra_headers.x-leak",
        ),
    ] {
        let resp = gw.post("/model/new", &entry("rt-env-1", params.clone()));
        assert_bad_field(&resp, field);
        assert!(!resp.text().contains(MASTER_KEY), "{}", resp.text());
    }
    assert_unknown_model(&chat(&gw, "rt-env"));

    let ok = entry("rt-env-1", json!({"api_key": "os.environ/PROVIDER_KEY"}));
    gw.post("/model/new", &ok).expect_status(200);
    assert_eq!(reply(chat(&gw, "rt-env")), "ok");
    let leak = json!({"litellm_params": {"api_key": "os.environ/LITELLM_MASTER_KEY"}, "model_info": {"id": "rt-env-1"}});
    assert_bad_field(&gw.post("/model/update", &leak), "litellm_params.api_key");
}

/// With `gateway_settings.model_env_allowlist`, only the listed names (or
/// prefixes) resolve for models added through the API.
#[test]
fn only_allow_listed_variables_resolve_when_a_list_is_set() {
    let mut cfg = config();
    cfg["gateway_settings"] = json!({"model_env_allowlist": ["PROVIDER_*"]});
    let gw = Gateway::start_json(
        &cfg,
        &[
            ("PROVIDER_KEY", "sk-provider-e2e"),
            ("OTHER_KEY", "sk-other"),
        ],
    );
    let entry = |var: &str| {
        json!({
            "model_name": "rt-allow",
            "litellm_params": {"model": "mock/rt", "api_key": format!("os.environ/{var}")},
            "model_info": {"id": "rt-allow-1"},
        })
    };
    assert_bad_field(
        &gw.post("/model/new", &entry("OTHER_KEY")),
        "litellm_params.api_key",
    );
    gw.post("/model/new", &entry("PROVIDER_KEY"))
        .expect_status(200);
}
