//! LiteLLM's realtime route (`/v1/realtime` over WebSocket) end to end
//! against a mock of OpenAI's realtime API (`e2e::realtime_mock`, which
//! checks the path, `model`, the upstream key and masks): the virtual key
//! is checked before the upgrade, frames are relayed both ways, each
//! `response.done`'s usage is charged to the key and the session written
//! as one spend row, budgets and parallel limits hold at connect, and an
//! oversize frame closes the session with 1009.

use e2e::config::UPSTREAM_KEY;
use e2e::realtime_mock::{RealtimeMock, USAGE};
use e2e::{eventually, to_yaml, Gateway, MASTER_KEY};
use serde_json::{json, Value};
use std::net::TcpStream;
use std::time::Duration;
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

/// The upstream model the deployment names (what the mock expects); the
/// price map prices its audio tokens (`gpt-realtime`: 3.2e-5 in, 6.4e-5
/// out), the config its text tokens.
const UPSTREAM_MODEL: &str = "gpt-realtime";
const AUDIO_INPUT_PRICE: f64 = 3.2e-5;
const AUDIO_OUTPUT_PRICE: f64 = 6.4e-5;
const INPUT_PRICE: f64 = 1e-6;
const OUTPUT_PRICE: f64 = 2e-6;
const CACHED_PRICE: f64 = 5e-7;

fn config(mock: &RealtimeMock, max_request_size_mb: f64, upstream_key: &str) -> Value {
    json!({
        "model_list": [{
            "model_name": "gpt-rt",
            "litellm_params": {
                "model": format!("openai/{UPSTREAM_MODEL}"),
                "api_base": mock.api_base(),
                "api_key": upstream_key,
                "input_cost_per_token": INPUT_PRICE,
                "output_cost_per_token": OUTPUT_PRICE,
                "cache_read_input_token_cost": CACHED_PRICE,
            },
            "model_info": {"id": "rt-1"},
        }],
        "general_settings": {"master_key": MASTER_KEY, "max_request_size_mb": max_request_size_mb},
    })
}

fn start(mock: &RealtimeMock, max_request_size_mb: f64, upstream_key: &str) -> Gateway {
    Gateway::start(
        &to_yaml(&config(mock, max_request_size_mb, upstream_key)),
        &[],
    )
}

fn new_key(gw: &Gateway, fields: Value) -> String {
    let resp = gw.post("/key/generate", &fields);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["key"].as_str().unwrap().to_string()
}

type Ws = WebSocket<TcpStream>;
type Handshake = tungstenite::handshake::client::Response;

/// Opens `/v1/realtime?model=gpt-rt` with `headers`; the HTTP refusal
/// (status and body) when the gateway does not upgrade.
fn connect(
    gw: &Gateway,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(Ws, Handshake), (u16, String)> {
    let mut req = format!("ws://127.0.0.1:{}{path}", gw.port())
        .into_client_request()
        .unwrap();
    for (name, value) in headers {
        let name = tungstenite::http::HeaderName::from_bytes(name.as_bytes()).expect("header name");
        req.headers_mut()
            .insert(name, value.parse().expect("header value"));
    }
    let stream = TcpStream::connect(("127.0.0.1", gw.port())).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    match tungstenite::client::client(req, stream) {
        Ok(pair) => Ok(pair),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
            let body = resp
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).to_string())
                .unwrap_or_default();
            Err((resp.status().as_u16(), body))
        }
        Err(e) => panic!("handshake failed: {e}\n{}", gw.output()),
    }
}

fn open(gw: &Gateway, key: &str) -> (Ws, Handshake) {
    let auth = format!("Bearer {key}");
    connect(
        gw,
        "/v1/realtime?model=gpt-rt",
        &[("authorization", &auth), ("openai-beta", "realtime=v1")],
    )
    .unwrap_or_else(|(status, body)| panic!("refused with {status}: {body}\n{}", gw.output()))
}

/// The next event the server sends (text frames only), or the close.
fn next<S: std::io::Read + std::io::Write>(
    ws: &mut WebSocket<S>,
) -> Result<Value, Option<(u16, String)>> {
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => {
                return Ok(serde_json::from_str(t.as_str()).expect("JSON event"))
            }
            Ok(Message::Close(frame)) => {
                return Err(frame.map(|f| (u16::from(f.code), f.reason.to_string())))
            }
            Ok(_) => {}
            Err(e) => panic!("read failed: {e}"),
        }
    }
}

fn send(ws: &mut Ws, event: Value) {
    ws.send(Message::text(event.to_string())).expect("send");
}

/// The cost of one mock response: text tokens at the configured prices
/// (its cached tokens are text), audio tokens at the price map's.
fn response_cost() -> f64 {
    let u = USAGE;
    (u.input_text - u.cached) as f64 * INPUT_PRICE
        + u.cached as f64 * CACHED_PRICE
        + u.input_audio as f64 * AUDIO_INPUT_PRICE
        + u.output_text as f64 * OUTPUT_PRICE
        + u.output_audio as f64 * AUDIO_OUTPUT_PRICE
}

/// Closes from the client side and reads until the server's close.
fn close(mut ws: Ws) {
    ws.close(None).expect("close");
    loop {
        match ws.read() {
            Ok(_) => {}
            Err(tungstenite::Error::ConnectionClosed) => return,
            Err(e) => panic!("closing: {e}"),
        }
    }
}

#[test]
fn a_session_relays_events_both_ways_charges_each_response_and_writes_one_row() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = start(&mock, 1.0, UPSTREAM_KEY);
    let key = new_key(&gw, json!({}));
    let (mut ws, handshake) = open(&gw, &key);
    let call_id = handshake
        .headers()
        .get("x-litellm-call-id")
        .and_then(|v| v.to_str().ok())
        .expect("the 101 carries the call id")
        .to_string();
    let created = next(&mut ws).unwrap();
    assert_eq!(created["type"], "session.created", "{created}");
    // Two responses: both relayed, both charged.
    for _ in 0..2 {
        send(
            &mut ws,
            json!({"type": "response.create", "response": {"modalities": ["text"]}}),
        );
        let mut types = Vec::new();
        loop {
            let event = next(&mut ws).unwrap();
            types.push(event["type"].as_str().unwrap().to_string());
            if event["type"] == "response.done" {
                assert_eq!(event["response"]["usage"]["input_tokens"], USAGE.input());
                break;
            }
        }
        assert_eq!(
            types,
            ["response.created", "response.text.delta", "response.done"]
        );
    }
    // An event the upstream does not know comes back as its error event.
    send(&mut ws, json!({"type": "nonsense", "event_id": "ev1"}));
    let err = next(&mut ws).unwrap();
    assert_eq!(err["error"]["code"], "unknown_event", "{err}");
    close(ws);

    // The upstream saw the deployment's key and model, never the caller's.
    let seen = mock.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].uri, format!("/v1/realtime?model={UPSTREAM_MODEL}"));
    assert_eq!(
        seen[0].header("authorization"),
        Some(&*format!("Bearer {UPSTREAM_KEY}"))
    );
    assert_eq!(seen[0].header("openai-beta"), Some("realtime=v1"));
    assert!(seen
        .iter()
        .all(|s| s.headers.iter().all(|(_, v)| !v.contains(&key))));
    let events = mock.events();
    assert_eq!(events.len(), 3, "{events:?}");

    let row = gw.spend_row(&call_id);
    assert_eq!(row["call_type"], "_arealtime", "{row}");
    assert_eq!(row["model_group"], "gpt-rt", "{row}");
    assert_eq!(row["model"], UPSTREAM_MODEL, "{row}");
    assert_eq!(
        row["prompt_tokens"].as_u64(),
        Some(2 * USAGE.input()),
        "{row}"
    );
    assert_eq!(
        row["completion_tokens"].as_u64(),
        Some(2 * USAGE.output()),
        "{row}"
    );
    let expected = 2.0 * response_cost();
    assert!(
        (row["spend"].as_f64().unwrap() - expected).abs() < 1e-12,
        "{row} vs {expected}"
    );
    let spent = eventually("the key's spend", Duration::from_secs(5), || {
        let info = gw.get(&format!("/key/info?key={key}")).json();
        info["info"]["spend"].as_f64().filter(|s| *s > 0.0)
    });
    assert!((spent - expected).abs() < 1e-12, "{spent} vs {expected}");
}

#[test]
fn a_wrong_or_missing_key_is_refused_before_the_upgrade() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = start(&mock, 1.0, UPSTREAM_KEY);
    let (status, body) = connect(
        &gw,
        "/v1/realtime?model=gpt-rt",
        &[("authorization", "Bearer sk-wrong")],
    )
    .map(|_| ())
    .unwrap_err();
    assert_eq!(status, 401, "{body}");
    let body: Value = serde_json::from_str(&body).expect("an OpenAI error body");
    assert!(body["error"]["message"].is_string(), "{body}");
    let (status, _) = connect(&gw, "/realtime?model=gpt-rt", &[])
        .map(|_| ())
        .unwrap_err();
    assert_eq!(status, 401);
    // A model the route does not know, and no model: refused before the upstream too.
    let auth = format!("Bearer {MASTER_KEY}");
    let (status, body) = connect(&gw, "/v1/realtime?model=nope", &[("authorization", &auth)])
        .map(|_| ())
        .unwrap_err();
    assert_eq!(status, 400, "{body}");
    let (status, body) = connect(&gw, "/v1/realtime", &[("authorization", &auth)])
        .map(|_| ())
        .unwrap_err();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("model"), "{body}");
    assert!(mock.seen().is_empty(), "{:?}", mock.seen());
    // A plain GET is told to upgrade.
    let resp = gw.call(
        "GET",
        "/v1/realtime?model=gpt-rt",
        &[("authorization", &auth)],
        b"",
    );
    assert_eq!(resp.status, 426, "{}", resp.text());
}

/// A key's `enforced_params` hold its realtime sessions as LiteLLM's
/// proxy holds them: it checks the body it makes for a session (`model`,
/// `websocket`, `query_params`, `realtime_mode`, its own `metadata`), so
/// a key enforcing `user` opens none (refused before the upgrade, naming
/// it) while one enforcing `metadata` does.
#[test]
fn enforced_params_are_checked_on_the_session_litellm_makes() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = start(&mock, 1.0, UPSTREAM_KEY);
    let strict = new_key(&gw, json!({"enforced_params": ["user"]}));
    let auth = format!("Bearer {strict}");
    let (status, body) = connect(
        &gw,
        "/v1/realtime?model=gpt-rt",
        &[("authorization", &auth)],
    )
    .map(|_| ())
    .unwrap_err();
    assert_eq!(status, 400, "{body}");
    let body: Value = serde_json::from_str(&body).expect("an OpenAI error body");
    assert_eq!(body["error"]["param"], "user", "{body}");
    assert!(mock.seen().is_empty(), "{:?}", mock.seen());
    let loose = new_key(&gw, json!({"enforced_params": ["metadata", "model"]}));
    let (ws, _) = open(&gw, &loose);
    close(ws);
}

#[test]
fn a_browser_key_in_a_subprotocol_is_accepted_and_never_echoed() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = start(&mock, 1.0, UPSTREAM_KEY);
    let key = new_key(&gw, json!({}));
    let protocols = format!("realtime, openai-insecure-api-key.{key}, openai-beta.realtime-v1");
    let (mut ws, handshake) = connect(
        &gw,
        "/realtime?model=gpt-rt",
        &[("sec-websocket-protocol", &protocols)],
    )
    .unwrap_or_else(|(s, b)| panic!("{s}: {b}"));
    assert_eq!(
        handshake
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok()),
        Some("realtime")
    );
    assert_eq!(next(&mut ws).unwrap()["type"], "session.created");
    close(ws);
}

#[test]
fn the_upstreams_refusal_is_relayed_as_an_http_error() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = start(&mock, 1.0, "sk-not-the-upstream-key");
    let auth = format!("Bearer {MASTER_KEY}");
    let (status, body) = connect(
        &gw,
        "/v1/realtime?model=gpt-rt",
        &[("authorization", &auth)],
    )
    .map(|_| ())
    .unwrap_err();
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("Incorrect API key"), "{body}");
    assert!(!body.contains("sk-not-the-upstream-key"), "{body}");
    assert_eq!(mock.seen().len(), 1);
}

#[test]
fn a_budget_refuses_a_session_once_spent_and_ends_the_one_that_spends_it() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = start(&mock, 1.0, UPSTREAM_KEY);
    // Less than one response costs: the first response spends it.
    let key = new_key(&gw, json!({"max_budget": response_cost() / 2.0}));
    let (mut ws, _) = open(&gw, &key);
    assert_eq!(next(&mut ws).unwrap()["type"], "session.created");
    send(&mut ws, json!({"type": "response.create"}));
    let closed = loop {
        match next(&mut ws) {
            Ok(event) if event["type"] == "error" => {
                assert_eq!(event["error"]["code"], "budget_exceeded", "{event}");
            }
            Ok(_) => {}
            Err(close) => break close,
        }
    };
    let (code, reason) = closed.expect("a close frame with a code");
    assert_eq!(code, 1008, "{reason}");
    // The next session is refused before the upgrade.
    let auth = format!("Bearer {key}");
    let (status, body) = eventually("the spend to count", Duration::from_secs(5), || {
        connect(
            &gw,
            "/v1/realtime?model=gpt-rt",
            &[("authorization", &auth)],
        )
        .err()
    });
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("Budget has been exceeded"), "{body}");
}

/// Token limits hold per response, not per session: each response's
/// tokens count in the window as it ends, and the session whose response
/// fills the key's tpm limit ends (LiteLLM's throttling error, close 1008)
/// instead of running on until it closes; the next session is refused.
#[test]
fn a_tpm_limit_counts_each_response_and_ends_the_session_that_fills_it() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = start(&mock, 1.0, UPSTREAM_KEY);
    let per_response = USAGE.input() + USAGE.output();
    // Room for one response and a half: the second fills it.
    let key = new_key(&gw, json!({"tpm_limit": per_response * 3 / 2}));
    let (mut ws, _) = open(&gw, &key);
    assert_eq!(next(&mut ws).unwrap()["type"], "session.created");
    send(&mut ws, json!({"type": "response.create"}));
    let first = until_done(&mut ws);
    assert!(
        first.iter().all(|e| e["type"] != "error"),
        "the first response fits: {first:?}"
    );
    send(&mut ws, json!({"type": "response.create"}));
    let mut throttled = false;
    let closed = loop {
        match next(&mut ws) {
            Ok(event) if event["type"] == "error" => {
                assert_eq!(event["error"]["type"], "throttling_error", "{event}");
                throttled = true;
            }
            Ok(_) => {}
            Err(close) => break close,
        }
    };
    assert!(throttled, "an error event named the limit");
    let (code, reason) = closed.expect("a close frame with a code");
    assert_eq!(code, 1008, "{reason}");
    assert_eq!(received(&mock, "response.create").len(), 2);
    let auth = format!("Bearer {key}");
    let (status, body) = connect(
        &gw,
        "/v1/realtime?model=gpt-rt",
        &[("authorization", &auth)],
    )
    .map(|_| ())
    .unwrap_err();
    assert_eq!(status, 429, "{body}");
}

#[test]
fn a_session_holds_its_parallel_slot_until_it_ends() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = start(&mock, 1.0, UPSTREAM_KEY);
    let key = new_key(&gw, json!({"max_parallel_requests": 1}));
    let (mut ws, _) = open(&gw, &key);
    assert_eq!(next(&mut ws).unwrap()["type"], "session.created");
    let auth = format!("Bearer {key}");
    let (status, body) = connect(
        &gw,
        "/v1/realtime?model=gpt-rt",
        &[("authorization", &auth)],
    )
    .map(|_| ())
    .unwrap_err();
    assert_eq!(status, 429, "{body}");
    close(ws);
    // Freed once the session ended.
    let (ws, _) = eventually("the slot to be freed", Duration::from_secs(5), || {
        connect(
            &gw,
            "/v1/realtime?model=gpt-rt",
            &[("authorization", &auth)],
        )
        .ok()
    });
    close(ws);
}

#[test]
fn a_frame_over_max_request_size_closes_the_session_with_1009() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    // 10 KiB.
    let gw = start(&mock, 10.0 / 1024.0, UPSTREAM_KEY);
    let (mut ws, _) = open(&gw, MASTER_KEY);
    assert_eq!(next(&mut ws).unwrap()["type"], "session.created");
    let audio = "A".repeat(64 * 1024);
    let event = json!({"type": "input_audio_buffer.append", "audio": audio});
    send(&mut ws, event);
    let closed = loop {
        match next(&mut ws) {
            Ok(_) => {}
            Err(close) => break close,
        }
    };
    let (code, reason) = closed.expect("a close frame with a code");
    assert_eq!(code, u16::from(CloseCode::Size), "{reason}");
    assert!(
        mock.events().is_empty(),
        "the oversize event reached the upstream: {:?}",
        mock.events()
    );
}

#[test]
fn a_key_blocked_during_a_session_ends_it_at_its_next_response() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = start(&mock, 1.0, UPSTREAM_KEY);
    let key = new_key(&gw, json!({}));
    let (mut ws, _) = open(&gw, &key);
    assert_eq!(next(&mut ws).unwrap()["type"], "session.created");
    let resp = gw.post("/key/block", &json!({"key": key}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    send(&mut ws, json!({"type": "response.create"}));
    let mut error = None;
    let closed = loop {
        match next(&mut ws) {
            Ok(event) if event["type"] == "error" => error = Some(event),
            Ok(_) => {}
            Err(close) => break close,
        }
    };
    let (code, reason) = closed.expect("a close frame with a code");
    assert_eq!(code, 1008, "{reason}");
    let error = error.expect("an error event before the close");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("blocked"),
        "{error}"
    );
}

/// Over client TLS the session's socket is split into halves the same way:
/// a session through the gateway's TLS termination relays both ways and
/// closes cleanly.
#[test]
fn a_session_over_client_tls_relays_both_ways() {
    use e2e::pki::{path_str, TestPki};
    use rustls::pki_types::ServerName;
    let pki = TestPki::new();
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = Gateway::spawn(
        &to_yaml(&config(&mock, 1.0, UPSTREAM_KEY)),
        &[],
        e2e::free_port(),
        &[
            "--ssl_certfile_path",
            path_str(&pki.cert),
            "--ssl_keyfile_path",
            path_str(&pki.key),
        ],
    );
    let client = e2e::tls_client::trusting(&pki.ca);
    let port = gw.port();
    let tls = || -> Option<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
        let tcp = TcpStream::connect(("127.0.0.1", port)).ok()?;
        tcp.set_read_timeout(Some(Duration::from_secs(15))).ok()?;
        let name = ServerName::try_from("localhost").ok()?;
        let conn = rustls::ClientConnection::new(client.clone(), name).ok()?;
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock).ok()?;
        }
        Some(stream)
    };
    let stream = eventually(
        "the gateway answering over TLS",
        Duration::from_secs(30),
        tls,
    );
    let mut req = format!("wss://localhost:{port}/v1/realtime?model=gpt-rt")
        .into_client_request()
        .unwrap();
    let auth = format!("Bearer {MASTER_KEY}");
    req.headers_mut()
        .insert("authorization", auth.parse().unwrap());
    let (mut ws, _) = tungstenite::client::client(req, stream)
        .unwrap_or_else(|e| panic!("handshake over TLS: {e}\n{}", gw.output()));
    assert_eq!(next(&mut ws).unwrap()["type"], "session.created");
    for _ in 0..3 {
        ws.send(Message::text(
            json!({"type": "response.create"}).to_string(),
        ))
        .unwrap();
        loop {
            if next(&mut ws).unwrap()["type"] == "response.done" {
                break;
            }
        }
    }
    ws.close(None).unwrap();
    loop {
        match ws.read() {
            Ok(_) => {}
            Err(tungstenite::Error::ConnectionClosed) => break,
            Err(e) => panic!("closing: {e}"),
        }
    }
    assert_eq!(mock.events().len(), 3);
}

/// An `azure/` deployment's session goes to Azure's realtime path with the
/// deployment and version in the query and the key in `api-key`.
#[test]
fn an_azure_session_names_the_deployment_and_sends_api_key() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let config = json!({
        "model_list": [{
            "model_name": "gpt-rt",
            "litellm_params": {
                "model": format!("azure/{UPSTREAM_MODEL}"),
                "api_base": mock.azure_base(),
                "api_key": UPSTREAM_KEY,
                "api_version": "2024-10-01-preview",
            },
        }],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let (mut ws, _) = open(&gw, MASTER_KEY);
    assert_eq!(next(&mut ws).unwrap()["type"], "session.created");
    send(&mut ws, json!({"type": "response.create"}));
    while next(&mut ws).unwrap()["type"] != "response.done" {}
    close(ws);
    let seen = mock.seen();
    assert_eq!(
        seen[0].uri,
        format!("/openai/realtime?api-version=2024-10-01-preview&deployment={UPSTREAM_MODEL}")
    );
    assert_eq!(seen[0].header("api-key"), Some(UPSTREAM_KEY));
    assert_eq!(seen[0].header("authorization"), None);
}

/// The official OpenAI Python SDK's realtime client
/// (`tests/python/test_realtime_sdk.py`) opens a session, gets its
/// response, and is refused with a wrong key.
#[test]
fn the_openai_sdk_realtime_client_works_through_the_gateway() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = start(&mock, 1.0, UPSTREAM_KEY);
    let key = new_key(&gw, json!({}));
    let base_url = format!("http://127.0.0.1:{}/v1", gw.port());
    let run = e2e::python::run_script(
        "test_realtime_sdk.py",
        &[
            ("GATEWAY_BASE_URL", &base_url),
            ("GATEWAY_KEY", &key),
            ("REALTIME_MODEL", "gpt-rt"),
        ],
        Duration::from_secs(120),
    );
    let text = run.output;
    let status = run
        .status
        .unwrap_or_else(|| panic!("test_realtime_sdk.py timed out after 120 s:\n{text}"));
    assert!(status.success(), "{text}\n{}", gw.output());
    assert_eq!(mock.events().len(), 1, "{:?}", mock.events());
}

/// A session's guardrails: `rt-mask` masks emails and `rt-block` blocks
/// US SSNs in what the client sends; `rt-out` masks "Project Falcon" and
/// blocks AWS access keys in what the model says. All `default_on`.
fn guarded(mock: &RealtimeMock) -> Gateway {
    let mut c = config(mock, 1.0, UPSTREAM_KEY);
    c["guardrails"] = guarded_rails();
    Gateway::start(&to_yaml(&c), &[])
}

/// The guardrails of [`guarded`].
fn guarded_rails() -> Value {
    json!([
        {"guardrail_name": "rt-mask", "litellm_params": {"guardrail": "litellm_content_filter",
            "mode": "pre_call", "default_on": true,
            "patterns": [{"pattern_type": "prebuilt", "pattern_name": "email", "action": "MASK"}]}},
        {"guardrail_name": "rt-block", "litellm_params": {"guardrail": "litellm_content_filter",
            "mode": "during_call", "default_on": true,
            "patterns": [{"pattern_type": "prebuilt", "pattern_name": "us_ssn", "action": "BLOCK"}]}},
        {"guardrail_name": "rt-out", "litellm_params": {"guardrail": "litellm_content_filter",
            "mode": "post_call", "default_on": true,
            "patterns": [{"pattern_type": "prebuilt", "pattern_name": "aws_access_key", "action": "BLOCK"}],
            "blocked_words": [{"keyword": "Project Falcon", "action": "MASK"}]}},
    ])
}

/// A session's guardrail runs are recorded as a request's are: LiteLLM's
/// `guardrail_information` on its spend row (a run per content filter
/// and client event, the `post_call` window's once for the session) and
/// the guardrail metrics.
#[test]
fn a_sessions_guardrail_runs_are_on_its_spend_row_and_in_the_metrics() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let mut c = config(&mock, 1.0, UPSTREAM_KEY);
    c["litellm_settings"]["callbacks"] = json!(["prometheus"]);
    c["guardrails"] = guarded_rails();
    let gw = Gateway::start(&to_yaml(&c), &[]);
    let (mut ws, handshake) = open(&gw, MASTER_KEY);
    let call_id = handshake
        .headers()
        .get("x-litellm-call-id")
        .and_then(|v| v.to_str().ok())
        .expect("a call id")
        .to_string();
    assert_eq!(next(&mut ws).unwrap()["type"], "session.created");
    say(&mut ws, "mail me at bob@example.com", "ev_1");
    send(&mut ws, json!({"type": "response.create"}));
    until_done(&mut ws);
    say(&mut ws, "my ssn is 123-45-6789", "ev_ssn");
    assert_eq!(next(&mut ws).unwrap()["type"], "error");
    close(ws);
    let info = eventually("the session's spend row", Duration::from_secs(10), || {
        let rows = gw
            .get("/spend/logs?start_date=2020-01-01&end_date=2100-01-01")
            .json();
        rows.as_array()?
            .iter()
            .find(|r| r["request_id"] == json!(call_id))
            .map(|r| r["guardrail_information"].clone())
    });
    let runs: Vec<(&str, &str, &str, &str)> = info
        .as_array()
        .unwrap_or_else(|| panic!("a list: {info}"))
        .iter()
        .map(|r| {
            (
                r["guardrail_name"].as_str().unwrap(),
                r["guardrail_mode"].as_str().unwrap(),
                r["guardrail_status"].as_str().unwrap(),
                r["guardrail_response"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [
            ("rt-mask", "pre_call", "success", "mask"),
            ("rt-block", "during_call", "success", "allow"),
            ("rt-mask", "pre_call", "success", "allow"),
            ("rt-block", "during_call", "guardrail_intervened", "block"),
            ("rt-out", "post_call", "success", "allow"),
        ]
    );
    assert!(!info.to_string().contains("bob@"), "no text of the session");
    let metrics = gw.get("/metrics").text();
    for line in [
        r#"litellm_guardrail_requests_total{guardrail_name="rt-mask",status="intervened",hook_type="pre_call"} 1"#,
        r#"litellm_guardrail_requests_total{guardrail_name="rt-mask",status="success",hook_type="pre_call"} 1"#,
        r#"litellm_guardrail_errors_total{guardrail_name="rt-block",error_type="blocked",hook_type="during_call"} 1"#,
        r#"litellm_guardrail_requests_total{guardrail_name="rt-out",status="success",hook_type="post_call"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
}

fn say(ws: &mut Ws, text: &str, event_id: &str) {
    send(
        ws,
        json!({"type": "conversation.item.create", "event_id": event_id, "item": {"type": "message",
            "role": "user", "content": [{"type": "input_text", "text": text}]}}),
    );
}

/// Reads events up to and including `response.done`.
fn until_done(ws: &mut Ws) -> Vec<Value> {
    let mut got = Vec::new();
    loop {
        let event = next(ws).expect("an event");
        let done = event["type"] == "response.done";
        got.push(event);
        if done {
            return got;
        }
    }
}

/// The events the mock received of type `kind`.
fn received(mock: &RealtimeMock, kind: &str) -> Vec<Value> {
    mock.events()
        .into_iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

#[test]
fn a_sessions_guardrails_mask_or_refuse_what_the_client_sends() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = guarded(&mock);
    let (mut ws, handshake) = open(&gw, MASTER_KEY);
    assert_eq!(
        handshake
            .headers()
            .get("x-litellm-applied-guardrails")
            .and_then(|v| v.to_str().ok()),
        Some("rt-mask,rt-block,rt-out")
    );
    assert_eq!(next(&mut ws).unwrap()["type"], "session.created");
    // Masked on the way: the instructions and a message.
    send(
        &mut ws,
        json!({"type": "session.update", "session": {"instructions": "escalate to carol@example.org"}}),
    );
    say(&mut ws, "mail me at bob@example.com", "ev_1");
    send(&mut ws, json!({"type": "response.create"}));
    let answer = until_done(&mut ws);
    let done = answer
        .iter()
        .find(|e| e["type"] == "response.text.done")
        .expect("text done");
    assert_eq!(done["text"], "You said: mail me at [EMAIL_REDACTED]");
    let updates = received(&mock, "session.update");
    assert_eq!(
        updates[0]["session"]["instructions"],
        "escalate to [EMAIL_REDACTED]"
    );
    // Refused: the client gets LiteLLM's error event, the upstream never
    // sees the message, nor the response.create of its turn.
    say(&mut ws, "my ssn is 123-45-6789", "ev_ssn");
    send(&mut ws, json!({"type": "response.create"}));
    let refusal = next(&mut ws).unwrap();
    assert_eq!(refusal["type"], "error", "{refusal}");
    assert_eq!(refusal["error"]["type"], "guardrail_violation");
    assert_eq!(refusal["error"]["code"], "content_policy_violation");
    assert_eq!(
        refusal["error"]["message"],
        "Content blocked: us_ssn pattern detected"
    );
    assert_eq!(refusal["error"]["event_id"], "ev_ssn");
    // A refused tool output goes on as LiteLLM's placeholder.
    send(
        &mut ws,
        json!({"type": "conversation.item.create", "item": {"type": "function_call_output",
            "call_id": "call_1", "output": "{\"ssn\": \"123-45-6789\"}"}}),
    );
    assert_eq!(
        next(&mut ws).unwrap()["error"]["type"],
        "guardrail_violation"
    );
    // The session goes on.
    say(&mut ws, "hello", "ev_2");
    send(&mut ws, json!({"type": "response.create"}));
    let answer = until_done(&mut ws);
    assert!(answer
        .iter()
        .any(|e| e["type"] == "response.text.done" && e["text"] == "You said: hello"));
    close(ws);
    let all = serde_json::to_string(&mock.events()).unwrap();
    assert!(
        !all.contains("bob@") && !all.contains("carol@") && !all.contains("123-45-6789"),
        "{all}"
    );
    assert_eq!(received(&mock, "response.create").len(), 2, "{all}");
    let outputs: Vec<Value> = received(&mock, "conversation.item.create")
        .into_iter()
        .filter(|e| e["item"]["type"] == "function_call_output")
        .collect();
    assert_eq!(
        outputs[0]["item"]["output"],
        "{\"error\": \"Tool output blocked by content policy\"}"
    );
}

#[test]
fn a_sessions_post_call_guardrails_mask_the_models_text_and_a_block_cancels_it() {
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = guarded(&mock);
    let key = new_key(&gw, json!({}));
    let (mut ws, _) = open(&gw, &key);
    assert_eq!(next(&mut ws).unwrap()["type"], "session.created");
    // The mock echoes in deltas of 8 bytes: the keyword is split across
    // them, and masked whole.
    say(&mut ws, "we start Project Falcon today", "ev_1");
    send(&mut ws, json!({"type": "response.create"}));
    let answer = until_done(&mut ws);
    let text = serde_json::to_string(&answer).unwrap();
    assert!(!text.contains("Falcon"), "{text}");
    let masked = "You said: we start [KEYWORD_REDACTED] today";
    let deltas: String = answer
        .iter()
        .filter(|e| e["type"] == "response.text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(deltas, masked, "{text}");
    let of = |kind: &str| {
        answer
            .iter()
            .find(|e| e["type"] == kind)
            .expect(kind)
            .clone()
    };
    assert_eq!(of("response.text.done")["text"], masked);
    assert_eq!(of("response.content_part.done")["part"]["text"], masked);
    assert_eq!(
        of("response.output_item.done")["item"]["content"][0]["text"],
        masked
    );
    let done = of("response.done");
    assert_eq!(done["response"]["output"][0]["content"][0]["text"], masked);
    // A block: the error event, the rest of the text dropped, the
    // response cancelled upstream (whose error about it, the response
    // having ended, is not relayed); the response is still charged.
    say(&mut ws, "the key is AKIAIOSFODNN7EXAMPLE ok", "ev_2");
    send(&mut ws, json!({"type": "response.create"}));
    let answer = until_done(&mut ws);
    let text = serde_json::to_string(&answer).unwrap();
    assert!(!text.contains("AKIA"), "{text}");
    let errors: Vec<&Value> = answer.iter().filter(|e| e["type"] == "error").collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert_eq!(errors[0]["error"]["type"], "guardrail_violation");
    assert_eq!(
        errors[0]["error"]["message"],
        "Content blocked: aws_access_key pattern detected"
    );
    assert!(
        !answer.iter().any(|e| e["type"] == "response.text.done"),
        "{text}"
    );
    // The next exchange: its answer, and no stray error before it.
    say(&mut ws, "bye", "ev_3");
    send(&mut ws, json!({"type": "response.create"}));
    let answer = until_done(&mut ws);
    assert!(answer.iter().all(|e| e["type"] != "error"), "{answer:?}");
    close(ws);
    let cancels = received(&mock, "response.cancel");
    assert_eq!(cancels.len(), 1);
    assert_eq!(cancels[0]["response_id"], "resp_echo");
    let spent = eventually("the key's spend", Duration::from_secs(5), || {
        let info = gw.get(&format!("/key/info?key={key}")).json();
        info["info"]["spend"].as_f64().filter(|s| *s > 0.0)
    });
    assert!((spent - 3.0 * response_cost()).abs() < 1e-12, "{spent}");
}

/// LiteLLM 1.110.2's WebRTC pair (`/v1/realtime/client_secrets`,
/// `/v1/realtime/calls`) and transcription sessions are refused with a
/// 501 naming the WebSocket route instead, under `/v1`, `/` and
/// `/openai/v1` alike; the last never reaches the `/openai/*`
/// pass-through, which would hand out an OpenAI ephemeral key no budget
/// sees.
#[test]
fn litellms_webrtc_routes_are_refused_clearly_and_never_passed_through() {
    let answer =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
    let upstream = e2e::RawUpstream::start(answer.to_vec(), false);
    let api_base = upstream.api_base();
    let base = api_base.trim_end_matches("/v1");
    let mock = RealtimeMock::start(UPSTREAM_MODEL, UPSTREAM_KEY);
    let gw = Gateway::start(
        &to_yaml(&config(&mock, 1.0, UPSTREAM_KEY)),
        &[
            ("OPENAI_API_BASE", base),
            ("OPENAI_API_KEY", "sk-upstream-secret"),
        ],
    );
    let key = new_key(&gw, json!({}));
    let paths = [
        "/v1/realtime/client_secrets",
        "/realtime/client_secrets",
        "/openai/v1/realtime/client_secrets",
        "/v1/realtime/calls",
        "/realtime/calls/",
        "/openai/v1/realtime/calls",
        "/v1/realtime/transcription_sessions",
        "/openai/v1/realtime/transcription_sessions",
        "/v1/realtime/translations/client_secrets",
        "/realtime/translations/calls",
    ];
    for path in paths {
        let resp = gw.post_as(
            &key,
            path,
            &json!({"session": {"type": "realtime", "model": "gpt-rt"}}),
        );
        assert_eq!(resp.status, 501, "{path}: {}", resp.text());
        let error = &resp.json()["error"];
        assert_eq!(error["type"], "not_implemented_error", "{path}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(path) && message.contains("/v1/realtime?model="),
            "{path}: {message}"
        );
    }
    assert_eq!(
        upstream.requests(),
        0,
        "a WebRTC route reached the pass-through's upstream"
    );
    // The pass-through itself is live: the refusal above is the route's.
    let resp = gw.call(
        "GET",
        "/openai/v1/models",
        &[("Authorization", &format!("Bearer {key}"))],
        b"",
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(upstream.requests(), 1);
}
