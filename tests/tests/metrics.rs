//! Prometheus metrics: LiteLLM's families, labels and values, exact across
//! several workers for the traffic sent (successes, streams, 401, 429,
//! upstream failures and fallbacks), valid for `promtool check metrics`,
//! gated as LiteLLM gates `/metrics`, and bounded in cardinality.

use e2e::config::{add_model, openai_model};
use e2e::{base_config, request, Gateway, MockServer, RawUpstream, MASTER_KEY};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One sample of the exposition.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the text format (label values with `\\`, `\"` and `\n` escapes).
fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = line.split_at(line.find(['{', ' ']).expect("a sample line"));
        let mut labels = BTreeMap::new();
        let mut rest = rest;
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices();
            let mut key = String::new();
            loop {
                let (i, c) = chars.next().expect("labels end");
                match c {
                    '}' => {
                        rest = &body[i + 1..];
                        break;
                    }
                    ',' => {}
                    '=' => {
                        assert_eq!(chars.next().map(|(_, c)| c), Some('"'));
                        let mut value = String::new();
                        loop {
                            match chars.next().expect("value end").1 {
                                '\\' => match chars.next().expect("escape").1 {
                                    'n' => value.push('\n'),
                                    c => value.push(c),
                                },
                                '"' => break,
                                c => value.push(c),
                            }
                        }
                        labels.insert(std::mem::take(&mut key), value);
                    }
                    c => key.push(c),
                }
            }
        }
        let value = match rest.trim() {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        out.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    out
}

/// The sum of `name` over the samples whose labels include every pair of `filter`.
fn sum(samples: &[Sample], name: &str, filter: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            filter
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// The one sample of `name` matching `filter`.
fn one<'a>(samples: &'a [Sample], name: &str, filter: &[(&str, &str)]) -> &'a Sample {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            filter
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert_eq!(found.len(), 1, "{name} {filter:?}: {found:?}");
    found[0]
}

fn scrape(gw: &Gateway) -> String {
    let resp = gw.get("/metrics");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/plain; version=0.0.4")));
    resp.text()
}

/// `promtool check metrics` on `text`: a failure names what promtool said.
fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package `prometheus`; scripts/test.sh installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool output");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sha256_hex(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// Sends a chat request for `model` with `key`; returns the status and body.
fn chat(gw: &Gateway, key: &str, body: Value) -> (u16, Value, String) {
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
    let text = resp.text();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    (resp.status, json, text)
}

/// The usage of a streamed answer: its last chunk with a `usage`.
fn stream_usage(text: &str) -> Value {
    text.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|c| c["usage"].is_object())
        .map(|c| c["usage"].clone())
        .unwrap_or_else(|| panic!("no usage chunk in {text}"))
}

const INPUT_COST: f64 = 0.001;
const OUTPUT_COST: f64 = 0.002;

fn start_with_workers(config: &Value, workers: &str) -> Gateway {
    let mut gw = Gateway::spawn(
        &e2e::to_yaml(config),
        &[],
        e2e::free_port(),
        &["--workers", workers],
    );
    gw.wait_ready(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("gateway did not start: {e}"));
    gw
}

#[test]
fn metric_values_equal_the_traffic_sent_across_workers() {
    let mock = MockServer::start(&[]);
    let body = r#"{"id":"x","object":"chat.completion","created":1,"model":"raw-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}"#;
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-ratelimit-remaining-requests: 42\r\nx-ratelimit-remaining-tokens: 9000\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let raw = RawUpstream::start(reply.into_bytes(), false);
    let mut config = base_config(mock.port());
    let priced = json!({"input_cost_per_token": INPUT_COST, "output_cost_per_token": OUTPUT_COST});
    config["model_list"][0] = openai_model("gpt-4o", "dep-1", &mock.api_base(), priced.clone());
    add_model(
        &mut config,
        openai_model(
            "broken",
            "broken-1",
            &mock.api_base(),
            json!({"extra_headers": {"x-mock-status": "500"}}),
        ),
    );
    add_model(
        &mut config,
        openai_model("raw", "raw-1", &raw.api_base(), priced.clone()),
    );
    config["litellm_settings"] = json!({"callbacks": ["prometheus"]});
    config["router_settings"] = json!({"num_retries": 0, "fallbacks": [{"broken": ["gpt-4o"]}]});
    let gw = start_with_workers(&config, "3");

    let team = gw.post("/team/new", &json!({"team_alias": "blue"}));
    assert_eq!(team.status, 200, "{}", team.text());
    let team_id = team.json()["team_id"].as_str().unwrap().to_string();
    let key = |fields: Value| {
        let resp = gw.post("/key/generate", &fields);
        assert_eq!(resp.status, 200, "{}", resp.text());
        resp.json()["key"].as_str().unwrap().to_string()
    };
    let alpha = key(json!({"key_alias": "alpha", "team_id": team_id, "max_budget": 100}));
    let beta = key(json!({"key_alias": "beta", "rpm_limit": 3}));
    let ask = |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "count to five"}]});

    let (mut prompt, mut completion) = (0.0, 0.0);
    let mut add_usage = |usage: &Value| {
        prompt += usage["prompt_tokens"].as_f64().unwrap();
        completion += usage["completion_tokens"].as_f64().unwrap();
    };
    for _ in 0..5 {
        let (status, body, _) = chat(&gw, &alpha, ask("gpt-4o"));
        assert_eq!(status, 200, "{body}");
        add_usage(&body["usage"]);
    }
    for _ in 0..3 {
        let mut streamed = ask("gpt-4o");
        streamed["stream"] = json!(true);
        streamed["stream_options"] = json!({"include_usage": true});
        let (status, _, text) = chat(&gw, &alpha, streamed);
        assert_eq!(status, 200, "{text}");
        add_usage(&stream_usage(&text));
    }
    let mut beta_ok = 0;
    for _ in 0..5 {
        let (status, body, _) = chat(&gw, &beta, ask("gpt-4o"));
        match status {
            200 => {
                beta_ok += 1;
                add_usage(&body["usage"]);
            }
            429 => {}
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(beta_ok, 3, "rpm_limit 3");
    for _ in 0..2 {
        let (status, body, _) = chat(&gw, MASTER_KEY, ask("broken"));
        assert_eq!(status, 200, "the fallback answers: {body}");
        add_usage(&body["usage"]);
    }
    for _ in 0..4 {
        assert_eq!(chat(&gw, "sk-not-a-key", ask("gpt-4o")).0, 401);
    }
    let (status, body, _) = chat(&gw, &alpha, ask("raw"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(chat(&gw, MASTER_KEY, ask("no-such-model")).0, 400);
    let requests = 5.0 + 3.0 + 5.0 + 2.0 + 4.0 + 1.0 + 1.0;

    // Each request records its last metric after its answer: wait for all.
    let text = e2e::eventually("every request counted", Duration::from_secs(10), || {
        let text = scrape(&gw);
        let s = parse(&text);
        (sum(&s, "litellm_proxy_total_requests_metric_total", &[]) == requests).then_some(text)
    });
    promtool_check(&text);
    let s = parse(&text);
    let total = "litellm_proxy_total_requests_metric_total";
    let (a, b) = (sha256_hex(&alpha), sha256_hex(&beta));
    let master = sha256_hex(MASTER_KEY);
    assert_eq!(
        sum(&s, total, &[("status_code", "200")]),
        5.0 + 3.0 + 3.0 + 2.0 + 1.0
    );
    assert_eq!(sum(&s, total, &[("status_code", "429")]), 2.0);
    assert_eq!(sum(&s, total, &[("status_code", "401")]), 4.0);
    assert_eq!(
        sum(
            &s,
            total,
            &[
                ("hashed_api_key", &a),
                ("api_key_alias", "alpha"),
                ("team", &team_id),
                ("team_alias", "blue"),
                ("requested_model", "gpt-4o"),
                ("route", "/v1/chat/completions")
            ]
        ),
        8.0
    );
    assert_eq!(
        sum(
            &s,
            total,
            &[
                ("hashed_api_key", &b),
                ("model_id", "dep-1"),
                ("api_provider", "openai")
            ]
        ),
        3.0
    );
    assert_eq!(
        sum(
            &s,
            total,
            &[
                ("hashed_api_key", &master),
                ("user", "default_user_id"),
                ("requested_model", "broken")
            ]
        ),
        2.0
    );
    assert_eq!(
        sum(
            &s,
            total,
            &[("requested_model", "other"), ("status_code", "400")]
        ),
        1.0
    );

    let failed = "litellm_proxy_failed_requests_metric_total";
    assert_eq!(sum(&s, failed, &[]), 2.0 + 4.0 + 1.0);
    assert_eq!(
        sum(
            &s,
            failed,
            &[
                ("hashed_api_key", &b),
                ("exception_status", "429"),
                ("exception_class", "HTTPException")
            ]
        ),
        2.0
    );
    assert_eq!(
        sum(
            &s,
            failed,
            &[
                ("hashed_api_key", "None"),
                ("exception_status", "401"),
                ("exception_class", "ProxyException")
            ]
        ),
        4.0,
        "a refused key is not labelled with its hash"
    );

    let dep_total = "litellm_deployment_total_requests_total";
    let dep_ok = "litellm_deployment_success_responses_total";
    let dep_failed = "litellm_deployment_failure_responses_total";
    assert_eq!(sum(&s, dep_total, &[("model_id", "dep-1")]), 13.0);
    assert_eq!(
        sum(
            &s,
            dep_ok,
            &[
                ("model_id", "dep-1"),
                ("litellm_model_name", "upstream-gpt"),
                ("api_base", &mock.api_base())
            ]
        ),
        13.0
    );
    assert_eq!(sum(&s, dep_total, &[("model_id", "broken-1")]), 2.0);
    assert_eq!(
        sum(
            &s,
            dep_failed,
            &[
                ("model_id", "broken-1"),
                ("exception_status", "500"),
                ("exception_class", "Openai.InternalServerError"),
                ("requested_model", "broken")
            ]
        ),
        2.0
    );
    assert_eq!(
        one(&s, "litellm_deployment_state", &[("model_id", "broken-1")]).value,
        1.0
    );
    assert_eq!(
        one(&s, "litellm_deployment_state", &[("model_id", "dep-1")]).value,
        0.0
    );
    assert_eq!(
        sum(
            &s,
            "litellm_deployment_successful_fallbacks_total",
            &[
                ("requested_model", "broken"),
                ("fallback_model", "gpt-4o"),
                ("exception_status", "500")
            ]
        ),
        2.0
    );
    assert_eq!(
        sum(&s, "litellm_deployment_failed_fallbacks_total", &[]),
        0.0
    );

    let dep1 = [("model_id", "dep-1")];
    assert_eq!(sum(&s, "litellm_input_tokens_metric_total", &dep1), prompt);
    assert_eq!(
        sum(&s, "litellm_output_tokens_metric_total", &dep1),
        completion
    );
    assert_eq!(
        sum(&s, "litellm_total_tokens_metric_total", &dep1),
        prompt + completion
    );
    let spend = sum(&s, "litellm_spend_metric_total", &dep1);
    let expected_spend = prompt * INPUT_COST + completion * OUTPUT_COST;
    assert!(
        (spend - expected_spend).abs() < 1e-9,
        "{spend} vs {expected_spend}"
    );
    assert_eq!(
        sum(
            &s,
            "litellm_input_tokens_metric_total",
            &[("model_id", "raw-1")]
        ),
        7.0
    );

    assert_eq!(sum(&s, "litellm_llm_api_latency_metric_count", &dep1), 13.0);
    assert_eq!(
        sum(
            &s,
            "litellm_llm_api_time_to_first_token_metric_count",
            &dep1
        ),
        3.0
    );
    assert_eq!(
        sum(&s, "litellm_request_total_latency_metric_count", &[]),
        14.0
    );
    assert_eq!(
        sum(
            &s,
            "litellm_request_total_latency_metric_bucket",
            &[("le", "+Inf")]
        ),
        14.0
    );

    assert_eq!(
        one(
            &s,
            "litellm_remaining_requests_metric",
            &[("model_id", "raw-1")]
        )
        .value,
        42.0
    );
    assert_eq!(
        one(
            &s,
            "litellm_remaining_tokens_metric",
            &[("model_id", "raw-1")]
        )
        .value,
        9000.0
    );
    let alpha_spend: f64 = sum(&s, "litellm_spend_metric_total", &[("hashed_api_key", &a)]);
    let left = one(
        &s,
        "litellm_remaining_api_key_budget_metric",
        &[("api_key_alias", "alpha")],
    )
    .value;
    assert!(
        (left - (100.0 - alpha_spend)).abs() < 1e-6,
        "{left} left after {alpha_spend}"
    );
    assert_eq!(
        one(
            &s,
            "litellm_api_key_max_budget_metric",
            &[("hashed_api_key", &a)]
        )
        .value,
        100.0
    );
    assert_eq!(
        one(
            &s,
            "litellm_remaining_team_budget_metric",
            &[("team", &team_id), ("team_alias", "blue")]
        )
        .value,
        f64::INFINITY,
        "a team without a budget"
    );
    let requests_kind = [("api_key_alias", "beta"), ("rate_limit_type", "requests")];
    assert_eq!(
        one(
            &s,
            "litellm_api_key_rate_limit_allowed_metric",
            &requests_kind
        )
        .value,
        3.0
    );
    assert_eq!(
        one(&s, "litellm_api_key_rate_limit_used_metric", &requests_kind).value,
        3.0
    );
    assert!(
        !text.contains(&alpha) && !text.contains(&beta) && !text.contains(MASTER_KEY),
        "no key in the exposition"
    );
}

#[test]
fn metrics_are_served_as_litellm_serves_them() {
    let mock = MockServer::start(&[]);
    let off = Gateway::start_json(&base_config(mock.port()), &[]);
    assert_eq!(off.get("/metrics").status, 404, "no prometheus callback");

    let mut config = base_config(mock.port());
    config["litellm_settings"] = json!({"success_callback": ["prometheus"]});
    let gw = Gateway::start_json(&config, &[]);
    assert_eq!(gw.call("GET", "/metrics", &[], b"").status, 401);
    let plain = gw.post("/key/generate", &json!({})).json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let auth = format!("Bearer {plain}");
    assert_eq!(
        gw.call("GET", "/metrics", &[("Authorization", &auth)], b"")
            .status,
        403
    );
    promtool_check(&scrape(&gw));

    config["litellm_settings"]["require_auth_for_metrics_endpoint"] = json!(false);
    let open = Gateway::start_json(&config, &[]);
    let resp = open.call("GET", "/metrics", &[], b"");
    assert_eq!(resp.status, 200);
    assert!(resp
        .text()
        .contains("# TYPE litellm_proxy_total_requests_metric_total counter"));

    let mut always = base_config(mock.port());
    always["gateway_settings"]["metrics"] = json!({"enabled": true});
    let on = Gateway::start_json(&always, &[]);
    assert_eq!(
        on.get("/metrics").status,
        200,
        "gateway_settings.metrics.enabled"
    );
}

#[test]
fn series_past_the_cap_land_on_other_and_are_counted() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    config["litellm_settings"] = json!({
        "callbacks": ["prometheus"],
        "prometheus_metrics_max_series_per_metric": 2,
    });
    let gw = Gateway::start_json(&config, &[]);
    for i in 0..6 {
        let body = json!({"model": "local-mock", "user": format!("end-user-{i}"), "messages": [{"role": "user", "content": "hi"}]});
        let mut conn = gw.connect();
        let auth = format!("Bearer {MASTER_KEY}");
        let resp = conn.roundtrip(&request(
            "POST",
            "/v1/chat/completions",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.to_string().as_bytes(),
        ));
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    let total = "litellm_proxy_total_requests_metric_total";
    let text = e2e::eventually("six requests counted", Duration::from_secs(10), || {
        let text = scrape(&gw);
        (sum(&parse(&text), total, &[]) == 6.0).then_some(text)
    });
    promtool_check(&text);
    let s = parse(&text);
    let series = s.iter().filter(|x| x.name == total).count();
    assert_eq!(series, 3, "two label sets and `other`: {text}");
    assert_eq!(
        one(
            &s,
            total,
            &[("end_user", "other"), ("hashed_api_key", "other")]
        )
        .value,
        4.0
    );
    assert_eq!(
        one(
            &s,
            "gateway_metrics_series_dropped_total",
            &[("metric", "litellm_proxy_total_requests_metric")]
        )
        .value,
        4.0
    );
}
