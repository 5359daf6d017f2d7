//! The batch poller and the budget hold of a batch (`/v1/batches` to the
//! faithful mock's OpenAI endpoints, whose batches complete on their first
//! retrieval with an output file carrying each line's usage): a batch
//! nobody polls is polled and charged by the gateway, once, by one replica
//! of a fleet sharing Postgres; a batch whose worst case (its input priced
//! at its bounds, plus the key's other open batches) does not fit the
//! key's budget is refused at creation.

use e2e::{assert_error, error_message, to_yaml, Gateway, MockServer, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

const BOUNDARY: &str = "----batch-poll-boundary-7Yh";
const UPSTREAM_KEY: &str = "sk-upstream-batches";
/// gpt-4o-mini's price map prices (USD per token).
const INPUT_PRICE: f64 = 0.15e-6;
const OUTPUT_PRICE: f64 = 0.6e-6;

fn start(mock: &MockServer, extra: &[(&str, &str)]) -> Gateway {
    let config = json!({
        "model_list": [
            {"model_name": "gpt-4o-mini", "litellm_params": {"model": "openai/gpt-4o-mini", "api_key": UPSTREAM_KEY, "api_base": mock.api_base()}},
        ],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let base = format!("http://127.0.0.1:{}", mock.port());
    let mut env = vec![
        ("OPENAI_API_BASE", base.as_str()),
        ("OPENAI_API_KEY", UPSTREAM_KEY),
    ];
    env.extend_from_slice(extra);
    Gateway::start(&to_yaml(&config), &env)
}

fn new_key(gw: &Gateway, fields: Value) -> String {
    let resp = gw.post("/key/generate", &fields);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["key"].as_str().unwrap().to_string()
}

/// Batch input lines for gpt-4o-mini, each capped at `max_tokens` when given.
fn batch_input(lines: usize, max_tokens: Option<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..lines {
        let mut body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": format!("question {i}")}]});
        if let Some(n) = max_tokens {
            body["max_tokens"] = json!(n);
        }
        let line = json!({"custom_id": format!("req-{i}"), "method": "POST", "url": "/v1/chat/completions", "body": body});
        out.extend_from_slice(line.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

fn call(gw: &Gateway, key: &str, method: &str, path: &str, body: Option<&Value>) -> e2e::Response {
    let auth = format!("Bearer {key}");
    let text = body.map(Value::to_string).unwrap_or_default();
    gw.call(
        method,
        path,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        text.as_bytes(),
    )
}

/// Uploads `content` as a batch input file for `key`; its id.
fn upload(gw: &Gateway, key: &str, content: &[u8]) -> String {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    let auth = format!("Bearer {key}");
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let resp = gw.call(
        "POST",
        "/v1/files",
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", content_type.as_str()),
        ],
        &body,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["id"].as_str().unwrap().to_string()
}

/// Creates a batch on `file` for `key`.
fn create(gw: &Gateway, key: &str, file: &str) -> e2e::Response {
    let body = json!({"input_file_id": file, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    call(gw, key, "POST", "/v1/batches", Some(&body))
}

/// How many times the gateway's log says it polled `batch`.
fn polls_of(gw: &Gateway, batch: &str) -> usize {
    gw.output()
        .lines()
        .filter(|l| l.contains("batch polled") && l.contains(batch))
        .count()
}

#[test]
fn a_batch_nobody_polls_is_polled_and_charged_once() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock, &[("PROXY_BATCH_POLLING_INTERVAL", "1")]);
    let alice = new_key(&gw, json!({}));
    let file = upload(&gw, &alice, &batch_input(2, None));
    let resp = create(&gw, &alice, &file);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let batch = resp.json()["id"].as_str().unwrap().to_string();

    // Nobody asks: the poller finds it completed and charges it.
    let row = gw.spend_row(&batch);
    assert_eq!(row["call_type"], "aretrieve_batch", "{row}");
    let (prompt, completion) = (
        row["prompt_tokens"].as_f64().unwrap(),
        row["completion_tokens"].as_f64().unwrap(),
    );
    assert!(prompt > 0.0 && completion > 0.0, "{row}");
    let want = (prompt * INPUT_PRICE + completion * OUTPUT_PRICE) / 2.0;
    let spent = row["spend"].as_f64().unwrap();
    assert!((spent - want).abs() < 1e-12, "{spent} != {want}");
    assert_eq!(polls_of(&gw, &batch), 1, "{}", gw.output());

    // The creator polls it too: completed, its output file its own, no
    // second charge.
    let resp = call(&gw, &alice, "GET", &format!("/v1/batches/{batch}"), None);
    assert_eq!(resp.json()["status"], "completed", "{}", resp.text());
    let output = resp.json()["output_file_id"].as_str().unwrap().to_string();
    let resp = call(
        &gw,
        &alice,
        "GET",
        &format!("/v1/files/{output}/content"),
        None,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let info = e2e::eventually("the key's spend", Duration::from_secs(5), || {
        let info = call(&gw, &alice, "GET", "/key/info", None).json();
        let spend = info["info"]["spend"].as_f64()?;
        (spend > 0.0).then_some(spend)
    });
    assert!((info - want).abs() < 1e-12, "{info} != {want}");
    // Two more intervals: a charged batch is not polled again.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(polls_of(&gw, &batch), 1, "{}", gw.output());
    let rows = gw.get(&format!("/spend/logs?request_id={batch}")).json();
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
}

#[test]
fn a_fleet_polls_each_batch_once_and_charges_it_once() {
    let db = TestDb::create();
    let mock = MockServer::start(&[]);
    // Two seconds: a poll and its charge end well within one interval, so
    // a second poll of a charged batch would be a second claim, not a race.
    let env = [
        ("DATABASE_URL", db.url()),
        ("PROXY_BATCH_POLLING_INTERVAL", "2"),
    ];
    let first = start(&mock, &env);
    let second = start(&mock, &env);
    let alice = new_key(&first, json!({}));
    let file = upload(&first, &alice, &batch_input(3, Some(50)));
    let mut batches = Vec::new();
    for _ in 0..4 {
        let resp = create(&first, &alice, &file);
        assert_eq!(resp.status, 200, "{}", resp.text());
        batches.push(resp.json()["id"].as_str().unwrap().to_string());
    }
    for batch in &batches {
        e2e::eventually("the batch charged", Duration::from_secs(15), || {
            let processed = db.query(&format!(
                "SELECT batch_processed FROM \"LiteLLM_ManagedObjectTable\" WHERE unified_object_id = '{batch}'"
            ));
            (processed == "t").then_some(())
        });
        first.spend_row(batch);
    }
    // Another round on each replica: a charged batch is never due again.
    std::thread::sleep(Duration::from_millis(4500));
    for batch in &batches {
        let polls = polls_of(&first, batch) + polls_of(&second, batch);
        assert_eq!(polls, 1, "{batch}: {}\n{}", first.output(), second.output());
        assert_eq!(
            db.query(&format!(
                "SELECT count(*) FROM \"LiteLLM_SpendLogs\" WHERE request_id = '{batch}'"
            )),
            "1"
        );
    }
}

#[test]
fn batches_left_open_are_polled_soon_after_a_restart() {
    let db = TestDb::create();
    let mock = MockServer::start(&[]);
    let url = [("DATABASE_URL", db.url())];
    // A replica that never polls creates a batch, then stops.
    let (alice, batch) = {
        let env = [url[0], ("PROXY_BATCH_POLLING_ENABLED", "false")];
        let first = start(&mock, &env);
        let alice = new_key(&first, json!({}));
        let file = upload(&first, &alice, &batch_input(2, None));
        let resp = create(&first, &alice, &file);
        assert_eq!(resp.status, 200, "{}", resp.text());
        let batch = resp.json()["id"].as_str().unwrap().to_string();
        // Written without waiting: stop once it is in the store.
        e2e::eventually("the batch stored", Duration::from_secs(5), || {
            let stored = db.query(&format!(
                "SELECT count(*) FROM \"LiteLLM_ManagedObjectTable\" WHERE unified_object_id = '{batch}'"
            ));
            (stored == "1").then_some(())
        });
        (alice, batch)
    };
    // One back with the default interval (an hour) polls and charges it
    // in its first round, soon after start.
    let second = start(&mock, &url);
    e2e::eventually("the batch charged", Duration::from_secs(20), || {
        let processed = db.query(&format!(
            "SELECT batch_processed FROM \"LiteLLM_ManagedObjectTable\" WHERE unified_object_id = '{batch}'"
        ));
        (processed == "t").then_some(())
    });
    let row = second.spend_row(&batch);
    assert_eq!(row["call_type"], "aretrieve_batch", "{row}");
    assert!(row["spend"].as_f64().unwrap() > 0.0, "{row}");
    assert_eq!(polls_of(&second, &batch), 1, "{}", second.output());
    let resp = call(
        &second,
        &alice,
        "GET",
        &format!("/v1/batches/{batch}"),
        None,
    );
    assert_eq!(resp.json()["status"], "completed", "{}", resp.text());
}

#[test]
fn a_batch_the_budget_cannot_cover_is_refused_at_creation() {
    let mock = MockServer::start(&[]);
    holds_are_checked(&start(&mock, &[]));
}

#[test]
fn batch_holds_are_read_from_postgres() {
    let db = TestDb::create();
    let mock = MockServer::start(&[]);
    holds_are_checked(&start(&mock, &[("DATABASE_URL", db.url())]));
    assert_eq!(
        db.query("SELECT count(*) FROM \"LiteLLM_ManagedObjectTable\" WHERE gateway_hold > 0.017 AND gateway_hold < 0.019"),
        "3"
    );
}

fn holds_are_checked(gw: &Gateway) {
    let alice = new_key(gw, json!({"max_budget": 0.05}));

    // Two lines of up to 100,000 output tokens: 2 × 100,000 × 0.6e-6 / 2
    // = 0.06 USD at worst, over the 0.05 budget.
    let big = upload(gw, &alice, &batch_input(2, Some(100_000)));
    let resp = create(gw, &alice, &big);
    let err = assert_error(&resp, 422);
    assert_eq!(err["type"], "budget_exceeded", "{err:?}");
    assert!(error_message(&err).contains("key"), "{err:?}");

    // Two lines of 30,000: 0.018 USD each batch. Two fit, a third does not
    // while the others are open (their holds count).
    let small = upload(gw, &alice, &batch_input(2, Some(30_000)));
    let mut open = Vec::new();
    for _ in 0..2 {
        let resp = create(gw, &alice, &small);
        assert_eq!(resp.status, 200, "{}", resp.text());
        open.push(resp.json()["id"].as_str().unwrap().to_string());
    }
    let resp = create(gw, &alice, &small);
    let err = assert_error(&resp, 422);
    assert_eq!(err["type"], "budget_exceeded", "{err:?}");

    // One completes and is charged (a few tokens): its hold is gone, and
    // the third fits.
    let resp = call(gw, &alice, "GET", &format!("/v1/batches/{}", open[0]), None);
    assert_eq!(resp.json()["status"], "completed", "{}", resp.text());
    let row = gw.spend_row(&open[0]);
    assert!(row["spend"].as_f64().unwrap() < 0.001, "{row}");
    let resp = e2e::eventually("the hold released", Duration::from_secs(5), || {
        let resp = create(gw, &alice, &small);
        (resp.status == 200).then_some(resp)
    });
    assert_eq!(resp.json()["object"], "batch", "{}", resp.text());

    // A key without a budget is not held (nothing to refuse).
    let bob = new_key(gw, json!({}));
    let file = upload(gw, &bob, &batch_input(2, Some(100_000)));
    let resp = create(gw, &bob, &file);
    assert_eq!(resp.status, 200, "{}", resp.text());
}
