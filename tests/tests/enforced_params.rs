//! A key's `enforced_params` (issue 35; LiteLLM 1.110's
//! `_enforced_params_check`): the parameters every LLM request of the key
//! must carry, a top-level name (`user`) or one level down
//! (`metadata.generation_name`); a request without one is refused with
//! LiteLLM's message naming it, before any upstream call. Kept in the
//! key's `metadata`, as LiteLLM keeps them. Also a key's `key_type`, which
//! LiteLLM turns into the key's `allowed_routes` at `/key/generate`.

use e2e::{assert_error, error_message, Gateway, MASTER_KEY};
use serde_json::{json, Value};

fn gateway() -> Gateway {
    let config = json!({
        "model_list": [{
            "model_name": "m",
            "litellm_params": {"model": "mock/m", "mock_response": "hello"},
        }],
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start_json(&config, &[])
}

fn chat(extra: Value) -> Value {
    let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

#[test]
fn a_keys_enforced_params_are_required_on_its_requests() {
    let gw = gateway();
    let made = gw
        .post(
            "/key/generate",
            &json!({"enforced_params": ["user", "metadata.generation_name"]}),
        )
        .expect_status(200)
        .json();
    let key = made["key"].as_str().expect("key").to_string();
    let info = gw
        .get(&format!("/key/info?key={key}"))
        .expect_status(200)
        .json();
    assert_eq!(
        info["info"]["metadata"]["enforced_params"],
        json!(["user", "metadata.generation_name"]),
        "{info}"
    );

    let err = assert_error(
        &gw.post_as(&key, "/v1/chat/completions", &chat(json!({}))),
        400,
    );
    assert_eq!(
        error_message(&err),
        "BadRequest please pass param=user in request body. This is a required param",
        "{err:?}"
    );
    assert_eq!(err["param"], "user", "{err:?}");

    let without_name = chat(json!({"user": "u-1", "metadata": {"other": "x"}}));
    let err = assert_error(
        &gw.post_as(&key, "/v1/chat/completions", &without_name),
        400,
    );
    assert_eq!(
        error_message(&err),
        "BadRequest please pass param=[metadata][generation_name] in request body. This is a required param",
        "{err:?}"
    );

    let complete = chat(json!({"user": "u-1", "metadata": {"generation_name": "g"}}));
    let resp = gw.post_as(&key, "/v1/chat/completions", &complete);
    assert_eq!(resp.status, 200, "{}", resp.text());

    // Other endpoints too (LiteLLM checks every LLM route).
    let emb = json!({"model": "m", "input": "x"});
    assert_error(&gw.post_as(&key, "/v1/embeddings", &emb), 400);

    // A key without them, and the master key, are not held to them.
    let plain = gw
        .post("/key/generate", &json!({}))
        .expect_status(200)
        .json();
    let plain = plain["key"].as_str().expect("key");
    let resp = gw.post_as(plain, "/v1/chat/completions", &chat(json!({})));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let resp = gw.post("/v1/chat/completions", &chat(json!({})));
    assert_eq!(resp.status, 200, "{}", resp.text());

    // `metadata` alone is always present on the routes where LiteLLM's
    // proxy adds its own metadata to the body it checks.
    let made = gw
        .post(
            "/key/generate",
            &json!({"metadata": {"enforced_params": ["metadata"]}}),
        )
        .expect_status(200)
        .json();
    let loose = made["key"].as_str().expect("key");
    let resp = gw.post_as(loose, "/v1/chat/completions", &chat(json!({})));
    assert_eq!(resp.status, 200, "{}", resp.text());
}

/// `key_type` presets the key's `allowed_routes` as LiteLLM's
/// `handle_key_type`: a `management` key may not call the LLM routes, an
/// `llm_api` key may; an unknown type is a 400 naming the field.
#[test]
fn key_type_presets_the_keys_routes() {
    let gw = gateway();
    let key_of = |key_type: &str| {
        let made = gw
            .post("/key/generate", &json!({"key_type": key_type}))
            .expect_status(200)
            .json();
        made["key"].as_str().expect("key").to_string()
    };
    let llm = key_of("llm_api");
    let info = gw
        .get(&format!("/key/info?key={llm}"))
        .expect_status(200)
        .json();
    assert_eq!(
        info["info"]["allowed_routes"],
        json!(["llm_api_routes"]),
        "{info}"
    );
    let resp = gw.post_as(&llm, "/v1/chat/completions", &chat(json!({})));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let management = key_of("management");
    let resp = gw.post_as(&management, "/v1/chat/completions", &chat(json!({})));
    assert_error(&resp, 403);
    let plain = key_of("default");
    let resp = gw.post_as(&plain, "/v1/chat/completions", &chat(json!({})));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let err = assert_error(&gw.post("/key/generate", &json!({"key_type": "root"})), 400);
    assert_eq!(err["param"], "key_type", "{err:?}");
}
