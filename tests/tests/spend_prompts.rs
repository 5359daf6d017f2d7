//! LiteLLM's `general_settings.store_prompts_in_spend_logs` end to end on
//! Postgres: a row of `LiteLLM_SpendLogs` keeps the request body in
//! `proxy_server_request` and the answer (a stream put together into the
//! whole answer) in `response`, `messages` staying `{}`; a string longer
//! than `MAX_STRING_LENGTH_PROMPT_IN_DB` keeps its first 35% and last 65%
//! around LiteLLM's note; a key's or its team's
//! `metadata.store_prompts_in_spend_logs: false` turns it off; and without
//! the setting both columns stay `{}`; with the response cache, the miss and
//! the hit both keep them.

use e2e::{to_yaml, Gateway, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// The mock deployment's answer.
const ANSWER: &str = "one two three four five";

/// LiteLLM's note inside a truncated string (`LITELLM_TRUNCATION_DB_SAFEGUARD_NOTE`).
const NOTE: &str = "Truncation is a DB storage safeguard. Full, untruncated data is logged to \
logging callbacks (OTEL, Datadog, etc.). To increase the truncation limit, set \
`MAX_STRING_LENGTH_PROMPT_IN_DB` in your env.";

/// A gateway on `db` with `general` added to its `general_settings`, and
/// `MAX_STRING_LENGTH_PROMPT_IN_DB=100`.
fn start(db: &TestDb, general: Value) -> Gateway {
    start_with(db, general, json!({}))
}

/// [`start`] with `litellm_settings`.
fn start_with(db: &TestDb, general: Value, litellm_settings: Value) -> Gateway {
    let mut general_settings = json!({"master_key": MASTER_KEY});
    if let (Some(all), Value::Object(more)) = (general_settings.as_object_mut(), general) {
        all.extend(more);
    }
    let config = json!({
        "model_list": [{
            "model_name": "m",
            "litellm_params": {"model": "mock/m", "mock_response": ANSWER},
        }],
        "general_settings": general_settings,
        "litellm_settings": litellm_settings,
    });
    Gateway::start(
        &to_yaml(&config),
        &[
            ("DATABASE_URL", db.url()),
            ("MAX_STRING_LENGTH_PROMPT_IN_DB", "100"),
        ],
    )
}

/// A new key made with `body` added to `/key/generate`'s.
fn generate(gw: &Gateway, body: Value) -> String {
    let resp = gw.post("/key/generate", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["key"].as_str().expect("key").to_string()
}

/// Sends `body` to `/v1/chat/completions` with `key`: the answer and its
/// call id.
fn chat(gw: &Gateway, key: &str, body: &Value) -> (e2e::Response, String) {
    let resp = gw.post_as(key, "/v1/chat/completions", body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let call_id = resp
        .header("x-litellm-call-id")
        .expect("call id")
        .to_string();
    (resp, call_id)
}

/// The row's `messages`, `proxy_server_request` and `response` columns,
/// once the row is written.
fn columns(db: &TestDb, call_id: &str) -> [String; 3] {
    let column = |name: &str| {
        db.query(&format!(
            r#"SELECT {name}::text FROM "LiteLLM_SpendLogs" WHERE request_id = '{call_id}'"#
        ))
    };
    e2e::eventually("the row", Duration::from_secs(10), || {
        let stored = column("request_id");
        (!stored.is_empty()).then_some(())
    });
    ["messages", "proxy_server_request", "response"].map(column)
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn rows_keep_the_request_and_the_answer_with_long_strings_cut() {
    let db = TestDb::create();
    let gw = start(&db, json!({"store_prompts_in_spend_logs": true}));
    let key = generate(&gw, json!({}));
    let long = "a".repeat(100) + &"b".repeat(100) + &"c".repeat(100);
    let body = json!({
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "system", "content": long}, {"role": "user", "content": "hi"}],
    });
    let (resp, call_id) = chat(&gw, &key, &body);
    let [messages, request, response] = columns(&db, &call_id);
    assert_eq!(messages, "{}", "LiteLLM keeps `messages` empty");
    // 35 of the first characters and 65 of the last, around the note.
    let cut = format!(
        "{}... (litellm_truncated skipped 200 chars. {NOTE}) ...{}",
        "a".repeat(35),
        "c".repeat(65)
    );
    let mut expected = body.clone();
    expected["messages"][0]["content"] = json!(cut);
    assert_eq!(parse(&request), expected);
    let answer = resp.json();
    let stored = parse(&response);
    assert_eq!(stored["id"], answer["id"], "{stored}");
    assert_eq!(stored["choices"], answer["choices"], "{stored}");
    assert_eq!(stored["choices"][0]["message"]["content"], ANSWER);
    assert_eq!(stored["usage"], answer["usage"]);
    // `/spend/logs` shows both as JSON, as LiteLLM's does.
    let logs = gw.get(&format!("/spend/logs?request_id={call_id}"));
    assert_eq!(logs.status, 200, "{}", logs.text());
    let row = &logs.json()[0];
    assert_eq!(row["proxy_server_request"], expected, "{row}");
    assert_eq!(row["response"]["choices"], answer["choices"], "{row}");
}

#[test]
fn a_streamed_answer_is_kept_whole() {
    let db = TestDb::create();
    let gw = start(&db, json!({"store_prompts_in_spend_logs": true}));
    let key = generate(&gw, json!({}));
    let body = json!({
        "model": "m",
        "stream": true,
        "messages": [{"role": "user", "content": "hi"}],
    });
    let (resp, call_id) = chat(&gw, &key, &body);
    let text = resp.text();
    assert!(text.contains("data: [DONE]"), "{text}");
    // What the client read, chunk by chunk.
    let streamed: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(streamed, ANSWER);
    let [messages, request, response] = columns(&db, &call_id);
    assert_eq!(messages, "{}");
    assert_eq!(parse(&request), body);
    let stored = parse(&response);
    assert_eq!(stored["object"], "chat.completion", "{stored}");
    assert_eq!(
        stored["choices"][0]["message"]["content"], ANSWER,
        "{stored}"
    );
    assert_eq!(
        stored["choices"][0]["message"]["role"], "assistant",
        "{stored}"
    );
}

#[test]
fn a_key_or_its_team_turns_it_off() {
    let db = TestDb::create();
    let gw = start(&db, json!({"store_prompts_in_spend_logs": true}));
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let off_key = generate(
        &gw,
        json!({"metadata": {"store_prompts_in_spend_logs": false}}),
    );
    let team = gw.post(
        "/team/new",
        &json!({"metadata": {"store_prompts_in_spend_logs": false}}),
    );
    assert_eq!(team.status, 200, "{}", team.text());
    let team_id = team.json()["team_id"]
        .as_str()
        .expect("team_id")
        .to_string();
    let team_key = generate(&gw, json!({"team_id": team_id}));
    // A key saying `true` cannot turn it on against its team.
    let both = generate(
        &gw,
        json!({"team_id": team_id, "metadata": {"store_prompts_in_spend_logs": true}}),
    );
    for key in [&off_key, &team_key, &both] {
        let (_, call_id) = chat(&gw, key, &body);
        let [messages, request, response] = columns(&db, &call_id);
        assert_eq!(
            [messages, request, response],
            ["{}", "{}", "{}"].map(String::from)
        );
    }
    // The switch is per key: another key's row keeps its prompt.
    let on_key = generate(&gw, json!({}));
    let (_, call_id) = chat(&gw, &on_key, &body);
    let [_, request, _] = columns(&db, &call_id);
    assert_eq!(parse(&request), body);
}

#[test]
fn without_the_setting_rows_keep_nothing() {
    let db = TestDb::create();
    let gw = start(&db, json!({}));
    let key = generate(&gw, json!({}));
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let (_, call_id) = chat(&gw, &key, &body);
    let [messages, request, response] = columns(&db, &call_id);
    assert_eq!(
        [messages, request, response],
        ["{}", "{}", "{}"].map(String::from)
    );
    let logs = gw.get(&format!("/spend/logs?request_id={call_id}"));
    let row = &logs.json()[0];
    assert!(row.get("proxy_server_request").is_none(), "{row}");
    assert!(row.get("response").is_none(), "{row}");
}

#[test]
fn with_the_response_cache_the_stored_answer_and_the_hit_are_kept() {
    let db = TestDb::create();
    let gw = start_with(
        &db,
        json!({"store_prompts_in_spend_logs": true}),
        json!({"cache": true, "cache_params": {"type": "local"}}),
    );
    let key = generate(&gw, json!({}));
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "cached?"}]});
    // The miss (the cache copies the answer too) and the hit, on one
    // connection: one core, whose local cache holds the answer.
    let mut conn = gw.connect();
    let mut send = || {
        let auth = format!("Bearer {key}");
        let resp = conn.roundtrip(&e2e::request(
            "POST",
            "/v1/chat/completions",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.to_string().as_bytes(),
        ));
        assert_eq!(resp.status, 200, "{}", resp.text());
        let call_id = resp
            .header("x-litellm-call-id")
            .expect("call id")
            .to_string();
        (resp, call_id)
    };
    let (first, miss) = send();
    let (second, hit) = send();
    assert!(second.header("x-litellm-cache-key").is_some(), "a hit");
    for (resp, call_id) in [(first, miss), (second, hit)] {
        let [_, request, response] = columns(&db, &call_id);
        assert_eq!(parse(&request), body);
        let stored = parse(&response);
        assert_eq!(stored["choices"], resp.json()["choices"], "{stored}");
        assert_eq!(stored["choices"][0]["message"]["content"], ANSWER);
    }
}

#[test]
fn latest_turn_keeps_only_the_model_and_the_last_user_turn() {
    let db = TestDb::create();
    let gw = start(
        &db,
        json!({"store_prompts_in_spend_logs": true, "spend_logs_prompt_storage": "latest_turn"}),
    );
    let key = generate(&gw, json!({}));
    let body = json!({
        "model": "m",
        "max_tokens": 10,
        "temperature": 0.5,
        "messages": [
            {"role": "system", "content": "the system prompt"},
            {"role": "user", "content": "an earlier question"},
            {"role": "assistant", "content": "an earlier answer"},
            {"role": "user", "content": [{"type": "text", "text": "the latest question"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        ],
    });
    let (_, call_id) = chat(&gw, &key, &body);
    let [_, request, response] = columns(&db, &call_id);
    assert_eq!(
        parse(&request),
        json!({"model": "m", "messages": [
            {"role": "user", "content": "the latest question\n[image omitted]"}]}),
        "as LiteLLM's _trimmed_turn keeps it"
    );
    // The answer is kept whole.
    assert_eq!(parse(&response)["choices"][0]["message"]["content"], ANSWER);
}

#[test]
fn turned_off_message_logging_redacts_both_columns() {
    let db = TestDb::create();
    let gw = start_with(
        &db,
        json!({"store_prompts_in_spend_logs": true}),
        json!({"turn_off_message_logging": true}),
    );
    let key = generate(&gw, json!({}));
    let body = json!({"model": "m", "max_tokens": 10,
        "messages": [{"role": "user", "content": "a private question"}]});
    let (resp, call_id) = chat(&gw, &key, &body);
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        ANSWER,
        "the client gets it"
    );
    let [_, request, response] = columns(&db, &call_id);
    let request = parse(&request);
    assert_eq!(
        request["messages"],
        json!([{"role": "user", "content": "redacted-by-litellm"}]),
        "{request}"
    );
    assert_eq!(
        (&request["prompt"], &request["input"]),
        (&json!(""), &json!(""))
    );
    assert_eq!(request["max_tokens"], 10, "the other fields stay");
    let response = parse(&response);
    assert_eq!(
        response["choices"][0]["message"]["content"], "redacted-by-litellm",
        "{response}"
    );
    assert!(response["usage"].is_object(), "{response}");

    // A request saying `turn_off_message_logging: false` is still redacted
    // (LiteLLM strips it) unless its key may opt out.
    let mut opt_out = body.clone();
    opt_out["turn_off_message_logging"] = json!(false);
    let (_, call_id) = chat(&gw, &key, &opt_out);
    let [_, request, _] = columns(&db, &call_id);
    assert_eq!(
        parse(&request)["messages"][0]["content"],
        "redacted-by-litellm"
    );
    let trusted = generate(
        &gw,
        json!({"metadata": {"allow_client_message_redaction_opt_out": true}}),
    );
    let (_, call_id) = chat(&gw, &trusted, &opt_out);
    let [_, request, response] = columns(&db, &call_id);
    assert_eq!(
        parse(&request)["messages"][0]["content"],
        "a private question"
    );
    assert_eq!(parse(&response)["choices"][0]["message"]["content"], ANSWER);
}

#[test]
fn a_request_or_its_header_turns_redaction_on() {
    let db = TestDb::create();
    let gw = start(&db, json!({"store_prompts_in_spend_logs": true}));
    let key = generate(&gw, json!({}));
    let mut body = json!({"model": "m", "max_tokens": 10,
        "messages": [{"role": "user", "content": "a private question"}]});
    // Off by default.
    let (_, call_id) = chat(&gw, &key, &body);
    let [_, request, _] = columns(&db, &call_id);
    assert_eq!(
        parse(&request)["messages"][0]["content"],
        "a private question"
    );
    // LiteLLM's header.
    let auth = format!("Bearer {key}");
    let resp = gw.call(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("litellm-enable-message-redaction", "true"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let call_id = resp
        .header("x-litellm-call-id")
        .expect("call id")
        .to_string();
    let [_, request, response] = columns(&db, &call_id);
    assert_eq!(
        parse(&request)["messages"][0]["content"],
        "redacted-by-litellm"
    );
    assert_eq!(
        parse(&response)["choices"][0]["message"]["content"],
        "redacted-by-litellm"
    );
    // The request's own field, in its metadata.
    body["metadata"] = json!({"turn_off_message_logging": true});
    let (_, call_id) = chat(&gw, &key, &body);
    let [_, request, _] = columns(&db, &call_id);
    assert_eq!(
        parse(&request)["messages"][0]["content"],
        "redacted-by-litellm"
    );
}
