//! Upstream behaviour: retry of a reset, timeouts, unreachable upstreams,
//! HTTPS with a private CA, 429 passthrough and upstream error messages.

use std::fs;
use std::time::{Duration, Instant};

use e2e::config::add_model;
use e2e::{
    assert_error, base_config, chat_body, error_message, free_port, openai_model, unique_id,
    Gateway, MockServer, RawUpstream,
};
use serde_json::{json, Value};

/// The base config plus one deployment `name` on the mock with `extra` params.
fn start_with(name: &str, extra: Value) -> (MockServer, Gateway) {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model(name, &format!("{name}-id"), &mock.api_base(), extra),
    );
    let gw = Gateway::start_json(&config, &[]);
    (mock, gw)
}

#[test]
fn reset_before_response_is_retried_once() {
    let fault = format!("reset-once:{}", unique_id("reset"));
    let (_mock, gw) = start_with("flaky", json!({"extra_headers": {"x-mock-fault": fault}}));
    let resp = gw.post("/v1/chat/completions", &chat_body("flaky"));
    let body = resp.expect_status(200).json();
    assert_eq!(body["model"], "upstream-gpt", "{body}");
}

#[test]
fn persistent_reset_fails_with_an_error_not_a_hang() {
    let (_mock, gw) = start_with(
        "broken",
        json!({"extra_headers": {"x-mock-fault": "reset"}}),
    );
    let started = Instant::now();
    let resp = gw.post("/v1/chat/completions", &chat_body("broken"));
    assert!(
        resp.status >= 500,
        "a reset upstream must give a 5xx, got {}: {}",
        resp.status,
        resp.text()
    );
    assert_error(&resp, resp.status);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn hanging_upstream_times_out_with_408() {
    let (_mock, gw) = start_with(
        "hangs",
        json!({"timeout": 1, "extra_headers": {"x-mock-fault": "hang"}}),
    );
    let started = Instant::now();
    let resp = gw.post("/v1/chat/completions", &chat_body("hangs"));
    let elapsed = started.elapsed();
    assert_error(&resp, 408);
    assert!(
        elapsed < Duration::from_secs(10),
        "timeout 1 s took {elapsed:?}"
    );
}

#[test]
fn unreachable_upstream_is_502_or_503() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    let closed = free_port();
    add_model(
        &mut config,
        openai_model(
            "nowhere",
            "dep-nowhere",
            &format!("http://127.0.0.1:{closed}/v1"),
            json!({}),
        ),
    );
    let gw = Gateway::start_json(&config, &[]);
    let started = Instant::now();
    let resp = gw.post("/v1/chat/completions", &chat_body("nowhere"));
    assert!(
        resp.status == 502 || resp.status == 503,
        "expected 502 or 503, got {}: {}",
        resp.status,
        resp.text()
    );
    let err = assert_error(&resp, resp.status);
    let msg = error_message(&err).to_ascii_lowercase();
    assert!(
        ["refused", "connect", "unreachable"]
            .iter()
            .any(|w| msg.contains(w)),
        "message should name the reason: {msg:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn rate_limit_429_keeps_retry_after() {
    let (_mock, gw) = start_with(
        "limited",
        json!({"extra_headers": {"x-mock-status": "429", "x-mock-retry-after": "7"}}),
    );
    let resp = gw.post("/v1/chat/completions", &chat_body("limited"));
    assert_error(&resp, 429);
    assert_eq!(
        resp.header("retry-after"),
        Some("7"),
        "headers: {:?}",
        resp.headers
    );
    // A relayed upstream error is still a proxied response.
    assert_eq!(resp.header("x-litellm-model-group"), Some("limited"));
    assert_eq!(resp.header("x-litellm-model-id"), Some("limited-id"));
    assert!(resp.header("x-litellm-call-id").is_some());
}

#[test]
fn upstream_400_message_passes_through() {
    let (_mock, gw) = start_with(
        "picky",
        json!({"extra_headers": {
            "x-mock-status": "400",
            "x-mock-error-message": "temperature must be at most 2 (mock 51c9)",
        }}),
    );
    let resp = gw.post("/v1/chat/completions", &chat_body("picky"));
    let err = assert_error(&resp, 400);
    assert!(
        error_message(&err).contains("temperature must be at most 2 (mock 51c9)"),
        "{err:?}"
    );
}

/// An upstream's 400 keeps its `param` in the relayed body, as LiteLLM
/// relays the OpenAI SDK's `param`; `code` is the status, as in LiteLLM's
/// `ProxyException` (the provider's own code is not in its body).
#[test]
fn upstream_400_keeps_its_param() {
    let answer = r#"{"error":{"message":"Invalid value for 'temperature' (mock 3e1)","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}"#;
    let reply = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
        answer.len()
    );
    let (_raw, gw) = start_raw(reply.as_bytes());
    let resp = gw.post("/v1/chat/completions", &chat_body("raw"));
    let err = assert_error(&resp, 400);
    assert_eq!(
        (&err["param"], &err["type"], &err["code"]),
        (
            &json!("temperature"),
            &json!("invalid_request_error"),
            &json!("400")
        ),
        "{err:?}"
    );
    assert!(error_message(&err).contains("mock 3e1"), "{err:?}");
}

/// A CA and a server certificate for `localhost` and 127.0.0.1 signed by it:
/// returns (ca.pem, server cert pem, server key pem) paths.
fn make_test_pki(dir: &std::path::Path) -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "gateway e2e test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().expect("ca key");
    let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
    let issuer = Issuer::new(ca_params, ca_key);

    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("server params");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().expect("server key");
    let cert = params.signed_by(&key, &issuer).expect("server cert");

    let ca_path = dir.join("ca.pem");
    let cert_path = dir.join("server.pem");
    let key_path = dir.join("server.key");
    fs::write(&ca_path, ca_cert.pem()).expect("write ca");
    fs::write(&cert_path, cert.pem()).expect("write cert");
    fs::write(&key_path, key.serialize_pem()).expect("write key");
    let s = |p: std::path::PathBuf| p.to_str().expect("utf-8 path").to_string();
    (s(ca_path), s(cert_path), s(key_path))
}

#[test]
fn https_upstream_with_test_ca() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ca, cert, key) = make_test_pki(dir.path());
    let mock = MockServer::start(&["--tls-cert", &cert, "--tls-key", &key]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model(
            "secure",
            "dep-tls",
            &format!("https://localhost:{}/v1", mock.port()),
            json!({}),
        ),
    );
    let gw = Gateway::start_json(&config, &[("SSL_CERT_FILE", &ca)]);
    let resp = gw.post("/v1/chat/completions", &chat_body("secure"));
    let body = resp.clone().expect_status(200).json();
    assert_eq!(body["model"], "upstream-gpt", "{body}");
    assert_eq!(resp.header("x-litellm-model-id"), Some("dep-tls"));
}

#[test]
fn https_upstream_with_unknown_ca_is_rejected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_ca, cert, key) = make_test_pki(dir.path());
    let mock = MockServer::start(&["--tls-cert", &cert, "--tls-key", &key]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model(
            "secure",
            "dep-tls",
            &format!("https://localhost:{}/v1", mock.port()),
            json!({}),
        ),
    );
    // No SSL_CERT_FILE: the test CA is not trusted, so the handshake must fail.
    let gw = Gateway::start_json(&config, &[]);
    let resp = gw.post("/v1/chat/completions", &chat_body("secure"));
    assert!(
        resp.status >= 500,
        "an untrusted upstream certificate must fail, got {}: {}",
        resp.status,
        resp.text()
    );
    assert_error(&resp, resp.status);
}

/// A gateway with deployment `raw` on a [`RawUpstream`] answering `reply`.
fn start_raw(reply: &[u8]) -> (RawUpstream, Gateway) {
    let raw = RawUpstream::start(reply.to_vec(), true);
    let mut config = base_config(free_port());
    add_model(
        &mut config,
        openai_model("raw", "raw-id", &raw.api_base(), json!({})),
    );
    let gw = Gateway::start_json(&config, &[]);
    (raw, gw)
}

#[test]
fn upstream_chunked_body_with_bare_lf_is_cut_not_guessed() {
    // The upstream's chunked framing is read as strictly as a client's: a
    // bare LF is a protocol error, never a guess at where the body ends. The
    // relayed body is already under way, so the client sees it cut (no last
    // chunk, connection closed), never a wrong but complete body.
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    let (_good_raw, good) = start_raw(format!("{head}2\r\n{{}}\r\n0\r\n\r\n").as_bytes());
    let resp = good.post("/v1/chat/completions", &chat_body("raw"));
    assert_eq!((resp.status, resp.text().as_str()), (200, "{}"));
    let (raw, gw) = start_raw(format!("{head}2\r\n{{}}\n0\r\n\r\n").as_bytes());
    let mut conn = gw.connect();
    conn.send(&e2e::request(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", &format!("Bearer {}", e2e::MASTER_KEY))],
        chat_body("raw").to_string().as_bytes(),
    ));
    let got = conn.try_read_response();
    assert!(
        got.is_err(),
        "a complete response from a bad upstream body: {got:?}"
    );
    assert!(conn.closed_within(Duration::from_secs(3)));
    assert_eq!(raw.requests(), 1, "a protocol error is not retried");
}

#[test]
fn interim_heads_in_the_same_read_as_the_final_one_are_skipped() {
    // 100 Continue and 103 Early Hints followed by the final head and body in
    // one write: the gateway skips the interim heads without waiting for
    // another read (before, it waited until the upstream timed out: 408).
    let body = r#"{"id":"x","object":"chat.completion","model":"upstream","choices":[{"index":0,"message":{"role":"assistant","content":"after 1xx"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#;
    let reply = format!(
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let (_raw, gw) = start_raw(reply.as_bytes());
    let resp = gw.post("/v1/chat/completions", &chat_body("raw"));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["choices"][0]["message"]["content"], "after 1xx");
}

#[test]
fn api_base_userinfo_and_query_are_never_echoed() {
    // Credentials in an api_base (userinfo, a key in the query string) stay
    // out of the headers, the error messages and /model/info.
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    let secret_base = format!(
        "http://user:hunter2@127.0.0.1:{}/v1?key=sk-query-secret",
        mock.port()
    );
    add_model(
        &mut config,
        openai_model("creds", "creds-id", &secret_base, json!({})),
    );
    let dead = format!(
        "http://user:hunter2@127.0.0.1:{}/v1?key=sk-query-secret",
        free_port()
    );
    add_model(
        &mut config,
        openai_model("creds-dead", "creds-dead-id", &dead, json!({})),
    );
    let gw = Gateway::start_json(&config, &[]);
    let leaks = |text: &str| text.contains("hunter2") || text.contains("sk-query-secret");
    let ok = gw.post("/v1/chat/completions", &chat_body("creds"));
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(
        ok.header("x-litellm-model-api-base"),
        Some(mock.api_base().as_str())
    );
    let failed = gw.post("/v1/chat/completions", &chat_body("creds-dead"));
    assert!(failed.status >= 500, "{}", failed.text());
    let info = gw.get("/model/info").expect_status(200);
    // Each attempt left a spend row, its api_base shown without credentials.
    let rows = e2e::eventually("the spend rows", Duration::from_secs(10), || {
        let logs = gw.get("/spend/logs").expect_status(200).json();
        let rows = logs.as_array().cloned().unwrap_or_default();
        let bases: Vec<String> = rows
            .iter()
            .filter_map(|r| r["api_base"].as_str().map(str::to_string))
            .collect();
        (bases.iter().any(|b| *b == mock.api_base()) && rows.len() >= 2).then_some(logs)
    });
    for (what, text) in [
        ("headers", format!("{:?}{:?}", ok.headers, failed.headers)),
        ("error", failed.text()),
        ("/model/info", info.text()),
        ("spend rows", rows.to_string()),
        ("log", gw.output()),
    ] {
        assert!(
            !leaks(&text),
            "credentials of api_base in the {what}: {text}"
        );
    }
}

#[test]
fn api_base_host_names_resolve() {
    // A name, not an IP literal: resolved off the core, then cached.
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model(
            "by-name",
            "by-name-id",
            &format!("http://localhost:{}/v1", mock.port()),
            json!({}),
        ),
    );
    let gw = Gateway::start_json(&config, &[]);
    for _ in 0..3 {
        let resp = gw.post("/v1/chat/completions", &chat_body("by-name"));
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
}

/// LiteLLM's proxy-only request fields (`turn_off_message_logging`, at the
/// top level or in `metadata`; `litellm_trace_id`; `litellm_metadata`;
/// `caching`, `ttl`, `litellm_session_id`, `mock_response` from a caller
/// who may not mock, ...) never reach the provider, on chat completions,
/// Responses, Messages and embeddings, as LiteLLM keeps them out of its
/// provider call. `metadata` is LiteLLM's own on chat completions and
/// embeddings (never sent on without its `enable_preview_features`); the
/// Responses and Messages APIs define it, and there the rest of it is sent
/// on.
#[test]
fn proxy_only_fields_never_reach_the_upstream() {
    let answer = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"upstream-gpt","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
        answer.len()
    );
    let (raw, gw) = start_raw(reply.as_bytes());
    let own = json!({
        "turn_off_message_logging": true,
        "litellm_trace_id": "trace-1",
        "litellm_metadata": {"trace_id": "trace-2"},
        "caching": true,
        "ttl": 60,
        "litellm_session_id": "session-1",
        "mock_response": "canned-answer",
        "input_cost_per_token": 0,
    });
    let calls = [
        (
            "/v1/chat/completions",
            json!({"model": "raw", "messages": [{"role": "user", "content": "ping-chat"}],
                "metadata": {"turn_off_message_logging": "true", "note": "kept-note"}}),
        ),
        (
            "/v1/responses",
            json!({"model": "raw", "input": "ping-responses",
                "metadata": {"turn_off_message_logging": true, "note": "kept-note"}}),
        ),
        (
            "/v1/messages",
            json!({"model": "raw", "max_tokens": 5,
                "messages": [{"role": "user", "content": "ping-messages"}],
                "metadata": {"user_id": "u-1", "turn_off_message_logging": true}}),
        ),
        (
            "/v1/embeddings",
            json!({"model": "raw", "input": "ping-embeddings",
                "metadata": {"turn_off_message_logging": false}}),
        ),
    ];
    for (path, mut body) in calls {
        if let (Some(body), Some(own)) = (body.as_object_mut(), own.as_object()) {
            body.extend(own.clone());
        }
        let before = raw.requests();
        // The answer may not be the endpoint's shape: only what was sent counts.
        gw.post(path, &body);
        assert_eq!(raw.requests(), before + 1, "{path}: one upstream call");
        let wire = String::from_utf8_lossy(&raw.last_request()).into_owned();
        let sent = &wire[wire.find("\r\n\r\n").expect("a request head") + 4..];
        let sent: Value = serde_json::from_str(sent).expect("the body sent upstream is JSON");
        let text = sent.to_string();
        assert!(text.contains("ping-"), "{path}: {text}");
        for field in [
            "turn_off_message_logging",
            "litellm_trace_id",
            "litellm_metadata",
            "caching",
            "ttl",
            "litellm_session_id",
            "mock_response",
            "canned-answer",
            "input_cost_per_token",
        ] {
            assert!(!text.contains(field), "{path} forwarded {field}: {text}");
        }
        match path {
            "/v1/responses" => {
                assert_eq!(sent["metadata"]["note"], "kept-note", "{path}: {text}")
            }
            // Translated to chat completions for this OpenAI deployment.
            "/v1/messages" => {}
            _ => assert!(
                sent.get("metadata").is_none(),
                "{path} sent metadata: {text}"
            ),
        }
    }
}
