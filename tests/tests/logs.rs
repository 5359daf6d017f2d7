//! JSON logs: with `--json-logs` every line the process writes is one JSON
//! object, start-up and fatal errors included; every LLM request, refusals
//! included, has exactly one access line with the call id the client got,
//! its status, the requested model group and the duration; no key of any
//! kind appears in any line.

use e2e::config::{add_model, openai_model, UPSTREAM_KEY};
use e2e::{base_config, free_port, request, to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// The gateway's stdout and stderr, from [`Gateway::output`].
fn streams(gw: &Gateway) -> (String, String) {
    let out = gw.output();
    let (stdout, stderr) = out
        .split_once("--- gateway stderr ---")
        .expect("output has both streams");
    let stdout = stdout.trim_start_matches("--- gateway stdout ---");
    (stdout.to_string(), stderr.to_string())
}

/// Every non-empty line of `text` as a JSON object; panics on any other.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert!(v.is_object(), "not an object: {l}");
            v
        })
        .collect()
}

fn start_json_logs(config: &Value) -> Gateway {
    let mut gw = Gateway::spawn(&to_yaml(config), &[], free_port(), &["--json-logs"]);
    gw.wait_ready(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("gateway did not start: {e}"));
    gw
}

/// One LLM request: what the client got.
struct Sent {
    call_id: String,
    status: u16,
    requested: &'static str,
}

fn send(gw: &Gateway, key: Option<&str>, body: &[u8], requested: &'static str) -> Sent {
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(a) = &auth {
        headers.push(("Authorization", a));
    }
    let mut conn = gw.connect();
    let resp = conn.roundtrip(&request("POST", "/v1/chat/completions", &headers, body));
    let call_id = resp
        .header("x-litellm-call-id")
        .unwrap_or_else(|| panic!("no call id on a {}: {}", resp.status, resp.text()))
        .to_string();
    Sent {
        call_id,
        status: resp.status,
        requested,
    }
}

fn chat(model: &str) -> Vec<u8> {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        .to_string()
        .into_bytes()
}

#[test]
fn every_llm_request_has_one_json_access_line_and_no_key_is_logged() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model(
            "broken",
            "broken-1",
            &mock.api_base(),
            json!({"extra_headers": {"x-mock-status": "500", "x-mock-error-message": format!("bad key {UPSTREAM_KEY}")}}),
        ),
    );
    config["router_settings"] = json!({"num_retries": 0});
    let gw = start_json_logs(&config);
    let limited = gw.post("/key/generate", &json!({"rpm_limit": 1})).json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let invalid = "sk-not-a-real-key-0123456789";

    let mut sent = vec![
        send(&gw, Some(MASTER_KEY), &chat("gpt-4o"), "gpt-4o"),
        send(&gw, None, &chat("gpt-4o"), ""),
        send(&gw, Some(invalid), &chat("gpt-4o"), ""),
        send(&gw, Some(&limited), &chat("gpt-4o"), "gpt-4o"),
        send(&gw, Some(&limited), &chat("gpt-4o"), "gpt-4o"),
        send(
            &gw,
            Some(MASTER_KEY),
            &chat("no-such-model"),
            "no-such-model",
        ),
        send(&gw, Some(MASTER_KEY), &chat("broken"), "broken"),
        send(&gw, Some(MASTER_KEY), b"{not json", ""),
    ];
    let streamed = json!({"model": "local-mock", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    sent.push(send(
        &gw,
        Some(MASTER_KEY),
        streamed.to_string().as_bytes(),
        "local-mock",
    ));
    // A body that never completes: the body timeout answers (408).
    let auth = format!("Bearer {MASTER_KEY}");
    let mut conn = gw.connect();
    let mut partial = request(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", &auth), ("Content-Length", "100")],
        b"",
    );
    partial.extend_from_slice(b"{\"model\":");
    conn.send(&partial);
    let resp = conn.read_response();
    sent.push(Sent {
        call_id: resp
            .header("x-litellm-call-id")
            .expect("a call id")
            .to_string(),
        status: resp.status,
        requested: "",
    });
    let statuses: Vec<u16> = sent.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [200, 401, 401, 200, 429, 400, 500, 400, 200, 408],
        "the traffic"
    );
    assert_eq!(gw.get("/v1/models").status, 200, "not an LLM request");

    let access = |stdout: &str| -> Vec<Value> {
        json_lines(stdout)
            .into_iter()
            .filter(|l| l["target"] == "gateway::access")
            .collect()
    };
    let stdout = e2e::eventually("every access line", Duration::from_secs(10), || {
        let (stdout, _) = streams(&gw);
        (access(&stdout).len() >= sent.len()).then_some(stdout)
    });
    let lines = access(&stdout);
    assert_eq!(lines.len(), sent.len(), "one line per LLM request, no more");
    for s in &sent {
        let mine: Vec<&Value> = lines.iter().filter(|l| l["call_id"] == s.call_id).collect();
        assert_eq!(mine.len(), 1, "one access line for call {}", s.call_id);
        let line = mine[0];
        assert_eq!(line["status"], s.status, "{line}");
        assert_eq!(line["requested_model"], s.requested, "{line}");
        assert!(line["duration_ms"].as_f64().is_some(), "{line}");
        assert_eq!(line["level"], "INFO");
        assert!(line["timestamp"].is_string());
    }
    let all = json_lines(&stdout);
    assert!(
        all.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("listening on"))),
        "the start-up lines are JSON too"
    );
    let (stdout, stderr) = streams(&gw);
    json_lines(&stderr);
    for secret in [MASTER_KEY, limited.as_str(), invalid, UPSTREAM_KEY] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "a key in the logs: {secret}"
        );
    }
}

#[test]
fn a_fatal_start_up_error_is_json_too() {
    let config =
        json!({"model_list": [{"model_name": "x", "litellm_params": {"model": "nope/x"}}]});
    let mut gw = Gateway::spawn(&to_yaml(&config), &[], free_port(), &["--json-logs"]);
    assert!(gw
        .wait_exit(Duration::from_secs(20))
        .is_some_and(|s| !s.success()));
    let (stdout, stderr) = streams(&gw);
    let lines: Vec<Value> = json_lines(&stdout)
        .into_iter()
        .chain(json_lines(&stderr))
        .collect();
    assert!(
        lines.iter().any(|l| l["level"] == "ERROR"
            && l["message"]
                .as_str()
                .is_some_and(|m| m.contains("model_list[0]"))),
        "the error, as JSON: {lines:?}"
    );
}
