//! A request's own `fallbacks`, checked as LiteLLM checks them before the
//! request runs: a fallback the key may not use is refused as that model
//! itself would be (not skipped), one nobody serves is LiteLLM's
//! `Invalid model name`, wherever in the field it is named; the
//! `[{"model": "name"}]` form is a fallback like a plain name; an entry
//! bringing its own `messages` (LiteLLM's `[{"model": ..., "messages":
//! [...]}]`) is served with them, as LiteLLM updates the call with the
//! entry.

use e2e::{assert_error, error_message, openai_model, to_yaml, Gateway, RawUpstream, MASTER_KEY};
use serde_json::{json, Value};

/// An api_base nothing listens on.
fn dead_base() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/v1")
}

/// `dead` (nothing listening, no retries), and the mock groups `a` and `b`.
fn start() -> Gateway {
    let mock = |name: &str| {
        json!({
            "model_name": name,
            "litellm_params": {"model": format!("mock/{name}"), "mock_response": format!("from {name}")},
        })
    };
    let config = json!({
        "model_list": [openai_model("dead", "dead", &dead_base(), json!({})), mock("a"), mock("b")],
        "router_settings": {"num_retries": 0},
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start(&to_yaml(&config), &[])
}

/// A chat request for `model` with `fallbacks`, sent with `key`.
fn chat(gw: &Gateway, key: &str, model: &str, fallbacks: Value) -> e2e::Response {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    if !fallbacks.is_null() {
        body["fallbacks"] = fallbacks;
    }
    let auth = format!("Bearer {key}");
    gw.call(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

fn content(resp: &e2e::Response) -> String {
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn request_fallbacks_are_checked_before_the_request_runs() {
    let gw = start();
    let key = gw
        .post("/key/generate", &json!({"models": ["dead", "a"]}))
        .json()["key"]
        .as_str()
        .expect("key")
        .to_string();
    // What the key gets asking for `b` itself.
    let own = chat(&gw, &key, "b", Value::Null);
    let denied = assert_error(&own, own.status);
    assert_eq!(denied["type"], "key_model_access_denied", "{denied:?}");

    // A fallback the key may not use, in either form, for this group or
    // another one: the same refusal, before `dead` is called.
    for fallbacks in [
        json!(["b"]),
        json!([{"model": "b"}]),
        json!([{"dead": ["a", "b"]}]),
        json!([{"other": ["b"]}]),
    ] {
        let resp = chat(&gw, &key, "dead", fallbacks.clone());
        let err = assert_error(&resp, own.status);
        assert_eq!(
            err["type"], "key_model_access_denied",
            "{fallbacks}: {err:?}"
        );
    }
    // A fallback nobody serves is LiteLLM's invalid model name (for a key
    // that may use any model; this key is refused it first, as there).
    let resp = chat(&gw, MASTER_KEY, "dead", json!(["a", "nope"]));
    let err = assert_error(&resp, 400);
    assert!(
        error_message(&err).contains("Invalid model name passed in model=nope"),
        "{err:?}"
    );
    let err = assert_error(&chat(&gw, &key, "dead", json!(["nope"])), own.status);
    assert_eq!(err["type"], "key_model_access_denied", "{err:?}");
    // Allowed fallbacks serve, as a name or as {"model": name}.
    for fallbacks in [
        json!(["a"]),
        json!([{"model": "a"}]),
        json!([{"dead": ["a"]}]),
    ] {
        let resp = chat(&gw, &key, "dead", fallbacks.clone());
        assert_eq!(content(&resp), "from a", "{fallbacks}");
    }
    // An entry with its own request is checked like any other fallback.
    let own_request =
        json!([{"model": "nope", "messages": [{"role": "user", "content": "other"}]}]);
    let resp = chat(&gw, MASTER_KEY, "dead", own_request);
    assert_error(&resp, 400);
}

/// An OpenAI chat answer.
const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"upstream-gpt","choices":[{"index":0,"message":{"role":"assistant","content":"from the recorder"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}"#;

#[test]
fn a_fallback_with_its_own_messages_is_sent_them() {
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{ANSWER}",
        ANSWER.len()
    );
    let raw = RawUpstream::start(reply.into_bytes(), false);
    let config = json!({
        "model_list": [
            openai_model("dead", "dead", &dead_base(), json!({})),
            openai_model("recorded", "recorded", &raw.api_base(), json!({})),
        ],
        "router_settings": {"num_retries": 0},
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let sent = || String::from_utf8_lossy(&raw.last_request()).to_string();

    let own = json!([{"model": "recorded", "temperature": 0.25,
        "messages": [{"role": "user", "content": "the fallback's own question"}]}]);
    let resp = chat(&gw, MASTER_KEY, "dead", own);
    assert_eq!(content(&resp), "from the recorder");
    let body = sent();
    assert!(body.contains("the fallback's own question"), "{body}");
    assert!(
        body.contains("0.25"),
        "the entry's other parameters too: {body}"
    );
    assert!(
        !body.contains("\"hi\""),
        "not the request's own messages: {body}"
    );
    assert!(!body.contains("fallbacks"), "{body}");

    // A plain fallback beside it is sent the request's own messages.
    let mixed =
        json!([{"model": "dead", "messages": [{"role": "user", "content": "x"}]}, "recorded"]);
    let resp = chat(&gw, MASTER_KEY, "dead", mixed);
    assert_eq!(content(&resp), "from the recorder");
    let body = sent();
    assert!(body.contains("\"hi\""), "{body}");
    assert!(!body.contains("\"x\""), "{body}");
    assert_eq!(raw.requests(), 2);
}
