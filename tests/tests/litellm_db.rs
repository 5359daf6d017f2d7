//! The switch from LiteLLM and back, against LiteLLM's own artefacts: a
//! database built by the SQL migrations of the `litellm-proxy-extras`
//! package and filled by the `litellm` package's helpers (hashed tokens,
//! model params encrypted with NaCl SecretBox and AES-256-GCM), served by
//! the gateway, then read back through LiteLLM's parsers
//! (`tests/python/litellm_db.py`; the packages are pinned in
//! `scripts/test.sh` and installed into `.venv`).

use e2e::{assert_error, to_yaml, Gateway, MockServer, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The salt key both LiteLLM's helpers and the gateway encrypt with.
const SALT_KEY: &str = "sk-salt-litedb-test";

/// `E2E_PYTHON`, else `.venv/bin/python` at the workspace root.
fn python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf();
    let python = std::env::var_os("E2E_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv/bin/python"));
    assert!(
        python.exists(),
        "Python interpreter {} not found: run scripts/test.sh (it installs the pinned litellm \
         packages into .venv) or set E2E_PYTHON",
        python.display()
    );
    python
}

/// Runs `tests/python/litellm_db.py args...`; its stdout, or a panic with
/// its output.
fn harness(args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/litellm_db.py");
    let out = Command::new(python())
        .arg(script)
        .args(args)
        .env("LITELLM_SALT_KEY", SALT_KEY)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run litellm_db.py");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "litellm_db.py {} failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
        args[0],
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn chat(gw: &Gateway, key: &str, model: &str) -> e2e::Response {
    chat_for(gw, key, model, None)
}

/// [`chat`] on behalf of end user `user` (the body's `user`), if any.
fn chat_for(gw: &Gateway, key: &str, model: &str, user: Option<&str>) -> e2e::Response {
    let mut body = json!({"model": model, "max_tokens": 16,
        "messages": [{"role": "user", "content": "hello there"}]});
    if let Some(user) = user {
        body["user"] = json!(user);
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

/// A string field of the fixture.
fn fx_str(fixture: &Value, name: &str) -> String {
    fixture[name].as_str().expect("fixture field").to_string()
}

/// Requests the mock received with upstream key `api_key`.
fn upstream_requests(mock: &MockServer, api_key: &str) -> u64 {
    mock.stats()["by_key"][api_key]["requests"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn a_litellm_database_serves_here_and_litellm_reads_what_the_gateway_wrote() {
    let db = TestDb::create();
    let mock = MockServer::start(&[]);
    let fixture: Value = serde_json::from_str(
        harness(&["setup", db.url(), &mock.api_base()])
            .lines()
            .last()
            .expect("fixture line"),
    )
    .expect("fixture JSON");
    assert!(fixture["migrations"].as_u64().unwrap() > 100, "{fixture}");
    let key = |name: &str| fixture["keys"][name].as_str().unwrap().to_string();
    let model = |which: &str, field: &str| {
        fixture["models"][which][field]
            .as_str()
            .unwrap()
            .to_string()
    };

    let config = json!({
        "model_list": [{
            "model_name": "local-mock",
            "litellm_params": {"model": "mock/local", "mock_response": "hi"},
        }],
        "general_settings": {"master_key": MASTER_KEY, "store_prompts_in_spend_logs": true},
        // Every request runs it: its rows carry `guardrail_information`,
        // which LiteLLM's types must read.
        "guardrails": [{"guardrail_name": "pii-mask", "litellm_params": {
            "guardrail": "litellm_content_filter", "mode": "pre_call", "default_on": true,
            "patterns": [{"pattern_type": "prebuilt", "pattern_name": "email", "action": "MASK"}]}}],
    });
    let gw = Gateway::start(
        &to_yaml(&config),
        &[("DATABASE_URL", db.url()), ("LITELLM_SALT_KEY", SALT_KEY)],
    );

    // Models LiteLLM encrypted are served, their api_key opened and sent.
    for which in ["secretbox", "gcm"] {
        let resp = chat(&gw, &key("good"), &model(which, "name"));
        assert_eq!(resp.status, 200, "{which}: {}", resp.text());
        assert_eq!(
            upstream_requests(&mock, &model(which, "api_key")),
            1,
            "{which}: the upstream saw the decrypted key: {}",
            mock.stats()
        );
    }

    // A model LiteLLM blocked is not served.
    assert_error(&chat(&gw, &key("good"), "lite-blocked"), 400);
    assert_eq!(upstream_requests(&mock, "sk-upstream-blocked"), 0);

    // LiteLLM's refusals, with its status codes and types.
    let err = assert_error(&chat(&gw, &key("blocked"), "lite-gcm"), 401);
    assert_eq!(err["type"], "auth_error", "{err:?}");
    let err = assert_error(&chat(&gw, &key("expired"), "lite-gcm"), 401);
    assert_eq!(err["type"], "expired_key", "{err:?}");
    let err = assert_error(&chat(&gw, &key("spent"), "lite-gcm"), 422);
    assert_eq!(err["type"], "budget_exceeded", "{err:?}");
    assert_error(&chat(&gw, &key("narrow"), "lite-secretbox"), 403);
    assert_eq!(chat(&gw, &key("narrow"), "lite-gcm").status, 200);

    // End users LiteLLM stored: a blocked one refused, one over its budget
    // row's max_budget refused, with LiteLLM's statuses and messages; one
    // within its budget served.
    let narrow = key("narrow");
    let err = assert_error(
        &chat_for(&gw, &narrow, "lite-gcm", Some("end-user-blocked")),
        400,
    );
    assert_eq!(
        err["message"], "User blocked from making LLM API Calls. User=end-user-blocked",
        "{err:?}"
    );
    let err = assert_error(
        &chat_for(&gw, &narrow, "lite-gcm", Some("end-user-spent")),
        422,
    );
    assert_eq!(err["type"], "budget_exceeded", "{err:?}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .starts_with("ExceededBudget: End User=end-user-spent over budget."),
        "{err:?}"
    );
    // A key LiteLLM made with `end_user_budget_id` in its metadata holds
    // an end user without a budget row of its own to that row (spend 1.0
    // over its 0.5), as LiteLLM's `get_end_user_object` grafts it; a key
    // without it does not.
    let err = assert_error(
        &chat_for(&gw, &key("tiered"), "lite-gcm", Some("end-user-riding")),
        422,
    );
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .starts_with("ExceededBudget: End User=end-user-riding over budget."),
        "{err:?}"
    );
    let resp = chat_for(&gw, &narrow, "lite-gcm", Some("end-user-riding"));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let end_user = fx_str(&fixture, "end_user_id");
    let resp = chat_for(&gw, &narrow, "lite-gcm", Some(&end_user));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let info = gw
        .get(&format!("/customer/info?end_user_id={end_user}"))
        .expect_status(200)
        .json();
    assert_eq!(info["litellm_budget_table"]["max_budget"], 10.0, "{info}");
    assert_eq!(info["alias"], "Lite end user", "{info}");

    // LiteLLM's key fields read as LiteLLM wrote them.
    let info = gw
        .get(&format!("/key/info?key={}", key("good")))
        .expect_status(200)
        .json();
    let info = &info["info"];
    assert_eq!(info["max_budget"], 10.0, "{info}");
    assert_eq!(info["rpm_limit"], 1000, "{info}");
    assert_eq!(
        info["model_max_budget"],
        json!({"lite-gcm": {"budget_limit": 5.0, "time_period": "30d"}}),
        "{info}"
    );

    // The team's aliases LiteLLM stored (a json.dumps'ed string) apply;
    // a member LiteLLM scoped to some models is held to them.
    let resp = chat(&gw, &key("narrow"), "lite-fast");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("x-litellm-model-group"), Some("lite-gcm"));
    let scoped = gw
        .post(
            "/key/generate",
            &json!({"user_id": "user-lite-scoped", "team_id": "team-lite"}),
        )
        .expect_status(200)
        .json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let err = assert_error(&chat(&gw, &scoped, "lite-secretbox"), 403);
    assert_eq!(err["type"], "team_model_access_denied", "{err:?}");
    assert_eq!(chat(&gw, &scoped, "lite-gcm").status, 200);
    // Member limits and team aliases written here, read by LiteLLM below.
    let member_limits = json!({"rpm_limit": 500, "tpm_limit": 90000,
        "allowed_models": ["lite-gcm", "lite-secretbox"], "temp_budget_increase": 2.0,
        "model_max_budget": {"lite-gcm": {"max_budget": 1.0, "budget_duration": "1d"}}});
    let mut update = json!({"team_id": "team-lite", "user_id": "user-lite",
        "temp_budget_expiry": "2999-01-01T00:00:00Z"});
    for (k, v) in member_limits.as_object().unwrap() {
        update[k] = v.clone();
    }
    gw.post("/team/member_update", &update).expect_status(200);
    let team_aliases = json!({"lite-fast": "lite-gcm", "lite-slow": "lite-secretbox"});
    gw.post(
        "/team/update",
        &json!({"team_id": "team-lite", "model_aliases": team_aliases}),
    )
    .expect_status(200);

    // A model added here is stored encrypted, as LiteLLM stores it.
    let new_key = "sk-upstream-added-here";
    gw.post(
        "/model/new",
        &json!({
            "model_name": "added-here",
            "litellm_params": {"model": "openai/gpt-4o", "api_base": mock.api_base(),
                "api_key": new_key},
            "model_info": {"id": "m-added-here"},
        }),
    )
    .expect_status(200);
    let stored = db.query(
        r#"SELECT litellm_params::text FROM "LiteLLM_ProxyModelTable" WHERE model_id = 'm-added-here'"#,
    );
    assert!(!stored.contains(new_key), "stored in plain text: {stored}");
    assert!(!stored.contains("gpt-4o"), "stored in plain text: {stored}");
    e2e::eventually("the added model to serve", Duration::from_secs(5), || {
        (chat(&gw, MASTER_KEY, "added-here").status == 200).then_some(())
    });
    assert_eq!(upstream_requests(&mock, new_key), 1, "{}", mock.stats());

    // Spend is added to what LiteLLM recorded (0.5), never overwritten.
    let good_token =
        db.query(r#"SELECT token FROM "LiteLLM_VerificationToken" WHERE key_alias = 'lite-good'"#);
    e2e::eventually("the good key's spend rows", Duration::from_secs(10), || {
        let n: u32 = db
            .query(&format!(
                r#"SELECT count(*) FROM "LiteLLM_SpendLogs" WHERE api_key = '{good_token}'"#
            ))
            .parse()
            .unwrap();
        let spend: f64 = db
            .query(&format!(
                r#"SELECT spend FROM "LiteLLM_VerificationToken" WHERE token = '{good_token}'"#
            ))
            .parse()
            .unwrap();
        (n == 2 && spend > 0.5).then_some(())
    });

    // The organization LiteLLM stored reads here; one made here, LiteLLM
    // reads (below).
    let org = gw
        .get("/organization/info?organization_id=org-lite")
        .expect_status(200)
        .json();
    assert_eq!(org["organization_alias"], "Lite org", "{org}");
    assert_eq!(org["litellm_budget_table"]["tpm_limit"], 5000, "{org}");
    assert_eq!(org["members"][0]["user_role"], "org_admin", "{org}");
    assert_eq!(
        (&org["spend"], &org["metadata"]["tier"]),
        (&json!(1.5), &json!("gold")),
        "{org}"
    );
    let gateway_org = json!({"id": "org-gw", "alias": "Gateway org", "models": ["lite-gcm"],
        "metadata": {"owner": "gateway", "model_rpm_limit": {"lite-gcm": 3}}, "max_budget": 7.0,
        "member_budget": 2.0});
    gw.post(
        "/organization/new",
        &json!({"organization_id": "org-gw", "organization_alias": "Gateway org",
            "models": ["lite-gcm"], "max_budget": 7, "budget_duration": "30d",
            "metadata": {"owner": "gateway"}, "model_rpm_limit": {"lite-gcm": 3}}),
    )
    .expect_status(200);
    gw.post(
        "/organization/member_add",
        &json!({"organization_id": "org-gw",
            "member": {"user_id": "user-lite", "role": "internal_user"}}),
    )
    .expect_status(200);
    gw.call(
        "PATCH",
        "/organization/member_update",
        &[
            ("Authorization", &format!("Bearer {MASTER_KEY}")),
            ("Content-Type", "application/json"),
        ],
        json!({"organization_id": "org-gw", "user_id": "user-lite",
            "max_budget_in_organization": 2})
        .to_string()
        .as_bytes(),
    )
    .expect_status(200);
    // A budget an organization of LiteLLM's uses is kept (its foreign key).
    assert_error(
        &gw.post("/budget/delete", &json!({"id": "budget-lite"})),
        400,
    );
    e2e::eventually("the end user's spend", Duration::from_secs(10), || {
        let spend: f64 = db
            .query(&format!(
                r#"SELECT spend FROM "LiteLLM_EndUserTable" WHERE user_id = '{end_user}'"#
            ))
            .parse()
            .unwrap();
        (spend > 0.25).then_some(())
    });

    // Every row is written (the end user's spend above came with them):
    // the daily tables are read below, and so is this answer.
    let day = |shift: &str| {
        db.query(&format!(
            "SELECT to_char((now() AT TIME ZONE 'UTC') {shift} interval '1 day', 'YYYY-MM-DD')"
        ))
    };
    let activity = gw
        .get(&format!(
            "/user/daily/activity?start_date={}&end_date={}&page_size=1000",
            day("-"),
            day("+")
        ))
        .expect_status(200)
        .json();

    let mut fixture = fixture;
    fixture["user_daily_activity"] = activity;
    fixture["gateway_org"] = gateway_org;
    fixture["member_limits"] = member_limits;
    fixture["team_aliases"] = team_aliases;
    fixture["new_model"] = json!({"name": "added-here", "id": "m-added-here", "api_key": new_key});
    let verified = harness(&["verify", db.url(), &fixture.to_string()]);
    assert!(verified.contains("prompts and answers kept"), "{verified}");
    assert!(
        verified.contains("model params opened by LiteLLM"),
        "{verified}"
    );
    assert!(
        verified.contains("organization, budget and membership parsed by LiteLLM"),
        "{verified}"
    );
    assert!(
        verified.contains("LiteLLM's daily writer upserts into them"),
        "{verified}"
    );
    assert!(
        verified.contains("member limits and team aliases parsed by LiteLLM"),
        "{verified}"
    );
}

/// LiteLLM's settings saved in its database, written by LiteLLM's own code:
/// with `store_model_in_db`, the `LiteLLM_CacheConfig` row its UI saves
/// (every field sealed) turns the response cache on with its parameters,
/// and the `LiteLLM_Config` row `litellm_settings` fills `cache` and
/// `cache_params` the file leaves out; without `store_model_in_db` neither
/// applies (as in LiteLLM), and a stored cache on a Redis this gateway is
/// not configured with stops the start, naming the row.
#[test]
fn litellms_stored_cache_settings_apply_with_store_model_in_db() {
    let mock = MockServer::start(&[]);
    let redis = e2e::PrivateRedis::start();
    let port = redis.port().to_string();
    let mut config = e2e::base_config(mock.port());
    config["router_settings"] = json!({"redis_host": "127.0.0.1", "redis_port": redis.port()});
    let yaml = to_yaml(&config);
    let send = |gw: &Gateway, text: &str| {
        let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]});
        let r = gw.post("/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.header("x-litellm-cache-key").map(str::to_string)
    };
    // A repeated request answered from the cache (the write to Redis is not
    // waited for): the hit's cache key.
    let hit = |gw: &Gateway, text: &str| -> String {
        assert!(send(gw, text).is_none(), "the first request was a hit");
        e2e::eventually("a hit", Duration::from_secs(10), || send(gw, text))
    };
    // One database, its stored rows replaced before each start.
    let db = TestDb::create();
    let stored = |settings: Value| {
        harness(&["settings", db.url(), &settings.to_string()]);
        &db
    };
    let envs = |db: &TestDb| -> Vec<(String, String)> {
        vec![
            ("DATABASE_URL".into(), db.url().into()),
            ("LITELLM_SALT_KEY".into(), SALT_KEY.into()),
        ]
    };
    let start = |db: &TestDb| -> Gateway {
        let envs = envs(db);
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Gateway::start(&yaml, &envs)
    };

    // The cache row, as LiteLLM's UI saves it (numbers as text, redis_type).
    let ui_row = json!({"type": "redis", "host": "127.0.0.1", "port": port, "namespace": "ui-saved",
        "ttl": "600", "redis_type": "node"});
    let db = stored(json!({"cache_settings": ui_row,
        "config": {"general_settings": {"store_model_in_db": true}}}));
    let gw = start(db);
    let key = hit(&gw, "stored cache row");
    assert!(
        key.starts_with("ui-saved:"),
        "the stored namespace applies: {key}"
    );
    drop(gw);

    // The litellm_settings row of LiteLLM_Config.
    let db = stored(json!({"config": {
        "general_settings": {"store_model_in_db": true},
        "litellm_settings": {"cache": true, "cache_params": {"type": "redis", "namespace": "cfg-row"}}}}));
    let gw = start(db);
    let key = hit(&gw, "stored litellm_settings");
    assert!(key.starts_with("cfg-row:"), "{key}");
    drop(gw);

    // Without store_model_in_db LiteLLM reads neither: nor does the gateway.
    let db = stored(json!({"cache_settings": ui_row}));
    let gw = start(db);
    for _ in 0..2 {
        assert_eq!(send(&gw, "store_model_in_db off"), None, "no cache is on");
    }
    assert!(
        gw.output().contains("LiteLLM_CacheConfig"),
        "{}",
        gw.output()
    );
    drop(gw);

    // A stored cache on another Redis: refused, naming the row.
    let db = stored(
        json!({"cache_settings": {"type": "redis", "host": "127.0.0.1", "port": "1"},
        "config": {"general_settings": {"store_model_in_db": true}}}),
    );
    let envs = envs(db);
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut gw = Gateway::spawn(&yaml, &envs, e2e::free_port(), &[]);
    let status = gw.wait_exit(Duration::from_secs(30)).unwrap_or_else(|| {
        panic!(
            "started with a stored cache on another Redis\n{}",
            gw.output()
        )
    });
    assert!(!status.success());
    let out = gw.output();
    assert!(
        out.contains("LiteLLM_CacheConfig") && out.contains("127.0.0.1:1"),
        "{out}"
    );
}

/// LiteLLM re-reads its `LiteLLM_CacheConfig` row every
/// `proxy_config_reload_interval_seconds` and rebuilds its cache when the
/// row changed: so does the gateway, while it serves. A row saved after
/// the start (another namespace, then `type: local`) takes effect without
/// a restart.
#[test]
fn a_cache_config_row_saved_while_serving_takes_effect() {
    let mock = MockServer::start(&[]);
    let redis = e2e::PrivateRedis::start();
    let port = redis.port().to_string();
    let mut config = e2e::base_config(mock.port());
    config["router_settings"] = json!({"redis_host": "127.0.0.1", "redis_port": redis.port()});
    config["general_settings"]["proxy_config_reload_interval_seconds"] = json!(1);
    let yaml = to_yaml(&config);
    let send = |gw: &Gateway, text: &str| {
        let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]});
        let r = gw.post("/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.header("x-litellm-cache-key").map(str::to_string)
    };
    let db = TestDb::create();
    let save = |namespace: &str, kind: &str| {
        let row = json!({"type": kind, "host": "127.0.0.1", "port": port,
            "namespace": namespace, "redis_type": "node"});
        harness(&[
            "settings",
            db.url(),
            &json!({"cache_settings": row,
                "config": {"general_settings": {"store_model_in_db": true}}})
            .to_string(),
        ]);
    };
    save("before", "redis");
    let gw = Gateway::start(
        &yaml,
        &[("DATABASE_URL", db.url()), ("LITELLM_SALT_KEY", SALT_KEY)],
    );
    // A hit under the stored namespace (the write is not waited for).
    let in_namespace = |gw: &Gateway, text: &str, namespace: &str| {
        let wanted = format!("{namespace}:");
        e2e::eventually(
            &format!("a hit keyed {wanted}"),
            Duration::from_secs(20),
            || send(gw, text).filter(|k| k.starts_with(&wanted)),
        )
    };
    in_namespace(&gw, "saved while serving", "before");

    // The row saved again with another namespace: the next requests are
    // keyed under it (the same prompt misses once, then hits).
    save("after", "redis");
    in_namespace(&gw, "saved while serving", "after");

    // Then as a local cache: the cache in force says so, and its cores
    // store and serve.
    save("after", "local");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = gw.get("/cache/ping");
        if r.status == 200 && r.json()["cache_type"] == "local" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the local cache is not in force: {} {}\n{}",
            r.status,
            r.text(),
            gw.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Served from a core's own entries (a request may reach another core
    // first, which misses).
    in_namespace(&gw, "served locally", "after");
}

/// Rows LiteLLM wrote with fields it acts on and the gateway does not (a
/// key's `router_settings`, `budget_fallbacks`, `config`, `permissions`
/// columns or `metadata.enable_prompt_caching`; a team's
/// `router_settings` or `team_member_permissions` beyond the baseline):
/// their keys' requests are refused (400 naming the field and the key or
/// team; one warning per key), never served as if the field were absent.
/// Empty values and the baseline permissions ask for nothing: served.
#[test]
fn rows_litellm_wrote_with_fields_it_acts_on_refuse_their_keys() {
    let db = TestDb::create();
    // LiteLLM's schema (its migrations), no settings.
    harness(&["settings", db.url(), "{}"]);
    let token = |key: &str| format!("encode(sha256('{key}'::bytea), 'hex')");
    let key_row = |key: &str, alias: &str, column: &str, value: &str| {
        db.query(&format!(
            r#"INSERT INTO "LiteLLM_VerificationToken" (token, key_alias, {column})
               VALUES ({}, '{alias}', '{value}')"#,
            token(key)
        ));
    };
    key_row("sk-lite-plain", "plain", "router_settings", "{}");
    key_row(
        "sk-lite-routed",
        "routed",
        "router_settings",
        r#"{"num_retries": 3}"#,
    );
    key_row(
        "sk-lite-fallbacks",
        "fallbacks",
        "budget_fallbacks",
        r#"{"gpt-4o": ["local-mock"]}"#,
    );
    key_row(
        "sk-lite-perms",
        "perms",
        "permissions",
        r#"{"get_spend_routes": true}"#,
    );
    key_row(
        "sk-lite-caching",
        "caching",
        "metadata",
        r#"{"enable_prompt_caching": true}"#,
    );
    db.query(
        r#"INSERT INTO "LiteLLM_TeamTable" (team_id, team_member_permissions)
           VALUES ('t-grants', ARRAY['/key/info', '/key/generate']),
                  ('t-baseline', ARRAY['/key/info', '/key/health']);
           INSERT INTO "LiteLLM_TeamTable" (team_id, router_settings)
           VALUES ('t-routed', '{"fallbacks": [{"local-mock": ["gpt-4o"]}]}')"#,
    );
    for (key, team) in [
        ("sk-lite-grants", "t-grants"),
        ("sk-lite-baseline", "t-baseline"),
        ("sk-lite-teamrouted", "t-routed"),
    ] {
        db.query(&format!(
            r#"INSERT INTO "LiteLLM_VerificationToken" (token, key_alias, team_id)
               VALUES ({}, '{key}', '{team}')"#,
            token(key)
        ));
    }
    let mock = MockServer::start(&[]);
    let gw = Gateway::start(
        &to_yaml(&e2e::base_config(mock.port())),
        &[("DATABASE_URL", db.url()), ("LITELLM_SALT_KEY", SALT_KEY)],
    );

    for key in ["sk-lite-plain", "sk-lite-baseline"] {
        let r = chat(&gw, key, "local-mock");
        assert_eq!(r.status, 200, "{key}: {}", r.text());
    }
    for (key, field, owner) in [
        ("sk-lite-routed", "router_settings", "key routed"),
        ("sk-lite-fallbacks", "budget_fallbacks", "key fallbacks"),
        ("sk-lite-perms", "permissions", "key perms"),
        (
            "sk-lite-caching",
            "metadata.enable_prompt_caching",
            "key caching",
        ),
        ("sk-lite-grants", "team_member_permissions", "team t-grants"),
        ("sk-lite-teamrouted", "router_settings", "team t-routed"),
    ] {
        for _ in 0..2 {
            let err = assert_error(&chat(&gw, key, "local-mock"), 400);
            assert_eq!(err["type"], "invalid_request_error", "{key}: {err:?}");
            assert_eq!(err["param"], field, "{key}: {err:?}");
            let message = err["message"].as_str().unwrap_or_default();
            assert!(
                message.starts_with(&format!("{owner} ")) && message.contains(field),
                "{key}: {message}"
            );
        }
    }
    // Warned about once per key, however often it calls (each refusal
    // is in the access log too). Logs are written off the request path:
    // read once the twelve refusals' access lines are out (each key's
    // warning is logged before its access line, by the same writer).
    let out = e2e::eventually(
        "the refusals' access lines",
        Duration::from_secs(10),
        || {
            let out = gw.output();
            (out.matches("status=400").count() >= 12).then_some(out)
        },
    );
    let warned = out
        .matches("WARN gateway::auth::unapplied: key routed has router_settings")
        .count();
    assert_eq!(warned, 1, "{out}");
}

/// Prompts LiteLLM keeps in `LiteLLM_PromptTable` are loaded at its
/// start with `store_model_in_db` (unless `supported_db_objects` leaves
/// `prompts` out) and applied to requests naming them: the gateway, which
/// does not apply them, stops its start naming the table, as it refuses a
/// config's `prompts:`; where LiteLLM would not load them it starts.
#[test]
fn stored_prompts_stop_the_start_where_litellm_loads_them() {
    let db = TestDb::create();
    harness(&[
        "settings",
        db.url(),
        &json!({"config": {"general_settings": {"store_model_in_db": true}}}).to_string(),
    ]);
    db.query(
        r#"INSERT INTO "LiteLLM_PromptTable" (id, prompt_id, litellm_params, updated_at)
           VALUES ('p-1', 'greeter', '{"prompt_id": "greeter", "prompt_integration": "dotprompt"}', now())"#,
    );
    let mock = MockServer::start(&[]);
    let yaml = to_yaml(&e2e::base_config(mock.port()));
    let envs = [("DATABASE_URL", db.url()), ("LITELLM_SALT_KEY", SALT_KEY)];
    let mut gw = Gateway::spawn(&yaml, &envs, e2e::free_port(), &[]);
    let status = gw
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("started with stored prompts\n{}", gw.output()));
    assert!(!status.success());
    let out = gw.output();
    assert!(
        out.contains("LiteLLM_PromptTable") && out.contains("greeter"),
        "{out}"
    );
    drop(gw);

    // supported_db_objects without prompts: LiteLLM does not load them.
    harness(&[
        "settings",
        db.url(),
        &json!({"config": {"general_settings": {"store_model_in_db": true,
            "supported_db_objects": ["models"]}}})
        .to_string(),
    ]);
    let gw = Gateway::start(&yaml, &envs);
    let r = chat(&gw, MASTER_KEY, "local-mock");
    assert_eq!(r.status, 200, "{}", r.text());
}
