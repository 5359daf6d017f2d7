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

/// `general_settings.enforced_params` holds every caller, the master key
/// included, as LiteLLM's `_enforced_params_check` does (it reads the
/// config's list before the key's); it used to stop start-up.
/// `service_account_settings.enforced_params` adds to it for keys whose
/// metadata names a `service_account_id`.
#[test]
fn the_configs_enforced_params_hold_every_caller() {
    let config = json!({
        "model_list": [{
            "model_name": "m",
            "litellm_params": {"model": "mock/m", "mock_response": "hello"},
        }],
        "general_settings": {
            "master_key": MASTER_KEY,
            "enforced_params": ["user"],
            "service_account_settings": {"enforced_params": ["metadata.team"]},
        },
    });
    let gw = Gateway::start_json(&config, &[]);
    let err = assert_error(&gw.post("/v1/chat/completions", &chat(json!({}))), 400);
    assert_eq!(
        error_message(&err),
        "BadRequest please pass param=user in request body. This is a required param",
        "{err:?}"
    );
    assert_eq!(err["param"], "user", "{err:?}");
    let resp = gw.post("/v1/chat/completions", &chat(json!({"user": "u-1"})));
    assert_eq!(resp.status, 200, "{}", resp.text());

    // A key is held to the config's list and then to its own.
    let made = gw
        .post(
            "/key/generate",
            &json!({"enforced_params": ["metadata.app"]}),
        )
        .expect_status(200)
        .json();
    let key = made["key"].as_str().expect("key");
    let err = assert_error(
        &gw.post_as(key, "/v1/chat/completions", &chat(json!({}))),
        400,
    );
    assert_eq!(err["param"], "user", "{err:?}");
    let err = assert_error(
        &gw.post_as(key, "/v1/chat/completions", &chat(json!({"user": "u"}))),
        400,
    );
    assert_eq!(err["param"], "metadata.app", "{err:?}");
    let both = chat(json!({"user": "u", "metadata": {"app": "a"}}));
    let resp = gw.post_as(key, "/v1/chat/completions", &both);
    assert_eq!(resp.status, 200, "{}", resp.text());

    // A service account's key also carries the service accounts' list.
    let made = gw
        .post(
            "/key/generate",
            &json!({"metadata": {"service_account_id": "billing-bot"}}),
        )
        .expect_status(200)
        .json();
    let service = made["key"].as_str().expect("key");
    let err = assert_error(
        &gw.post_as(service, "/v1/chat/completions", &chat(json!({"user": "u"}))),
        400,
    );
    assert_eq!(
        error_message(&err),
        "BadRequest please pass param=[metadata][team] in request body. This is a required param",
        "{err:?}"
    );
    let complete = chat(json!({"user": "u", "metadata": {"team": "t"}}));
    let resp = gw.post_as(service, "/v1/chat/completions", &complete);
    assert_eq!(resp.status, 200, "{}", resp.text());
}

/// A config whose `enforced_params` is not a list of names stops start-up
/// naming it.
#[test]
fn a_malformed_enforced_params_setting_stops_start_up() {
    let config = json!({
        "model_list": [{"model_name": "m", "litellm_params": {"model": "mock/m"}}],
        "general_settings": {"master_key": MASTER_KEY, "enforced_params": "user"},
    });
    let mut gw = Gateway::spawn(&e2e::to_yaml(&config), &[], e2e::free_port(), &[]);
    let status = gw
        .wait_exit(std::time::Duration::from_secs(20))
        .expect("the gateway exits");
    assert!(!status.success());
    assert!(
        gw.output().contains("general_settings.enforced_params"),
        "{}",
        gw.output()
    );
}

const BOUNDARY: &str = "----enforced-7MA4YWxkTrZu0gW";

/// A transcription form: `fields` before the audio file (`len` bytes),
/// `after` behind it.
fn form(fields: &[(&str, &str)], len: usize, after: &[(&str, &str)]) -> Vec<u8> {
    let part = |(name, value): &(&str, &str)| {
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        )
    };
    let mut body: Vec<u8> = fields.iter().flat_map(|f| part(f).into_bytes()).collect();
    body.extend_from_slice(
        format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"talk.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF").as_bytes(),
    );
    body.extend((4..len).map(|i| (i % 251) as u8));
    body.extend_from_slice(b"\r\n");
    body.extend(after.iter().flat_map(|f| part(f).into_bytes()));
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// A key with `enforced_params` on multipart forms: LiteLLM's proxy reads
/// a transcription's form fields (the file aside) as the request's members
/// and decodes its `metadata` field's JSON, so `user` and
/// `metadata.generation_name` sent as fields satisfy it (before, every
/// form of such a key was refused: the check saw no JSON members), and a
/// form without them is refused with LiteLLM's message. A form streamed to
/// the upstream (over 256 KiB) is checked on the fields before its file.
#[test]
fn a_forms_fields_satisfy_enforced_params() {
    let mock = e2e::MockServer::start(&[]);
    let config = json!({
        "model_list": [{"model_name": "whisper", "litellm_params": {"model": "openai/whisper-1", "api_key": "sk-up", "api_base": mock.api_base()}}],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start_json(&config, &[]);
    let made = gw
        .post(
            "/key/generate",
            &json!({"enforced_params": ["user", "metadata.generation_name"]}),
        )
        .expect_status(200)
        .json();
    let key = made["key"].as_str().expect("key");
    let send = |body: &[u8]| {
        let auth = format!("Bearer {key}");
        let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
        gw.call(
            "POST",
            "/v1/audio/transcriptions",
            &[("Authorization", &auth), ("Content-Type", &content_type)],
            body,
        )
    };
    let metadata = r#"{"generation_name": "g"}"#;
    let full = [
        ("model", "whisper"),
        ("user", "u-1"),
        ("metadata", metadata),
    ];
    let resp = send(&form(&full, 16_000, &[]));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["text"], "mock transcript of talk.wav");

    // Fields after the file count too when the form is read whole.
    let resp = send(&form(&full[..1], 16_000, &full[1..]));
    assert_eq!(resp.status, 200, "{}", resp.text());

    let err = assert_error(&send(&form(&full[..2], 16_000, &[])), 400);
    assert_eq!(
        error_message(&err),
        "BadRequest please pass param=[metadata][generation_name] in request body. This is a required param",
        "{err:?}"
    );
    let err = assert_error(&send(&form(&[("model", "whisper")], 16_000, &[])), 400);
    assert_eq!(err["param"], "user", "{err:?}");

    // Streamed (over 256 KiB): the fields before the file are checked.
    let resp = send(&form(&full, 300_000, &[]));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let err = assert_error(&send(&form(&full[..1], 300_000, &full[1..])), 400);
    assert_eq!(err["param"], "user", "{err:?}");
    assert!(
        error_message(&err).ends_with("send it before the file)"),
        "{err:?}"
    );
}
