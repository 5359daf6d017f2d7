//! Fuzzing the format translators end to end: a few thousand seeded
//! requests with random JSON in every field a translator reads (content
//! blocks, system, tools, tool choices, images, response formats, stops,
//! thinking), sent as Messages requests to a translated group and to an
//! Anthropic deployment (passed through), and as chat completions to an
//! Anthropic deployment (translated to Messages). The gateway must stay up,
//! answer every request with a well-formed response, never fail with a 500
//! (a translator that panicked), and keep each endpoint's error shape.

use std::time::{Duration, Instant};

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use fastrand::Rng;
use serde_json::{json, Map, Value};

/// The seed every run starts from, so a failure reproduces.
const SEED: u64 = 0x7a4e_5c01;
/// Requests per endpoint, unless the time bound ends the run first.
const CASES: usize = 1500;
/// The time bound of each sending loop.
const TIME_BOUND: Duration = Duration::from_secs(25);

/// A random JSON value, biased toward the shapes translators look into.
fn random_value(rng: &mut Rng, depth: u32) -> Value {
    let keys = [
        "type",
        "text",
        "role",
        "content",
        "source",
        "media_type",
        "data",
        "url",
        "id",
        "name",
        "input",
        "tool_use_id",
        "function",
        "arguments",
        "parameters",
        "input_schema",
        "image_url",
        "tool_calls",
        "cache_control",
        "json_schema",
        "schema",
        "budget_tokens",
    ];
    let strings = [
        "",
        "text",
        "image",
        "tool_use",
        "tool_result",
        "thinking",
        "document",
        "base64",
        "url",
        "image_url",
        "file",
        "function",
        "auto",
        "any",
        "tool",
        "none",
        "required",
        "json_schema",
        "json_object",
        "user",
        "assistant",
        "system",
        "tool",
        "data:image/png;base64,AAAA",
        "data:;base64",
        "http://x/y.png",
        "{\"a\":",
        "{}",
        "\u{0}",
        "\u{fffd}",
    ];
    match rng.u8(0..10) {
        0 => Value::Null,
        1 => Value::Bool(rng.bool()),
        2 => [
            json!(0),
            json!(-1),
            json!(u64::MAX),
            json!(1e300),
            json!(2.5),
        ][rng.usize(0..5)]
        .clone(),
        3 | 4 => json!(strings[rng.usize(0..strings.len())]),
        5 | 6 if depth < 4 => Value::Array(
            (0..rng.usize(0..4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        7..=9 if depth < 4 => Value::Object(
            (0..rng.usize(0..5))
                .map(|_| {
                    (
                        keys[rng.usize(0..keys.len())].to_string(),
                        random_value(rng, depth + 1),
                    )
                })
                .collect::<Map<_, _>>(),
        ),
        _ => json!("x"),
    }
}

/// A body with plausible `base` members, some replaced or joined by random
/// values in `fields`.
fn mutate(rng: &mut Rng, mut base: Map<String, Value>, fields: &[&str]) -> Value {
    for _ in 0..rng.usize(1..=3) {
        let field = fields[rng.usize(0..fields.len())];
        base.insert(field.to_string(), random_value(rng, 0));
    }
    Value::Object(base)
}

fn messages_body(rng: &mut Rng, model: &str) -> Value {
    let base = json!({
        "model": model,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    let fields = [
        "messages",
        "system",
        "tools",
        "tool_choice",
        "stop_sequences",
        "metadata",
        "thinking",
        "stream",
        "temperature",
        "max_tokens",
    ];
    let mut body = mutate(rng, base, &fields);
    // Random content blocks inside an otherwise valid message list.
    if rng.bool() {
        let blocks: Vec<Value> = (0..rng.usize(1..4)).map(|_| random_value(rng, 1)).collect();
        let role = ["user", "assistant"][rng.usize(0..2)];
        body["messages"] = json!([{"role": role, "content": blocks}]);
    }
    body
}

fn chat_body(rng: &mut Rng) -> Value {
    let base = json!({
        "model": "claude",
        "messages": [{"role": "user", "content": "hi"}],
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    let fields = [
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "stop",
        "reasoning_effort",
        "thinking",
        "user",
        "stream",
        "stream_options",
        "max_tokens",
    ];
    let mut body = mutate(rng, base, &fields);
    if rng.bool() {
        let parts: Vec<Value> = (0..rng.usize(1..4)).map(|_| random_value(rng, 1)).collect();
        let role = ["user", "assistant", "system", "tool"][rng.usize(0..4)];
        body["messages"] =
            json!([{"role": role, "content": parts, "tool_calls": random_value(rng, 1)}]);
    }
    body
}

/// Sends `body` to `path` and checks the answer: a status, never 500, and
/// an error in the endpoint's shape.
fn check(
    gw: &mut Gateway,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
    anthropic: bool,
) -> u16 {
    let resp = gw.call("POST", path, headers, body.to_string().as_bytes());
    if let Some(status) = gw.wait_exit(Duration::ZERO) {
        panic!("the gateway died ({status}) on {body}\n{}", gw.output());
    }
    assert_ne!(resp.status, 500, "{path} {body}: {}", resp.text());
    if resp.status >= 400 {
        let v = resp.json();
        let shaped = if anthropic {
            v["type"] == "error"
                && v["error"]["type"].is_string()
                && v["error"]["message"].is_string()
        } else {
            v["error"]["message"].is_string()
                && v["error"]["code"] == Value::String(resp.status.to_string())
        };
        assert!(shaped, "{path} {body}: error not in its shape: {v}");
    }
    resp.status
}

#[test]
fn random_fields_never_break_the_translators() {
    let mock = MockServer::start(&[]);
    let config = json!({
        "model_list": [
            {"model_name": "local", "litellm_params": {"model": "mock/local", "mock_response": "hi"}},
            {"model_name": "claude", "litellm_params": {
                "model": "anthropic/claude-3-5-sonnet-20241022",
                "api_base": format!("http://127.0.0.1:{}", mock.port()),
                "api_key": "sk-ant", "timeout": 10,
            }},
        ],
        "general_settings": {"master_key": MASTER_KEY},
        "router_settings": {"num_retries": 0},
    });
    let mut gw = Gateway::start(&to_yaml(&config), &[]);
    let mut rng = Rng::with_seed(SEED);
    let anthropic_headers = [
        ("x-api-key", MASTER_KEY),
        ("anthropic-version", "2023-06-01"),
        ("content-type", "application/json"),
    ];
    let auth = format!("Bearer {MASTER_KEY}");
    let openai_headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    for model in ["local", "claude"] {
        let started = Instant::now();
        let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
        let mut sent = 0;
        while sent < CASES && started.elapsed() < TIME_BOUND {
            let body = messages_body(&mut rng, model);
            let status = check(&mut gw, "/v1/messages", &anthropic_headers, &body, true);
            *statuses.entry(status).or_default() += 1;
            sent += 1;
        }
        eprintln!("/v1/messages to {model}: {sent} cases, statuses {statuses:?}");
        assert!(sent >= 200, "only {sent} cases within {TIME_BOUND:?}");
        assert!(
            statuses.contains_key(&200) && statuses.contains_key(&400),
            "{statuses:?}"
        );
    }
    let started = Instant::now();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let mut sent = 0;
    while sent < CASES && started.elapsed() < TIME_BOUND {
        let body = chat_body(&mut rng);
        let status = check(
            &mut gw,
            "/v1/chat/completions",
            &openai_headers,
            &body,
            false,
        );
        *statuses.entry(status).or_default() += 1;
        sent += 1;
    }
    eprintln!("/v1/chat/completions to claude: {sent} cases, statuses {statuses:?}");
    assert!(sent >= 200, "only {sent} cases within {TIME_BOUND:?}");
    assert!(
        statuses.contains_key(&200) && statuses.contains_key(&400),
        "{statuses:?}"
    );
}
