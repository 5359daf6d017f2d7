//! The admin console (`/ui`): its files and headers, the login and its
//! session cookie, the cookie as a credential for the admin API with a CSRF
//! token on state-changing calls, logout, the per-address login throttle;
//! and the whole console in headless Chromium (`tests/python/test_console.py`,
//! Selenium), in memory and on Postgres with two replicas sharing a Redis,
//! screenshots of each page under
//! `target/tmp/console-screenshots*/`.

use std::path::Path;
use std::time::Duration;

use e2e::{assert_error, error_message, Gateway, Response, MASTER_KEY};
use serde_json::{json, Value};

/// Prices for the mock deployments (keys with budgets need a price).
fn priced(mut params: Value) -> Value {
    params["input_cost_per_token"] = json!(0.00001);
    params["output_cost_per_token"] = json!(0.00003);
    params
}

/// A gateway with `local-mock` (the built-in mock) and `chat-deep`, whose
/// only deployment is unreachable and falls back to `local-mock`.
fn gateway(envs: &[(&str, &str)]) -> Gateway {
    gateway_with(envs, json!({}))
}

/// [`gateway`] with more `general_settings`.
fn gateway_with(envs: &[(&str, &str)], general: Value) -> Gateway {
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = json!({
        "model_list": [
            {"model_name": "local-mock", "model_info": {"id": "local-1"},
             "litellm_params": priced(json!({"model": "mock/local", "mock_response": "Hello from the mock"}))},
            {"model_name": "chat-deep", "model_info": {"id": "deep"},
             "litellm_params": priced(json!({"model": "openai/deep", "api_key": "sk-up", "timeout": 5,
                 "api_base": format!("http://127.0.0.1:{dead}/v1")}))},
        ],
        "router_settings": {"num_retries": 0, "fallbacks": [{"chat-deep": ["local-mock"]}]},
        "general_settings": {"master_key": MASTER_KEY},
    });
    let mut config = config;
    if let (Some(into), Value::Object(more)) = (config["general_settings"].as_object_mut(), general)
    {
        into.extend(more);
    }
    Gateway::start_json(&config, envs)
}

fn login(gw: &Gateway, username: &str, password: &str) -> Response {
    let body = json!({"username": username, "password": password}).to_string();
    gw.call(
        "POST",
        "/ui/login",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
}

/// The cookie pair (`gateway_session=...`) and CSRF token of a login.
fn session(resp: &Response) -> (String, String) {
    assert_eq!(resp.status, 200, "{}", resp.text());
    let cookie = resp.header("set-cookie").expect("a session cookie");
    let pair = cookie.split(';').next().unwrap().to_string();
    let csrf = resp.json()["csrf_token"].as_str().unwrap().to_string();
    (pair, csrf)
}

#[test]
fn ui_files_carry_their_types_a_strict_csp_etags_and_gzip() {
    let gw = gateway(&[]);
    for path in ["/ui", "/ui/"] {
        let resp = gw.call("GET", path, &[], b"");
        assert_eq!(resp.status, 200, "{path}");
        assert_eq!(
            resp.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        assert!(resp.text().contains("/ui/app.js"));
        let csp = resp.header("content-security-policy").unwrap();
        assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
        assert!(!csp.contains("unsafe-inline") && csp.contains("frame-ancestors 'none'"));
        assert_eq!(resp.header("x-frame-options"), Some("DENY"));
        assert_eq!(resp.header("x-content-type-options"), Some("nosniff"));
    }
    let js = gw.call("GET", "/ui/pages/keys.js", &[], b"");
    assert_eq!(js.status, 200);
    assert_eq!(
        js.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(js.header("cache-control"), Some("no-cache"));
    let etag = js.header("etag").expect("an etag").to_string();
    let again = gw.call("GET", "/ui/pages/keys.js", &[("If-None-Match", &etag)], b"");
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    assert!(js.header("content-encoding").is_none());
    // Gzipped for a browser that accepts it, under its own ETag.
    let gz = gw.call(
        "GET",
        "/ui/pages/keys.js",
        &[("Accept-Encoding", "gzip, deflate, br")],
        b"",
    );
    assert_eq!(gz.status, 200);
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(gz.header("vary"), Some("accept-encoding"));
    assert!(gz.body.starts_with(&[0x1f, 0x8b]), "not gzip");
    assert!(
        gz.body.len() * 2 < js.body.len(),
        "{} vs {}",
        gz.body.len(),
        js.body.len()
    );
    let gz_etag = gz.header("etag").unwrap().to_string();
    assert_ne!(gz_etag, etag);
    let gz_again = gw.call(
        "GET",
        "/ui/pages/keys.js",
        &[("Accept-Encoding", "gzip"), ("If-None-Match", &gz_etag)],
        b"",
    );
    assert_eq!(gz_again.status, 304);
    let css = gw.call("GET", "/ui/style.css", &[("If-None-Match", "\"old\"")], b"");
    assert_eq!(css.status, 200);
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
    for (method, path) in [
        ("GET", "/ui/nope.js"),
        ("GET", "/ui/../Cargo.toml"),
        ("GET", "/ui/pages"),
        ("POST", "/ui/app.js"),
        ("DELETE", "/ui/session"),
    ] {
        let resp = gw.call(method, path, &[], b"");
        assert_error(&resp, 404);
    }
}

#[test]
fn a_login_opens_a_session_whose_cookie_is_an_admin_credential_with_csrf() {
    let gw = gateway(&[]);
    let wrong = login(&gw, "admin", "sk-wrong");
    assert_eq!(
        error_message(&assert_error(&wrong, 401)),
        "Invalid credentials used to access UI."
    );
    assert!(wrong.header("set-cookie").is_none());
    assert_error(&login(&gw, "root", MASTER_KEY), 401);
    let form = gw.call(
        "POST",
        "/ui/login",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"username=admin&password=x",
    );
    assert_error(&form, 400);

    let resp = login(&gw, "admin", MASTER_KEY);
    let cookie = resp.header("set-cookie").unwrap().to_string();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    assert!(!resp.text().contains(MASTER_KEY));
    let (pair, csrf) = session(&resp);

    // Reads need only the cookie; the session endpoint hands back the token.
    let me = gw.call("GET", "/ui/session", &[("Cookie", &pair)], b"");
    assert_eq!(me.json()["authenticated"], true);
    assert_eq!(me.json()["csrf_token"], csrf.as_str());
    let anon = gw.call("GET", "/ui/session", &[], b"");
    assert_eq!(anon.json(), json!({"authenticated": false}));
    let listed = gw.call("GET", "/key/list", &[("Cookie", &pair)], b"");
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(
        gw.call(
            "GET",
            "/health/readiness/details",
            &[("Cookie", &pair)],
            b""
        )
        .status,
        200
    );

    // Changes need the session's CSRF token too.
    let generate = |headers: &[(&str, &str)]| {
        let mut all = vec![("Content-Type", "application/json"), ("Cookie", &pair)];
        all.extend_from_slice(headers);
        gw.call("POST", "/key/generate", &all, b"{\"key_alias\":\"c\"}")
    };
    assert_error(&generate(&[]), 403);
    assert_error(&generate(&[("x-csrf-token", "not-the-token")]), 403);
    let made = generate(&[("x-csrf-token", &csrf)]);
    assert_eq!(made.status, 200, "{}", made.text());
    let key = made.json()["key"].as_str().unwrap().to_string();
    // A key in the request wins over the cookie: a plain key is no admin.
    let auth = format!("Bearer {key}");
    let as_key = gw.call(
        "GET",
        "/key/list",
        &[("Cookie", &pair), ("Authorization", &auth)],
        b"",
    );
    assert_error(&as_key, 403);
    // The cookie is no credential for LLM calls.
    let chat = gw.call(
        "POST",
        "/v1/chat/completions",
        &[("Cookie", &pair), ("Content-Type", "application/json")],
        e2e::chat_body("local-mock").to_string().as_bytes(),
    );
    assert_error(&chat, 401);

    // Logout needs the token, then ends the session and clears the cookie.
    let out = gw.call("POST", "/ui/logout", &[("Cookie", &pair)], b"");
    assert_error(&out, 403);
    let out = gw.call(
        "POST",
        "/ui/logout",
        &[("Cookie", &pair), ("x-csrf-token", &csrf)],
        b"",
    );
    assert_eq!(out.status, 200);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    let after = gw.call("GET", "/key/list", &[("Cookie", &pair)], b"");
    assert!(error_message(&assert_error(&after, 401)).contains("console session"));
    let unknown = gw.call(
        "GET",
        "/key/list",
        &[("Cookie", "gateway_session=0123456789abcdef")],
        b"",
    );
    assert_error(&unknown, 401);
}

#[test]
fn ui_username_and_password_replace_the_master_key() {
    let gw = gateway(&[("UI_USERNAME", "ops"), ("UI_PASSWORD", "console-pw")]);
    assert_error(&login(&gw, "admin", MASTER_KEY), 401);
    assert_error(&login(&gw, "ops", MASTER_KEY), 401);
    let (pair, _) = session(&login(&gw, "ops", "console-pw"));
    assert_eq!(
        gw.call("GET", "/team/list", &[("Cookie", &pair)], b"")
            .status,
        200
    );
}

#[test]
fn wrong_passwords_are_throttled_per_address() {
    let gw = gateway(&[]);
    for _ in 0..5 {
        assert_error(&login(&gw, "admin", "guess"), 401);
    }
    let throttled = login(&gw, "admin", MASTER_KEY);
    let err = assert_error(&throttled, 429);
    assert!(error_message(&err).contains("Too many failed logins"));
    let wait: u64 = throttled.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=300).contains(&wait), "{wait}");
    // The admin API itself is not throttled by it.
    assert_eq!(gw.get("/key/list").status, 200);
}

/// Runs `tests/python/test_console.py` against a [`gateway`] started with
/// `envs`, beside `others` more replicas of it (sharing its Redis);
/// screenshots go to `target/tmp/<shots>/`.
fn browser_run(envs: &[(&str, &str)], others: usize, shots: &str) {
    assert!(
        Path::new("/usr/bin/chromium").exists() && Path::new("/usr/bin/chromedriver").exists(),
        "chromium and chromedriver are missing: run scripts/test.sh (apt-get install chromium chromium-driver)"
    );
    let gw = gateway(envs);
    let _others: Vec<Gateway> = (0..others).map(|_| gateway(envs)).collect();
    let replicas = (others + 1).to_string();
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join(shots);
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let url = format!("http://127.0.0.1:{}", gw.port());
    let shots_dir = shots.display().to_string();
    let script_envs = [
        ("GATEWAY_URL", url.as_str()),
        ("GATEWAY_MASTER_KEY", MASTER_KEY),
        ("GATEWAY_MODEL", "local-mock"),
        ("GATEWAY_FALLBACK_MODEL", "chat-deep"),
        ("SCREENSHOT_DIR", shots_dir.as_str()),
        ("GATEWAY_REPLICAS", replicas.as_str()),
    ];
    let run = e2e::python::run_script("test_console.py", &script_envs, Duration::from_secs(180));
    let (status, output) = (run.status, run.output);
    println!("{output}\nscreenshots: {}", shots.display());
    let hint = if output.contains("No module named") {
        "\n(the interpreter lacks selenium: run scripts/test.sh)"
    } else {
        ""
    };
    assert!(
        status.is_some_and(|s| s.success()),
        "the console's browser test failed ({status:?}):\n{output}{hint}\n{}",
        gw.output()
    );
    for page in [
        "keys",
        "teams",
        "users",
        "organizations",
        "models",
        "usage",
        "logs",
        "limits",
        "health",
    ] {
        let found = std::fs::read_dir(&shots)
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .ends_with(&format!("-{page}.png"))
            });
        assert!(found, "no screenshot of {page}");
    }
}

#[test]
fn the_console_works_in_headless_chromium() {
    browser_run(&[], 0, "console-screenshots");
}

/// The same pages against LiteLLM's tables in Postgres, as a fleet: two
/// replicas sharing a Redis (the Health page lists both).
#[test]
fn the_console_works_in_headless_chromium_on_postgres_with_two_replicas() {
    let db = e2e::TestDb::create();
    let redis = e2e::PrivateRedis::start();
    let url = redis.url();
    browser_run(
        &[("DATABASE_URL", db.url()), ("REDIS_URL", url.as_str())],
        1,
        "console-screenshots-postgres",
    );
}

#[test]
fn an_internal_users_key_logs_in_to_its_own_keys_and_spend_only() {
    let gw = gateway(&[]);
    let new_user = |id: &str, role: &str| {
        let resp = gw.post("/user/new", &json!({"user_id": id, "user_role": role}));
        assert_eq!(resp.status, 200, "{}", resp.text());
        resp.json()["key"].as_str().unwrap().to_string()
    };
    let alice = new_user("alice", "internal_user");
    let bob = new_user("bob", "internal_user");
    let plain = gw.post("/key/generate", &json!({})).json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    assert_error(&login(&gw, "", &plain), 401);
    assert_error(&login(&gw, "admin", "sk-no-such-key"), 401);

    let resp = login(&gw, "", &alice);
    assert_eq!(resp.json()["role"], "internal_user");
    assert_eq!(resp.json()["user_id"], "alice");
    let (pair, csrf) = session(&resp);
    let me = gw.call("GET", "/ui/session", &[("Cookie", &pair)], b"");
    assert_eq!(me.json()["role"], "internal_user");

    // Its own keys only, whatever it asks for.
    let listed = gw.call(
        "GET",
        "/key/list?return_full_object=true",
        &[("Cookie", &pair)],
        b"",
    );
    assert_eq!(listed.status, 200, "{}", listed.text());
    let keys = listed.json()["keys"].as_array().unwrap().clone();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0]["user_id"], "alice");
    let others = gw.call("GET", "/key/list?user_id=bob", &[("Cookie", &pair)], b"");
    assert_error(&others, 403);
    let spend = gw.call("GET", "/spend/logs", &[("Cookie", &pair)], b"");
    assert_eq!(spend.status, 200, "{}", spend.text());
    // Its teams: those it is a member of (LiteLLM's UI shows an internal
    // user its own), never another's.
    for (team, members) in [
        ("alices-team", json!([{"user_id": "alice", "role": "user"}])),
        ("bobs-team", json!([{"user_id": "bob", "role": "admin"}])),
    ] {
        let made = gw.post(
            "/team/new",
            &json!({"team_id": team, "members_with_roles": members}),
        );
        assert_eq!(made.status, 200, "{}", made.text());
    }
    let teams = |headers: &[(&str, &str)], q: &str| {
        let resp = gw.call("GET", &format!("/v2/team/list{q}"), headers, b"");
        assert_eq!(resp.status, 200, "{}", resp.text());
        let answer = resp.json();
        let ids: Vec<String> = answer["teams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["team_id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(answer["total"], json!(ids.len()), "{answer}");
        ids
    };
    assert_eq!(teams(&[("Cookie", &pair)], ""), ["alices-team"]);
    assert_eq!(
        teams(&[("Cookie", &pair)], "?user_id=alice&page_size=25"),
        ["alices-team"]
    );
    let bobs = gw.call(
        "GET",
        "/v2/team/list?user_id=bob",
        &[("Cookie", &pair)],
        b"",
    );
    assert_error(&bobs, 403);
    let bob_auth = format!("Bearer {bob}");
    assert_eq!(teams(&[("Authorization", &bob_auth)], ""), ["bobs-team"]);
    // Nothing an admin may do; the models, as any key may (LiteLLM's).
    for path in ["/team/list", "/global/spend", "/user/list"] {
        assert_error(&gw.call("GET", path, &[("Cookie", &pair)], b""), 403);
    }
    let models = gw.call("GET", "/model/info", &[("Cookie", &pair)], b"");
    assert_eq!(models.status, 200, "{}", models.text());
    // Keys for itself only (LiteLLM's internal_user), never for another.
    let generate = gw.call(
        "POST",
        "/key/generate",
        &[
            ("Cookie", &pair),
            ("x-csrf-token", &csrf),
            ("Content-Type", "application/json"),
        ],
        br#"{"user_id": "bob"}"#,
    );
    assert_error(&generate, 403);
    // The same view with the key itself, as LiteLLM gives it.
    let auth = format!("Bearer {bob}");
    let own = gw.call("GET", "/key/list", &[("Authorization", &auth)], b"");
    assert_eq!(own.json()["total_count"], 1, "{}", own.text());

    // Blocking the key ends what the session may do.
    assert_eq!(gw.post("/key/block", &json!({"key": alice})).status, 200);
    let after = gw.call("GET", "/key/list", &[("Cookie", &pair)], b"");
    assert_error(&after, 401);
    let me = gw.call("GET", "/ui/session", &[("Cookie", &pair)], b"");
    assert_eq!(me.json()["authenticated"], false);
}

#[test]
fn ui_access_mode_admin_only_lets_only_admins_log_in() {
    let gw = gateway_with(&[], json!({"ui_access_mode": "admin_only"}));
    let resp = gw.post(
        "/user/new",
        &json!({"user_id": "carol", "user_role": "internal_user"}),
    );
    let key = resp.json()["key"].as_str().unwrap().to_string();
    let refused = login(&gw, "", &key);
    assert!(error_message(&assert_error(&refused, 401)).contains("admin_only"));
    let admin = gw.post(
        "/user/new",
        &json!({"user_id": "dave", "user_role": "proxy_admin"}),
    );
    let admin_key = admin.json()["key"].as_str().unwrap().to_string();
    assert_eq!(login(&gw, "", &admin_key).json()["role"], "proxy_admin");
    session(&login(&gw, "admin", MASTER_KEY));
}

#[test]
fn disable_admin_ui_turns_the_console_off() {
    let gw = gateway(&[("DISABLE_ADMIN_UI", "True")]);
    for (method, path) in [
        ("GET", "/ui"),
        ("GET", "/ui/app.js"),
        ("GET", "/ui/session"),
    ] {
        assert_error(&gw.call(method, path, &[], b""), 404);
    }
    assert_error(&login(&gw, "admin", MASTER_KEY), 404);
    assert_eq!(gw.get("/key/list").status, 200);
}

/// Two replicas of one fleet (the same master key, one Redis): a login on
/// one is a session on the other, with the same CSRF token; a logout on
/// either ends it on both; a changed cookie, or a replica with another
/// console password, refuses it.
#[test]
fn a_session_works_on_every_replica_and_a_logout_ends_it_on_all() {
    let redis = e2e::PrivateRedis::start();
    let url = redis.url();
    let envs = [("REDIS_URL", url.as_str())];
    let (a, b) = (gateway(&envs), gateway(&envs));
    let (pair, csrf) = session(&login(&a, "admin", MASTER_KEY));
    let me = b.call("GET", "/ui/session", &[("Cookie", &pair)], b"");
    assert_eq!(me.json()["authenticated"], true, "{}", me.text());
    assert_eq!(me.json()["csrf_token"], csrf.as_str());
    let made = b.call(
        "POST",
        "/key/generate",
        &[
            ("Content-Type", "application/json"),
            ("Cookie", &pair),
            ("x-csrf-token", &csrf),
        ],
        b"{}",
    );
    assert_eq!(made.status, 200, "{}", made.text());

    // The token is signed: any change to it is no session.
    let mut forged = pair.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == '0' { '1' } else { '0' });
    let refused = b.call("GET", "/key/list", &[("Cookie", &forged)], b"");
    assert_error(&refused, 401);
    let elsewhere = gateway(&[("UI_PASSWORD", "another-console-pw")]);
    let refused = elsewhere.call("GET", "/key/list", &[("Cookie", &pair)], b"");
    assert_error(&refused, 401);

    // A logout on B ends the session on A too.
    let out = b.call(
        "POST",
        "/ui/logout",
        &[("Cookie", &pair), ("x-csrf-token", &csrf)],
        b"",
    );
    assert_eq!(out.status, 200, "{}", out.text());
    for gw in [&a, &b] {
        let after = gw.call("GET", "/key/list", &[("Cookie", &pair)], b"");
        assert_error(&after, 401);
        let me = gw.call("GET", "/ui/session", &[("Cookie", &pair)], b"");
        assert_eq!(me.json()["authenticated"], false);
    }
    // Remembered in Redis until the session would have expired.
    let e2e::redis::Reply::Array(keys) = redis.command(&["KEYS", "{gateway:console}:logout:*"])
    else {
        panic!("KEYS answers an array");
    };
    assert_eq!(keys.len(), 1, "{keys:?}");
    let e2e::redis::Reply::Bulk(Some(name)) = &keys[0] else {
        panic!("a key name: {keys:?}");
    };
    let e2e::redis::Reply::Int(ttl) = redis.command(&["TTL", name]) else {
        panic!("TTL answers an integer");
    };
    assert!((1..=43_200).contains(&ttl), "{ttl}");
    // A new login is a new session, on both.
    let (again, _) = session(&login(&b, "admin", MASTER_KEY));
    assert_eq!(
        a.call("GET", "/key/list", &[("Cookie", &again)], b"")
            .status,
        200
    );
}
