//! Deployment health: `GET /health` probes every deployment (a live one, a
//! dead one, one answering errors) and reports them as LiteLLM does without
//! secrets; background checks keep traffic off a dead deployment and set
//! `litellm_deployment_state`; `/health/readiness` reports the database,
//! Redis and the change listener.

use e2e::config::{add_model, openai_model, UPSTREAM_KEY};
use e2e::{base_config, free_port, Gateway, MockServer, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// An api_base where nothing listens.
fn dead_base() -> String {
    format!("http://127.0.0.1:{}/v1", free_port())
}

/// Twenty requests to group `g`, every one answered by deployment `live`.
fn all_reach_live(gw: &Gateway) {
    for _ in 0..20 {
        let resp = gw.post(
            "/v1/chat/completions",
            &json!({"model": "g", "messages": [{"role": "user", "content": "hi"}]}),
        );
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.header("x-litellm-model-id"), Some("live"));
    }
}

fn ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .map(|e| e["model_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn health_reports_live_and_dead_deployments_without_secrets() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model("dead", "dead-1", &dead_base(), json!({})),
    );
    add_model(
        &mut config,
        openai_model(
            "refused",
            "refused-1",
            &mock.api_base(),
            json!({"extra_headers": {"x-mock-status": "401", "x-mock-error-message": format!("Incorrect API key provided: {UPSTREAM_KEY}")}}),
        ),
    );
    add_model(
        &mut config,
        json!({"model_name": "failing-mock", "litellm_params": {"model": "mock/x", "mock_error_status": 500}, "model_info": {"id": "failing-1"}}),
    );
    let gw = Gateway::start_json(&config, &[]);

    assert_eq!(gw.call("GET", "/health", &[], b"").status, 401);
    let plain = gw.post("/key/generate", &json!({})).json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let auth = format!("Bearer {plain}");
    assert_eq!(
        gw.call("GET", "/health", &[("Authorization", &auth)], b"")
            .status,
        403
    );

    let before = mock.stats();
    let resp = gw.get("/health");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let text = resp.text();
    let body = resp.json();
    assert_eq!(ids(&body["healthy_endpoints"]), ["dep-1", "local-1"]);
    assert_eq!(
        ids(&body["unhealthy_endpoints"]),
        ["dead-1", "failing-1", "refused-1"]
    );
    assert_eq!(body["healthy_count"], 2);
    assert_eq!(body["unhealthy_count"], 3);
    let live = &body["healthy_endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["model_id"] == "dep-1")
        .unwrap()
        .clone();
    assert_eq!(live["model"], "openai/upstream-gpt");
    assert_eq!(live["api_base"], mock.api_base());
    assert_eq!(live["custom_llm_provider"], "openai");
    assert!(live.get("error").is_none());
    let unhealthy = body["unhealthy_endpoints"].as_array().unwrap();
    let error_of = |id: &str| {
        unhealthy.iter().find(|e| e["model_id"] == id).unwrap()["error"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(error_of("dead-1").contains("cannot connect"), "{text}");
    assert!(error_of("refused-1").starts_with("status 401"), "{text}");
    assert!(error_of("failing-1").starts_with("status 500"), "{text}");
    assert!(
        !text.contains(UPSTREAM_KEY) && !text.contains("api_key"),
        "no secret in the health report: {text}"
    );
    let after = mock.stats();
    let delta = |field: &str| after[field].as_u64().unwrap() - before[field].as_u64().unwrap();
    assert_eq!(
        (delta("requests"), delta("failed")),
        (1, 1),
        "one real call per deployment on the mock"
    );
    assert_eq!(
        delta("completion_tokens"),
        1,
        "the probe asks for one token"
    );

    let dead = gw.get("/health?model=dead");
    assert_eq!(dead.status, 503, "{}", dead.text());
    assert_eq!(dead.json()["unhealthy_count"], 1);
    let one = gw.get("/health?model_id=dep-1");
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["healthy_count"], 1);
    assert_eq!(one.json()["unhealthy_count"], 0);
    assert_eq!(gw.get("/health?bogus=1").status, 400);
}

#[test]
fn background_checks_keep_traffic_off_a_dead_deployment() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    config["model_list"] = json!([
        openai_model("g", "live", &mock.api_base(), json!({})),
        openai_model("g", "dead", &dead_base(), json!({})),
    ]);
    config["general_settings"]["background_health_checks"] = json!(true);
    config["general_settings"]["health_check_interval"] = json!(1);
    config["router_settings"] = json!({"num_retries": 0});
    config["litellm_settings"] = json!({"callbacks": ["prometheus"]});
    let gw = Gateway::start_json(&config, &[]);

    let report = e2e::eventually("a background check", Duration::from_secs(10), || {
        let body = gw.get("/health").json();
        (body["unhealthy_count"] == 1).then_some(body)
    });
    assert_eq!(ids(&report["unhealthy_endpoints"]), ["dead"]);
    assert_eq!(ids(&report["healthy_endpoints"]), ["live"]);
    all_reach_live(&gw);
    let metrics = gw.get("/metrics").text();
    let state = |id: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("litellm_deployment_state{")
                    && l.contains(&format!("model_id=\"{id}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_string)
    };
    assert_eq!(state("dead").as_deref(), Some("2"), "{metrics}");
    assert_eq!(state("live").as_deref(), Some("0"), "{metrics}");
}

/// Before the background loop's first result, `/health` checks on demand;
/// that answer steers the router at once, so traffic agrees with it. A
/// deployment that never answers holds the loop's first check for its
/// whole timeout, while `/health?model=g` checks only group `g`.
#[test]
fn an_on_demand_check_before_the_first_background_result_steers_traffic() {
    let mock = MockServer::start(&[]);
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_base = format!("http://{}/v1", silent.local_addr().unwrap());
    let mut config = base_config(mock.port());
    config["model_list"] = json!([
        openai_model("g", "live", &mock.api_base(), json!({})),
        openai_model("g", "dead", &dead_base(), json!({})),
        openai_model("slow", "silent", &silent_base, json!({})),
    ]);
    config["general_settings"]["background_health_checks"] = json!(true);
    config["general_settings"]["health_check_interval"] = json!(600);
    config["general_settings"]["health_check_timeout"] = json!(30);
    config["router_settings"] = json!({"num_retries": 0});
    let gw = Gateway::start_json(&config, &[]);

    let report = gw.get("/health?model=g").json();
    assert_eq!(ids(&report["unhealthy_endpoints"]), ["dead"], "{report}");
    all_reach_live(&gw);
}

#[test]
fn readiness_reports_the_database_redis_and_the_change_listener() {
    let mock = MockServer::start(&[]);
    let alone = Gateway::start_json(&base_config(mock.port()), &[]);
    // Public, as LiteLLM 1.110 answers it: status and database only.
    let public = alone.call("GET", "/health/readiness", &[], b"");
    assert_eq!(public.status, 200, "{}", public.text());
    assert_eq!(
        public.json(),
        json!({"status": "healthy", "db": "Not connected"})
    );
    // The details need a key.
    e2e::assert_error(
        &alone.call("GET", "/health/readiness/details", &[], b""),
        401,
    );
    let body = alone.get("/health/readiness/details").json();
    assert_eq!(body["status"], "healthy");
    assert_eq!(body["db"], "Not connected");
    assert_eq!(body["change_listener"], "Not connected");
    assert_eq!(body["cache"], Value::Null);
    assert_eq!(body["limiter"]["mode"], "local");

    let db = TestDb::create();
    let mut config = base_config(mock.port());
    config["litellm_settings"] = json!({"callbacks": ["prometheus"]});
    let gw = Gateway::start_json(
        &config,
        &[
            ("DATABASE_URL", db.url()),
            ("REDIS_URL", "redis://127.0.0.1:6379"),
        ],
    );
    let body = e2e::eventually("the listener connects", Duration::from_secs(10), || {
        let body = gw.get("/health/readiness/details").json();
        (body["change_listener"] == "connected").then_some(body)
    });
    assert_eq!(body["status"], "healthy");
    assert_eq!(body["db"], "connected");
    assert_eq!(body["cache"], "redis");
    assert_eq!(body["redis"], "connected");
    assert_eq!(body["success_callbacks"], json!(["prometheus"]));
    assert!(!body.to_string().contains(MASTER_KEY));
    assert_eq!(
        gw.call("GET", "/health/readiness", &[], b"").json(),
        json!({"status": "healthy", "db": "connected"})
    );
}

#[test]
fn allow_public_health_readiness_details_opens_the_details_to_anyone() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    config["general_settings"]["allow_public_health_readiness_details"] = json!(true);
    let gw = Gateway::start_json(&config, &[]);
    let body = gw.call("GET", "/health/readiness", &[], b"").json();
    assert_eq!(body["status"], "healthy");
    assert_eq!(body["limiter"]["mode"], "local", "{body}");
    assert!(gw
        .output()
        .lines()
        .all(|l| !l.contains("allow_public_health_readiness_details")));
}

/// LiteLLM's `POST /health/test_connection`: one request to the deployment
/// `model_info.id` names (or the one `litellm_params.model` names, or one
/// built from the request's params alone), answered as `status` and
/// `result`; admins only; a served deployment's credentials never go where
/// the request points.
#[test]
fn test_connection_sends_one_request_to_one_deployment() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model("dead", "dead-1", &dead_base(), json!({})),
    );
    let gw = Gateway::start_json(&config, &[]);
    let test = |body: Value| gw.post("/health/test_connection", &body);

    let before = mock.stats();
    let ok = test(
        json!({"mode": "chat", "litellm_params": {"model": "gpt-4o"}, "model_info": {"id": "dep-1"}}),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json()["status"], "success", "{}", ok.text());
    assert_eq!(ok.json()["result"]["model_id"], "dep-1");
    assert_eq!(ok.json()["result"]["api_base"], mock.api_base());
    assert!(!ok.text().contains(UPSTREAM_KEY));
    let after = mock.stats();
    assert_eq!(
        after["requests"].as_u64().unwrap() - before["requests"].as_u64().unwrap(),
        1,
        "one request reached the deployment"
    );

    // A dead deployment: 200 with the error, as LiteLLM answers.
    let dead = test(json!({"litellm_params": {"model": "dead"}, "model_info": {"id": "dead-1"}}));
    assert_eq!(dead.status, 200, "{}", dead.text());
    assert_eq!(dead.json()["status"], "error");
    let error = dead.json()["result"]["error"].as_str().unwrap().to_string();
    assert!(error.contains("cannot connect"), "{error}");

    // By model group or provider/model string, without an id.
    for model in ["local-mock", "mock/local"] {
        let by_name = test(json!({"litellm_params": {"model": model}}));
        assert_eq!(
            by_name.json()["status"],
            "success",
            "{model}: {}",
            by_name.text()
        );
        assert_eq!(by_name.json()["result"]["model_id"], "local-1");
    }
    // A model not served yet, from the request's params alone.
    let fresh = test(json!({"litellm_params": {"model": "openai/upstream-gpt",
        "api_base": mock.api_base(), "api_key": "sk-tried"}}));
    assert_eq!(fresh.json()["status"], "success", "{}", fresh.text());
    let refused = test(json!({"litellm_params": {"model": "mock/x", "mock_error_status": 500}}));
    assert_eq!(refused.json()["status"], "error", "{}", refused.text());

    // A served deployment is tested as served; its key goes nowhere else.
    let redirected = test(
        json!({"litellm_params": {"model": "gpt-4o", "api_base": dead_base()},
        "model_info": {"id": "dep-1"}}),
    );
    assert_eq!(redirected.status, 400, "{}", redirected.text());
    let env = test(
        json!({"litellm_params": {"model": "openai/x", "api_base": mock.api_base(),
        "api_key": "os.environ/LITELLM_MASTER_KEY"}}),
    );
    assert_eq!(env.status, 400, "{}", env.text());
    assert_eq!(test(json!({"model_info": {"id": "nope"}})).status, 404);
    assert_eq!(test(json!({"litellm_params": {}})).status, 400);
    assert_eq!(
        test(json!({"mode": "embedding", "model_info": {"id": "dep-1"}})).status,
        400
    );
    assert_eq!(test(json!({"surprise": 1})).status, 400);

    // Admins only.
    let plain = gw.post("/key/generate", &json!({})).json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let auth = format!("Bearer {plain}");
    let body = json!({"model_info": {"id": "dep-1"}}).to_string();
    let as_key = gw.call(
        "POST",
        "/health/test_connection",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    );
    assert_eq!(as_key.status, 403, "{}", as_key.text());
    let anon = gw.call("POST", "/health/test_connection", &[], body.as_bytes());
    assert_eq!(anon.status, 401);
}
