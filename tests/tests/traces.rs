//! OpenTelemetry traces: with `litellm_settings.callbacks: [otel]` and
//! LiteLLM's `OTEL_*` variables (or the standard `OTEL_EXPORTER_OTLP_*`),
//! each request is one trace (a `litellm_request` span, a
//! `raw_gen_ai_request` child per upstream attempt) exported over OTLP/HTTP
//! as protobuf or JSON to a collector stand-in that decodes it; an incoming
//! `traceparent` is continued and the attempt's is sent upstream.

use e2e::config::{add_model, openai_model};
use e2e::{base_config, free_port, to_yaml, Gateway, MockServer, RawUpstream, MASTER_KEY};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One export the collector received: its head and body.
#[derive(Clone)]
struct Export {
    head: String,
    body: Vec<u8>,
}

/// A collector stand-in: answers every POST 200 and keeps what it got.
struct Collector {
    port: u16,
    exports: Arc<Mutex<Vec<Export>>>,
}

impl Collector {
    fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let exports = Arc::new(Mutex::new(Vec::new()));
        let kept = exports.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 16384];
                let head_end = loop {
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => break 0,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                if head_end == 0 {
                    continue;
                }
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = buf[head_end..].to_vec();
                kept.lock().unwrap().push(Export { head, body });
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        });
        Collector { port, exports }
    }

    fn exports(&self) -> Vec<Export> {
        self.exports.lock().unwrap().clone()
    }
}

/// A decoded span, from protobuf or JSON alike.
#[derive(Debug, Clone)]
struct Span {
    trace_id: String,
    span_id: String,
    parent: String,
    name: String,
    kind: i64,
    start: u64,
    end: u64,
    attributes: BTreeMap<String, Value>,
    error: bool,
}

/// A protobuf field value.
enum Field {
    Varint(u64),
    Fixed64(u64),
    Bytes(Vec<u8>),
}

/// The fields of one protobuf message.
fn fields(mut buf: &[u8]) -> Vec<(u64, Field)> {
    fn varint(buf: &mut &[u8]) -> u64 {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let b = buf[0];
            *buf = &buf[1..];
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return v;
            }
            shift += 7;
        }
    }
    let mut out = Vec::new();
    while !buf.is_empty() {
        let tag = varint(&mut buf);
        let field = match tag & 7 {
            0 => Field::Varint(varint(&mut buf)),
            1 => {
                let v = u64::from_le_bytes(buf[..8].try_into().unwrap());
                buf = &buf[8..];
                Field::Fixed64(v)
            }
            2 => {
                let len = varint(&mut buf) as usize;
                let v = buf[..len].to_vec();
                buf = &buf[len..];
                Field::Bytes(v)
            }
            5 => {
                buf = &buf[4..];
                Field::Varint(0)
            }
            w => panic!("wire type {w}"),
        };
        out.push((tag >> 3, field));
    }
    out
}

fn messages(buf: &[u8], number: u64) -> Vec<Vec<u8>> {
    fields(buf)
        .into_iter()
        .filter_map(|(n, f)| match f {
            Field::Bytes(b) if n == number => Some(b),
            _ => None,
        })
        .collect()
}

/// A KeyValue: (key, value as JSON).
fn key_value(buf: &[u8]) -> (String, Value) {
    let mut key = String::new();
    let mut value = Value::Null;
    for (n, f) in fields(buf) {
        match (n, f) {
            (1, Field::Bytes(b)) => key = String::from_utf8(b).unwrap(),
            (2, Field::Bytes(any)) => {
                for (m, v) in fields(&any) {
                    value = match (m, v) {
                        (1, Field::Bytes(s)) => json!(String::from_utf8(s).unwrap()),
                        (3, Field::Varint(i)) => json!(i as i64),
                        _ => Value::Null,
                    };
                }
            }
            _ => {}
        }
    }
    (key, value)
}

/// The service name and spans of a protobuf `ExportTraceServiceRequest`.
fn decode_protobuf(body: &[u8]) -> (String, Vec<Span>) {
    let mut service = String::new();
    let mut spans = Vec::new();
    for resource_spans in messages(body, 1) {
        for resource in messages(&resource_spans, 1) {
            for kv in messages(&resource, 1) {
                let (k, v) = key_value(&kv);
                if k == "service.name" {
                    service = v.as_str().unwrap().to_string();
                }
            }
        }
        for scope_spans in messages(&resource_spans, 2) {
            for raw in messages(&scope_spans, 2) {
                let mut span = Span {
                    trace_id: String::new(),
                    span_id: String::new(),
                    parent: String::new(),
                    name: String::new(),
                    kind: 0,
                    start: 0,
                    end: 0,
                    attributes: BTreeMap::new(),
                    error: false,
                };
                for (n, f) in fields(&raw) {
                    match (n, f) {
                        (1, Field::Bytes(b)) => span.trace_id = hex::encode(b),
                        (2, Field::Bytes(b)) => span.span_id = hex::encode(b),
                        (4, Field::Bytes(b)) => span.parent = hex::encode(b),
                        (5, Field::Bytes(b)) => span.name = String::from_utf8(b).unwrap(),
                        (6, Field::Varint(k)) => span.kind = k as i64,
                        (7, Field::Fixed64(t)) => span.start = t,
                        (8, Field::Fixed64(t)) => span.end = t,
                        (9, Field::Bytes(kv)) => {
                            let (k, v) = key_value(&kv);
                            span.attributes.insert(k, v);
                        }
                        (15, Field::Bytes(status)) => {
                            span.error = fields(&status)
                                .iter()
                                .any(|(n, f)| *n == 3 && matches!(f, Field::Varint(2)));
                        }
                        _ => {}
                    }
                }
                spans.push(span);
            }
        }
    }
    (service, spans)
}

/// The service name and spans of an OTLP JSON body.
fn decode_json(body: &[u8]) -> (String, Vec<Span>) {
    let v: Value = serde_json::from_slice(body).unwrap();
    let rs = &v["resourceSpans"][0];
    let service = rs["resource"]["attributes"][0]["value"]["stringValue"]
        .as_str()
        .unwrap()
        .to_string();
    let spans = rs["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Span {
            trace_id: s["traceId"].as_str().unwrap().to_string(),
            span_id: s["spanId"].as_str().unwrap().to_string(),
            parent: s["parentSpanId"].as_str().unwrap_or("").to_string(),
            name: s["name"].as_str().unwrap().to_string(),
            kind: s["kind"].as_i64().unwrap(),
            start: s["startTimeUnixNano"].as_str().unwrap().parse().unwrap(),
            end: s["endTimeUnixNano"].as_str().unwrap().parse().unwrap(),
            attributes: s["attributes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| {
                    let v = &a["value"];
                    let value = match (v.get("stringValue"), v.get("intValue")) {
                        (Some(s), _) => s.clone(),
                        (_, Some(i)) => json!(i.as_str().unwrap().parse::<i64>().unwrap()),
                        _ => Value::Null,
                    };
                    (a["key"].as_str().unwrap().to_string(), value)
                })
                .collect(),
            error: s["status"]["code"] == 2,
        })
        .collect();
    (service, spans)
}

/// A raw upstream answering every request with usage 7 + 5.
fn raw_upstream() -> RawUpstream {
    let body = r#"{"id":"x","object":"chat.completion","created":1,"model":"upstream-gpt","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}"#;
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    RawUpstream::start(reply.into_bytes(), false)
}

/// Waits until the collector holds `n` spans; returns them and the exports.
fn collected(
    collector: &Collector,
    n: usize,
    decode: fn(&[u8]) -> (String, Vec<Span>),
) -> (Vec<Export>, String, Vec<Span>) {
    e2e::eventually("the spans exported", Duration::from_secs(10), || {
        let exports = collector.exports();
        let mut service = String::new();
        let mut spans = Vec::new();
        for e in &exports {
            let (s, mut more) = decode(&e.body);
            service = s;
            spans.append(&mut more);
        }
        (spans.len() >= n).then_some((exports, service, spans))
    })
}

fn start(config: &Value, env: &[(&str, &str)]) -> Gateway {
    let mut gw = Gateway::spawn(&to_yaml(config), env, free_port(), &[]);
    gw.wait_ready(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("gateway did not start: {e}"));
    gw
}

#[test]
fn a_request_is_one_trace_with_a_span_per_attempt_in_protobuf() {
    let mock = MockServer::start(&[]);
    let raw = raw_upstream();
    let collector = Collector::start();
    let mut config = base_config(mock.port());
    config["model_list"] = json!([
        openai_model(
            "primary",
            "broken-1",
            &mock.api_base(),
            json!({"extra_headers": {"x-mock-status": "500"}})
        ),
        openai_model("backup", "raw-1", &raw.api_base(), json!({})),
    ]);
    add_model(
        &mut config,
        json!({"model_name": "unused", "litellm_params": {"model": "mock/x"}}),
    );
    config["litellm_settings"] = json!({"callbacks": ["otel"]});
    config["router_settings"] = json!({"num_retries": 0, "fallbacks": [{"primary": ["backup"]}]});
    let endpoint = format!("http://127.0.0.1:{}", collector.port);
    let gw = start(
        &config,
        &[
            ("OTEL_EXPORTER", "otlp_http"),
            ("OTEL_ENDPOINT", &endpoint),
            ("OTEL_HEADERS", "x-test-header=abc"),
            ("OTEL_SERVICE_NAME", "gw-test"),
        ],
    );
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{caller_trace}-{caller_span}-01");
    let auth = format!("Bearer {MASTER_KEY}");
    let body = json!({"model": "primary", "messages": [{"role": "user", "content": "hi"}]});
    let resp = gw.call(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("traceparent", &traceparent),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();

    let (exports, service, spans) = collected(&collector, 3, decode_protobuf);
    assert_eq!(spans.len(), 3, "{spans:#?}");
    assert_eq!(service, "gw-test");
    let head = exports[0].head.to_ascii_lowercase();
    assert!(head.starts_with("post /v1/traces http/1.1"), "{head}");
    assert!(
        head.contains("content-type: application/x-protobuf"),
        "{head}"
    );
    assert!(head.contains("x-test-header: abc"), "{head}");

    let root = spans
        .iter()
        .find(|s| s.name == "litellm_request")
        .expect("root span");
    assert_eq!(root.trace_id, caller_trace, "the caller's trace continues");
    assert_eq!(root.parent, caller_span);
    assert_eq!(root.kind, 2);
    assert!(root.end >= root.start && root.start > 0);
    let attr = |s: &Span, k: &str| s.attributes.get(k).cloned().unwrap_or(Value::Null);
    assert_eq!(attr(root, "litellm.call_id"), json!(call_id));
    assert_eq!(attr(root, "gen_ai.request.model"), json!("primary"));
    assert_eq!(attr(root, "gen_ai.response.model"), json!("upstream-gpt"));
    assert_eq!(attr(root, "gen_ai.system"), json!("openai"));
    assert_eq!(attr(root, "gen_ai.operation.name"), json!("chat"));
    assert_eq!(attr(root, "gen_ai.usage.input_tokens"), json!(7));
    assert_eq!(attr(root, "gen_ai.usage.output_tokens"), json!(5));
    assert_eq!(attr(root, "litellm.fallbacks"), json!(1));
    assert_eq!(attr(root, "litellm.model_id"), json!("raw-1"));
    assert_eq!(
        attr(root, "metadata.user_api_key_hash"),
        json!(hex::encode(Sha256::digest(MASTER_KEY.as_bytes())))
    );
    assert!(!root.error);

    let mut attempts: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "raw_gen_ai_request")
        .collect();
    attempts.sort_by_key(|s| s.start);
    assert_eq!(attempts.len(), 2);
    for a in &attempts {
        assert_eq!(a.trace_id, caller_trace);
        assert_eq!(
            a.parent, root.span_id,
            "attempts are children of the request"
        );
        assert_eq!(a.kind, 3);
    }
    let (failed, ok) = (attempts[0], attempts[1]);
    assert!(failed.error, "{failed:?}");
    assert_eq!(attr(failed, "litellm.model_id"), json!("broken-1"));
    assert_eq!(attr(failed, "http.response.status_code"), json!(500));
    assert_eq!(attr(failed, "error.type"), json!("internal_server"));
    assert!(!ok.error);
    assert_eq!(attr(ok, "gen_ai.request.model"), json!("upstream-gpt"));
    assert_eq!(attr(ok, "gen_ai.usage.input_tokens"), json!(7));
    assert_eq!(attr(ok, "litellm.fallback_depth"), json!(1));
    assert_eq!(attr(ok, "litellm.model_group"), json!("backup"));

    let upstream = String::from_utf8_lossy(&raw.last_request()).to_ascii_lowercase();
    let sent = format!("traceparent: 00-{caller_trace}-{}-01", ok.span_id);
    assert!(upstream.contains(&sent), "{sent} upstream:\n{upstream}");

    // The exporter counts a batch once the collector has answered, which
    // is after the collector has stored it: wait for the count.
    let ready = e2e::eventually(
        "the exported spans counted",
        Duration::from_secs(10),
        || {
            let ready = gw.get("/health/readiness/details").json();
            (ready["otel"]["spans_exported"] == 3).then_some(ready)
        },
    );
    assert_eq!(ready["otel"]["spans_dropped"], 0);
}

#[test]
fn traces_go_out_as_otlp_json_with_the_standard_variables() {
    let mock = MockServer::start(&[]);
    let collector = Collector::start();
    let mut config = base_config(mock.port());
    config["litellm_settings"] = json!({"success_callback": ["otel"]});
    let endpoint = format!("http://127.0.0.1:{}", collector.port);
    let gw = start(
        &config,
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ],
    );
    let resp = gw.post(
        "/v1/chat/completions",
        &json!({"model": "local-mock", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(resp.status, 200);
    let refused = gw.call("POST", "/v1/chat/completions", &[], b"{}");
    assert_eq!(refused.status, 401);
    let (exports, service, spans) = collected(&collector, 3, decode_json);
    assert!(exports[0]
        .head
        .to_ascii_lowercase()
        .contains("content-type: application/json"));
    assert_eq!(service, "litellm", "LiteLLM's default service name");
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "litellm_request")
        .collect();
    assert_eq!(roots.len(), 2, "one trace per request, refusals included");
    let refusal = roots
        .iter()
        .find(|s| s.error)
        .expect("the 401 is an error span");
    assert_eq!(
        refusal.attributes.get("http.response.status_code"),
        Some(&json!(401))
    );
    let ok = roots.iter().find(|s| !s.error).unwrap();
    assert!(ok.parent.is_empty(), "a new trace without traceparent");
    let child = spans
        .iter()
        .find(|s| s.name == "raw_gen_ai_request")
        .unwrap();
    assert_eq!(child.trace_id, ok.trace_id);
    assert_eq!(child.parent, ok.span_id);
    assert_eq!(child.attributes.get("gen_ai.system"), Some(&json!("mock")));
}

/// What the request's guardrails did is visible four ways: a `guardrail`
/// span per run under the request's root span, LiteLLM's guardrail
/// families on `/metrics`, the spend row's `guardrail_information` and
/// the `x-litellm-applied-guardrails` header; a block (no upstream call,
/// no spend row) still has its span and its counts.
#[test]
fn guardrail_runs_have_a_span_each_metrics_and_the_spend_rows_information() {
    let raw = raw_upstream();
    let collector = Collector::start();
    let mut config = base_config(free_port());
    config["model_list"] = json!([openai_model("gpt-4o", "raw-1", &raw.api_base(), json!({}))]);
    config["litellm_settings"] = json!({"callbacks": ["otel", "prometheus"]});
    config["guardrails"] = json!([
        {"guardrail_name": "pii-mask", "litellm_params": {
            "guardrail": "litellm_content_filter", "mode": "pre_call", "default_on": true,
            "patterns": [{"pattern_type": "prebuilt", "pattern_name": "email", "action": "MASK"}],
            "blocked_words": [{"keyword": "project falcon", "action": "BLOCK"}]}},
        {"guardrail_name": "answer-check", "litellm_params": {
            "guardrail": "litellm_content_filter", "mode": "post_call", "default_on": true,
            "patterns": [{"pattern_type": "prebuilt", "pattern_name": "us_ssn", "action": "BLOCK"}]}},
    ]);
    let endpoint = format!("http://127.0.0.1:{}", collector.port);
    let gw = start(
        &config,
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ],
    );
    let chat = |text: &str| {
        gw.post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}),
        )
    };
    let masked = chat("mail me at jane@example.com");
    assert_eq!(masked.status, 200, "{}", masked.text());
    assert_eq!(
        masked.header("x-litellm-applied-guardrails"),
        Some("pii-mask,answer-check")
    );
    let call_id = masked.header("x-litellm-call-id").unwrap().to_string();
    let blocked = chat("about Project Falcon");
    assert_eq!(blocked.status, 400, "{}", blocked.text());
    assert_eq!(raw.requests(), 1, "the block made no upstream call");

    // Traces: the masked request's root has two guardrail children, the
    // blocked one's root one.
    let (_, _, spans) = collected(&collector, 6, decode_json);
    let root = spans
        .iter()
        .find(|s| {
            s.name == "litellm_request"
                && s.attributes.get("litellm.call_id") == Some(&json!(call_id))
        })
        .expect("the masked request's root span");
    let runs: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "guardrail" && s.parent == root.span_id)
        .collect();
    let named = |s: &Span, k: &str| {
        s.attributes
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut seen: Vec<(String, String, String, String)> = runs
        .iter()
        .map(|s| {
            assert_eq!(s.trace_id, root.trace_id);
            assert!(s.start <= s.end && s.start >= root.start && s.end <= root.end);
            assert_eq!(named(s, "openinference.span.kind"), "GUARDRAIL");
            (
                named(s, "guardrail_name"),
                named(s, "guardrail_mode"),
                named(s, "guardrail_status"),
                named(s, "guardrail_response"),
            )
        })
        .collect();
    seen.sort();
    let row = |n: &str, m: &str, st: &str, r: &str| {
        (n.to_string(), m.to_string(), st.to_string(), r.to_string())
    };
    assert_eq!(
        seen,
        [
            row("answer-check", "post_call", "success", "allow"),
            row("pii-mask", "pre_call", "success", "mask"),
        ]
    );
    let block_span = spans
        .iter()
        .find(|s| s.name == "guardrail" && named(s, "guardrail_status") == "guardrail_intervened")
        .expect("the block's span");
    assert_eq!(named(block_span, "guardrail_name"), "pii-mask");
    assert_eq!(named(block_span, "guardrail_response"), "block");

    // Prometheus: LiteLLM's three families, per guardrail and outcome.
    let metrics = gw.get("/metrics").text();
    for line in [
        r#"litellm_guardrail_requests_total{guardrail_name="pii-mask",status="intervened",hook_type="pre_call"} 1"#,
        r#"litellm_guardrail_requests_total{guardrail_name="pii-mask",status="error",hook_type="pre_call"} 1"#,
        r#"litellm_guardrail_requests_total{guardrail_name="answer-check",status="success",hook_type="post_call"} 1"#,
        r#"litellm_guardrail_errors_total{guardrail_name="pii-mask",error_type="blocked",hook_type="pre_call"} 1"#,
        r#"litellm_guardrail_latency_seconds_count{guardrail_name="pii-mask",status="intervened",error_type="none",hook_type="pre_call"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }

    // The spend row's metadata: LiteLLM's guardrail_information.
    let info = e2e::eventually("the spend row", Duration::from_secs(10), || {
        let rows = gw
            .get("/spend/logs?start_date=2020-01-01&end_date=2100-01-01")
            .json();
        rows.as_array()?
            .iter()
            .find(|r| r["request_id"] == json!(call_id))
            .map(|r| r["guardrail_information"].clone())
    });
    let info = info.as_array().expect("a list");
    assert_eq!(info.len(), 2, "{info:?}");
    assert_eq!(info[0]["guardrail_name"], "pii-mask");
    assert_eq!(info[0]["guardrail_provider"], "litellm_content_filter");
    assert_eq!(info[0]["guardrail_mode"], "pre_call");
    assert_eq!(info[0]["guardrail_status"], "success");
    assert_eq!(info[0]["guardrail_response"], "mask");
    assert_eq!(info[1]["guardrail_name"], "answer-check");
    assert_eq!(info[1]["guardrail_mode"], "post_call");
    for run in info {
        let (start, end, took) = (
            run["start_time"].as_f64().unwrap(),
            run["end_time"].as_f64().unwrap(),
            run["duration"].as_f64().unwrap(),
        );
        assert!(start > 1.7e9 && end >= start && took >= 0.0, "{run}");
    }
    assert!(
        !info.iter().any(|r| r.to_string().contains("jane@")),
        "no text of the request"
    );
}
