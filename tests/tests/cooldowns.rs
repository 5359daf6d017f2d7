//! Cooldowns shared by the fleet: two gateway replicas on one private Redis.
//! A cooldown started by one reaches the other by pub/sub, a replica
//! started later catches up from the cooldown keys, cooldowns expire,
//! allowed-fails counters add up across replicas, and with Redis stopped
//! each replica still cools on its own view (and shares again once Redis is
//! back).
//!
//! Every group routes by cost: `cheap` (free) is always chosen unless it is
//! cooling, `backup` (unknown price) only then, so one request tells
//! whether a replica sees `cheap` cooling. A replica's config decides
//! whether `cheap` fails there (an `x-mock-status` header to the mock).

use e2e::{chat_body, openai_model, to_yaml, Gateway, MockServer, PrivateRedis, MASTER_KEY};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A group `group` of `cheap<suffix>` (failing with `fails` when given) and
/// `backup<suffix>`, both on the mock.
fn group(mock: &MockServer, group: &str, suffix: &str, fails: Option<u16>) -> Vec<Value> {
    let mut cheap = json!({
        "model": format!("openai/cheap{suffix}-model"),
        "input_cost_per_token": 0,
        "output_cost_per_token": 0,
    });
    if let Some(status) = fails {
        cheap["extra_headers"] = json!({"x-mock-status": status.to_string()});
    }
    let backup = json!({"model": format!("openai/backup{suffix}-model")});
    vec![
        openai_model(group, &format!("cheap{suffix}"), &mock.api_base(), cheap),
        openai_model(group, &format!("backup{suffix}"), &mock.api_base(), backup),
    ]
}

fn replica(models: Vec<Value>, router_settings: Value, redis: &PrivateRedis) -> Gateway {
    let mut settings = json!({"routing_strategy": "cost-based-routing", "retry_after": 0});
    if let (Some(s), Value::Object(extra)) = (settings.as_object_mut(), router_settings) {
        s.extend(extra);
    }
    let config = json!({
        "model_list": models,
        "router_settings": settings,
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start(&to_yaml(&config), &[("REDIS_URL", &redis.url())])
}

/// The status and serving deployment of one chat request to `model`.
fn chat(gw: &Gateway, model: &str) -> (u16, String) {
    let resp = gw.post("/v1/chat/completions", &chat_body(model));
    let id = resp.header("x-litellm-model-id").unwrap_or("").to_string();
    (resp.status, id)
}

/// Waits until `gw` routes `model` to `id` (and it answers 200).
fn until_served_by(gw: &Gateway, model: &str, id: &str, timeout: Duration) -> Duration {
    let since = Instant::now();
    e2e::eventually(&format!("{model} served by {id}"), timeout, || {
        (chat(gw, model) == (200, id.to_string())).then_some(())
    });
    since.elapsed()
}

/// Whether the 200 answer of one request to `model` came after a failed
/// attempt (on `cheap`), and which deployment served it.
fn chat_retried(gw: &Gateway, model: &str) -> (bool, String) {
    let resp = gw.post("/v1/chat/completions", &chat_body(model));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let retries = resp.header("x-litellm-attempted-retries").unwrap_or("0");
    let id = resp.header("x-litellm-model-id").unwrap_or("").to_string();
    (retries != "0", id)
}

#[test]
fn a_cooldown_reaches_the_other_replica_by_pub_sub_and_expires() {
    let redis = PrivateRedis::start();
    let mock = MockServer::start(&[]);
    let settings = json!({"num_retries": 1, "cooldown_time": 4});
    let a = replica(
        group(&mock, "chat", "", Some(429)),
        settings.clone(),
        &redis,
    );
    let b = replica(group(&mock, "chat", "", None), settings.clone(), &redis);
    assert_eq!(chat(&b, "chat"), (200, "cheap".into()), "b serves cheap");

    assert_eq!(
        chat(&a, "chat"),
        (200, "backup".into()),
        "a's 429 cools cheap there and the retry is served by backup"
    );
    let cooled_at = Instant::now();
    let hop = until_served_by(&b, "chat", "backup", Duration::from_secs(2));
    eprintln!(
        "cooldown propagation a -> b: {:.1} ms (probe every 20 ms)",
        hop.as_secs_f64() * 1e3
    );
    let pttl = match redis.command(&["PTTL", "deployment:cheap:cooldown"]) {
        e2e::redis::Reply::Int(ms) => ms,
        other => panic!("PTTL: {other:?}"),
    };
    assert!(
        pttl > 0 && pttl <= 4_000,
        "the cooldown key: {pttl} ms left"
    );

    let c = replica(group(&mock, "chat", "", None), settings, &redis);
    until_served_by(&c, "chat", "backup", Duration::from_secs(2));
    assert!(
        cooled_at.elapsed() < Duration::from_millis(3_500),
        "a replica started later caught up while the cooldown ran"
    );
    for _ in 0..5 {
        assert_eq!(chat(&b, "chat"), (200, "backup".into()), "still cooling");
    }

    until_served_by(&b, "chat", "cheap", Duration::from_secs(8));
    let lasted = cooled_at.elapsed();
    assert!(
        lasted >= Duration::from_millis(3_800),
        "cheap came back after the cooldown, not before: {lasted:?}"
    );
    until_served_by(&c, "chat", "cheap", Duration::from_secs(2));
}

#[test]
fn allowed_fails_add_up_across_replicas() {
    let redis = PrivateRedis::start();
    let mock = MockServer::start(&[]);
    let settings = json!({"num_retries": 0, "allowed_fails": 3, "cooldown_time": 30});
    let a = replica(
        group(&mock, "chat", "", Some(500)),
        settings.clone(),
        &redis,
    );
    let b = replica(group(&mock, "chat", "", Some(500)), settings, &redis);
    for gw in [&a, &a, &b] {
        let (status, _) = chat(gw, "chat");
        assert_ne!(status, 200, "cheap fails and is not retried");
    }
    e2e::eventually("three failures counted", Duration::from_secs(2), || {
        (redis.command(&["GET", "deployment:cheap:allowed_fails"])
            == e2e::redis::Reply::Bulk(Some("3".into())))
        .then_some(())
    });
    assert_eq!(
        redis.command(&["EXISTS", "deployment:cheap:cooldown"]),
        e2e::redis::Reply::Int(0),
        "3 failures are allowed"
    );
    let (status, _) = chat(&b, "chat");
    assert_ne!(status, 200);
    // 4 failures in the fleet, 2 on either replica: only the fleet count
    // exceeds allowed_fails.
    e2e::eventually("the fleet cooldown", Duration::from_secs(2), || {
        (redis.command(&["EXISTS", "deployment:cheap:cooldown"]) == e2e::redis::Reply::Int(1))
            .then_some(())
    });
    assert_eq!(chat(&b, "chat"), (200, "backup".into()), "b cooled it");
    until_served_by(&a, "chat", "backup", Duration::from_secs(2));
    for gw in [&a, &b] {
        for _ in 0..5 {
            assert_eq!(chat(gw, "chat"), (200, "backup".into()), "cheap is cooling");
        }
    }
}

#[test]
fn with_redis_stopped_each_replica_cools_on_its_own_view_and_shares_again_after() {
    let redis = PrivateRedis::start();
    let mock = MockServer::start(&[]);
    let settings = json!({"num_retries": 1, "cooldown_time": 30});
    let models = |a_side: bool| {
        let mut m = group(&mock, "chat", "", Some(429));
        m.extend(group(&mock, "later", "2", a_side.then_some(429)));
        m
    };
    let a = replica(models(true), settings.clone(), &redis);
    let b = replica(models(false), settings, &redis);
    redis.stop();
    for gw in [&a, &b] {
        assert_eq!(
            chat_retried(gw, "chat"),
            (true, "backup".into()),
            "cheap failed once on each replica, no 5xx without Redis"
        );
        for _ in 0..5 {
            assert_eq!(
                chat_retried(gw, "chat"),
                (false, "backup".into()),
                "and each cooled it on its own view"
            );
        }
    }

    redis.restart();
    assert_eq!(chat_retried(&a, "later"), (true, "backup2".into()));
    let since = Instant::now();
    until_served_by(&b, "later", "backup2", Duration::from_secs(5));
    eprintln!(
        "after Redis returned, a's cooldown reached b in {:.0} ms (reconnect with backoff, then catch-up)",
        since.elapsed().as_secs_f64() * 1e3
    );
}

/// `/model/info` (the console's Models page) shows which deployments the
/// router keeps out of rotation now: `model_info.cooling_down`.
#[test]
fn model_info_shows_a_cooling_deployment() {
    let mock = MockServer::start(&[]);
    let config = json!({
        "model_list": group(&mock, "chat", "", Some(429)),
        "router_settings": {"routing_strategy": "cost-based-routing", "num_retries": 1,
            "retry_after": 0, "cooldown_time": 60},
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let cooling = |gw: &Gateway| -> Vec<(String, bool)> {
        let info = gw.get("/model/info").json();
        let mut rows: Vec<(String, bool)> = info["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let i = &m["model_info"];
                (
                    i["id"].as_str().unwrap().to_string(),
                    i["cooling_down"].as_bool().unwrap(),
                )
            })
            .collect();
        rows.sort();
        rows
    };
    assert_eq!(
        cooling(&gw),
        [("backup".to_string(), false), ("cheap".to_string(), false)]
    );
    assert_eq!(
        chat(&gw, "chat"),
        (200, "backup".into()),
        "cheap's 429 cools it"
    );
    assert_eq!(
        cooling(&gw),
        [("backup".to_string(), false), ("cheap".to_string(), true)]
    );
}
