//! `/spend/logs?request_id=<id>` with the `id` of the answer the client
//! received, as LiteLLM answers it (LiteLLM keeps that id as the row's
//! `request_id`): a chat completion relayed whole, one streamed, and an
//! Anthropic Messages answer translated from an OpenAI upstream each find
//! exactly their own row (the one `x-litellm-call-id` names). In memory and
//! on Postgres (`LiteLLM_SpendLogs.response_id`).

use e2e::{openai_model, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// A gateway with `gpt` on the mock upstream.
fn start(mock: &MockServer, database_url: Option<&str>) -> Gateway {
    let config = json!({
        "model_list": [openai_model("gpt", "dep-1", &mock.api_base(), json!({}))],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let envs: Vec<(&str, &str)> = database_url
        .map(|u| ("DATABASE_URL", u))
        .into_iter()
        .collect();
    Gateway::start_json(&config, &envs)
}

/// POSTs `body` to `path` with the master key; the answer's `id` (of the
/// first event that has one, for a stream) and its call id.
fn ask(gw: &Gateway, path: &str, body: Value) -> (String, String) {
    let auth = format!("Bearer {MASTER_KEY}");
    let resp = gw.call(
        "POST",
        path,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let call_id = resp
        .header("x-litellm-call-id")
        .expect("call id")
        .to_string();
    let id = if body["stream"] == true {
        resp.text()
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find_map(|e| {
                [&e["id"], &e["message"]["id"]]
                    .into_iter()
                    .find_map(|v| v.as_str().map(str::to_string))
            })
            .unwrap_or_else(|| panic!("no id in the stream: {}", resp.text()))
    } else {
        resp.json()["id"].as_str().expect("answer id").to_string()
    };
    (id, call_id)
}

/// The rows `/spend/logs?request_id=<id>` answers.
fn rows_of(gw: &Gateway, id: &str) -> Vec<Value> {
    let logs = gw.get(&format!("/spend/logs?request_id={id}"));
    assert_eq!(logs.status, 200, "{}", logs.text());
    logs.json().as_array().expect("array of rows").clone()
}

fn each_answer_finds_its_row(database_url: Option<&str>) {
    let mock = MockServer::start(&[]);
    let gw = start(&mock, database_url);
    let messages = json!([{"role": "user", "content": "hi"}]);
    let asked = [
        ask(
            &gw,
            "/v1/chat/completions",
            json!({"model": "gpt", "messages": messages}),
        ),
        ask(
            &gw,
            "/v1/chat/completions",
            json!({"model": "gpt", "messages": messages, "stream": true}),
        ),
        ask(
            &gw,
            "/v1/messages",
            json!({"model": "gpt", "max_tokens": 10, "messages": messages}),
        ),
    ];
    for (id, call_id) in &asked {
        assert_ne!(id, call_id, "the answer's id is not the call id");
        let rows = e2e::eventually(
            &format!("the row of answer {id}"),
            Duration::from_secs(10),
            || {
                let rows = rows_of(&gw, id);
                (!rows.is_empty()).then_some(rows)
            },
        );
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0]["call_id"], call_id.as_str(), "{rows:?}");
        assert_eq!(rows[0]["response_id"], id.as_str(), "{rows:?}");
        assert_eq!(rows[0]["status"], "success", "{rows:?}");
    }
    // The call id still finds the same row; an id no answer carried, none.
    let (id, call_id) = &asked[0];
    let by_call = rows_of(&gw, call_id);
    assert_eq!(by_call.len(), 1, "{by_call:?}");
    assert_eq!(by_call[0]["response_id"], id.as_str());
    assert_eq!(rows_of(&gw, "chatcmpl-nobody"), Vec::<Value>::new());
}

#[test]
fn each_answer_finds_its_row_in_memory() {
    each_answer_finds_its_row(None);
}

#[test]
fn each_answer_finds_its_row_on_postgres() {
    let db = e2e::TestDb::create();
    each_answer_finds_its_row(Some(db.url()));
    // The answer's id is indexed by hash (migration 0034: a B-tree of
    // random ids cost the spend writer the most of any index), and a
    // lookup by it reads that index.
    let plan = db.query(
        r#"SET enable_seqscan = off;
        EXPLAIN SELECT 1 FROM "LiteLLM_SpendLogs" WHERE response_id = 'chatcmpl-x'"#,
    );
    assert!(
        plan.contains("gateway_spendlogs_response_id_hash_idx"),
        "{plan}"
    );
    let method = db.query(
        "SELECT am.amname FROM pg_class c JOIN pg_am am ON am.oid = c.relam \
         WHERE c.relname = 'gateway_spendlogs_response_id_hash_idx'",
    );
    assert_eq!(method, "hash");
}
