//! Hostile input on the request path: inputs that used to kill the process
//! or poison a key's counters, and the panic isolation that keeps a bug in
//! one request from taking a core down.

use e2e::{assert_error, to_yaml, Gateway, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

const REPLY: &str = "one two three";

fn config() -> String {
    to_yaml(&json!({
        "model_list": [
            {"model_name": "m", "litellm_params": {"model": "mock/m", "mock_response": REPLY}},
            {"model_name": "m2", "litellm_params": {"model": "mock/m2", "mock_response": REPLY}},
        ],
        "general_settings": {"master_key": MASTER_KEY},
    }))
}

fn chat(gw: &Gateway, key: &str, body: &[u8]) -> e2e::Response {
    let auth = format!("Bearer {key}");
    gw.call(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body,
    )
}

fn readiness(gw: &Gateway) -> Value {
    let resp = gw.get("/health/readiness/details");
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()
}

#[test]
fn the_openai_sdk_extra_body_with_fallbacks_and_num_retries_is_served() {
    // `extra_body={"fallbacks": [...], "num_retries": 1}` puts both fields
    // last, side by side: this body used to panic the core and exit the
    // process.
    let gw = Gateway::start(&config(), &[]);
    let body = br#"{"messages":[{"role":"user","content":"hi"}],"model":"m","fallbacks":["m2"],"num_retries":1}"#;
    for _ in 0..4 {
        let resp = chat(&gw, MASTER_KEY, body);
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.json()["choices"][0]["message"]["content"], REPLY);
    }
    assert_eq!(readiness(&gw)["panics_caught"], 0);
}

#[test]
fn an_out_of_range_max_tokens_is_a_400_and_does_not_poison_the_key() {
    let gw = Gateway::start(&config(), &[]);
    let resp = gw.post("/key/generate", &json!({"tpm_limit": 100_000}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let key = resp.json()["key"].as_str().unwrap().to_string();
    for (field, value) in [
        ("max_tokens", "18446744071562067968"),
        ("max_tokens", "-1"),
        ("max_completion_tokens", "2.5"),
        ("n", "0"),
        ("num_retries", "1000000"),
        // Above gateway_settings.max_request_retries (10 by default).
        ("num_retries", "11"),
    ] {
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"{field}":{value}}}"#
        );
        let err = assert_error(&chat(&gw, &key, body.as_bytes()), 400);
        assert_eq!(err["param"], field, "{body}: {err:?}");
    }
    // The refused requests charged nothing: the key is served at once.
    let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100}"#;
    let resp = chat(&gw, &key, body);
    assert_eq!(resp.status, 200, "{}", resp.text());
}

#[test]
fn a_panic_costs_one_request_and_the_core_serves_on() {
    let gw = Gateway::start(&config(), &[("GATEWAY_TEST_HOOKS", "1")]);
    let ok_body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    // Each of the two cores is hit more than once (connections spread
    // across the SO_REUSEPORT listeners).
    for round in 0..6 {
        let auth = format!("Bearer {MASTER_KEY}");
        let resp = gw.call("POST", "/__test/panic", &[("Authorization", &auth)], b"{}");
        let err = assert_error(&resp, 500);
        assert_eq!(err["type"], "internal_server_error");
        assert_eq!(resp.header("connection"), Some("close"), "round {round}");

        let panic_body =
            br#"{"model":"__test_panic__","messages":[{"role":"user","content":"hi"}]}"#;
        let resp = chat(&gw, MASTER_KEY, panic_body);
        assert_error(&resp, 500);
        assert!(
            resp.header("x-litellm-call-id").is_some(),
            "the LLM path answers with its call id"
        );

        let resp = chat(&gw, MASTER_KEY, ok_body);
        assert_eq!(resp.status, 200, "round {round}: {}", resp.text());
    }
    // A panic after the head went out: the stream is cut, the core lives.
    let mut conn = gw.connect();
    conn.send(&e2e::request("GET", "/__test/panic-mid-stream", &[], b""));
    let head = conn
        .read_head()
        .expect("the head was sent before the panic");
    assert_eq!(head.status, 200);
    let mut events = conn.sse(&head);
    let mut seen = 0;
    while let Ok(Some(_)) = events.next_event() {
        seen += 1;
    }
    assert!(seen <= 1, "the stream ends at the panic");
    assert_eq!(chat(&gw, MASTER_KEY, ok_body).status, 200);
    assert_eq!(readiness(&gw)["panics_caught"], 13);
    // Logged once each, with the call id on the LLM path.
    e2e::eventually("the panics in the log", Duration::from_secs(5), || {
        let log = gw.output();
        (log.matches("request panicked").count() == 6
            && log.contains("test hook: the request path panicked")
            && log.contains("call_id"))
        .then_some(())
    });
}

fn mock_group(name: &str, id: &str, mock: &e2e::MockServer) -> Value {
    e2e::openai_model(name, id, &mock.api_base(), json!({}))
}

/// Requests the mock answered, with its injected errors.
fn mock_requests(mock: &e2e::MockServer) -> u64 {
    let stats = mock.stats();
    let count = |field: &str| {
        stats[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field} count in {stats}"))
    };
    count("requests") + count("failed")
}

#[test]
fn a_fallback_the_key_may_not_use_is_skipped_not_retried() {
    // Primary answers 429; its only fallback is a group the key may not
    // use; the body asks for the most retries. This used to spin the core.
    let mock = e2e::MockServer::start(&["--error-rate", "1", "--error-status", "429"]);
    let gw = Gateway::start(
        &to_yaml(&json!({
            "model_list": [mock_group("primary", "p-1", &mock), mock_group("secret", "s-1", &mock)],
            "router_settings": {"fallbacks": [{"primary": ["secret"]}]},
            "general_settings": {"master_key": MASTER_KEY},
        })),
        &[],
    );
    let resp = gw.post("/key/generate", &json!({"models": ["primary"]}));
    let key = resp.json()["key"].as_str().unwrap().to_string();
    let body =
        br#"{"model":"primary","messages":[{"role":"user","content":"hi"}],"num_retries":10}"#;
    let resp = chat(&gw, &key, body);
    assert_error(&resp, 429);
    // Only the primary was called, once (a 429 with fallbacks goes to the
    // fallbacks): the disallowed group never was, nor retried.
    assert_eq!(mock_requests(&mock), 1, "{}", mock.stats());
    assert_eq!(chat(&gw, &key, body).status, 429, "the core still serves");
    // Named in the request's own `fallbacks`, it is refused before anything
    // is called, as LiteLLM refuses it.
    let own = br#"{"model":"primary","messages":[{"role":"user","content":"hi"}],"num_retries":10,"fallbacks":["secret"]}"#;
    let err = assert_error(&chat(&gw, &key, own), 403);
    assert_eq!(err["type"], "key_model_access_denied", "{err:?}");
    assert_eq!(mock_requests(&mock), 2, "{}", mock.stats());
}

#[test]
fn retries_stop_at_the_request_s_retry_deadline() {
    let mock = e2e::MockServer::start(&["--error-rate", "1", "--error-status", "500"]);
    let gw = Gateway::start(
        &to_yaml(&json!({
            "model_list": [mock_group("primary", "p-1", &mock)],
            "general_settings": {"master_key": MASTER_KEY},
            "gateway_settings": {"retry_deadline_ms": 300},
        })),
        &[],
    );
    // Ten retries with backoff (0.5 s, 1 s, 2 s...) would take most of a
    // minute; the deadline leaves room for the first attempt only.
    let body =
        br#"{"model":"primary","messages":[{"role":"user","content":"hi"}],"num_retries":10}"#;
    let resp = chat(&gw, MASTER_KEY, body);
    assert_error(&resp, 500);
    let calls = mock_requests(&mock);
    assert!((1..=2).contains(&calls), "{}", mock.stats());
}

#[test]
fn no_retry_starts_after_the_client_left() {
    let mock = e2e::MockServer::start(&[
        "--error-rate",
        "1",
        "--error-status",
        "500",
        "--latency-ms",
        "300",
    ]);
    let gw = Gateway::start(
        &to_yaml(&json!({
            "model_list": [mock_group("primary", "p-1", &mock)],
            "router_settings": {"num_retries": 5, "retry_after": 0},
            "general_settings": {"master_key": MASTER_KEY},
        })),
        &[],
    );
    let body = br#"{"model":"primary","messages":[{"role":"user","content":"hi"}]}"#;
    let auth = format!("Bearer {MASTER_KEY}");
    let mut conn = gw.connect();
    conn.send(&e2e::request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body,
    ));
    // The request is read whole before the close is seen; the first
    // attempt then takes 300 ms, and no retry may start after it.
    drop(conn);
    e2e::eventually("the request to end", Duration::from_secs(10), || {
        gw.output().contains("gateway::access").then_some(())
    });
    assert_eq!(mock_requests(&mock), 1, "{}", mock.stats());
}

fn priced_body(model: &str) -> String {
    format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}],"max_tokens":5}}"#)
}

fn new_key(gw: &Gateway, body: Value) -> String {
    let resp = gw.post("/key/generate", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["key"].as_str().unwrap().to_string()
}

/// A config with a self-hosted model listed without a price, wildcard
/// routes with and without one, and `unpriced_models` as given.
fn unpriced_config(unpriced_models: Option<&str>) -> String {
    to_yaml(&unpriced_config_json(unpriced_models))
}

fn unpriced_config_json(unpriced_models: Option<&str>) -> Value {
    let mut config = json!({
        "model_list": [
            {"model_name": "llama", "litellm_params": {"model": "mock/self-hosted-llama", "mock_response": REPLY}},
            {"model_name": "free/*", "litellm_params": {"model": "mock/*", "mock_response": REPLY}},
            {"model_name": "paid/*", "litellm_params": {
                "model": "mock/*", "mock_response": REPLY,
                "input_cost_per_token": 0.002, "output_cost_per_token": 0.002,
            }},
        ],
        "general_settings": {"master_key": MASTER_KEY},
        "litellm_settings": {"callbacks": ["prometheus"]},
    });
    if let Some(v) = unpriced_models {
        config["gateway_settings"] = json!({"unpriced_models": v});
    }
    config
}

/// Sums a counter family's samples for one model group.
fn group_counter(gw: &Gateway, family: &str, group: &str) -> f64 {
    let text = gw.get("/metrics").text();
    let prefix = format!("{family}{{");
    let wanted = format!("model_group=\"{group}\"");
    text.lines()
        .filter(|l| l.starts_with(&prefix) && l.contains(&wanted))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .fold(0.0, |a, b| a + b)
}

/// Waits until `group`'s attempts are all in the metrics, then checks how
/// many of them `gateway_unpriced_requests_total` counted: an attempt's
/// metrics are recorded after its answer is written, so a scrape right after
/// the answer may not see them yet.
fn expect_unpriced_requests(gw: &Gateway, group: &str, attempts: f64, unpriced: f64) {
    e2e::eventually(
        &format!("{attempts} attempts of {group}"),
        Duration::from_secs(5),
        || {
            (group_counter(gw, "litellm_deployment_total_requests_total", group) == attempts)
                .then_some(())
        },
    );
    assert_eq!(
        group_counter(gw, "gateway_unpriced_requests_total", group),
        unpriced,
        "{group}"
    );
}

#[test]
fn a_model_without_a_price_cannot_bypass_a_budget() {
    // A wildcard route lets the client name any model; one the price table
    // does not know would cost nothing, so a budget would never bind.
    let gw = Gateway::start(&unpriced_config(None), &[]);
    let budgeted = new_key(&gw, json!({"max_budget": 0.2}));
    let unlimited = new_key(&gw, json!({}));
    let err = assert_error(
        &chat(&gw, &budgeted, priced_body("free/anything").as_bytes()),
        400,
    );
    assert_eq!(err["param"], "model");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("no known price") && message.contains("unpriced_models"),
        "{err:?}"
    );
    // Without a budget nothing needs a price; with a (wildcard) price the
    // budget applies and binds.
    assert_eq!(
        chat(&gw, &unlimited, priced_body("free/anything").as_bytes()).status,
        200
    );
    let mut statuses = Vec::new();
    for _ in 0..20 {
        statuses.push(chat(&gw, &budgeted, priced_body("paid/anything").as_bytes()).status);
    }
    assert_eq!(statuses[0], 200, "{statuses:?}");
    assert!(statuses.contains(&422), "the budget binds: {statuses:?}");
}

#[test]
fn a_listed_model_without_a_price_is_served_at_cost_0_under_a_budget_as_litellm_does() {
    let gw = Gateway::start(&unpriced_config(None), &[]);
    // One warning at start-up names the deployment.
    let log = gw.output();
    let warnings: Vec<_> = log.lines().filter(|l| l.contains("has no price")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains("model_name \"llama\"")
            && warnings[0].contains("mock/self-hosted-llama")
            && warnings[0].contains("served at cost 0"),
        "{}",
        warnings[0]
    );
    let budgeted = new_key(&gw, json!({"max_budget": 0.000001}));
    for _ in 0..3 {
        let resp = chat(&gw, &budgeted, priced_body("llama").as_bytes());
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    let info = gw.get(&format!("/key/info?key={budgeted}")).json();
    assert_eq!(info["info"]["spend"], 0.0, "{info}");
    expect_unpriced_requests(&gw, "llama", 3.0, 3.0);
    // A priced call is not counted.
    let unlimited = new_key(&gw, json!({}));
    assert_eq!(
        chat(&gw, &unlimited, priced_body("paid/x").as_bytes()).status,
        200
    );
    expect_unpriced_requests(&gw, "paid/x", 1.0, 0.0);
    // A model added through the API without a price: one warning at add
    // time, then served at cost 0 under the budget.
    let added = gw.post(
        "/model/new",
        &json!({"model_name": "qwen", "litellm_params": {"model": "mock/qwen-local", "mock_response": REPLY}}),
    );
    assert_eq!(added.status, 200, "{}", added.text());
    e2e::eventually("the add-time warning", Duration::from_secs(5), || {
        gw.output()
            .lines()
            .any(|l| l.contains("has no price") && l.contains("mock/qwen-local"))
            .then_some(())
    });
    let resp = chat(&gw, &budgeted, priced_body("qwen").as_bytes());
    assert_eq!(resp.status, 200, "{}", resp.text());
    expect_unpriced_requests(&gw, "qwen", 1.0, 1.0);
}

#[test]
fn unpriced_models_refuse_and_free_override_both_rules() {
    let gw = Gateway::start(&unpriced_config(Some("refuse")), &[]);
    let budgeted = new_key(&gw, json!({"max_budget": 1.0}));
    let err = assert_error(&chat(&gw, &budgeted, priced_body("llama").as_bytes()), 400);
    assert!(
        err["message"].as_str().unwrap().contains("no known price"),
        "{err:?}"
    );
    assert!(gw.output().contains("unpriced_models: refuse"));
    let unlimited = new_key(&gw, json!({}));
    assert_eq!(
        chat(&gw, &unlimited, priced_body("llama").as_bytes()).status,
        200
    );
    drop(gw);
    let gw = Gateway::start(&unpriced_config(Some("free")), &[]);
    let budgeted = new_key(&gw, json!({"max_budget": 1.0}));
    for model in ["llama", "free/anything"] {
        let resp = chat(&gw, &budgeted, priced_body(model).as_bytes());
        assert_eq!(resp.status, 200, "{model}: {}", resp.text());
    }
    expect_unpriced_requests(&gw, "free/anything", 1.0, 1.0);
    drop(gw);
    let mut gw = Gateway::spawn(
        &unpriced_config(Some("sometimes")),
        &[],
        e2e::free_port(),
        &[],
    );
    let status = gw
        .wait_exit(Duration::from_secs(20))
        .expect("gateway exits");
    assert!(!status.success());
    let bad = gw.output();
    assert!(
        bad.contains("unpriced_models") && bad.contains("sometimes"),
        "{bad}"
    );
}

#[test]
fn litellms_block_requests_for_models_without_pricing_refuses_every_caller() {
    let mut config = unpriced_config_json(None);
    config["litellm_settings"]["block_requests_for_models_without_pricing"] = json!(true);
    let gw = Gateway::start(&to_yaml(&config), &[]);
    for key in [MASTER_KEY.to_string(), new_key(&gw, json!({}))] {
        for model in ["llama", "free/anything"] {
            let err = assert_error(&chat(&gw, &key, priced_body(model).as_bytes()), 403);
            assert_eq!(err["type"], "model_cost_map_missing", "{err:?}");
            assert_eq!(err["param"], "model");
            assert!(
                err["message"]
                    .as_str()
                    .unwrap()
                    .contains("'block_requests_for_models_without_pricing' is enabled"),
                "{err:?}"
            );
        }
        let resp = chat(&gw, &key, priced_body("paid/x").as_bytes());
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
}

#[test]
fn a_panicking_control_plane_job_fails_its_caller_and_the_thread_lives() {
    let gw = Gateway::start(&config(), &[("GATEWAY_TEST_HOOKS", "1")]);
    let auth = format!("Bearer {MASTER_KEY}");
    for _ in 0..2 {
        let resp = gw.call(
            "GET",
            "/__test/panic-control-job",
            &[("Authorization", &auth)],
            b"",
        );
        let err = assert_error(&resp, 503);
        assert!(
            e2e::error_message(&err).contains("the control-plane job failed"),
            "the caller gets the job's failure, not a timeout: {err:?}"
        );
    }
    // The control thread still runs jobs: key management goes through it.
    gw.post("/key/generate", &json!({})).expect_status(200);
    assert_eq!(readiness(&gw)["panics_caught"], 2);
    e2e::eventually("the panics in the log", Duration::from_secs(5), || {
        let log = gw.output();
        let lines = log
            .lines()
            .filter(|l| l.contains("a control-plane job panicked"));
        (lines.count() == 2).then_some(())
    });
}

/// Retries made for one request that keeps failing, read from its
/// `x-litellm-attempted-retries` header.
fn attempted_retries(resp: &e2e::Response) -> u64 {
    resp.header("x-litellm-attempted-retries")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no attempted-retries header: {:?}", resp.headers))
}

#[test]
fn fast_failing_attempts_stop_at_the_retry_deadline_too() {
    // Attempts that fail at once (429s, refused connections) are held to
    // the same deadline as slow ones: with a generous one the retries the
    // body asks for happen; with a short one the backoff would carry the
    // first retry past it, so none starts.
    let mock = e2e::MockServer::start(&["--error-rate", "1", "--error-status", "429"]);
    let refused = format!("http://127.0.0.1:{}/v1", e2e::free_port());
    let start = |deadline_ms: u64| {
        Gateway::start(
            &to_yaml(&json!({
                "model_list": [
                    mock_group("limited", "l-1", &mock),
                    e2e::openai_model("refused", "r-1", &refused, json!({})),
                ],
                "general_settings": {"master_key": MASTER_KEY},
                "gateway_settings": {"retry_deadline_ms": deadline_ms},
            })),
            &[],
        )
    };
    let body = |model: &str| {
        format!(
            r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}],"num_retries":2}}"#
        )
    };
    let generous = start(30_000);
    let resp = chat(&generous, MASTER_KEY, body("limited").as_bytes());
    assert_error(&resp, 429);
    assert_eq!(attempted_retries(&resp), 2, "{:?}", resp.headers);
    let resp = chat(&generous, MASTER_KEY, body("refused").as_bytes());
    assert!(resp.status >= 500, "{}", resp.text());
    assert_eq!(attempted_retries(&resp), 2, "{:?}", resp.headers);
    drop(generous);

    let short = start(100);
    for model in ["limited", "refused"] {
        let resp = chat(&short, MASTER_KEY, body(model).as_bytes());
        assert!(resp.status >= 400, "{model}: {}", resp.text());
        assert_eq!(attempted_retries(&resp), 0, "{model}: {:?}", resp.headers);
    }
}

/// An upstream that answers every request with a 200 head announcing
/// `len` bytes of body, then sends one byte every `every`.
fn trickling_upstream(len: usize, every: Duration) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                let _ = stream.read(&mut buf);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
                );
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                for _ in 0..len {
                    std::thread::sleep(every);
                    if stream.write_all(b" ").is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://127.0.0.1:{port}/v1")
}

#[test]
fn a_non_streamed_answer_has_a_total_deadline() {
    // Each byte comes well within the 2 s timeout, but the whole body would
    // take 20 s: the deployment's timeout bounds the whole answer.
    let base = trickling_upstream(100, Duration::from_millis(200));
    let gw = Gateway::start(
        &to_yaml(&json!({
            "model_list": [e2e::openai_model("trickle", "t-1", &base, json!({"timeout": 2}))],
            "router_settings": {"num_retries": 0},
            "general_settings": {"master_key": MASTER_KEY},
        })),
        &[],
    );
    let auth = format!("Bearer {MASTER_KEY}");
    let mut conn = gw.connect();
    conn.send(&e2e::request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        br#"{"model":"trickle","messages":[{"role":"user","content":"hi"}]}"#,
    ));
    conn.set_read_timeout(Duration::from_secs(60));
    let head = conn.read_head().expect("a response head");
    if head.status == 200 {
        // Relayed as it came: the body is cut at the deadline.
        let body = conn.try_read_body(&head);
        assert!(
            body.is_err(),
            "the whole trickled body was relayed: {body:?}"
        );
    } else {
        assert_eq!(head.status, 408, "{head:?}");
    }
}

#[test]
fn include_usage_false_is_still_billed_and_the_usage_chunk_hidden() {
    let mock = e2e::MockServer::start(&[]);
    let gw = Gateway::start(
        &to_yaml(&json!({
            "model_list": [e2e::openai_model("metered", "m-1", &mock.api_base(), json!({
                "input_cost_per_token": 0.001,
                "output_cost_per_token": 0.002,
                "extra_headers": {"x-mock-completion-tokens": "37"},
            }))],
            "general_settings": {"master_key": MASTER_KEY},
        })),
        &[],
    );
    let key = gw.post("/key/generate", &json!({})).json()["key"]
        .as_str()
        .expect("a key")
        .to_string();
    let stream = |include_usage: bool| -> Vec<Value> {
        let body = json!({
            "model": "metered",
            "messages": [{"role": "user", "content": "count the tokens of this prompt"}],
            "stream": true,
            "stream_options": {"include_usage": include_usage},
        });
        let auth = format!("Bearer {key}");
        let mut conn = gw.connect();
        conn.send(&e2e::request(
            "POST",
            "/v1/chat/completions",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.to_string().as_bytes(),
        ));
        let head = conn.read_head().expect("head");
        assert_eq!(head.status, 200, "{head:?}");
        let mut sse = conn.sse(&head);
        let mut chunks = Vec::new();
        while let Some(data) = sse.next_event().expect("event") {
            if data != "[DONE]" {
                chunks.push(serde_json::from_str(&data).expect("a JSON chunk"));
            }
        }
        chunks
    };
    let usage_of = |chunks: &[Value]| -> Vec<Value> {
        chunks
            .iter()
            .filter(|c| !c["usage"].is_null())
            .map(|c| c["usage"].clone())
            .collect()
    };
    // What the upstream reports when asked, as the client who asks sees it.
    let asked = usage_of(&stream(true));
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["completion_tokens"], 37, "{asked:?}");
    // Not asked: no usage chunk reaches the client...
    assert_eq!(usage_of(&stream(false)), Vec::<Value>::new());
    // ...yet both requests are billed from the upstream's counts.
    let rows = e2e::eventually("two spend rows", Duration::from_secs(10), || {
        let logs = gw.get(&format!("/spend/logs?api_key={key}")).json();
        let rows = logs.as_array().cloned().unwrap_or_default();
        (rows.len() == 2).then_some(rows)
    });
    for row in &rows {
        assert_eq!(row["completion_tokens"], 37, "{row}");
        assert_eq!(row["prompt_tokens"], asked[0]["prompt_tokens"], "{row}");
        assert!(row["spend"].as_f64().is_some_and(|s| s > 0.0), "{row}");
    }
}

#[test]
fn values_copied_into_headers_never_carry_cr_or_lf() {
    let gw = Gateway::start(&config(), &[]);
    // A model name from the client is refused before it could be echoed.
    let body = br#"{"model":"m\r\nx-injected: yes","messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(
        assert_error(&chat(&gw, MASTER_KEY, body), 400)["param"],
        "model"
    );
    // A deployment id from an admin is echoed in x-litellm-model-id: a value
    // with CR/LF is refused, or never written.
    let added = gw.post(
        "/model/new",
        &json!({
            "model_name": "crlf",
            "litellm_params": {"model": "mock/crlf", "mock_response": REPLY},
            "model_info": {"id": "dep\r\nx-injected: yes"},
        }),
    );
    if added.status == 200 {
        let body = br#"{"model":"crlf","messages":[{"role":"user","content":"hi"}]}"#;
        let resp = chat(&gw, MASTER_KEY, body);
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.header("x-injected"), None, "{:?}", resp.headers);
        assert_eq!(
            resp.header("x-litellm-model-id"),
            None,
            "{:?}",
            resp.headers
        );
        assert_eq!(resp.json()["choices"][0]["message"]["content"], REPLY);
    } else {
        assert_error(&added, 400);
    }
}
