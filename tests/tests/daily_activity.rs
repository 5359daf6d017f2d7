//! LiteLLM's `/user`, `/team`, `/tag` and `/customer` `daily/activity` end
//! to end on the in-memory store: requests of a key (of an internal user,
//! in a team, with tags, for an end user) show up per day with their
//! spend, breakdown and names; a bad parameter is a 400 naming it; the
//! internal user sees its own figures only. `/global/spend` is the spend
//! of every request, the master key's too. And `/gateway/limits`, the
//! Limits page's live view of a key's or team's limits.

use e2e::{assert_error, to_yaml, Gateway, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

fn start() -> Gateway {
    start_with(&[])
}

fn start_with(envs: &[(&str, &str)]) -> Gateway {
    let config = json!({
        "model_list": [{
            "model_name": "priced",
            "litellm_params": {
                "model": "mock/priced",
                "mock_response": "one two three",
                "input_cost_per_token": 0.00001,
                "output_cost_per_token": 0.0001,
            },
        }],
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start(&to_yaml(&config), envs)
}

fn chat(gw: &Gateway, key: &str, body: Value) {
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
}

fn get_as(gw: &Gateway, key: &str, path: &str) -> e2e::Response {
    let auth = format!("Bearer {key}");
    gw.call("GET", path, &[("Authorization", &auth)], b"")
}

/// Yesterday to tomorrow (UTC), as the query's dates: the requests' day
/// is in it whatever the clock.
fn range() -> String {
    let day = 86_400;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let date = |secs: u64| {
        // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
        let z = (secs / day) as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = yoe + era * 400 + i64::from(m <= 2);
        format!("{y:04}-{m:02}-{d:02}")
    };
    format!(
        "start_date={}&end_date={}",
        date(now - day),
        date(now + day)
    )
}

#[test]
fn daily_activity_per_user_team_tag_and_end_user() {
    let gw = start();
    gw.post(
        "/team/new",
        &json!({"team_id": "t1", "team_alias": "Team One"}),
    )
    .expect_status(200);
    gw.post(
        "/user/new",
        &json!({"user_id": "u1", "user_role": "internal_user"}),
    )
    .expect_status(200);
    let key = gw
        .post(
            "/key/generate",
            &json!({"user_id": "u1", "team_id": "t1", "key_alias": "u1-key",
                "metadata": {"tags": ["from-key"]}}),
        )
        .expect_status(200)
        .json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    for _ in 0..2 {
        chat(
            &gw,
            &key,
            json!({"model": "priced", "user": "cust-1", "metadata": {"tags": ["feature-x"]},
                "messages": [{"role": "user", "content": "hi"}]}),
        );
    }
    chat(
        &gw,
        MASTER_KEY,
        json!({"model": "priced", "messages": [{"role": "user", "content": "hi"}]}),
    );
    let range = range();

    // Users: u1's two requests and the master key's (user '').
    let users = e2e::eventually("three requests counted", Duration::from_secs(10), || {
        let v = gw
            .get(&format!("/user/daily/activity?{range}"))
            .expect_status(200)
            .json();
        (v["metadata"]["total_api_requests"] == 3).then_some(v)
    });
    // LiteLLM's /global/spend: every request's spend of the last 30 days,
    // the master key's included.
    let global = gw.get("/global/spend").expect_status(200).json();
    let total = users["metadata"]["total_spend"].as_f64().unwrap();
    assert!(
        (global["spend"].as_f64().unwrap() - total).abs() < 1e-12,
        "{global} {users}"
    );
    let day = &users["results"][0];
    assert!(
        users["metadata"]["total_spend"].as_f64().unwrap() > 0.0,
        "{users}"
    );
    assert_eq!(day["metrics"]["api_requests"], 3, "{day}");
    let entities = &day["breakdown"]["entities"];
    assert_eq!(entities["u1"]["metrics"]["api_requests"], 2, "{entities}");
    assert_eq!(
        entities["Unassigned"]["metrics"]["api_requests"], 1,
        "{entities}"
    );
    let keys = day["breakdown"]["api_keys"].as_object().unwrap();
    assert!(
        keys.values()
            .any(|k| k["metadata"]["key_alias"] == "u1-key"),
        "{keys:?}"
    );
    let models = &day["breakdown"]["models"];
    assert_eq!(models["priced"]["metrics"]["api_requests"], 3, "{models}");
    assert_eq!(
        day["breakdown"]["endpoints"]["/chat/completions"]["metrics"]["api_requests"],
        3
    );

    // Teams, with the team's alias; tags, the request's and the key's;
    // the end user.
    let teams = gw
        .get(&format!("/team/daily/activity?{range}&team_ids=t1"))
        .expect_status(200)
        .json();
    let t1 = &teams["results"][0]["breakdown"]["entities"]["t1"];
    assert_eq!(t1["metrics"]["api_requests"], 2, "{teams}");
    assert_eq!(t1["metadata"]["team_alias"], "Team One", "{teams}");
    let tags = gw
        .get(&format!("/tag/daily/activity?{range}"))
        .expect_status(200)
        .json();
    let tagged = &tags["results"][0]["breakdown"]["entities"];
    for tag in ["feature-x", "from-key"] {
        assert_eq!(tagged[tag]["metrics"]["api_requests"], 2, "{tags}");
    }
    let customers = gw
        .get(&format!(
            "/customer/daily/activity?{range}&end_user_ids=cust-1"
        ))
        .expect_status(200)
        .json();
    assert_eq!(
        customers["metadata"]["total_api_requests"], 2,
        "{customers}"
    );

    // Bad parameters, named.
    for (query, param) in [
        ("end_date=2026-01-01".to_string(), "start_date"),
        (format!("{range}&page_size=0"), "page_size"),
        (format!("{range}&bogus=1"), "bogus"),
    ] {
        let err = assert_error(&gw.get(&format!("/user/daily/activity?{query}")), 400);
        assert_eq!(err["param"], param, "{query}");
    }

    // The internal user: its own figures, and no one else's.
    let own = get_as(&gw, &key, &format!("/user/daily/activity?{range}"))
        .expect_status(200)
        .json();
    assert_eq!(own["metadata"]["total_api_requests"], 2, "{own}");
    assert_error(
        &get_as(
            &gw,
            &key,
            &format!("/user/daily/activity?{range}&user_id=other"),
        ),
        403,
    );
    assert_error(
        &get_as(&gw, &key, &format!("/team/daily/activity?{range}")),
        403,
    );
}

/// `/gateway/limits` (the console's Limits page): a key's limits beside
/// this process's counters in local mode (two requests on a 10 rpm key:
/// 2 used, 8 left; none in flight), its team's limit too; the limiter's
/// mode and reservation switch (alone without a key or team); a bad
/// parameter named.
#[test]
fn live_limits_of_a_key_and_its_team() {
    let gw = start();
    gw.post("/team/new", &json!({"team_id": "lt", "rpm_limit": 100}))
        .expect_status(200);
    let key = gw
        .post(
            "/key/generate",
            &json!({"team_id": "lt", "rpm_limit": 10, "tpm_limit": 100000,
                "max_parallel_requests": 3}),
        )
        .expect_status(200)
        .json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    for _ in 0..2 {
        chat(
            &gw,
            &key,
            json!({"model": "priced", "messages": [{"role": "user", "content": "hi"}]}),
        );
    }
    let live = gw
        .get(&format!("/gateway/limits?api_key={key}"))
        .expect_status(200)
        .json();
    assert_eq!(live["mode"], "local", "{live}");
    assert_eq!(live["reservation"], true, "{live}");
    assert_eq!(live["counted_here"], true, "{live}");
    assert_eq!(live["counted_in"], "replica", "{live}");
    let limit = |scope: &str, kind: &str| {
        live["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["scope"] == scope && l["type"] == kind)
            .unwrap_or_else(|| panic!("no {scope} {kind}: {live}"))
            .clone()
    };
    let rpm = limit("api_key", "rpm");
    assert_eq!(
        (
            rpm["limit"].clone(),
            rpm["current"].clone(),
            rpm["remaining"].clone()
        ),
        (json!(10), json!(2), json!(8)),
        "{live}"
    );
    assert_eq!(limit("api_key", "parallel")["current"], 0, "{live}");
    assert!(
        limit("api_key", "tpm")["current"].as_u64().unwrap() > 0,
        "{live}"
    );
    assert_eq!(limit("team", "rpm")["current"], 2, "{live}");
    let team = gw
        .get("/gateway/limits?team_id=lt")
        .expect_status(200)
        .json();
    assert_eq!(team["limits"].as_array().unwrap().len(), 1, "{team}");
    let state = gw.get("/gateway/limits").expect_status(200).json();
    assert_eq!(
        (state["mode"].clone(), state["limits"].clone()),
        (json!("local"), json!([]))
    );
    let err = assert_error(
        &gw.get(&format!("/gateway/limits?api_key={key}&team_id=lt")),
        400,
    );
    assert_eq!(err["param"], "team_id");
    assert_error(&gw.get("/gateway/limits?team_id=nope"), 404);
    assert_error(
        &get_as(&gw, &key, &format!("/gateway/limits?api_key={key}")),
        403,
    );
}

/// `/gateway/limits` for a key shows every limit its requests meet, not
/// only its row's rpm/tpm/parallel: the rpm of the budget row it links
/// (filling what the key leaves unset), its per-model limit with the
/// model named, its team's per-model limit for a model the key sets none
/// for, and its per-tag limit; each beside its use (one request to
/// `priced`). `model` narrows the per-model lines to one model group; a
/// team shows its per-model limits too.
#[test]
fn live_limits_of_a_key_include_budget_row_per_model_and_per_tag_limits() {
    let gw = start();
    gw.post("/budget/new", &json!({"budget_id": "row", "rpm_limit": 50}))
        .expect_status(200);
    gw.post(
        "/team/new",
        &json!({"team_id": "pm", "model_rpm_limit": {"priced": 20, "other": 9}}),
    )
    .expect_status(200);
    let key = gw
        .post(
            "/key/generate",
            &json!({"team_id": "pm", "budget_id": "row", "model_rpm_limit": {"priced": 7},
                "metadata": {"tag_rpm_limit": {"nightly": 4}}}),
        )
        .expect_status(200)
        .json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    chat(
        &gw,
        &key,
        json!({"model": "priced", "messages": [{"role": "user", "content": "hi"}]}),
    );
    let live = gw
        .get(&format!("/gateway/limits?api_key={key}"))
        .expect_status(200)
        .json();
    // (scope, model or tag, limit, current) of each rpm line.
    let rpm = |live: &Value| {
        let mut out: Vec<(String, String, u64, u64)> = live["limits"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["type"] == "rpm")
            .map(|l| {
                let what = l["model"].as_str().or(l["tag"].as_str()).unwrap_or("");
                (
                    l["scope"].as_str().unwrap().to_string(),
                    what.to_string(),
                    l["limit"].as_u64().unwrap(),
                    l["current"].as_u64().unwrap(),
                )
            })
            .collect();
        out.sort();
        out
    };
    let line = |scope: &str, what: &str, limit: u64, current: u64| {
        (scope.to_string(), what.to_string(), limit, current)
    };
    assert_eq!(
        rpm(&live),
        [
            line("api_key", "", 50, 1),
            line("model_per_key", "priced", 7, 1),
            line("model_per_team", "other", 9, 0),
            line("tag_per_key", "nightly", 4, 0),
        ],
        "{live}"
    );
    let one = gw
        .get(&format!("/gateway/limits?api_key={key}&model=priced"))
        .expect_status(200)
        .json();
    assert_eq!(
        rpm(&one),
        [
            line("api_key", "", 50, 1),
            line("model_per_key", "priced", 7, 1),
            line("tag_per_key", "nightly", 4, 0),
        ],
        "{one}"
    );
    let team = gw
        .get("/gateway/limits?team_id=pm")
        .expect_status(200)
        .json();
    assert_eq!(
        rpm(&team),
        [
            line("model_per_team", "other", 9, 0),
            line("model_per_team", "priced", 20, 0),
        ],
        "{team}"
    );
    let err = assert_error(&gw.get("/gateway/limits?model=priced"), 400);
    assert_eq!(err["param"], "model");
}

/// In `redis` mode the fleet's count is in Redis: `/gateway/limits` says
/// so (`counted_in: fleet`) rather than show this replica's counters,
/// which do not hold it, as if they were the use.
#[test]
fn live_limits_in_redis_mode_name_the_fleet_as_where_the_count_lives() {
    let redis = e2e::PrivateRedis::start();
    let url = redis.url();
    let gw = start_with(&[("REDIS_URL", url.as_str())]);
    let key = gw
        .post(
            "/key/generate",
            &json!({"rpm_limit": 10, "tpm_limit": 100000, "max_parallel_requests": 5}),
        )
        .expect_status(200)
        .json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    for _ in 0..2 {
        chat(
            &gw,
            &key,
            json!({"model": "priced", "messages": [{"role": "user", "content": "hi"}]}),
        );
    }
    // The fleet's counters, read from Redis: two requests, their tokens,
    // and no slot held once both settlements (sent after the answers) land.
    let line = |live: &Value, kind: &str| {
        live["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["scope"] == "api_key" && l["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} line: {live}"))
            .clone()
    };
    let live = e2e::eventually("the slots freed", Duration::from_secs(5), || {
        let live = gw
            .get(&format!("/gateway/limits?api_key={key}"))
            .expect_status(200)
            .json();
        (line(&live, "parallel")["current"] == 0).then_some(live)
    });
    assert_eq!(
        (live["mode"].clone(), live["counted_in"].clone()),
        (json!("redis"), json!("fleet")),
        "{live}"
    );
    assert_eq!(live["counted_here"], false, "{live}");
    let of = |kind: &str| line(&live, kind);
    assert_eq!(
        (of("rpm")["limit"].clone(), of("rpm")["current"].clone()),
        (json!(10), json!(2)),
        "{live}"
    );
    assert_eq!(of("rpm")["remaining"], 8, "{live}");
    let tokens = of("tpm")["current"]
        .as_u64()
        .unwrap_or_else(|| panic!("{live}"));
    assert!(tokens > 0, "{live}");
}
