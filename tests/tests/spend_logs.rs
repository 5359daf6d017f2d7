//! LiteLLM's `general_settings.disable_spend_logs` and `disable_error_logs`
//! end to end: without them every attempt leaves a row in `/spend/logs`;
//! with `disable_spend_logs` none does while the key's spend in
//! `/key/info` still rises by the request's cost; with `disable_error_logs`
//! the failed attempt's row is left out and the served one kept. In memory
//! and on Postgres (`LiteLLM_SpendLogs`).

use e2e::{openai_model, to_yaml, Gateway, MASTER_KEY};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Prices that make each mock request cost about a tenth of a cent.
const INPUT_COST: f64 = 0.00001;
const OUTPUT_COST: f64 = 0.0001;

/// An api_base nothing listens on.
fn dead_base() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/v1")
}

/// A gateway with `general` added to its `general_settings`: a priced mock
/// model, and `dead` (nothing listening) falling back to it.
fn start(general: Value, database_url: Option<&str>) -> Gateway {
    let mut general_settings = json!({"master_key": MASTER_KEY});
    if let (Some(all), Value::Object(more)) = (general_settings.as_object_mut(), general) {
        all.extend(more);
    }
    let config = json!({
        "model_list": [{
            "model_name": "priced",
            "litellm_params": {
                "model": "mock/priced",
                "mock_response": "one two three four five",
                "input_cost_per_token": INPUT_COST,
                "output_cost_per_token": OUTPUT_COST,
            },
        }, openai_model("dead", "dead", &dead_base(), json!({}))],
        "router_settings": {"num_retries": 0, "fallbacks": [{"dead": ["priced"]}]},
        "general_settings": general_settings,
    });
    let envs: Vec<(&str, &str)> = database_url
        .map(|u| ("DATABASE_URL", u))
        .into_iter()
        .collect();
    Gateway::start(&to_yaml(&config), &envs)
}

/// A new key with a budget.
fn generate(gw: &Gateway) -> String {
    let resp = gw.post("/key/generate", &json!({"max_budget": 10.0}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["key"].as_str().expect("key").to_string()
}

/// One chat request with `key` to `model`, served (through the fallback
/// for `dead`); its call id and cost.
fn chat(gw: &Gateway, key: &str, model: &str) -> (String, f64) {
    let body =
        json!({"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let auth = format!("Bearer {key}");
    let resp = gw.call(
        "POST",
        "/v1/chat/completions",
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
    let usage = &resp.json()["usage"];
    let cost = usage["prompt_tokens"].as_f64().unwrap() * INPUT_COST
        + usage["completion_tokens"].as_f64().unwrap() * OUTPUT_COST;
    assert!(cost > 0.0);
    (call_id, cost)
}

/// The key's spend in `/key/info` once it reaches `expected` (or what it
/// is after 10 s, for the caller's assertion to report).
fn settled_spend(gw: &Gateway, key: &str, expected: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = gw.get(&format!("/key/info?key={key}"));
        assert_eq!(info.status, 200, "{}", info.text());
        let spend = info.json()["info"]["spend"].as_f64().expect("spend");
        if (spend - expected).abs() < 1e-9 || Instant::now() > deadline {
            return spend;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The rows `/spend/logs` holds for `call_id`.
fn rows_of(gw: &Gateway, call_id: &str) -> Vec<Value> {
    let logs = gw.get(&format!("/spend/logs?request_id={call_id}"));
    assert_eq!(logs.status, 200, "{}", logs.text());
    logs.json().as_array().expect("array of rows").clone()
}

/// Every row `/spend/logs` holds.
fn all_rows(gw: &Gateway) -> Vec<Value> {
    let logs = gw.get("/spend/logs");
    assert_eq!(logs.status, 200, "{}", logs.text());
    logs.json().as_array().expect("array of rows").clone()
}

/// Without the switches, a served request and a failed attempt each leave a
/// row, and the key's spend is the served one's cost.
fn rows_are_kept_by_default(database_url: Option<&str>) {
    let gw = start(json!({}), database_url);
    let key = generate(&gw);
    let (call_id, cost) = chat(&gw, &key, "dead");
    let rows = e2e::eventually("both attempts' rows", Duration::from_secs(10), || {
        let rows = rows_of(&gw, &call_id);
        (rows.len() >= 2).then_some(rows)
    });
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().any(|r| r["status"] == "failure"), "{rows:?}");
    assert!(rows.iter().any(|r| r["status"] == "success"), "{rows:?}");
    assert!((settled_spend(&gw, &key, cost) - cost).abs() < 1e-9);
    // The console's Logs filters: a row's model (group) and status.
    let only = |filter: &str| -> Vec<(String, String)> {
        let logs = gw.get(&format!("/spend/logs?request_id={call_id}&{filter}"));
        assert_eq!(logs.status, 200, "{filter}: {}", logs.text());
        let rows = logs.json().as_array().expect("array of rows").clone();
        rows.iter()
            .map(|r| {
                let s = |f: &str| r[f].as_str().unwrap_or_default().to_string();
                (s("model_group"), s("status"))
            })
            .collect()
    };
    let failed = vec![("dead".to_string(), "failure".to_string())];
    let served = vec![("priced".to_string(), "success".to_string())];
    assert_eq!(only("status=failure"), failed);
    assert_eq!(only("status=success"), served);
    assert_eq!(only("model=dead"), failed);
    assert_eq!(only("model=upstream-gpt"), failed, "by the row's model too");
    assert_eq!(only("model=priced&status=failure"), vec![]);
    let bad = gw.get("/spend/logs?status=maybe");
    assert_eq!(bad.status, 400, "{}", bad.text());
}

/// With `disable_spend_logs`, no request leaves a row, and the key's spend
/// still rises by each request's cost.
fn no_rows_with_disable_spend_logs(database_url: Option<&str>) {
    let gw = start(json!({"disable_spend_logs": true}), database_url);
    let key = generate(&gw);
    let mut total = 0.0;
    for model in ["priced", "dead", "priced"] {
        let (call_id, cost) = chat(&gw, &key, model);
        total += cost;
        // The spend is counted in the batch that would have written the
        // row: once it shows, a row would show too.
        let spend = settled_spend(&gw, &key, total);
        assert!(
            (spend - total).abs() < 1e-9,
            "spend {spend}, expected {total}"
        );
        assert_eq!(rows_of(&gw, &call_id), Vec::<Value>::new());
    }
    assert_eq!(all_rows(&gw), Vec::<Value>::new());
}

/// With `disable_error_logs`, the failed attempt leaves no row; the served
/// one does, and its cost is counted.
fn no_failure_rows_with_disable_error_logs(database_url: Option<&str>) {
    let gw = start(json!({"disable_error_logs": true}), database_url);
    let key = generate(&gw);
    let (call_id, cost) = chat(&gw, &key, "dead");
    let rows = e2e::eventually("the served attempt's row", Duration::from_secs(10), || {
        let rows = rows_of(&gw, &call_id);
        (!rows.is_empty()).then_some(rows)
    });
    // The failed attempt's row was queued before the served one's, so it
    // would have been written by now.
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "success");
    assert_eq!(rows[0]["model_group"], "priced");
    assert!((settled_spend(&gw, &key, cost) - cost).abs() < 1e-9);
}

#[test]
fn rows_are_kept_by_default_in_memory() {
    rows_are_kept_by_default(None);
}

#[test]
fn disable_spend_logs_keeps_no_row_but_counts_spend_in_memory() {
    no_rows_with_disable_spend_logs(None);
}

#[test]
fn disable_error_logs_keeps_no_failure_row_in_memory() {
    no_failure_rows_with_disable_error_logs(None);
}

#[test]
fn rows_are_kept_by_default_on_postgres() {
    let db = e2e::TestDb::create();
    rows_are_kept_by_default(Some(db.url()));
}

#[test]
fn disable_spend_logs_keeps_no_row_but_counts_spend_on_postgres() {
    let db = e2e::TestDb::create();
    no_rows_with_disable_spend_logs(Some(db.url()));
}

#[test]
fn disable_error_logs_keeps_no_failure_row_on_postgres() {
    let db = e2e::TestDb::create();
    no_failure_rows_with_disable_error_logs(Some(db.url()));
}

/// Reports, in one transaction of its own, whether a spend COPY is under
/// way in this database and, if so, whether the key rows are locked
/// meanwhile: `idle` (no COPY), `moved` (the COPY seen first ended or
/// another began during the check), else `free` or `locked`.
const COPY_PROBE: &str = r#"
CREATE FUNCTION copy_probe() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    before text;
    after text;
    locked boolean := false;
BEGIN
    SELECT string_agg(pid || '@' || query_start, ',') INTO before FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
        AND state = 'active' AND query LIKE 'COPY%LiteLLM_SpendLogs%';
    IF before IS NULL THEN RETURN 'idle'; END IF;
    BEGIN
        PERFORM 1 FROM "LiteLLM_VerificationToken" FOR UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN locked := true;
    END;
    PERFORM pg_stat_clear_snapshot();
    SELECT string_agg(pid || '@' || query_start, ',') INTO after FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
        AND state = 'active' AND query LIKE 'COPY%LiteLLM_SpendLogs%';
    IF after IS DISTINCT FROM before THEN RETURN 'moved'; END IF;
    RETURN CASE WHEN locked THEN 'locked' ELSE 'free' END;
END $$;
"#;

/// A busy batch's rows reach Postgres spread over part of the time the
/// batch took to fill, and no key row is locked while they trickle in:
/// the locks come after the COPY, so a long COPY never keeps another
/// replica's writer (or a key update) waiting on them.
#[test]
fn a_spend_copy_under_way_holds_no_key_lock() {
    let db = e2e::TestDb::create();
    let gw = start(json!({}), Some(db.url()));
    // No budget: a fast build spends one before the probe has seen enough.
    let resp = gw.post("/key/generate", &json!({}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let key = resp.json()["key"].as_str().expect("key").to_string();
    db.query(COPY_PROBE);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut free = 0;
    std::thread::scope(|s| {
        for _ in 0..16 {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    chat(&gw, &key, "priced");
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while free < 3 && Instant::now() < deadline {
            match db.query("SELECT copy_probe()").as_str() {
                "free" => free += 1,
                "locked" => {
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    panic!("the key row was locked while the spend COPY ran");
                }
                _ => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(
        free, 3,
        "a spend COPY seen under way three times within 60 s"
    );
    // The batches seen under way commit.
    e2e::eventually("spend rows committed", Duration::from_secs(10), || {
        let rows = db.query(r#"SELECT count(*) FROM "LiteLLM_SpendLogs""#);
        (rows.parse::<u64>().expect("a count") > 0).then_some(())
    });
}
