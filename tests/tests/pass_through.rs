//! LiteLLM's provider pass-through routes end to end on the faithful mock
//! (`loadgen mock` checks Anthropic's `x-api-key` and `anthropic-version`,
//! Gemini's key in `?key=`/`x-goog-api-key`, and answers in each API's own
//! shapes and stream framing): the caller's virtual key is checked and
//! replaced by the provider key the gateway holds, the answer relayed as it
//! is (streams too), usage charged at the price map's price, a spend row
//! per call, and bad paths, missing keys, budgets and rate limits refused
//! before the upstream sees anything.

use e2e::{to_yaml, Gateway, MockServer, Response, MASTER_KEY};
use serde_json::{json, Value};

/// The provider key the gateway adds (never the caller's).
const ANTHROPIC_KEY: &str = "sk-ant-upstream-secret";
/// The mock's Gemini key (`loadgen/src/mock/api/gemini.rs`).
const GEMINI_KEY: &str = "mock-gemini-api-key";

fn start(mock: &MockServer, extra_env: &[(&str, &str)]) -> Gateway {
    let config = json!({
        "model_list": [],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let base = format!("http://127.0.0.1:{}", mock.port());
    let mut env = vec![
        ("ANTHROPIC_API_BASE", base.as_str()),
        ("ANTHROPIC_API_KEY", ANTHROPIC_KEY),
        ("GEMINI_API_BASE", base.as_str()),
        ("GEMINI_API_KEY", GEMINI_KEY),
        ("OPENAI_API_BASE", base.as_str()),
    ];
    env.extend_from_slice(extra_env);
    Gateway::start(&to_yaml(&config), &env)
}

fn new_key(gw: &Gateway, fields: Value) -> String {
    let resp = gw.post("/key/generate", &fields);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["key"].as_str().unwrap().to_string()
}

fn messages_call(gw: &Gateway, key: &str, body: &Value) -> Response {
    gw.call(
        "POST",
        "/anthropic/v1/messages",
        &[
            ("x-api-key", key),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

/// Requests the mock served per API key.
fn served_by_key(mock: &MockServer) -> Value {
    mock.stats()["by_key"].clone()
}

fn raw(resp: &Response) -> String {
    let mut text = String::new();
    for (n, v) in &resp.headers {
        text.push_str(&format!("{n}: {v}\n"));
    }
    text.push_str(&resp.text());
    text
}

#[test]
fn anthropic_route_swaps_the_key_relays_the_answer_and_charges_its_usage() {
    let mock = MockServer::start(&["--completion-tokens", "5"]);
    let gw = start(&mock, &[]);
    let key = new_key(&gw, json!({}));
    let body = json!({"model": "claude-haiku-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hello there"}]});
    let resp = messages_call(&gw, &key, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    let answer = resp.json();
    assert_eq!(answer["type"], "message", "Anthropic's own shape: {answer}");
    assert!(
        !raw(&resp).contains(ANTHROPIC_KEY),
        "the provider key leaked"
    );
    let by_key = served_by_key(&mock);
    assert!(by_key.get(ANTHROPIC_KEY).is_some(), "{by_key}");
    assert!(
        by_key.get(&key).is_none(),
        "the virtual key reached the provider: {by_key}"
    );
    let (input, output) = (
        answer["usage"]["input_tokens"].as_u64().unwrap(),
        answer["usage"]["output_tokens"].as_u64().unwrap(),
    );
    assert_eq!(output, 5);
    let row = gw.spend_row(&call_id);
    assert_eq!(row["call_type"], "pass_through_endpoint", "{row}");
    assert_eq!(row["custom_llm_provider"], "anthropic");
    assert_eq!(row["model"], "claude-haiku-4-5");
    assert_eq!(
        (
            row["prompt_tokens"].as_u64(),
            row["completion_tokens"].as_u64()
        ),
        (Some(input), Some(output))
    );
    let expected = input as f64 * 1e-6 + output as f64 * 5e-6;
    assert!(
        (row["spend"].as_f64().unwrap() - expected).abs() < 1e-12,
        "{row}"
    );
    // The key's spend counts it.
    let info = gw.get(&format!("/key/info?key={key}")).json();
    let spent = info["info"]["spend"].as_f64().unwrap_or_default();
    assert!(spent > 0.0, "{info}");

    // A stream is relayed in Anthropic's framing, and charged too.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let resp = messages_call(&gw, &key, &streamed);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream")));
    let text = resp.text();
    assert!(text.contains("event: message_start"), "{text}");
    assert!(text.contains("event: message_stop"), "{text}");
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(row["completion_tokens"], 5, "{row}");
    assert!(row["spend"].as_f64().unwrap() > 0.0, "{row}");

    // The provider's own refusal is relayed as it is, and logged.
    let resp = messages_call(
        &gw,
        &key,
        &json!({"model": "claude-haiku-4-5", "messages": []}),
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert_eq!(resp.json()["type"], "error", "Anthropic's error shape");
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(
        (row["status"].as_str(), row["spend"].as_f64()),
        (Some("failure"), Some(0.0))
    );
}

#[test]
fn gemini_route_reads_the_key_from_the_query_or_header_and_sends_its_own() {
    let mock = MockServer::start(&["--completion-tokens", "3"]);
    let gw = start(&mock, &[]);
    let key = new_key(&gw, json!({}));
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let path = "/gemini/v1beta/models/gemini-2.0-flash:generateContent";
    let post = |path: &str, headers: &[(&str, &str)]| {
        let mut h = vec![("content-type", "application/json")];
        h.extend_from_slice(headers);
        gw.call("POST", path, &h, body.to_string().as_bytes())
    };
    // The mock refuses any key but its own: the caller's was replaced.
    let resp = post(&format!("{path}?key={key}"), &[]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let answer = resp.json();
    assert!(answer["candidates"].is_array(), "{answer}");
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(row["model"], "gemini-2.0-flash");
    assert_eq!(row["completion_tokens"], 3, "{row}");
    let resp = post(path, &[("x-goog-api-key", &key)]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    // A stream, as Gemini frames it.
    let resp = post(
        &format!("/gemini/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse&key={key}"),
        &[],
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp.text().contains("data: "), "{}", resp.text());
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(row["completion_tokens"], 3, "{row}");
    // Without a key, or with one the gateway does not know: refused here.
    let before = mock.stats()["received"].clone();
    assert_eq!(post(path, &[]).status, 401);
    assert_eq!(post(&format!("{path}?key=sk-unknown"), &[]).status, 401);
    assert_eq!(
        mock.stats()["received"],
        before,
        "refusals reached the provider"
    );
}

#[test]
fn pass_through_refuses_bad_paths_unserved_routes_missing_keys_budgets_and_limits() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock, &[]);
    let key = new_key(&gw, json!({}));
    let before = mock.stats()["received"].clone();
    let body = json!({"model": "claude-haiku-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]});
    for path in [
        "/anthropic/v1/../../admin",
        "/anthropic/v1/%2e%2e/messages",
        "/anthropic//evil.example/v1/messages",
        "/anthropic/v1/a%2Fb",
    ] {
        let resp = gw.call(
            "POST",
            path,
            &[("x-api-key", &key), ("content-type", "application/json")],
            body.to_string().as_bytes(),
        );
        assert_eq!(resp.status, 400, "{path}: {}", resp.text());
        assert_eq!(resp.json()["error"]["type"], "invalid_request_error");
    }
    let auth = format!("Bearer {key}");
    let resp = gw.call(
        "POST",
        "/vertex_ai/v1/projects/p/locations/l/x",
        &[("authorization", &auth)],
        b"{}",
    );
    // No use_in_pass_through Vertex AI deployment, no AWS keys: named.
    assert_eq!(resp.status, 503, "{}", resp.text());
    assert!(
        resp.text().contains("use_in_pass_through"),
        "{}",
        resp.text()
    );
    let resp = gw.call(
        "POST",
        "/bedrock/model/m/converse",
        &[("authorization", &auth)],
        b"{}",
    );
    assert_eq!(resp.status, 503, "{}", resp.text());
    assert!(resp.text().contains("AWS_ACCESS_KEY_ID"), "{}", resp.text());
    // No COHERE_API_KEY: named, not sent without a credential.
    let resp = gw.call(
        "POST",
        "/cohere/v2/chat",
        &[("authorization", &auth)],
        b"{}",
    );
    assert_eq!(resp.status, 503, "{}", resp.text());
    assert!(resp.text().contains("COHERE_API_KEY"), "{}", resp.text());
    // No key at all.
    let resp = gw.call(
        "POST",
        "/anthropic/v1/messages",
        &[],
        body.to_string().as_bytes(),
    );
    assert_eq!(resp.status, 401, "{}", resp.text());
    // A key whose budget is spent.
    let broke = new_key(&gw, json!({"max_budget": 0.0}));
    let resp = messages_call(&gw, &broke, &body);
    assert_eq!(resp.status, 422, "{}", resp.text());
    assert_eq!(
        resp.json()["error"]["type"],
        "budget_exceeded",
        "{}",
        resp.text()
    );
    assert_eq!(
        mock.stats()["received"],
        before,
        "a refusal reached the provider"
    );
    // A key's rpm counts pass-through calls.
    let limited = new_key(&gw, json!({"rpm_limit": 1}));
    assert_eq!(messages_call(&gw, &limited, &body).status, 200);
    assert_eq!(messages_call(&gw, &limited, &body).status, 429);
}

/// Concurrent pass-through calls hold their worst case against the key's
/// budget before they are sent, as LLM routes do: however they overlap,
/// the calls let through never spend more than the budget, and the others
/// are refused at it without reaching the provider.
#[test]
fn concurrent_pass_through_calls_are_refused_at_the_budget() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock, &[]);
    // claude-haiku-4-5: 1e-6 USD an input token, 5e-6 an output token; a
    // call with max_tokens 1000 may cost about 0.0051 USD, and costs about
    // that (the mock answers with 1000 tokens): two fit in 0.012, not three.
    let budget = 0.012;
    let key = new_key(&gw, json!({"max_budget": budget}));
    let body = json!({"model": "claude-haiku-4-5", "max_tokens": 1000, "messages": [{"role": "user", "content": "hello"}]});
    let before = mock.stats()["requests"].as_u64().unwrap_or(0);
    let results: Vec<Response> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    gw.call(
                        "POST",
                        "/anthropic/v1/messages",
                        &[
                            ("x-api-key", &key),
                            ("anthropic-version", "2023-06-01"),
                            ("content-type", "application/json"),
                            ("x-mock-completion-tokens", "1000"),
                            ("x-mock-latency-ms", "300"),
                        ],
                        body.to_string().as_bytes(),
                    )
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let mut spent = 0.0;
    let mut served = 0;
    for resp in &results {
        match resp.status {
            200 => {
                served += 1;
                let call_id = resp.header("x-litellm-call-id").unwrap();
                let row = gw.spend_row(call_id);
                assert_eq!(row["completion_tokens"].as_u64(), Some(1000), "{row}");
                spent += row["spend"].as_f64().unwrap();
            }
            _ => {
                assert_eq!(
                    resp.json()["error"]["type"],
                    "budget_exceeded",
                    "{}",
                    resp.text()
                );
            }
        }
    }
    assert!(served >= 1, "no call was let through");
    assert!(served < results.len(), "no call was refused");
    assert!(
        spent <= budget,
        "{served} calls spent {spent} USD against a budget of {budget}"
    );
    let after = mock.stats()["requests"].as_u64().unwrap_or(0);
    assert_eq!(
        after - before,
        served as u64,
        "a refused call reached the provider"
    );
}

#[test]
fn openai_route_serves_any_method_below_v1_with_the_provider_key() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock, &[("OPENAI_API_KEY", "sk-openai-upstream")]);
    let key = new_key(&gw, json!({}));
    let auth = format!("Bearer {key}");
    // `/openai/models` is `/v1/models` upstream, as LiteLLM joins it.
    let resp = gw.call("GET", "/openai/models", &[("authorization", &auth)], b"");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["object"], "list");
    let resp = gw.call(
        "POST",
        "/openai/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let usage = resp.json()["usage"].clone();
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(row["prompt_tokens"], usage["prompt_tokens"], "{row}");
    assert!(row["spend"].as_f64().unwrap() > 0.0, "{row}");
    let by_key = served_by_key(&mock);
    assert!(by_key.get("sk-openai-upstream").is_some(), "{by_key}");
    assert!(by_key.get(&key).is_none(), "{by_key}");
}

#[test]
fn custom_pass_through_endpoints_reach_their_target_with_their_headers() {
    let mock = MockServer::start(&[]);
    let upstream = format!("http://127.0.0.1:{}", mock.port());
    let config = json!({
        "model_list": [],
        "general_settings": {
            "master_key": MASTER_KEY,
            "pass_through_endpoints": [
                {"path": "/open-chat", "target": format!("{upstream}/v1/chat/completions"),
                 "headers": {"Authorization": "Bearer sk-custom-open"}},
                {"path": "/keyed", "target": format!("{upstream}/v1"), "auth": true,
                 "include_subpath": true, "forward_headers": true,
                 "headers": {"Authorization": "Bearer sk-custom-keyed"}},
            ],
        },
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let chat = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let post = |path: &str, headers: &[(&str, &str)]| {
        let mut h = vec![("content-type", "application/json")];
        h.extend_from_slice(headers);
        gw.call("POST", path, &h, chat.to_string().as_bytes())
    };
    // No key asked (LiteLLM's default); the client's other headers stay
    // home without `forward_headers`.
    let resp = post("/open-chat", &[("x-mock-status", "500")]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["object"], "chat.completion");
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert_eq!(row["call_type"], "pass_through_endpoint", "{row}");
    // `auth: true`: a key, then the endpoint's own credential upstream.
    assert_eq!(post("/keyed/chat/completions", &[]).status, 401);
    // As LiteLLM's: a key needs the route in `allowed_passthrough_routes`.
    let ungranted = new_key(&gw, json!({}));
    let resp = post(
        "/keyed/chat/completions",
        &[("authorization", &format!("Bearer {ungranted}"))],
    );
    assert_eq!(resp.status, 403, "{}", resp.text());
    let key = new_key(&gw, json!({"allowed_passthrough_routes": ["/keyed"]}));
    let auth = format!("Bearer {key}");
    let resp = post("/keyed/chat/completions", &[("authorization", &auth)]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    // A `denied_passthrough_routes` entry (the key's or its team's) wins
    // over a grant, with LiteLLM's message; a team's grant serves its keys
    // that name none; a proxy admin's key needs no grant.
    let denied = new_key(
        &gw,
        json!({"allowed_passthrough_routes": ["/keyed"], "denied_passthrough_routes": ["/keyed/chat"]}),
    );
    let resp = post(
        "/keyed/chat/completions",
        &[("authorization", &format!("Bearer {denied}"))],
    );
    assert_eq!(resp.status, 403, "{}", resp.text());
    assert_eq!(
        resp.json()["error"]["message"],
        "Key/team denied access to passthrough route /keyed/chat/completions. Matched `/keyed/chat` in `denied_passthrough_routes`.",
    );
    let team = gw
        .post(
            "/team/new",
            &json!({"allowed_passthrough_routes": ["/keyed"], "denied_passthrough_routes": ["/keyed/embeddings"]}),
        )
        .expect_status(200)
        .json();
    let member = new_key(&gw, json!({"team_id": team["team_id"]}));
    let member_auth = format!("Bearer {member}");
    let resp = post(
        "/keyed/chat/completions",
        &[("authorization", &member_auth)],
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let resp = post("/keyed/embeddings", &[("authorization", &member_auth)]);
    assert_eq!(resp.status, 403, "{}", resp.text());
    gw.post(
        "/user/new",
        &json!({"user_id": "pt-admin", "user_role": "proxy_admin"}),
    )
    .expect_status(200);
    let admin = new_key(&gw, json!({"user_id": "pt-admin"}));
    let resp = post(
        "/keyed/chat/completions",
        &[("authorization", &format!("Bearer {admin}"))],
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    // `forward_headers`: the client's headers go too.
    let resp = post(
        "/keyed/chat/completions",
        &[("authorization", &auth), ("x-mock-status", "429")],
    );
    assert_eq!(resp.status, 429, "{}", resp.text());
    let by_key = served_by_key(&mock);
    assert!(by_key.get("sk-custom-open").is_some(), "{by_key}");
    assert!(by_key.get("sk-custom-keyed").is_some(), "{by_key}");
    assert!(by_key.get(&key).is_none(), "{by_key}");
    // Below the target only: no way out of it; other paths stay 404.
    let resp = post("/keyed/../admin", &[("authorization", &auth)]);
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert_eq!(post("/open-chat/more", &[]).status, 404);
}

#[test]
fn cohere_mistral_and_azure_routes_add_their_provider_keys_and_charge_chat() {
    let mock = MockServer::start(&[]);
    let base = format!("http://127.0.0.1:{}", mock.port());
    let gw = start(
        &mock,
        &[
            ("COHERE_API_BASE", &base),
            // The mock's Cohere key (`loadgen/src/mock/api/cohere.rs`).
            ("COHERE_API_KEY", "mock-cohere-api-key"),
            ("MISTRAL_API_BASE", &base),
            ("MISTRAL_API_KEY", "sk-mistral-upstream"),
            ("AZURE_API_BASE", &base),
            ("AZURE_API_KEY", "az-upstream-key"),
        ],
    );
    let key = new_key(&gw, json!({}));
    let auth = format!("Bearer {key}");
    let user = json!([{"role": "user", "content": "hello there"}]);
    let calls = [
        (
            "/cohere/v2/chat",
            json!({"model": "command-r-08-2024", "messages": user}),
            "mock-cohere-api-key",
        ),
        (
            "/mistral/v1/chat/completions",
            json!({"model": "mistral-small-latest", "messages": user}),
            "sk-mistral-upstream",
        ),
        (
            "/azure/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21",
            json!({"messages": user}),
            "az-upstream-key",
        ),
    ];
    for (path, body, upstream_key) in calls {
        let resp = gw.call(
            "POST",
            path,
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body.to_string().as_bytes(),
        );
        assert_eq!(resp.status, 200, "{path}: {}", resp.text());
        let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
        assert!(
            row["prompt_tokens"].as_i64().unwrap_or(0) > 0,
            "{path}: usage read: {row}"
        );
        let by_key = served_by_key(&mock);
        assert!(by_key.get(upstream_key).is_some(), "{path}: {by_key}");
        assert!(by_key.get(&key).is_none(), "{path}: {by_key}");
    }
}
