//! Authentication from the request head (issue 10): a request without a
//! valid credential is answered before its body is read and before
//! `100 Continue`, so an unauthenticated client cannot make the gateway
//! buffer a body. A refused body that is small and already on its way is
//! dropped and the connection kept; otherwise the connection closes.

use std::time::Duration;

use e2e::{assert_error, request, Gateway, MASTER_KEY};
use serde_json::json;

fn start() -> Gateway {
    Gateway::start_json(
        &json!({
            "model_list": [{"model_name": "chat-fast", "litellm_params": {"model": "mock/chat-fast"}}],
            "general_settings": {"master_key": MASTER_KEY},
        }),
        &[],
    )
}

/// A head announcing a 10 MB body (under the 64 MB limit), with `extra`
/// headers; the body is never sent.
fn big_head(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut headers = vec![("Content-Length", "10000000")];
    headers.extend_from_slice(extra);
    request("POST", path, &headers, b"")
}

#[test]
fn a_head_without_a_valid_key_gets_its_401_without_sending_the_body() {
    let gw = start();
    for auth in [None, Some("Bearer sk-not-a-key-at-all")] {
        let extra: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", *a)).collect();
        let mut conn = gw.connect();
        conn.send(&big_head("/v1/chat/completions", &extra));
        let resp = conn.read_response();
        assert_error(&resp, 401);
        assert!(
            conn.closed_within(Duration::from_secs(10)),
            "{auth:?}: the body was not read, so the connection closes"
        );
    }
}

#[test]
fn a_non_admin_key_gets_its_403_before_a_management_body() {
    let gw = start();
    let key = gw
        .post("/key/generate", &json!({}))
        .expect_status(200)
        .json()["key"]
        .as_str()
        .expect("a key")
        .to_string();
    let auth = format!("Bearer {key}");
    let mut conn = gw.connect();
    conn.send(&big_head("/key/generate", &[("Authorization", &auth)]));
    assert_error(&conn.read_response(), 403);
    assert!(conn.closed_within(Duration::from_secs(10)));
}

#[test]
fn no_100_continue_for_a_refused_head() {
    let gw = start();
    let mut conn = gw.connect();
    conn.send(&big_head(
        "/v1/embeddings",
        &[
            ("Authorization", "Bearer sk-wrong-key-1"),
            ("Expect", "100-continue"),
        ],
    ));
    let resp = conn.read_response();
    assert_error(&resp, 401);
    assert!(conn.closed_within(Duration::from_secs(10)));
}

#[test]
fn a_small_refused_body_is_dropped_and_the_connection_kept() {
    let gw = start();
    let mut conn = gw.connect();
    let body = json!({"model": "chat-fast", "messages": [{"role": "user", "content": "hi"}]});
    let refused = request(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", "Bearer sk-wrong-key-2")],
        body.to_string().as_bytes(),
    );
    assert_error(&conn.roundtrip(&refused), 401);
    let ok = request(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", &format!("Bearer {MASTER_KEY}"))],
        body.to_string().as_bytes(),
    );
    conn.roundtrip(&ok).expect_status(200);
}

#[test]
fn a_refused_chunked_body_is_not_read() {
    let gw = start();
    let mut conn = gw.connect();
    let mut head = request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", "Bearer sk-wrong-key-3"),
            ("Transfer-Encoding", "chunked"),
        ],
        b"",
    );
    // The first chunk only: the body never ends.
    head.extend_from_slice(b"10\r\n0123456789abcdef\r\n");
    conn.send(&head);
    assert_error(&conn.read_response(), 401);
    assert!(conn.closed_within(Duration::from_secs(10)));
}
