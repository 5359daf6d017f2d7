//! OpenAI's Files and Batch APIs through the gateway (`/v1/files`,
//! `/v1/batches`, also without `/v1`) to the faithful mock's OpenAI and
//! Azure endpoints (Bearer or `api-key` + `api-version`, the multipart
//! `purpose` field required, OpenAI's file, batch and list shapes, a batch
//! that completes with an output file carrying each line's usage): the
//! upstream chosen by `custom_llm_provider` (LiteLLM's
//! `/{provider}/v1/files…` paths first) or a model group, ownership
//! per key (another key gets LiteLLM's 403, an unknown id a 404; lists
//! show only the caller's objects), across replicas sharing Postgres, and
//! a completed batch charged to its creator once.

use e2e::{assert_error, error_message, to_yaml, Gateway, MockServer, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

const BOUNDARY: &str = "----files-test-boundary-Q1w2E3";
/// The provider key the gateway holds.
const UPSTREAM_KEY: &str = "sk-upstream-files";
/// gpt-4o-mini's price map prices (USD per token).
const INPUT_PRICE: f64 = 0.15e-6;
const OUTPUT_PRICE: f64 = 0.6e-6;

fn config(mock: &MockServer) -> Value {
    json!({
        "model_list": [
            {"model_name": "gpt-4o-mini", "litellm_params": {"model": "openai/gpt-4o-mini", "api_key": UPSTREAM_KEY, "api_base": mock.api_base()}},
            {"model_name": "azure-mini", "litellm_params": {"model": "azure/gpt-4o-mini", "api_key": "az-key", "api_version": "2024-10-21", "api_base": format!("http://127.0.0.1:{}", mock.port())}},
        ],
        "general_settings": {"master_key": MASTER_KEY},
        "files_settings": [
            {"custom_llm_provider": "azure", "api_base": format!("http://127.0.0.1:{}", mock.port()), "api_key": "az-files-key", "api_version": "2025-01-01-preview"},
        ],
    })
}

fn start(mock: &MockServer, extra: &[(&str, &str)]) -> Gateway {
    let base = format!("http://127.0.0.1:{}", mock.port());
    let mut env = vec![
        ("OPENAI_API_BASE", base.as_str()),
        ("OPENAI_API_KEY", UPSTREAM_KEY),
    ];
    env.extend_from_slice(extra);
    Gateway::start(&to_yaml(&config(mock)), &env)
}

fn new_key(gw: &Gateway, fields: Value) -> String {
    let resp = gw.post("/key/generate", &fields);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["key"].as_str().unwrap().to_string()
}

/// Two batch input lines for gpt-4o-mini.
fn batch_input() -> Vec<u8> {
    let mut lines = Vec::new();
    for (i, text) in ["hello there", "what is the capital of France?"]
        .iter()
        .enumerate()
    {
        let line = json!({"custom_id": format!("req-{i}"), "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}});
        lines.extend_from_slice(line.to_string().as_bytes());
        lines.push(b'\n');
    }
    lines
}

/// A multipart upload of `content` as `name` with `fields`.
fn form(fields: &[(&str, &str)], file: Option<(&str, &[u8])>) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    }
    if let Some((name, content)) = file {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/jsonl\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

fn upload(
    gw: &Gateway,
    key: &str,
    path: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) -> e2e::Response {
    let auth = format!("Bearer {key}");
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", content_type.as_str()),
    ];
    headers.extend_from_slice(extra);
    gw.call("POST", path, &headers, body)
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

fn ids(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn files_are_reached_only_by_the_key_that_uploaded_them() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock, &[]);
    let alice = new_key(&gw, json!({}));
    let bob = new_key(&gw, json!({}));

    // custom_llm_provider as LiteLLM's header; OpenAI's file object back.
    let input = batch_input();
    let body = form(&[("purpose", "batch")], Some(("input.jsonl", &input)));
    let resp = upload(
        &gw,
        &alice,
        "/v1/files",
        &body,
        &[("custom-llm-provider", "openai")],
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let file = resp.json();
    assert_eq!(file["object"], "file", "{file}");
    assert_eq!(file["purpose"], "batch");
    assert_eq!(file["bytes"], input.len());
    let id = file["id"].as_str().unwrap().to_string();
    // The upstream saw the gateway's provider key, never the caller's.
    let by_key = mock.stats()["by_key"].clone();
    assert!(by_key.get(UPSTREAM_KEY).is_some(), "{by_key}");
    assert!(by_key.get(&alice).is_none(), "{by_key}");

    // The owner reaches it, with and without /v1.
    let resp = call(&gw, &alice, "GET", &format!("/v1/files/{id}"), None);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["id"], id.as_str());
    let resp = call(&gw, &alice, "GET", &format!("/files/{id}/content"), None);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.body, input, "the content as uploaded");

    // Another key does not, whatever it asks (LiteLLM's 403).
    for (method, path) in [
        ("GET", format!("/v1/files/{id}")),
        ("GET", format!("/v1/files/{id}/content")),
        ("DELETE", format!("/v1/files/{id}")),
    ] {
        let resp = call(&gw, &bob, method, &path, None);
        let err = assert_error(&resp, 403);
        assert_eq!(
            error_message(&err),
            "The caller does not have access to this managed file id.",
            "{method} {path}"
        );
    }
    // Lists: each key sees its own files only; the master key sees all.
    let listed = call(&gw, &alice, "GET", "/v1/files?limit=100", None);
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(ids(&listed.json()), vec![id.clone()]);
    let listed = call(&gw, &bob, "GET", "/v1/files", None);
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert!(ids(&listed.json()).is_empty(), "{}", listed.text());
    let listed = call(&gw, MASTER_KEY, "GET", "/files", None);
    assert!(ids(&listed.json()).contains(&id), "{}", listed.text());

    // An id the gateway never issued is a 404; one that could leave the
    // API's path a 400; neither reaches the upstream.
    let before = mock.stats()["received"].as_u64().unwrap_or(0);
    let resp = call(&gw, &alice, "GET", "/v1/files/file-not-ours", None);
    let err = assert_error(&resp, 404);
    assert!(error_message(&err).contains("file-not-ours"), "{err:?}");
    let resp = call(&gw, &alice, "GET", "/v1/files/a..b", None);
    assert_error(&resp, 400);
    // An upload without purpose, or without a file, is refused here.
    let resp = upload(
        &gw,
        &alice,
        "/v1/files",
        &form(&[], Some(("x.jsonl", b"{}"))),
        &[],
    );
    let err = assert_error(&resp, 400);
    assert!(error_message(&err).contains("purpose"), "{err:?}");
    let resp = upload(
        &gw,
        &alice,
        "/v1/files",
        &form(&[("purpose", "batch")], None),
        &[],
    );
    assert_error(&resp, 400);
    let resp = upload(&gw, &alice, "/v1/files", b"not a form", &[]);
    assert_error(&resp, 400);
    // A provider the gateway does not serve files for.
    let resp = upload(
        &gw,
        &alice,
        "/v1/files",
        &body,
        &[("custom-llm-provider", "anthropic")],
    );
    assert_error(&resp, 400);
    assert_eq!(
        mock.stats()["received"].as_u64().unwrap_or(0),
        before,
        "nothing reached the mock"
    );

    // The owner deletes it; then it is gone upstream.
    let resp = call(&gw, &alice, "DELETE", &format!("/v1/files/{id}"), None);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["deleted"], true);
    let resp = call(&gw, &alice, "GET", &format!("/v1/files/{id}"), None);
    assert_eq!(resp.status, 404, "{}", resp.text());
}

#[test]
fn a_completed_batch_is_charged_to_its_creator_once() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock, &[]);
    let alice = new_key(&gw, json!({}));
    let bob = new_key(&gw, json!({}));

    // Upload through the model group (the `model` form field).
    let body = form(
        &[("purpose", "batch"), ("model", "gpt-4o-mini")],
        Some(("in.jsonl", &batch_input())),
    );
    let resp = upload(&gw, &alice, "/v1/files", &body, &[]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let file = resp.json()["id"].as_str().unwrap().to_string();

    // Another key may not build a batch on it.
    let create = json!({"input_file_id": file, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let resp = call(&gw, &bob, "POST", "/v1/batches", Some(&create));
    assert_error(&resp, 403);
    let resp = call(
        &gw,
        &alice,
        "POST",
        "/v1/batches",
        Some(&json!({"input_file_id": file})),
    );
    assert_error(&resp, 400);

    // LiteLLM's fields are the gateway's: OpenAI (the mock) refuses
    // arguments it does not know, so they are left out.
    let mut with_ours = create.clone();
    with_ours["custom_llm_provider"] = json!("openai");
    let resp = call(&gw, &alice, "POST", "/v1/batches", Some(&with_ours));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let batch = resp.json();
    assert_eq!(batch["object"], "batch", "{batch}");
    assert_eq!(batch["status"], "validating");
    let id = batch["id"].as_str().unwrap().to_string();

    let resp = call(&gw, &bob, "GET", &format!("/v1/batches/{id}"), None);
    let err = assert_error(&resp, 403);
    assert_eq!(
        error_message(&err),
        "The caller does not have access to this managed batch id."
    );
    let listed = call(&gw, &bob, "GET", "/v1/batches", None);
    assert!(ids(&listed.json()).is_empty(), "{}", listed.text());
    let listed = call(&gw, &alice, "GET", "/batches", None);
    assert_eq!(ids(&listed.json()), vec![id.clone()]);

    // Polled as completed: the output file is the creator's.
    let resp = call(&gw, &alice, "GET", &format!("/v1/batches/{id}"), None);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let done = resp.json();
    assert_eq!(done["status"], "completed", "{done}");
    let output = done["output_file_id"].as_str().unwrap().to_string();
    let resp = call(
        &gw,
        &bob,
        "GET",
        &format!("/v1/files/{output}/content"),
        None,
    );
    assert_error(&resp, 403);
    let resp = call(
        &gw,
        &alice,
        "GET",
        &format!("/v1/files/{output}/content"),
        None,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let (mut prompt, mut completion) = (0.0, 0.0);
    for line in resp.text().lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        let usage = &line["response"]["body"]["usage"];
        prompt += usage["prompt_tokens"].as_f64().unwrap();
        completion += usage["completion_tokens"].as_f64().unwrap();
    }
    assert!(prompt > 0.0 && completion > 0.0);
    // LiteLLM's batch price: half the price map's.
    let want = (prompt * INPUT_PRICE + completion * OUTPUT_PRICE) / 2.0;

    let row = gw.spend_row(&id);
    assert_eq!(row["call_type"], "aretrieve_batch", "{row}");
    assert_eq!(row["prompt_tokens"].as_f64().unwrap(), prompt);
    assert_eq!(row["completion_tokens"].as_f64().unwrap(), completion);
    let spent = row["spend"].as_f64().unwrap();
    assert!((spent - want).abs() < 1e-12, "{spent} != {want}");

    // Polled again: no second charge.
    let resp = call(&gw, &alice, "GET", &format!("/v1/batches/{id}"), None);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let info = e2e::eventually("the key's spend", Duration::from_secs(5), || {
        let info = call(&gw, &alice, "GET", "/key/info", None).json();
        let spend = info["info"]["spend"].as_f64()?;
        (spend > 0.0).then_some(info)
    });
    std::thread::sleep(Duration::from_millis(300));
    let rows = gw.get(&format!("/spend/logs?request_id={id}")).json();
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    let spend = info["info"]["spend"].as_f64().unwrap();
    assert!((spend - want).abs() < 1e-12, "{spend} != {want}");

    // A completed batch cannot be cancelled: the upstream's 400, relayed.
    let resp = call(
        &gw,
        &alice,
        "POST",
        &format!("/v1/batches/{id}/cancel"),
        None,
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
}

#[test]
fn azure_files_use_the_deployments_or_files_settings_resource_and_api_version() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock, &[]);
    let key = new_key(&gw, json!({"models": ["azure-mini"]}));
    let body = form(
        &[("purpose", "batch"), ("model", "azure-mini")],
        Some(("in.jsonl", &batch_input())),
    );
    let resp = upload(&gw, &key, "/v1/files", &body, &[]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let file = resp.json()["id"].as_str().unwrap().to_string();
    // Retrieved and batched on Azure (the mock refuses a call without
    // api-key or api-version).
    let resp = call(&gw, &key, "GET", &format!("/v1/files/{file}"), None);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let create = json!({"input_file_id": file, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let resp = call(&gw, &key, "POST", "/v1/batches", Some(&create));
    assert_eq!(resp.status, 200, "{}", resp.text());
    // LiteLLM's files_settings: custom_llm_provider azure goes to its
    // entry's resource with its key.
    let settings_body = form(
        &[("purpose", "batch"), ("custom_llm_provider", "azure")],
        Some(("in.jsonl", &batch_input())),
    );
    let resp = upload(&gw, &key, "/v1/files", &settings_body, &[]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let file = resp.json()["id"].as_str().unwrap().to_string();
    let resp = call(&gw, &key, "GET", &format!("/v1/files/{file}/content"), None);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(
        mock.stats()["by_key"].get("az-files-key").is_some(),
        "{}",
        mock.stats()
    );
    // A key not allowed the model group may not upload through it.
    let other = new_key(&gw, json!({"models": ["gpt-4o-mini"]}));
    let resp = upload(&gw, &other, "/v1/files", &body, &[]);
    assert_error(&resp, 403);
}

#[test]
fn provider_scoped_paths_are_managed_files_and_batches() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock, &[]);
    let alice = new_key(&gw, json!({}));
    let bob = new_key(&gw, json!({}));

    // LiteLLM's `/{provider}/v1/files`: the path's provider comes before
    // the header's and the form's (azure, to its files_settings entry).
    let body = form(
        &[("purpose", "batch"), ("custom_llm_provider", "openai")],
        Some(("in.jsonl", &batch_input())),
    );
    let resp = upload(
        &gw,
        &alice,
        "/azure/v1/files",
        &body,
        &[("custom-llm-provider", "openai")],
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let file = resp.json()["id"].as_str().unwrap().to_string();
    assert!(
        mock.stats()["by_key"].get("az-files-key").is_some(),
        "{}",
        mock.stats()
    );
    assert!(
        mock.stats()["by_key"].get(UPSTREAM_KEY).is_none(),
        "{}",
        mock.stats()
    );

    // Managed, not passed through: the owner reaches it under any
    // provider's path (it goes where it was made), another key gets
    // LiteLLM's 403, and lists show only the caller's objects.
    let resp = call(
        &gw,
        &alice,
        "GET",
        &format!("/openai/v1/files/{file}"),
        None,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let resp = call(
        &gw,
        &alice,
        "GET",
        &format!("/azure/v1/files/{file}/content"),
        None,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.body, batch_input());
    let resp = call(&gw, &bob, "GET", &format!("/openai/v1/files/{file}"), None);
    assert_error(&resp, 403);
    let listed = call(&gw, &bob, "GET", "/azure/v1/files", None);
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert!(!ids(&listed.json()).contains(&file), "{}", listed.text());

    // Batches too.
    let create = json!({"input_file_id": file, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let resp = call(&gw, &alice, "POST", "/azure/v1/batches", Some(&create));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let batch = resp.json()["id"].as_str().unwrap().to_string();
    let resp = call(
        &gw,
        &alice,
        "GET",
        &format!("/azure/v1/batches/{batch}"),
        None,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let resp = call(
        &gw,
        &bob,
        "GET",
        &format!("/azure/v1/batches/{batch}"),
        None,
    );
    assert_error(&resp, 403);
    let resp = call(
        &gw,
        &bob,
        "POST",
        &format!("/openai/v1/batches/{batch}/cancel"),
        None,
    );
    assert_error(&resp, 403);

    // A provider without a files API here is a 400 naming it.
    let resp = upload(&gw, &alice, "/anthropic/v1/files", &body, &[]);
    let err = assert_error(&resp, 400);
    assert_eq!(err["param"], "custom_llm_provider", "{err:?}");
    assert!(error_message(&err).contains("anthropic"), "{err:?}");
}

/// Two gateways on one database, two keys made on the first, and a batch
/// input file alice uploaded through the first. Bind its fields in
/// declaration order (`db`, `_mock`, then the rest): bindings drop in
/// reverse, so the gateways stop before the mock and the database go.
struct Replicas {
    db: TestDb,
    _mock: MockServer,
    first: Gateway,
    second: Gateway,
    alice: String,
    bob: String,
    file: String,
}

impl Replicas {
    fn with_a_batch_file() -> Replicas {
        let db = TestDb::create();
        let mock = MockServer::start(&[]);
        let first = start(&mock, &[("DATABASE_URL", db.url())]);
        let second = start(&mock, &[("DATABASE_URL", db.url())]);
        let alice = new_key(&first, json!({}));
        let bob = new_key(&first, json!({}));
        let body = form(&[("purpose", "batch")], Some(("in.jsonl", &batch_input())));
        let resp = upload(&first, &alice, "/v1/files", &body, &[]);
        assert_eq!(resp.status, 200, "{}", resp.text());
        let file = resp.json()["id"].as_str().unwrap().to_string();
        Replicas {
            db,
            _mock: mock,
            first,
            second,
            alice,
            bob,
            file,
        }
    }
}

#[test]
fn a_batch_is_known_to_the_other_replica_once_its_creation_is_answered() {
    let Replicas {
        db,
        _mock,
        first,
        second,
        alice,
        bob,
        file,
    } = Replicas::with_a_batch_file();

    // A slow store: inserts into LiteLLM's object table wait 1.5 s (reads
    // go on), as they would behind a busy Postgres.
    let url = db.url().to_string();
    let holder = std::thread::spawn(move || {
        std::process::Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &url, "-c"])
            .arg(
                "BEGIN; LOCK TABLE \"LiteLLM_ManagedObjectTable\" IN SHARE MODE; \
                 SELECT pg_sleep(1.5); COMMIT;",
            )
            .output()
            .expect("psql runs")
    });
    e2e::eventually("the insert lock held", Duration::from_secs(5), || {
        let held = db.query(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
             WHERE c.relname = 'LiteLLM_ManagedObjectTable' AND l.mode = 'ShareLock' AND l.granted",
        );
        (held == "1").then_some(())
    });
    let create = json!({"input_file_id": file, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let resp = call(&first, &alice, "POST", "/v1/batches", Some(&create));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let batch = resp.json()["id"].as_str().unwrap().to_string();

    // Asked at once, the other replica knows whose the batch is.
    let resp = call(&second, &bob, "GET", &format!("/v1/batches/{batch}"), None);
    assert_error(&resp, 403);
    let resp = call(
        &second,
        &alice,
        "GET",
        &format!("/v1/batches/{batch}"),
        None,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let held = holder.join().expect("the lock holder");
    assert!(held.status.success(), "{held:?}");
}

#[test]
fn ownership_is_shared_by_replicas_on_one_database() {
    let Replicas {
        db,
        _mock,
        first,
        second,
        alice,
        bob,
        file,
    } = Replicas::with_a_batch_file();
    let create = json!({"input_file_id": file, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let resp = call(&first, &alice, "POST", "/v1/batches", Some(&create));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let batch = resp.json()["id"].as_str().unwrap().to_string();

    // The other replica knows whose they are, from LiteLLM's tables.
    let resp = e2e::eventually(
        "the file on the second replica",
        Duration::from_secs(5),
        || {
            let resp = call(&second, &alice, "GET", &format!("/v1/files/{file}"), None);
            (resp.status == 200).then_some(resp)
        },
    );
    assert_eq!(resp.json()["id"], file.as_str());
    let resp = call(&second, &bob, "GET", &format!("/v1/files/{file}"), None);
    assert_error(&resp, 403);
    let resp = call(&second, &bob, "GET", &format!("/v1/batches/{batch}"), None);
    assert_error(&resp, 403);
    let listed = call(&second, &alice, "GET", "/v1/batches", None);
    assert_eq!(ids(&listed.json()), vec![batch.clone()]);
    assert_eq!(
        db.query(&format!(
            "SELECT file_purpose FROM \"LiteLLM_ManagedObjectTable\" WHERE unified_object_id = '{batch}'"
        )),
        "batch"
    );

    // Completed on one replica, polled on both: one charge, one row.
    let resp = call(
        &second,
        &alice,
        "GET",
        &format!("/v1/batches/{batch}"),
        None,
    );
    assert_eq!(resp.json()["status"], "completed", "{}", resp.text());
    let resp = call(&first, &alice, "GET", &format!("/v1/batches/{batch}"), None);
    assert_eq!(resp.json()["status"], "completed", "{}", resp.text());
    let row = second.spend_row(&batch);
    assert!(row["spend"].as_f64().unwrap() > 0.0, "{row}");
    e2e::eventually("the batch marked charged", Duration::from_secs(5), || {
        let processed = db.query(&format!(
            "SELECT batch_processed FROM \"LiteLLM_ManagedObjectTable\" WHERE unified_object_id = '{batch}'"
        ));
        (processed == "t").then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        db.query(&format!(
            "SELECT count(*) FROM \"LiteLLM_SpendLogs\" WHERE request_id = '{batch}'"
        )),
        "1"
    );
}

#[test]
fn the_openai_sdk_uploads_batches_and_is_refused_other_keys_objects() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock, &[]);
    let base_url = format!("http://127.0.0.1:{}/v1", gw.port());
    let run = e2e::python::run_script(
        "test_files_batches.py",
        &[
            ("GATEWAY_BASE_URL", &base_url),
            ("GATEWAY_MASTER_KEY", MASTER_KEY),
        ],
        Duration::from_secs(120),
    );
    let text = run.output;
    let status = run
        .status
        .unwrap_or_else(|| panic!("test_files_batches.py timed out after 120 s:\n{text}"));
    assert!(status.success(), "{text}\n{}", gw.output());
    assert_eq!(text.matches("PASS ").count(), 5, "{text}");
}

/// A key's `enforced_params` hold its uploads and batch creations as
/// LiteLLM 1.110 checks them there (`add_litellm_data_to_request` in
/// `create_file` and `create_batch`): an upload's form fields are not
/// members of the body checked (only the `litellm_metadata` the proxy adds
/// on these routes is), so a key that enforces `user` uploads nothing; a
/// batch creation's JSON body is checked as sent, `metadata` included.
#[test]
fn enforced_params_hold_uploads_and_batch_creations_as_litellm_checks_them() {
    let mock = MockServer::start(&[]);
    let gw = start(&mock, &[]);
    let key = new_key(&gw, json!({}));
    let input = batch_input();
    let body = form(&[("purpose", "batch")], Some(("in.jsonl", &input)));
    // With a `user` field (OpenAI, the mock, would refuse it: never sent).
    let with_user = form(
        &[("purpose", "batch"), ("user", "u-1")],
        Some(("in.jsonl", &input)),
    );
    let resp = upload(
        &gw,
        &key,
        "/v1/files",
        &body,
        &[("custom-llm-provider", "openai")],
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let file = resp.json()["id"].as_str().unwrap().to_string();

    let enforce = |names: Value| {
        let resp = gw.post(
            "/key/update",
            &json!({"key": key, "enforced_params": names}),
        );
        assert_eq!(resp.status, 200, "{}", resp.text());
    };
    enforce(json!(["user"]));
    let uploads = mock.stats()["requests"].clone();
    let resp = upload(
        &gw,
        &key,
        "/v1/files",
        &with_user,
        &[("custom-llm-provider", "openai")],
    );
    let err = assert_error(&resp, 400);
    assert_eq!(
        error_message(&err),
        "BadRequest please pass param=user in request body. This is a required param",
        "{err:?}"
    );
    assert_eq!(
        mock.stats()["requests"],
        uploads,
        "nothing reached the upstream"
    );
    // What the proxy adds on the files routes is always there.
    enforce(json!(["litellm_metadata"]));
    let resp = upload(
        &gw,
        &key,
        "/v1/files",
        &body,
        &[("custom-llm-provider", "openai")],
    );
    assert_eq!(resp.status, 200, "{}", resp.text());

    // A batch creation: its body as sent.
    enforce(json!(["metadata.project"]));
    let create = json!({"input_file_id": file, "endpoint": "/v1/chat/completions",
        "completion_window": "24h", "custom_llm_provider": "openai"});
    let err = assert_error(&call(&gw, &key, "POST", "/v1/batches", Some(&create)), 400);
    assert_eq!(err["param"], "metadata.project", "{err:?}");
    assert!(error_message(&err).contains("param=metadata "), "{err:?}");
    let mut tagged = create.clone();
    tagged["metadata"] = json!({"project": "p-1"});
    let resp = call(&gw, &key, "POST", "/v1/batches", Some(&tagged));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["metadata"]["project"], "p-1");
}
