//! Rate limits end to end: every scope, seed 003's TPM reservation cases,
//! the sliding window at a boundary, parallel slots, the Redis circuit
//! breaker and a Redis outage. Redis tests run on a private `redis-server`.

use e2e::{to_yaml, Gateway, PrivateRedis, RawUpstream, MASTER_KEY};
use serde_json::{json, Value};
use sha2::Digest;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Twelve words: the mock reports 12 completion tokens.
const REPLY: &str = "one two three four five six seven eight nine ten eleven twelve";

fn config(extra_settings: Value, declared_keys: Option<Value>) -> String {
    let mut config = json!({
        "model_list": [{
            "model_name": "m",
            "litellm_params": {"model": "mock/m", "mock_response": REPLY},
        }, {
            "model_name": "slow",
            "litellm_params": {"model": "openai/slow", "api_base": held_upstream().api_base(), "api_key": "sk-held"},
        }, {
            "model_name": "linger",
            "litellm_params": {"model": "mock/linger", "mock_response": REPLY, "mock_latency_ms": 3000},
        }, {
            "model_name": "hang",
            "litellm_params": {"model": "mock/hang", "mock_response": REPLY, "mock_latency_ms": 10000},
        }],
        "general_settings": {"master_key": MASTER_KEY},
    });
    if !extra_settings.is_null() {
        config["gateway_settings"] = json!({"rate_limits": extra_settings});
    }
    if let Some(keys) = declared_keys {
        config["gateway_settings"]["virtual_keys"] = keys;
    }
    to_yaml(&config)
}

/// The upstream of model `slow`: it answers REPLY (12 completion tokens),
/// and holds its answers while a [`burst`] is being decided. One per test
/// process (nextest runs each test in its own).
fn held_upstream() -> &'static RawUpstream {
    static HELD: OnceLock<RawUpstream> = OnceLock::new();
    HELD.get_or_init(|| RawUpstream::chat_completion("slow", REPLY))
}

fn start(extra_settings: Value, redis: Option<&PrivateRedis>, envs: &[(&str, &str)]) -> Gateway {
    let url = redis.map(PrivateRedis::url);
    let mut all: Vec<(&str, &str)> = envs.to_vec();
    if let Some(url) = &url {
        all.push(("REDIS_URL", url));
    }
    Gateway::start(&config(extra_settings, None), &all)
}

fn generate(gw: &Gateway, fields: Value) -> String {
    let resp = gw.post("/key/generate", &fields);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["key"].as_str().expect("key").to_string()
}

fn admin(gw: &Gateway, path: &str, body: Value) {
    let resp = gw.post(path, &body);
    assert_eq!(resp.status, 200, "{path}: {}", resp.text());
}

fn token(key: &str) -> String {
    hex::encode(sha2::Sha256::digest(key.as_bytes()))
}

struct Reply {
    status: u16,
    body: Value,
    headers: Vec<(String, String)>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }

    fn total_tokens(&self) -> i64 {
        self.body["usage"]["total_tokens"].as_i64().expect("usage")
    }
}

fn chat(gw: &Gateway, key: &str, body: Value) -> Reply {
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
    Reply {
        status: resp.status,
        body: serde_json::from_slice(&resp.body).unwrap_or(Value::Null),
        headers: resp.headers,
    }
}

fn hello(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Say hi in one word."}]})
}

fn hello_capped(model: &str, max_tokens: u64) -> Value {
    let mut b = hello(model);
    b["max_tokens"] = json!(max_tokens);
    b
}

/// Sends `bodies` at once, one thread each, and returns the replies.
/// Answers of model `slow` are held until every request is either answered
/// or waiting at that upstream, so no admitted request ends (and frees what
/// it holds) before the last one is decided, however slowly the threads run.
fn burst(gw: &Gateway, key: &str, bodies: Vec<Value>) -> Vec<Reply> {
    let sends = bodies
        .into_iter()
        .map(|b| Box::new(move || chat(gw, key, b)) as Box<dyn FnOnce() -> Reply + Send>)
        .collect();
    held_upstream().burst(sends)
}

fn assert_throttled(r: &Reply, scope: &str, kind: &str) {
    assert_eq!(r.status, 429, "{}", r.body);
    let e = &r.body["error"];
    assert_eq!(e["type"], "throttling_error", "{}", r.body);
    assert_eq!(e["code"], "429");
    let m = r.message();
    assert!(
        m.starts_with(&format!("Rate limit exceeded for {scope}: ")),
        "{m}"
    );
    assert!(
        m.contains(&format!("Limit type: {kind}. Current limit: ")),
        "{m}"
    );
    assert!(m.contains(" UTC"), "{m}");
    assert!(r
        .header("retry-after")
        .is_some_and(|v| v.parse::<u64>().is_ok()));
}

// ---------------------------------------------------------------- local

#[test]
fn key_rpm_is_enforced_locally_with_headers_and_litellms_429() {
    let gw = start(Value::Null, None, &[]);
    let key = generate(&gw, json!({"rpm_limit": 3}));
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let r = chat(&gw, &key, hello("m"));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("x-ratelimit-limit-requests"), Some("3"));
        remaining.push(
            r.header("x-ratelimit-remaining-requests")
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(remaining, ["2", "1", "0"]);
    let r = chat(&gw, &key, hello("m"));
    assert_throttled(&r, "api_key", "requests");
    assert!(
        r.message().contains(&token(&key)),
        "names the key's hash: {}",
        r.message()
    );
    assert!(r.message().contains("Current limit: 3, Remaining: 0."));
    // Another key is not affected.
    let other = generate(&gw, json!({}));
    assert_eq!(chat(&gw, &other, hello("m")).status, 200);
}

#[test]
fn parallel_limit_admits_one_in_flight_and_frees_the_slot() {
    let gw = start(Value::Null, None, &[]);
    let key = generate(&gw, json!({"max_parallel_requests": 1}));
    let replies = burst(&gw, &key, vec![hello("slow"), hello("slow")]);
    let ok = replies.iter().filter(|r| r.status == 200).count();
    assert_eq!(ok, 1);
    let refused = replies.iter().find(|r| r.status != 200).unwrap();
    assert_throttled(refused, "api_key", "parallel");
    // The slot is free by the time a response has ended: a client sending
    // one request after another is never refused, whichever core takes it.
    for i in 0..40 {
        let r = chat(&gw, &key, hello("m"));
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
    }
}

// ---------------------------------------------------------------- Redis: seed 003

#[test]
fn seed_003_reservation_on_refuses_what_cannot_fit_its_reservation() {
    let redis = PrivateRedis::start();
    let gw = start(Value::Null, Some(&redis), &[]);
    let key = generate(&gw, json!({"tpm_limit": 200}));
    // Each reserves ~5 prompt + 120 = 125 tokens: only one fits in 200.
    let replies = burst(
        &gw,
        &key,
        (0..4).map(|_| hello_capped("slow", 120)).collect(),
    );
    let ok: Vec<&Reply> = replies.iter().filter(|r| r.status == 200).collect();
    assert_eq!(
        ok.len(),
        1,
        "statuses: {:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    for r in replies.iter().filter(|r| r.status != 200) {
        assert_throttled(r, "api_key", "tokens");
        assert!(
            r.message().contains("Current limit: 200, Remaining: 7"),
            "{}",
            r.message()
        );
    }
    // After the response the reservation became the real usage.
    let counter = format!("{{api_key:{}}}:tokens", token(&key));
    let used = ok[0].total_tokens();
    e2e::eventually("the reservation reconciled", Duration::from_secs(5), || {
        (redis.window_total(&counter) == used).then_some(())
    });
}

#[test]
fn seed_003_reservation_off_admits_all_four_and_counts_real_usage() {
    let redis = PrivateRedis::start();
    let gw = start(
        Value::Null,
        Some(&redis),
        &[("LITELLM_TPM_TOKEN_RESERVATION_ENABLED", "false")],
    );
    let key = generate(
        &gw,
        json!({"tpm_limit": 200, "model_tpm_limit": {"slow": 1000}}),
    );
    let replies = burst(
        &gw,
        &key,
        (0..4).map(|_| hello_capped("slow", 120)).collect(),
    );
    assert!(
        replies.iter().all(|r| r.status == 200),
        "{:?}",
        replies.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    let used: i64 = replies.iter().map(Reply::total_tokens).sum();
    let key_counter = format!("{{api_key:{}}}:tokens", token(&key));
    let model_counter = format!("{{model_per_key:{}:slow}}:tokens", token(&key));
    e2e::eventually(
        "usage charged after the calls",
        Duration::from_secs(5),
        || {
            (redis.window_total(&key_counter) == used && redis.window_total(&model_counter) == used)
                .then_some(())
        },
    );
}

#[test]
fn seed_003_sequential_requests_climb_by_real_usage_until_the_cap() {
    let redis = PrivateRedis::start();
    let gw = start(
        Value::Null,
        Some(&redis),
        &[("LITELLM_TPM_TOKEN_RESERVATION_ENABLED", "false")],
    );
    let key = generate(&gw, json!({"tpm_limit": 200}));
    let counter = format!("{{api_key:{}}}:tokens", token(&key));
    let mut total = 0;
    let mut served = 0;
    loop {
        let r = chat(&gw, &key, hello_capped("m", 120));
        if r.status != 200 {
            assert_throttled(&r, "api_key", "tokens");
            assert!(r.message().contains("Remaining: 0."), "{}", r.message());
            break;
        }
        served += 1;
        total += r.total_tokens();
        e2e::eventually(
            "the counter climbs by real usage",
            Duration::from_secs(5),
            || (redis.window_total(&counter) == total).then_some(()),
        );
        assert!(served < 100, "never refused");
    }
    // Refused only once real usage reached the cap, and not before.
    let per_request = total / served;
    assert!(
        total >= 200 && total - per_request < 200,
        "total {total} over {served} requests"
    );
}

// ---------------------------------------------------------------- Redis: scopes

#[test]
fn every_scope_is_enforced_through_redis() {
    let redis = PrivateRedis::start();
    let gw = start(
        json!({"end_user": {"rpm_limit": 1}, "server": {"rpm_limit": 50}}),
        Some(&redis),
        &[],
    );
    // user
    admin(
        &gw,
        "/user/new",
        json!({"user_id": "u-rpm", "rpm_limit": 1}),
    );
    let k = generate(&gw, json!({"user_id": "u-rpm"}));
    assert_eq!(chat(&gw, &k, hello("m")).status, 200);
    assert_throttled(&chat(&gw, &k, hello("m")), "user", "requests");
    // team
    admin(
        &gw,
        "/team/new",
        json!({"team_id": "t-rpm", "rpm_limit": 1}),
    );
    let k = generate(&gw, json!({"team_id": "t-rpm"}));
    assert_eq!(chat(&gw, &k, hello("m")).status, 200);
    assert_throttled(&chat(&gw, &k, hello("m")), "team", "requests");
    // the key's per-model limit: another model is not limited
    let k = generate(&gw, json!({"model_rpm_limit": {"m": 1}}));
    assert_eq!(chat(&gw, &k, hello("m")).status, 200);
    assert_throttled(&chat(&gw, &k, hello("m")), "model_per_key", "requests");
    assert_eq!(chat(&gw, &k, hello("slow")).status, 200);
    // end user: per `user` in the body
    let k = generate(&gw, json!({}));
    let as_user = |u: &str| {
        let mut b = hello("m");
        b["user"] = json!(u);
        chat(&gw, &k, b)
    };
    assert_eq!(as_user("alice").status, 200);
    assert_throttled(&as_user("alice"), "end_user", "requests");
    assert_eq!(as_user("bob").status, 200);
    // Each counter lives in Redis under its hash-tagged name.
    for counter in [
        "{user:u-rpm}:requests",
        "{team:t-rpm}:requests",
        "{end_user:alice}:requests",
    ] {
        assert_eq!(redis.window_total(counter), 1, "{counter}");
    }
    // server: everything so far counted; fill it up.
    // Refused requests charged nothing anywhere (all or none).
    let served = redis.window_total("{server:global}:requests");
    assert_eq!(served, 6, "server counter");
    let k = generate(&gw, json!({}));
    for _ in served..50 {
        assert_eq!(chat(&gw, &k, hello("m")).status, 200);
    }
    assert_throttled(&chat(&gw, &k, hello("m")), "server", "requests");
}

#[test]
fn sliding_window_never_admits_twice_the_limit_across_a_boundary() {
    let redis = PrivateRedis::start();
    let gw = start(
        Value::Null,
        Some(&redis),
        &[("LITELLM_RATE_LIMIT_WINDOW_SIZE", "2")],
    );
    let key = generate(&gw, json!({"rpm_limit": 2}));
    let started = Instant::now();
    // Each admitted request's (sent, answered) times: its admission in
    // Redis happened between the two.
    let mut admitted: Vec<(f64, f64)> = Vec::new();
    while started.elapsed() < Duration::from_secs(7) {
        let sent = started.elapsed().as_secs_f64();
        let r = chat(&gw, &key, hello("m"));
        match r.status {
            200 => admitted.push((sent, started.elapsed().as_secs_f64())),
            429 => assert_throttled(&r, "api_key", "requests"),
            s => panic!("status {s}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // A fixed window would admit 2 at the end of one window and 2 more at
    // the start of the next; here any 2 s span holds at most 2. Measured
    // from the first one's sending to the third one's answer, the widest
    // the two admissions can be apart (a slow answer on a loaded machine
    // must not look like an early admission).
    for w in admitted.windows(3) {
        assert!(
            w[2].1 - w[0].0 >= 2.0,
            "three admissions within 2 s: {admitted:?}"
        );
    }
    assert!(
        admitted.len() >= 4,
        "the window slides and admits again: {admitted:?}"
    );
}

/// A counter keeps a running sum beside its buckets (see `limiter.lua`):
/// counters written without it (by an earlier version, or with it lost) are
/// recounted from their buckets, and a sum that drifted is recounted once a
/// window has passed since its last recount.
#[test]
fn window_counters_without_or_with_a_stale_running_sum_are_recounted() {
    let redis = PrivateRedis::start();
    let gw = start(Value::Null, Some(&redis), &[]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let bucket = (now - 1).to_string();
    let set = |args: &[&str]| {
        let mut command = vec!["HSET"];
        command.extend_from_slice(args);
        redis.command(&command);
    };
    // Two units in buckets only, as the previous format stored them.
    let full = generate(&gw, json!({"rpm_limit": 2}));
    let full_counter = format!("{{api_key:{}}}:requests", token(&full));
    set(&[&full_counter, &bucket, "2"]);
    assert_throttled(&chat(&gw, &full, hello("m")), "api_key", "requests");
    assert_eq!(redis.window_total(&full_counter), 2);
    // One unit in a bucket, a sum claiming 50, last recounted over a window ago.
    let drifted = generate(&gw, json!({"rpm_limit": 3}));
    let drifted_counter = format!("{{api_key:{}}}:requests", token(&drifted));
    let (low, counted) = ((now - 60).to_string(), (now - 61).to_string());
    set(&[
        &drifted_counter,
        &bucket,
        "1",
        "-1",
        "50",
        "-2",
        &low,
        "-3",
        &counted,
    ]);
    assert_eq!(chat(&gw, &drifted, hello("m")).status, 200);
    assert_eq!(chat(&gw, &drifted, hello("m")).status, 200);
    assert_throttled(&chat(&gw, &drifted, hello("m")), "api_key", "requests");
    // `window_total` also checks that the sum now equals the buckets.
    assert_eq!(redis.window_total(&drifted_counter), 3);
    for counter in [&full_counter, &drifted_counter] {
        assert!(
            matches!(
                redis.command(&["HGET", counter, "-1"]),
                e2e::redis::Reply::Bulk(Some(_))
            ),
            "{counter} keeps its running sum"
        );
    }
}

#[test]
fn parallel_slots_are_released_in_redis_and_expire_after_a_crash() {
    let redis = PrivateRedis::start();
    // Declared in the file, so a second replica knows it too.
    let key = "sk-parallel-crash-1";
    let config = config(
        json!({"parallel_slot_ttl_secs": 3}),
        Some(json!([{"key": key, "max_parallel_requests": 1}])),
    );
    let url = redis.url();
    let gw = Gateway::start(&config, &[("REDIS_URL", &url)]);
    let counter = format!("{{api_key:{}}}:parallel", token(key));
    let replies = burst(&gw, key, vec![hello("slow"), hello("slow"), hello("slow")]);
    assert_eq!(replies.iter().filter(|r| r.status == 200).count(), 1);
    assert_throttled(
        replies.iter().find(|r| r.status != 200).unwrap(),
        "api_key",
        "parallel",
    );
    e2e::eventually("the slot freed", Duration::from_secs(5), || {
        (redis.slots(&counter) == 0).then_some(())
    });
    // A replica killed while holding a slot: the slot lapses with its TTL.
    let mut conn = gw.connect();
    let body = hello("hang").to_string();
    let auth = format!("Bearer {key}");
    conn.send(&e2e::request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    ));
    e2e::eventually("the slot taken", Duration::from_secs(5), || {
        (redis.slots(&counter) == 1).then_some(())
    });
    gw.signal(libc::SIGKILL);
    drop(gw);
    let other = Gateway::start(&config, &[("REDIS_URL", &url)]);
    assert_throttled(&chat(&other, key, hello("m")), "api_key", "parallel");
    e2e::eventually(
        "the crashed replica's slot lapsed",
        Duration::from_secs(8),
        || (chat(&other, key, hello("m")).status == 200).then_some(()),
    );
}

/// A key holding more than 32 slots at once in Redis: the slots taken past
/// 32 are the request id padded (so the set becomes a skip list, see
/// `limiter.lua`), and each settlement names the form its admission took
/// (the slots held then, from the admission's reply): every slot is freed.
#[test]
fn slots_past_32_held_at_once_in_redis_are_all_freed() {
    let redis = PrivateRedis::start();
    let gw = start(Value::Null, Some(&redis), &[]);
    let key = generate(&gw, json!({"max_parallel_requests": 100}));
    let counter = format!("{{api_key:{}}}:parallel", token(&key));
    let replies = burst(&gw, &key, (0..40).map(|_| hello("slow")).collect());
    assert_eq!(served(&replies), 40);
    e2e::eventually("every slot freed", Duration::from_secs(5), || {
        (redis.slots(&counter) == 0).then_some(())
    });
}

// ---------------------------------------------------------------- Redis: breaker and outage

#[test]
fn breaker_opens_when_redis_stops_serves_throughout_and_closes_when_it_returns() {
    let redis = PrivateRedis::start();
    let gw = start(
        Value::Null,
        Some(&redis),
        &[
            ("REDIS_CIRCUIT_BREAKER_FAILURE_THRESHOLD", "2"),
            ("REDIS_CIRCUIT_BREAKER_RECOVERY_TIMEOUT", "1"),
        ],
    );
    let key = generate(&gw, json!({"rpm_limit": 1000}));
    let counter = format!("{{api_key:{}}}:requests", token(&key));
    assert_eq!(chat(&gw, &key, hello("m")).status, 200);
    assert_eq!(redis.window_total(&counter), 1);
    redis.stop();
    for _ in 0..10 {
        assert_eq!(
            chat(&gw, &key, hello("m")).status,
            200,
            "served during the outage"
        );
    }
    e2e::eventually("the breaker opened", Duration::from_secs(5), || {
        gw.output().contains("circuit breaker opened").then_some(())
    });
    redis.restart();
    e2e::eventually(
        "the breaker closed on a probe",
        Duration::from_secs(10),
        || {
            assert_eq!(chat(&gw, &key, hello("m")).status, 200);
            gw.output().contains("circuit breaker closed").then_some(())
        },
    );
    e2e::eventually("counting in Redis again", Duration::from_secs(5), || {
        assert_eq!(chat(&gw, &key, hello("m")).status, 200);
        (redis.window_total(&counter) >= 1).then_some(())
    });
}

#[test]
fn breaker_disabled_never_opens_and_limits_still_hold_during_an_outage() {
    let redis = PrivateRedis::start();
    let gw = start(
        Value::Null,
        Some(&redis),
        &[
            ("REDIS_CIRCUIT_BREAKER_ENABLED", "false"),
            ("REDIS_CIRCUIT_BREAKER_FAILURE_THRESHOLD", "1"),
        ],
    );
    let key = generate(&gw, json!({"rpm_limit": 3}));
    redis.stop();
    // Each request tries Redis, gives up at the deadline and is limited by
    // this process's counters: the limit still holds.
    let statuses: Vec<u16> = (0..4).map(|_| chat(&gw, &key, hello("m")).status).collect();
    assert_eq!(statuses, [200, 200, 200, 429]);
    let out = e2e::eventually("the fallback logged", Duration::from_secs(5), || {
        let out = gw.output();
        out.contains("Redis limiter call failed").then_some(out)
    });
    assert!(!out.contains("circuit breaker opened"), "{out}");
}

// ---------------------------------------------------------------- Redis: lease mode

/// `limiter` of `/health/readiness/details`: mode, Redis calls since start, breaker.
fn limiter_health(gw: &Gateway) -> Value {
    let resp = gw.get("/health/readiness/details");
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["limiter"].clone()
}

fn redis_calls(gw: &Gateway) -> u64 {
    limiter_health(gw)["redis_calls"]
        .as_u64()
        .expect("limiter.redis_calls")
}

fn served(replies: &[Reply]) -> usize {
    replies.iter().filter(|r| r.status == 200).count()
}

#[test]
fn lease_mode_admits_exactly_the_limit_over_a_burst_then_429() {
    let redis = PrivateRedis::start();
    let gw = start(
        json!({"mode": "lease", "redis_timeout_ms": 1000}),
        Some(&redis),
        &[],
    );
    let health = limiter_health(&gw);
    assert_eq!(health["mode"], "lease", "{health}");
    assert_eq!(health["breaker"], "closed", "{health}");
    let key = generate(&gw, json!({"rpm_limit": 30}));
    let counter = format!("{{api_key:{}}}:requests", token(&key));
    let before = redis_calls(&gw);
    let replies = burst(&gw, &key, vec![hello("m"); 60]);
    assert_eq!(served(&replies), 30);
    // Leases of 3: one refill in flight at a time, not one per request.
    let calls = redis_calls(&gw) - before;
    eprintln!("lease mode: {calls} Redis calls for a burst of 60 over a limit of 30");
    assert!(calls < 60, "{calls} Redis calls for a burst of 60");
    for r in replies.iter().filter(|r| r.status != 200) {
        assert_throttled(r, "api_key", "requests");
    }
    assert_throttled(&chat(&gw, &key, hello("m")), "api_key", "requests");
    assert!(redis.window_total(&counter) <= 30);
    e2e::eventually("the leases ended", Duration::from_secs(5), || {
        (redis.window_total(&counter) == 30).then_some(())
    });
}

#[test]
fn lease_mode_returns_unused_units_and_reconciles_tokens() {
    let redis = PrivateRedis::start();
    let gw = start(json!({"mode": "lease"}), Some(&redis), &[]);
    let key = generate(&gw, json!({"rpm_limit": 100, "tpm_limit": 100000}));
    let requests = format!("{{api_key:{}}}:requests", token(&key));
    let tokens = format!("{{api_key:{}}}:tokens", token(&key));
    let mut used = 0;
    for _ in 0..7 {
        let r = chat(&gw, &key, hello_capped("m", 50));
        assert_eq!(r.status, 200, "{}", r.body);
        used += r.total_tokens();
    }
    // A lease charges a tenth of the limit at once...
    assert!(redis.window_total(&requests) >= 7);
    // ...and what was not spent goes back when it ends; tokens end at the
    // real usage, not at the reservations.
    e2e::eventually("the leases returned", Duration::from_secs(5), || {
        let counts = (redis.window_total(&requests), redis.window_total(&tokens));
        (counts == (7, used)).then_some(())
    });
}

#[test]
fn lease_mode_admits_a_keys_first_request_alone_and_leases_from_the_next() {
    let redis = PrivateRedis::start();
    // Leases live 30 s: none ends (and gives units back) while the test
    // reads the counters.
    let gw = start(
        json!({"mode": "lease", "redis_timeout_ms": 1000, "lease_ttl_ms": 30000}),
        Some(&redis),
        &[],
    );
    let key = generate(&gw, json!({"rpm_limit": 1000, "max_parallel_requests": 10}));
    let requests = format!("{{api_key:{}}}:requests", token(&key));
    let parallel = format!("{{api_key:{}}}:parallel", token(&key));
    assert_eq!(chat(&gw, &key, hello("m")).status, 200);
    // Charged for itself alone, as in redis mode: a lease would have
    // charged its share of the limit (100) for one request.
    assert_eq!(redis.window_total(&requests), 1);
    // Its slot was its own, freed by its settlement.
    e2e::eventually("the slot freed", Duration::from_secs(5), || {
        (redis.slots(&parallel) == 0).then_some(())
    });
    // Seen now: the next request leases the share.
    assert_eq!(chat(&gw, &key, hello("m")).status, 200);
    assert_eq!(redis.window_total(&requests), 101);
}

#[test]
fn lease_mode_makes_well_under_one_redis_call_per_request() {
    let redis = PrivateRedis::start();
    // Leases live 30 s (the most a 60 s window allows), so the count does
    // not depend on how long a loaded machine takes for the 200 requests.
    let leased = start(
        json!({"mode": "lease", "redis_timeout_ms": 1000, "lease_ttl_ms": 30000}),
        Some(&redis),
        &[],
    );
    let key = generate(&leased, json!({"rpm_limit": 1000, "tpm_limit": 1000000}));
    let before = redis_calls(&leased);
    for _ in 0..10 {
        let replies = burst(&leased, &key, vec![hello("m"); 20]);
        assert_eq!(served(&replies), 20);
    }
    let calls = redis_calls(&leased) - before;
    eprintln!(
        "lease mode: {calls} Redis calls for 200 requests ({:.3} per request)",
        calls as f64 / 200.0
    );
    assert!(calls * 4 < 200, "{calls} Redis calls for 200 requests");
    // Per request, the same counter shows an admission and a settlement each.
    let per_request = start(Value::Null, Some(&redis), &[]);
    assert_eq!(limiter_health(&per_request)["mode"], "redis");
    let key = generate(
        &per_request,
        json!({"rpm_limit": 1000, "tpm_limit": 1000000}),
    );
    let before = redis_calls(&per_request);
    for _ in 0..20 {
        assert_eq!(chat(&per_request, &key, hello("m")).status, 200);
    }
    let calls = e2e::eventually("the settlements sent", Duration::from_secs(5), || {
        let calls = redis_calls(&per_request) - before;
        (calls >= 40).then_some(calls)
    });
    eprintln!("redis mode: {calls} Redis calls for 20 requests");
}

#[test]
fn two_lease_replicas_never_admit_more_than_the_limit_together() {
    let redis = PrivateRedis::start();
    // Declared in the file, so both replicas know it.
    let key = "sk-lease-two-1";
    let limit = 40;
    let config = config(
        json!({"mode": "lease", "redis_timeout_ms": 1000}),
        Some(json!([{"key": key, "rpm_limit": limit}])),
    );
    let url = redis.url();
    let a = Gateway::start(&config, &[("REDIS_URL", &url)]);
    let b = Gateway::start(&config, &[("REDIS_URL", &url)]);
    let counter = format!("{{api_key:{}}}:requests", token(key));
    let both = |to_a: usize, to_b: usize| {
        std::thread::scope(|s| {
            let ha = s.spawn(|| served(&burst(&a, key, vec![hello("m"); to_a])));
            let hb = s.spawn(|| served(&burst(&b, key, vec![hello("m"); to_b])));
            (ha.join().unwrap(), hb.join().unwrap())
        })
    };
    // Uneven load, exactly the limit in all: a refusal here is a false
    // rejection, quota parked in the other replica's lease.
    let (first_a, first_b) = both(34, 6);
    let first = (first_a + first_b) as i64;
    assert!(first_a > 0 && first_b > 0, "{first_a} + {first_b}");
    // Units parked in a lease go back when it ends: Redis counts what was served.
    e2e::eventually("the first leases ended", Duration::from_secs(5), || {
        (redis.window_total(&counter) == first).then_some(())
    });
    // Then far more than the limit from both at once: never more than it.
    let (second_a, second_b) = both(30, 30);
    let total = first + (second_a + second_b) as i64;
    assert!(total <= limit, "{total} admitted over {limit}");
    e2e::eventually("the second leases ended", Duration::from_secs(5), || {
        (redis.window_total(&counter) == total).then_some(())
    });
    eprintln!(
        "two replicas, limit {limit}: 34 + 6 served {first_a} + {first_b} ({} false rejections), then 30 + 30 served {second_a} + {second_b} ({} of the limit left unserved); {total} in all",
        limit - first,
        limit - total
    );
}

#[test]
fn lease_mode_falls_back_to_local_counters_while_redis_is_out() {
    let redis = PrivateRedis::start();
    let gw = start(json!({"mode": "lease"}), Some(&redis), &[]);
    let key = generate(&gw, json!({"rpm_limit": 3}));
    redis.stop();
    // No lease can be granted: this process's counters enforce the limit.
    let statuses: Vec<u16> = (0..4).map(|_| chat(&gw, &key, hello("m")).status).collect();
    assert_eq!(statuses, [200, 200, 200, 429]);
    e2e::eventually("the fallback logged", Duration::from_secs(5), || {
        gw.output()
            .contains("Redis limiter call failed")
            .then_some(())
    });
}

// ---------------------------------------------------------------- Redis: leased parallel slots

/// The members of a parallel counter: request ids, or `lease:<process>:<n>:<slot>`.
fn slot_members(redis: &PrivateRedis, counter: &str) -> Vec<String> {
    match redis.command(&["ZRANGE", counter, "0", "-1"]) {
        e2e::redis::Reply::Array(items) => items
            .into_iter()
            .map(|m| match m {
                e2e::redis::Reply::Bulk(Some(m)) => m,
                other => panic!("ZRANGE {counter}: {other:?}"),
            })
            .collect(),
        other => panic!("ZRANGE {counter}: {other:?}"),
    }
}

/// Sends a chat request on a connection of its own and leaves it in flight.
fn send_in_flight(gw: &Gateway, key: &str, model: &str) -> e2e::Conn {
    let mut conn = gw.connect();
    let auth = format!("Bearer {key}");
    conn.send(&e2e::request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        hello(model).to_string().as_bytes(),
    ));
    conn
}

#[test]
fn lease_mode_parallel_slots_make_no_redis_call_in_steady_state() {
    let redis = PrivateRedis::start();
    let gw = start(
        json!({"mode": "lease", "redis_timeout_ms": 1000}),
        Some(&redis),
        &[],
    );
    // The full pipeline benchmark's key: rpm, tpm and parallel limits.
    let key = generate(
        &gw,
        json!({"rpm_limit": 1000000, "tpm_limit": 1000000000, "max_parallel_requests": 1000}),
    );
    let counter = format!("{{api_key:{}}}:parallel", token(&key));
    // The first requests take the leases; then the steady state.
    assert_eq!(served(&burst(&gw, &key, vec![hello("m"); 20])), 20);
    let before = redis_calls(&gw);
    let started = Instant::now();
    for _ in 0..10 {
        let replies = burst(&gw, &key, vec![hello("m"); 20]);
        assert_eq!(served(&replies), 20);
    }
    let calls = redis_calls(&gw) - before;
    let elapsed = started.elapsed();
    // What Redis sees is per lease, not per request: at most a renewal and
    // a refill of each of the three leases every half lease life (500 ms)
    // the requests took, whatever the traffic (a loaded machine takes
    // longer, so the bound is counted in lease lives, not fixed).
    let passes = u64::try_from(elapsed.as_millis() / 500).unwrap_or(u64::MAX) + 1;
    eprintln!(
        "lease mode with a parallel limit: {calls} Redis calls for 200 requests ({:.3} per request) in {elapsed:?}",
        calls as f64 / 200.0,
    );
    assert!(
        calls < 200 && calls <= 6 * passes,
        "{calls} Redis calls for 200 requests in {elapsed:?}"
    );
    // The slots were leased: the counter names the lease's members, never a
    // request, and goes back to empty once the replica is idle.
    let members = slot_members(&redis, &counter);
    assert!(
        members.iter().all(|m| m.starts_with("lease:")),
        "{members:?}"
    );
    e2e::eventually("the idle slots returned", Duration::from_secs(5), || {
        (redis.slots(&counter) == 0).then_some(())
    });
}

/// Two lease-mode replicas sharing one private Redis, `key` declared with
/// at most `limit` requests in flight (`settings` added to the lease mode's),
/// and the name of that key's parallel counter in Redis.
struct LeasePair {
    redis: PrivateRedis,
    a: Gateway,
    b: Gateway,
    counter: String,
}

fn lease_pair(key: &str, limit: usize, settings: Value) -> LeasePair {
    let redis = PrivateRedis::start();
    let mut rate_limits = json!({"mode": "lease", "redis_timeout_ms": 1000});
    if let (Some(all), Some(extra)) = (rate_limits.as_object_mut(), settings.as_object()) {
        all.extend(extra.clone());
    }
    let config = config(
        rate_limits,
        Some(json!([{"key": key, "max_parallel_requests": limit}])),
    );
    let url = redis.url();
    let a = Gateway::start(&config, &[("REDIS_URL", &url)]);
    let b = Gateway::start(&config, &[("REDIS_URL", &url)]);
    let counter = format!("{{api_key:{}}}:parallel", token(key));
    LeasePair {
        redis,
        a,
        b,
        counter,
    }
}

#[test]
fn two_lease_replicas_never_hold_more_than_the_parallel_limit_in_flight() {
    let key = "sk-lease-parallel-two-1";
    let limit = 4;
    let LeasePair {
        redis,
        a,
        b,
        counter,
    } = lease_pair(key, limit, json!({}));
    // Each admitted request stays in flight 3 s: all twelve overlap.
    let (to_a, to_b) = std::thread::scope(|s| {
        let ha = s.spawn(|| burst(&a, key, vec![hello("linger"); 6]));
        let hb = s.spawn(|| burst(&b, key, vec![hello("linger"); 6]));
        // While they are in flight: the slots are leases' members, never
        // more than the limit.
        let members = e2e::eventually("slots leased", Duration::from_secs(3), || {
            let members = slot_members(&redis, &counter);
            (!members.is_empty()).then_some(members)
        });
        assert!(members.len() <= limit, "{members:?}");
        assert!(
            members.iter().all(|m| m.starts_with("lease:")),
            "{members:?}"
        );
        (ha.join().unwrap(), hb.join().unwrap())
    });
    let (served_a, served_b) = (served(&to_a), served(&to_b));
    eprintln!("two lease replicas, parallel limit {limit}: 6 + 6 in flight together served {served_a} + {served_b}");
    assert!(
        served_a + served_b <= limit,
        "{served_a} + {served_b} in flight over {limit}"
    );
    assert!(served_a + served_b > 0);
    for r in to_a.iter().chain(&to_b).filter(|r| r.status != 200) {
        assert_throttled(r, "api_key", "parallel");
    }
    // A small limit's slots go back as soon as they are idle.
    e2e::eventually("the slots returned", Duration::from_secs(5), || {
        (redis.slots(&counter) == 0).then_some(())
    });
}

#[test]
fn an_idle_lease_replica_returns_its_slots_to_the_other() {
    let key = "sk-lease-parallel-idle-1";
    let limit = 20;
    let LeasePair {
        redis,
        a,
        b,
        counter,
    } = lease_pair(key, limit, json!({}));
    // A serves a burst with leased slots (some stay parked in its lease
    // after it).
    let to_a = std::thread::scope(|s| {
        let ha = s.spawn(|| burst(&a, key, vec![hello("linger"); 10]));
        let members = e2e::eventually("slots leased", Duration::from_secs(3), || {
            let members = slot_members(&redis, &counter);
            (members.len() >= 10).then_some(members)
        });
        assert!(
            members.iter().all(|m| m.starts_with("lease:")),
            "{members:?}"
        );
        ha.join().unwrap()
    });
    assert_eq!(served(&to_a), 10);
    // Idle, A returns them at its next renewal.
    e2e::eventually("A's idle slots returned", Duration::from_secs(5), || {
        (redis.slots(&counter) == 0).then_some(())
    });
    // B can then have the whole limit in flight, and not one more.
    let replies = burst(&b, key, vec![hello("linger"); limit + 2]);
    assert_eq!(served(&replies), limit, "false rejections on B");
}

#[test]
fn a_killed_lease_replicas_parallel_slots_lapse_with_the_lease() {
    let key = "sk-lease-parallel-crash-1";
    // The per-request slot TTL stays at its 600 s default: only the
    // lease's life (3 s here) can free the slot.
    let LeasePair {
        redis,
        a,
        b,
        counter,
    } = lease_pair(key, 1, json!({"lease_ttl_ms": 3000}));
    let _conn = send_in_flight(&a, key, "hang");
    e2e::eventually("the slot leased", Duration::from_secs(5), || {
        (redis.slots(&counter) == 1).then_some(())
    });
    // Renewed while A lives: B is refused for longer than a lease life.
    let held_since = Instant::now();
    while held_since.elapsed() < Duration::from_secs(4) {
        assert_throttled(&chat(&b, key, hello("m")), "api_key", "parallel");
        std::thread::sleep(Duration::from_millis(500));
    }
    a.signal(libc::SIGKILL);
    drop(a);
    e2e::eventually(
        "the killed replica's slot lapsed",
        Duration::from_secs(8),
        || (chat(&b, key, hello("m")).status == 200).then_some(()),
    );
}

#[test]
fn a_teams_per_model_limits_bind_its_keys_unless_a_key_sets_its_own() {
    // LiteLLM keeps a team's `model_rpm_limit` / `model_tpm_limit` in its
    // metadata and checks them as `model_per_team`, shared by the team's
    // keys, where the key has no limit of its own for that model.
    for redis in [None, Some(PrivateRedis::start())] {
        let gw = start(json!({}), redis.as_ref(), &[]);
        admin(
            &gw,
            "/team/new",
            json!({"team_id": "t-model", "model_rpm_limit": {"m": 2}}),
        );
        let a = generate(&gw, json!({"team_id": "t-model"}));
        let b = generate(&gw, json!({"team_id": "t-model"}));
        assert_eq!(chat(&gw, &a, hello("m")).status, 200);
        assert_eq!(chat(&gw, &b, hello("m")).status, 200);
        assert_throttled(&chat(&gw, &a, hello("m")), "model_per_team", "requests");
        // Another model is not limited by it.
        assert_eq!(chat(&gw, &a, hello("slow")).status, 200);
        // A key with its own limit for the model is held to that one alone.
        let own = generate(
            &gw,
            json!({"team_id": "t-model", "model_rpm_limit": {"m": 3}}),
        );
        for _ in 0..3 {
            assert_eq!(chat(&gw, &own, hello("m")).status, 200);
        }
        assert_throttled(&chat(&gw, &own, hello("m")), "model_per_key", "requests");
        // Values are checked as a key's are.
        let resp = gw.post(
            "/team/new",
            &json!({"team_id": "t-bad", "model_tpm_limit": {"m": "lots"}}),
        );
        assert_eq!(resp.status, 400, "{}", resp.text());
        assert_eq!(resp.json()["error"]["param"], "model_tpm_limit.m");
        // /team/update changes it for the next request.
        admin(
            &gw,
            "/team/update",
            json!({"team_id": "t-model", "model_rpm_limit": {"m": 100}}),
        );
        assert_eq!(chat(&gw, &a, hello("m")).status, 200);
    }
}

#[test]
fn default_estimated_output_tokens_is_the_tpm_reservation_of_a_request_without_max_tokens() {
    // LiteLLM reserves the prompt plus the declared estimate (key, then
    // team) in place of its heuristic floor when `max_tokens` is absent.
    let gw = start(json!({}), None, &[]);
    let plain = generate(&gw, json!({"tpm_limit": 200}));
    assert_eq!(chat(&gw, &plain, hello("m")).status, 200);
    let large = generate(
        &gw,
        json!({"tpm_limit": 200, "default_estimated_output_tokens": 500}),
    );
    let r = chat(&gw, &large, hello("m"));
    assert_throttled(&r, "api_key", "tokens");
    // max_tokens still wins over the estimate.
    assert_eq!(chat(&gw, &large, hello_capped("m", 10)).status, 200);
    // The team's estimate, for a key that declares none: each of four
    // concurrent requests reserves ~5 + 120 tokens, so one fits in 200.
    admin(
        &gw,
        "/team/new",
        json!({"team_id": "t-est", "default_estimated_output_tokens": 120}),
    );
    let member = generate(&gw, json!({"team_id": "t-est", "tpm_limit": 200}));
    let replies = burst(&gw, &member, (0..4).map(|_| hello("slow")).collect());
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
}
