//! The console at scale (issue 34): `/gateway/logs` pages the spend log
//! newest first by page token, and a filter no index serves (a team, a
//! user) searches a bounded number of rows a call and says where it
//! stopped; `/key/list?has_limits=true` finds every key with limits, not
//! the first page's, per-model, per-tag and budget-row limits included; a console logout on one replica ends the session on
//! every replica through Postgres when there is no Redis.

use e2e::{assert_error, eventually, Gateway, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// A gateway with `local-mock` (the built-in mock).
fn gateway(envs: &[(&str, &str)]) -> Gateway {
    let config = json!({
        "model_list": [{"model_name": "local-mock", "model_info": {"id": "local-1"},
            "litellm_params": {"model": "mock/local", "mock_response": "Hello from the mock"}}],
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start_json(&config, envs)
}

fn envs(db: Option<&TestDb>) -> Vec<(&str, &str)> {
    db.map(|db| ("DATABASE_URL", db.url()))
        .into_iter()
        .collect()
}

/// A new key, plain.
fn new_key(gw: &Gateway, body: Value) -> String {
    let resp = gw.post("/key/generate", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["key"].as_str().unwrap().to_string()
}

/// The answer of `/gateway/logs?<query>` (a 200).
fn logs(gw: &Gateway, query: &str) -> Value {
    let resp = gw.get(&format!("/gateway/logs?{query}"));
    assert_eq!(resp.status, 200, "{query}: {}", resp.text());
    resp.json()
}

/// Every page of `/gateway/logs?<query>`, following the page tokens: the
/// request ids in order, and the answers.
fn every_page(gw: &Gateway, query: &str) -> (Vec<String>, Vec<Value>) {
    let (mut ids, mut answers) = (Vec::new(), Vec::new());
    let mut token: Option<String> = None;
    loop {
        let q = match &token {
            Some(t) => format!("{query}&page_token={}", urlencode(t)),
            None => query.to_string(),
        };
        let answer = logs(gw, &q);
        for row in answer["data"].as_array().expect("data") {
            ids.push(row["request_id"].as_str().unwrap().to_string());
        }
        token = answer["next_page_token"].as_str().map(str::to_string);
        answers.push(answer);
        assert!(answers.len() < 500, "no end to the pages of {query}");
        if token.is_none() {
            return (ids, answers);
        }
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A row's place in the log: its `startTime` (RFC 3339 in UTC, its
/// fraction padded to nanoseconds) and `request_id`.
fn order_of(row: &Value) -> (String, String) {
    let at = row["startTime"].as_str().expect("startTime");
    let at = at.trim_end_matches('Z');
    let (seconds, fraction) = at.split_once('.').unwrap_or((at, ""));
    let id = row["request_id"].as_str().expect("request_id");
    (format!("{seconds}.{fraction:0<9}"), id.to_string())
}

fn pages_newest_first(db: Option<&TestDb>) {
    let gw = gateway(&envs(db));
    let key = new_key(&gw, json!({}));
    for _ in 0..7 {
        let resp = gw.post_as(&key, "/v1/chat/completions", &e2e::chat_body("local-mock"));
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    let mut rows: Vec<Value> = eventually("7 spend rows", Duration::from_secs(20), || {
        let rows = gw.get(&format!("/spend/logs?api_key={key}")).json();
        let rows = rows.as_array()?.clone();
        (rows.len() == 7).then_some(rows)
    });
    rows.sort_by_key(|r| std::cmp::Reverse(order_of(r)));
    let newest_first: Vec<String> = rows.iter().map(|r| order_of(r).1).collect();

    // By key (an index serves it), then with no filter at all: pages of 3,
    // each row once, newest first.
    let (ids, answers) = every_page(&gw, &format!("api_key={key}&page_size=3"));
    assert_eq!(ids, newest_first);
    let sizes: Vec<usize> = answers
        .iter()
        .map(|a| a["data"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, [3, 3, 1]);
    assert!(answers.iter().all(|a| a["partial"] == false), "{answers:?}");
    let (ids, _) = every_page(&gw, "page_size=2");
    assert_eq!(ids, newest_first);
    // A filter no index serves, over few rows: the same rows, and one that
    // matches nothing is an empty last page.
    let (ids, _) = every_page(&gw, "status=success&model=local-mock&page_size=4");
    assert_eq!(ids, newest_first);
    let none = logs(&gw, "team_id=no-such-team");
    assert_eq!(
        none,
        json!({"data": [], "next_page_token": null, "partial": false, "searched_to": null})
    );

    // Bad input is named.
    for (query, param) in [
        ("page_token=12", "page_token"),
        ("page_token=x:req", "page_token"),
        ("page_size=0", "page_size"),
        ("page_size=1001", "page_size"),
        ("page=2", "page"),
    ] {
        let err = assert_error(&gw.get(&format!("/gateway/logs?{query}")), 400);
        assert_eq!(err["param"], param, "{query}");
    }
    // An admin's view: a plain key may not read it.
    let auth = format!("Bearer {key}");
    let plain = gw.call("GET", "/gateway/logs", &[("Authorization", &auth)], b"");
    assert_error(&plain, 403);
}

#[test]
fn the_log_pages_newest_first_by_token_in_memory() {
    pages_newest_first(None);
}

#[test]
fn the_log_pages_newest_first_by_token_on_postgres() {
    let db = TestDb::create();
    pages_newest_first(Some(&db));
}

/// 300,000 rows in the log, of team `hay` but for the two oldest (team
/// `needle`): the team's page is found by bounded searches, each answer
/// saying how far back it got, and a team with no rows ends the same way.
#[test]
fn a_filter_no_index_serves_searches_a_bounded_number_of_rows_a_call() {
    let db = TestDb::create();
    let gw = gateway(&envs(Some(&db)));
    db.query(
        r#"INSERT INTO "LiteLLM_SpendLogs" (request_id, api_key, "startTime", "endTime",
            model, model_group, team_id, status)
        SELECT 'row-' || lpad(i::text, 7, '0'), 'k', t, t, 'm', 'm',
            CASE WHEN i <= 2 THEN 'needle' ELSE 'hay' END, 'success'
        FROM generate_series(1, 300000) AS i,
            LATERAL (SELECT timestamp '2026-01-01' + i * interval '1 second' AS t) AS at;
        ANALYZE "LiteLLM_SpendLogs""#,
    );
    for (team, wanted) in [
        ("needle", vec!["row-0000002", "row-0000001"]),
        ("none", vec![]),
    ] {
        let (ids, answers) = every_page(&gw, &format!("team_id={team}&page_size=5"));
        assert_eq!(ids, wanted, "{team}");
        assert!(
            answers.len() > 1,
            "{team}: one call looked at every row: {answers:?}"
        );
        let mut searched: Vec<&str> = Vec::new();
        for a in &answers[..answers.len() - 1] {
            assert_eq!(a["partial"], true, "{team}: {a}");
            searched.push(a["searched_to"].as_str().expect("searched_to"));
        }
        let last = answers.last().unwrap();
        assert_eq!(last["partial"], false, "{team}: {last}");
        // Each call went further back than the one before.
        let mut sorted = searched.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.dedup();
        assert_eq!(sorted, searched, "{team}");
    }
}

/// The same log with an operator's `(team_id, "startTime")` index: a team
/// filter reads through it, so the rare team's rows and a team with no
/// rows are each one whole answer, never `partial`; and a user filter
/// reads LiteLLM's `("user", "startTime")` index, which migration 0032
/// creates, so it is one whole answer too.
#[test]
fn an_operators_team_index_and_the_user_index_answer_in_one_call() {
    let db = TestDb::create();
    let gw = gateway(&envs(Some(&db)));
    db.query(
        r#"INSERT INTO "LiteLLM_SpendLogs" (request_id, api_key, "startTime", "endTime",
            model, model_group, team_id, status)
        SELECT 'row-' || lpad(i::text, 7, '0'), 'k', t, t, 'm', 'm',
            CASE WHEN i <= 2 THEN 'needle' ELSE 'hay' END, 'success'
        FROM generate_series(1, 300000) AS i,
            LATERAL (SELECT timestamp '2026-01-01' + i * interval '1 second' AS t) AS at;
        UPDATE "LiteLLM_SpendLogs" SET "user" = 'rare' WHERE request_id IN ('row-0000001', 'row-0000003');
        CREATE INDEX spendlogs_team_time ON "LiteLLM_SpendLogs" (team_id, "startTime");
        ANALYZE "LiteLLM_SpendLogs""#,
    );
    for (team, wanted) in [
        ("needle", vec!["row-0000002", "row-0000001"]),
        ("none", vec![]),
    ] {
        let (ids, answers) = every_page(&gw, &format!("team_id={team}&page_size=5"));
        assert_eq!(ids, wanted, "{team}");
        assert_eq!(answers.len(), 1, "{team}: {answers:?}");
        assert_eq!(answers[0]["partial"], false, "{team}: {answers:?}");
    }
    for (user, wanted) in [
        ("rare", vec!["row-0000003", "row-0000001"]),
        ("nobody", vec![]),
    ] {
        let (ids, answers) = every_page(&gw, &format!("user_id={user}&page_size=5"));
        assert_eq!(ids, wanted, "{user}");
        assert_eq!(answers.len(), 1, "{user}: {answers:?}");
        assert_eq!(answers[0]["partial"], false, "{user}: {answers:?}");
    }
}

fn every_key_with_limits(db: Option<&TestDb>) {
    let gw = gateway(&envs(db));
    // The oldest key has limits, then 100 without, then one more with: the
    // first page of 100 keys (newest first) would miss the oldest.
    new_key(&gw, json!({"key_alias": "limited-old", "rpm_limit": 5}));
    for i in 0..100 {
        new_key(&gw, json!({"key_alias": format!("plain-{i}")}));
    }
    new_key(
        &gw,
        json!({"key_alias": "limited-new", "max_parallel_requests": 2}),
    );
    let resp = gw.get("/key/list?has_limits=true&return_full_object=true&size=1&page=2");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let page = resp.json();
    assert_eq!(page["total_count"], 2, "{page}");
    assert_eq!(page["total_pages"], 2, "{page}");
    assert_eq!(page["keys"][0]["key_alias"], "limited-old", "{page}");
    let first = gw
        .get("/key/list?has_limits=true&return_full_object=true&size=1")
        .json();
    assert_eq!(first["keys"][0]["key_alias"], "limited-new", "{first}");
    let err = assert_error(&gw.get("/key/list?has_limits=maybe"), 400);
    assert_eq!(err["param"], "has_limits");
}

#[test]
fn key_list_finds_every_key_with_limits_in_memory() {
    every_key_with_limits(None);
}

#[test]
fn key_list_finds_every_key_with_limits_on_postgres() {
    let db = TestDb::create();
    every_key_with_limits(Some(&db));
}

/// `has_limits` counts every rate limit a key's requests meet that the
/// key's row sets or links: a per-model limit (the column, or LiteLLM's
/// `metadata.model_tpm_limit`), a per-tag limit (`metadata.tag_rpm_limit`)
/// and the rpm of the shared budget row it links; not a key whose budget
/// row sets none, nor an empty per-model map.
fn keys_limited_per_model_per_tag_or_by_their_budget_row(db: Option<&TestDb>) {
    let gw = gateway(&envs(db));
    for (id, rpm) in [("slow", json!(4)), ("free", Value::Null)] {
        let resp = gw.post("/budget/new", &json!({"budget_id": id, "rpm_limit": rpm}));
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    for body in [
        json!({"key_alias": "per-model", "model_rpm_limit": {"local-mock": 3}}),
        json!({"key_alias": "per-model-meta", "metadata": {"model_tpm_limit": {"local-mock": 300}}}),
        json!({"key_alias": "per-tag", "metadata": {"tag_rpm_limit": {"batch": 2}}}),
        json!({"key_alias": "budget-row", "budget_id": "slow"}),
        json!({"key_alias": "budget-row-without", "budget_id": "free"}),
        json!({"key_alias": "empty-map", "model_rpm_limit": {}}),
        json!({"key_alias": "plain"}),
    ] {
        new_key(&gw, body);
    }
    let resp = gw.get("/key/list?has_limits=true&return_full_object=true&size=100");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let page = resp.json();
    let mut aliases: Vec<&str> = page["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key_alias"].as_str().unwrap())
        .collect();
    aliases.sort_unstable();
    assert_eq!(
        aliases,
        ["budget-row", "per-model", "per-model-meta", "per-tag"],
        "{page}"
    );
    assert_eq!(page["total_count"], 4, "{page}");
}

#[test]
fn key_list_finds_keys_limited_per_model_per_tag_or_by_budget_row_in_memory() {
    keys_limited_per_model_per_tag_or_by_their_budget_row(None);
}

#[test]
fn key_list_finds_keys_limited_per_model_per_tag_or_by_budget_row_on_postgres() {
    let db = TestDb::create();
    keys_limited_per_model_per_tag_or_by_their_budget_row(Some(&db));
}

/// Two replicas on one database and no Redis: a logout on one ends the
/// session on the other (`gateway_console_logouts`, until the session
/// would have expired).
#[test]
fn a_logout_ends_the_session_on_every_replica_through_postgres() {
    let db = TestDb::create();
    let env = envs(Some(&db));
    let (a, b) = (gateway(&env), gateway(&env));
    let body = json!({"username": "admin", "password": MASTER_KEY}).to_string();
    let login = a.call(
        "POST",
        "/ui/login",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(login.status, 200, "{}", login.text());
    let pair = login
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let csrf = login.json()["csrf_token"].as_str().unwrap().to_string();
    for gw in [&a, &b] {
        let listed = gw.call("GET", "/key/list", &[("Cookie", &pair)], b"");
        assert_eq!(listed.status, 200, "{}", listed.text());
    }
    let out = b.call(
        "POST",
        "/ui/logout",
        &[("Cookie", &pair), ("x-csrf-token", &csrf)],
        b"",
    );
    assert_eq!(out.status, 200, "{}", out.text());
    for gw in [&a, &b] {
        assert_error(&gw.call("GET", "/key/list", &[("Cookie", &pair)], b""), 401);
        let me = gw.call("GET", "/ui/session", &[("Cookie", &pair)], b"");
        assert_eq!(me.json()["authenticated"], false, "{}", me.text());
    }
    let hours = db.query(
        "SELECT round(extract(epoch FROM expires_at - (now() AT TIME ZONE 'UTC')) / 3600)
         FROM gateway_console_logouts",
    );
    assert_eq!(hours, "12");
}
