//! Vertex AI deployments end to end on the faithful mock (`loadgen mock`:
//! its token endpoint verifies the service account's RS256 assertion and
//! its claims, its Vertex paths need an unexpired token it granted and
//! the account's project): chat completions whole and streamed, Anthropic's
//! `/v1/messages` through the internal form, one token for many requests,
//! tokens refreshed before they expire, and credentials that cannot give
//! a token answered with a clear error.

use e2e::{eventually, to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::io::Write;
use std::time::Duration;

/// The mock's service account, and the same account with a key the mock
/// does not know (`loadgen/src/mock/api/vertex/`).
const KEY_FILE: &str = include_str!("../../loadgen/src/mock/api/vertex/service_account.json");
const UNKNOWN_KEY: &str = include_str!("../../loadgen/src/mock/api/vertex/unknown_key.json");

/// `key` with its `token_uri` pointed at port `port`.
fn key_for(key: &str, port: u16) -> String {
    key.replace(
        "https://oauth2.googleapis.com/token",
        &format!("http://127.0.0.1:{port}/token"),
    )
}

/// `key_for(key, port)` in a temp file.
fn key_file(key: &str, port: u16) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(key_for(key, port).as_bytes()).unwrap();
    f
}

fn vertex(group: &str, mock: &MockServer, extra: Value) -> Value {
    let mut params = json!({
        "model": "vertex_ai/gemini-2.0-flash",
        "api_base": format!("http://127.0.0.1:{}", mock.port()),
        "vertex_location": "us-central1",
        "timeout": 10,
    });
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    json!({"model_name": group, "litellm_params": params, "model_info": {"id": group}})
}

fn start(models: Vec<Value>, envs: &[(&str, &str)]) -> Gateway {
    let config = json!({
        "model_list": models,
        "general_settings": {"master_key": MASTER_KEY},
        "router_settings": {"num_retries": 0},
    });
    Gateway::start(&to_yaml(&config), envs)
}

fn chat(gw: &Gateway, model: &str, stream: bool) -> e2e::http::Response {
    gw.post(
        "/v1/chat/completions",
        &json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}),
    )
}

fn grants(mock: &MockServer) -> u64 {
    mock.stats()["token_grants"].as_u64().unwrap()
}

/// The text of a streamed chat completion.
fn streamed_text(text: &str) -> String {
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn vertex_serves_chat_whole_and_streamed_on_one_cached_token() {
    let mock = MockServer::start(&["--completion-tokens", "4"]);
    let key = key_file(KEY_FILE, mock.port());
    let path = key.path().to_str().unwrap();
    let gw = start(
        vec![
            vertex("by-file", &mock, json!({"vertex_credentials": path})),
            // The same key through GOOGLE_APPLICATION_CREDENTIALS shares the token.
            vertex("by-env", &mock, json!({})),
        ],
        &[("GOOGLE_APPLICATION_CREDENTIALS", path)],
    );
    let resp = chat(&gw, "by-file", false);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "lorem ipsum dolor sit"
    );
    assert_eq!(body["usage"]["completion_tokens"], 4);
    assert_eq!(body["model"], "gemini-2.0-flash");

    let resp = chat(&gw, "by-env", true);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream")));
    assert_eq!(streamed_text(&resp.text()), "lorem ipsum dolor sit");

    let resp = gw.call(
        "POST",
        "/v1/messages",
        &[
            ("x-api-key", MASTER_KEY),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
        ],
        json!({"model": "by-file", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["content"][0]["text"], "lorem ipsum dolor sit");

    for i in 0..6 {
        let resp = chat(
            &gw,
            if i % 2 == 0 { "by-file" } else { "by-env" },
            i % 3 == 0,
        );
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    assert_eq!(grants(&mock), 1, "one token fetched for every request");
}

#[test]
fn vertex_tokens_are_refreshed_before_they_expire() {
    // Tokens that live 2 s: the gateway must fetch the next one in time.
    let mock = MockServer::start(&["--token-ttl-secs", "2", "--completion-tokens", "2"]);
    let inline = key_for(KEY_FILE, mock.port());
    let gw = start(
        vec![vertex(
            "v",
            &mock,
            json!({"vertex_credentials": inline, "vertex_project": "mock-project"}),
        )],
        &[],
    );
    let resp = chat(&gw, "v", false);
    assert_eq!(resp.status, 200, "{}", resp.text());
    // Three grants mean the first token has expired at the mock by now.
    eventually("two refreshes", Duration::from_secs(15), || {
        (grants(&mock) >= 3).then_some(())
    });
    for stream in [false, true] {
        let resp = chat(&gw, "v", stream);
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
}

#[test]
fn vertex_credentials_that_give_no_token_are_a_clear_error() {
    let mock = MockServer::start(&[]);
    let unknown = key_file(UNKNOWN_KEY, mock.port());
    let good = key_file(KEY_FILE, mock.port());
    // A token endpoint nobody listens on.
    let closed = key_file(KEY_FILE, e2e::free_port());
    let gw = start(
        vec![
            vertex(
                "unknown-key",
                &mock,
                json!({"vertex_credentials": unknown.path()}),
            ),
            vertex(
                "no-endpoint",
                &mock,
                json!({"vertex_credentials": closed.path()}),
            ),
            vertex(
                "no-credentials",
                &mock,
                json!({"vertex_project": "mock-project"}),
            ),
            vertex(
                "other-project",
                &mock,
                json!({"vertex_credentials": good.path(), "vertex_project": "someone-else"}),
            ),
        ],
        &[],
    );
    for stream in [false, true] {
        let resp = chat(&gw, "unknown-key", stream);
        let err = e2e::assert_error(&resp, 401);
        let message = e2e::error_message(&err);
        assert!(
            message.contains("Invalid JWT Signature.")
                && message.contains("gateway-test@mock-project.iam.gserviceaccount.com"),
            "{message}"
        );
        assert!(!message.contains("PRIVATE KEY"), "{message}");
    }
    let resp = chat(&gw, "no-endpoint", false);
    let err = e2e::assert_error(&resp, 503);
    assert!(
        e2e::error_message(&err).contains("token endpoint"),
        "{err:?}"
    );
    let resp = chat(&gw, "no-credentials", false);
    let err = e2e::assert_error(&resp, 401);
    assert!(
        e2e::error_message(&err).contains("no credentials"),
        "{err:?}"
    );
    // Google's own refusal passes through.
    let resp = chat(&gw, "other-project", false);
    let err = e2e::assert_error(&resp, 403);
    assert_eq!(err["type"], "PERMISSION_DENIED");
    assert_eq!(mock.stats()["requests"], 0);
    assert_eq!(gw.get("/health/liveliness").status, 200);
}

#[test]
fn vertex_serves_anthropic_models_through_raw_predict() {
    let mock = MockServer::start(&["--completion-tokens", "3"]);
    let key = key_file(KEY_FILE, mock.port());
    let gw = start(
        vec![vertex(
            "claude",
            &mock,
            json!({"model": "vertex_ai/claude-sonnet-4@20250514", "vertex_credentials": key.path()}),
        )],
        &[],
    );
    let resp = chat(&gw, "claude", false);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "lorem ipsum dolor"
    );
    assert_eq!(body["usage"]["completion_tokens"], 3);
    let resp = chat(&gw, "claude", true);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(streamed_text(&resp.text()), "lorem ipsum dolor");
    // Messages requests pass through, the model moved into the path.
    for stream in [false, true] {
        let resp = gw.call(
            "POST",
            "/v1/messages",
            &[
                ("x-api-key", MASTER_KEY),
                ("anthropic-version", "2023-06-01"),
                ("content-type", "application/json"),
            ],
            json!({"model": "claude", "max_tokens": 20, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
                .to_string()
                .as_bytes(),
        );
        assert_eq!(resp.status, 200, "{}", resp.text());
        if stream {
            assert!(
                resp.text().contains("event: message_stop"),
                "{}",
                resp.text()
            );
        } else {
            assert_eq!(resp.json()["content"][0]["text"], "lorem ipsum dolor");
        }
    }
    assert_eq!(grants(&mock), 1);
    assert_eq!(mock.stats()["requests"], 4);
}

#[test]
fn vertex_embeddings_use_predict_with_token_counts() {
    let mock = MockServer::start(&[]);
    let key = key_file(KEY_FILE, mock.port());
    let gw = start(
        vec![vertex(
            "embed",
            &mock,
            json!({"model": "vertex_ai/text-embedding-005", "vertex_credentials": key.path()}),
        )],
        &[],
    );
    let resp = gw.post(
        "/v1/embeddings",
        &json!({"model": "embed", "input": ["the quick brown fox", "jumps"]}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    let tokens = body["usage"]["prompt_tokens"].as_u64().unwrap();
    // The mock's statistics.token_count, summed over the inputs.
    assert_eq!(
        tokens,
        mock.stats()["prompt_tokens"].as_u64().unwrap(),
        "{body}"
    );
    assert!(tokens > 0);
    assert_eq!(grants(&mock), 1);
}

#[test]
fn vertex_health_checks_fetch_their_own_token() {
    let mock = MockServer::start(&[]);
    let good = key_file(KEY_FILE, mock.port());
    let unknown = key_file(UNKNOWN_KEY, mock.port());
    let gw = start(
        vec![
            vertex("good", &mock, json!({"vertex_credentials": good.path()})),
            vertex(
                "unknown-key",
                &mock,
                json!({"vertex_credentials": unknown.path()}),
            ),
        ],
        &[],
    );
    // No request has fetched a token yet: the probe fetches it.
    let resp = gw.get("/health");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    let ids = |list: &Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|e| e["model_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&body["healthy_endpoints"]), ["good"], "{body}");
    assert_eq!(ids(&body["unhealthy_endpoints"]), ["unknown-key"], "{body}");
    let error = body["unhealthy_endpoints"][0]["error"].as_str().unwrap();
    assert!(error.contains("Invalid JWT Signature."), "{error}");
    // The probe's token serves requests too.
    assert_eq!(chat(&gw, "good", false).status, 200);
    assert_eq!(grants(&mock), 1);
}

#[test]
fn vertex_concurrent_first_requests_share_one_token_fetch() {
    let mock = MockServer::start(&["--completion-tokens", "2"]);
    let key = key_file(KEY_FILE, mock.port());
    let gw = start(
        vec![vertex(
            "v",
            &mock,
            json!({"vertex_credentials": key.path()}),
        )],
        &[],
    );
    // Every request arrives before any token exists.
    let gw = &gw;
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..12)
            .map(|i| s.spawn(move || chat(gw, "v", i % 2 == 0).status))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(grants(&mock), 1, "one fetch shared by all");
}

#[test]
fn vertex_takes_user_credentials_from_gcloud() {
    let mock = MockServer::start(&["--completion-tokens", "2"]);
    let user = include_str!("../../loadgen/src/mock/api/vertex/authorized_user.json");
    let file = key_file(user, mock.port());
    let wrong = key_file(
        &user.replace("1//mock-refresh-token", "1//revoked"),
        mock.port(),
    );
    let gw = start(
        vec![
            // `gcloud auth application-default login`'s file, its
            // quota_project_id the project.
            vertex("user", &mock, json!({})),
            vertex(
                "revoked",
                &mock,
                json!({"vertex_credentials": wrong.path()}),
            ),
        ],
        &[(
            "GOOGLE_APPLICATION_CREDENTIALS",
            file.path().to_str().unwrap(),
        )],
    );
    for stream in [false, true] {
        let resp = chat(&gw, "user", stream);
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    assert_eq!(grants(&mock), 1);
    let err = e2e::assert_error(&chat(&gw, "revoked", false), 401);
    assert!(
        e2e::error_message(&err).contains("invalid_grant"),
        "{err:?}"
    );
}
