//! Rate limits and cooldowns on a Redis Cluster: a private three-master
//! Cluster, two gateway replicas configured the LiteLLM way
//! (`REDIS_CLUSTER_NODES`). No overshoot for rpm, tpm with reservation,
//! parallel and leased limits across the replicas, while a request's
//! counters live on different slots; a slot moved under the replicas
//! (`MOVED`) and one being migrated (`ASK`); one master killed and started again under load; cooldowns
//! and allowed-fails counters shared through the Cluster.

use e2e::{
    chat_body, openai_model, to_yaml, Gateway, MockServer, PrivateCluster, RawUpstream, MASTER_KEY,
};
use serde_json::{json, Value};
use sha2::Digest;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

const REPLY: &str = "one two three four five six seven eight nine ten eleven twelve";

/// Keys declared in the file (both replicas know them) and a server rpm
/// limit, so every request also charges `{server:global}` on its own slot.
fn config(keys: Value) -> String {
    to_yaml(&json!({
        "model_list": [{
            "model_name": "m",
            "litellm_params": {"model": "mock/m", "mock_response": REPLY},
        }, {
            "model_name": "slow",
            "litellm_params": {"model": "openai/slow", "api_base": held_upstream().api_base(), "api_key": "sk-held"},
        }, {
            "model_name": "linger",
            "litellm_params": {"model": "mock/linger", "mock_response": REPLY, "mock_latency_ms": 3000},
        }],
        "general_settings": {"master_key": MASTER_KEY},
        "gateway_settings": {
            "rate_limits": {"redis_timeout_ms": 1000, "server": {"rpm_limit": 100000}},
            "virtual_keys": keys,
        },
    }))
}

/// The upstream of model `slow`: its answers are held while a burst
/// ([`both_held`]) is being decided. One per test process.
fn held_upstream() -> &'static RawUpstream {
    static HELD: OnceLock<RawUpstream> = OnceLock::new();
    HELD.get_or_init(|| RawUpstream::chat_completion("slow", REPLY))
}

fn replicas(cluster: &PrivateCluster, keys: Value, envs: &[(&str, &str)]) -> (Gateway, Gateway) {
    let config = config(keys);
    let nodes = cluster.nodes_json();
    let mut all = envs.to_vec();
    all.push(("REDIS_CLUSTER_NODES", &nodes));
    (Gateway::start(&config, &all), Gateway::start(&config, &all))
}

fn token(key: &str) -> String {
    hex::encode(sha2::Sha256::digest(key.as_bytes()))
}

fn chat(gw: &Gateway, key: &str, body: &Value) -> (u16, Value) {
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
    (
        resp.status,
        serde_json::from_slice(&resp.body).unwrap_or(Value::Null),
    )
}

fn hello(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Say hi in one word."}]})
}

/// `to_a` requests to `a` and `to_b` to `b`, all at once; the replies.
fn both(
    a: &Gateway,
    b: &Gateway,
    key: &str,
    body: &Value,
    to_a: usize,
    to_b: usize,
) -> Vec<(u16, Value)> {
    std::thread::scope(|s| {
        let sends: Vec<_> = (0..to_a + to_b)
            .map(|i| {
                let gw = if i < to_a { a } else { b };
                s.spawn(move || chat(gw, key, body))
            })
            .collect();
        sends.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// [`both`] for model `slow`: its answers held until every request is
/// answered or waiting upstream, so no admitted request ends (and frees its
/// reservation or slot) before the last one is decided.
fn both_held(
    a: &Gateway,
    b: &Gateway,
    key: &str,
    body: &Value,
    to_a: usize,
    to_b: usize,
) -> Vec<(u16, Value)> {
    let sends = (0..to_a + to_b)
        .map(|i| {
            let gw = if i < to_a { a } else { b };
            Box::new(move || chat(gw, key, body)) as Box<dyn FnOnce() -> (u16, Value) + Send>
        })
        .collect();
    held_upstream().burst(sends)
}

fn served(replies: &[(u16, Value)]) -> usize {
    replies.iter().filter(|(s, _)| *s == 200).count()
}

fn assert_refused(replies: &[(u16, Value)], kind: &str) {
    for (status, body) in replies.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(*status, 429, "{body}");
        let m = body["error"]["message"].as_str().unwrap_or("");
        assert!(
            m.starts_with("Rate limit exceeded for api_key: ")
                && m.contains(&format!("Limit type: {kind}.")),
            "{m}"
        );
    }
}

#[test]
fn two_replicas_on_a_cluster_never_overshoot_rpm_and_follow_moved_and_ask() {
    let cluster = PrivateCluster::start();
    let (key, moved, asked) = ("sk-cluster-rpm-1", "sk-cluster-moved-1", "sk-cluster-ask-1");
    let (a, b) = replicas(
        &cluster,
        json!([
            {"key": key, "rpm_limit": 20},
            {"key": moved, "rpm_limit": 5},
            {"key": asked, "rpm_limit": 3},
        ]),
        &[],
    );
    let counter = format!("{{api_key:{}}}:requests", token(key));
    let server = "{server:global}:requests";
    let replies = both(&a, &b, key, &hello("m"), 30, 30);
    assert_eq!(served(&replies), 20, "exactly the limit over both replicas");
    assert_refused(&replies, "requests");
    assert_eq!(cluster.window_total(&counter), 20);
    // The server's counter lives on another slot: the 40 refused requests
    // were given back there (all or none), so it counts what was served.
    e2e::eventually(
        "refusals compensated on the server's slot",
        Duration::from_secs(5),
        || (cluster.window_total(server) == 20).then_some(()),
    );

    // A slot handed to another master under the replicas' feet: the next
    // calls get MOVED, follow it and count on the new owner.
    let moved_counter = format!("{{api_key:{}}}:requests", token(moved));
    let to = (cluster.node_of(&moved_counter) + 1) % 3;
    cluster.move_slot_of(&moved_counter, to);
    let replies = both(&a, &b, moved, &hello("m"), 4, 4);
    assert_eq!(served(&replies), 5);
    assert_refused(&replies, "requests");
    assert_eq!(cluster.node_of(&moved_counter), to);
    assert_eq!(cluster.window_total(&moved_counter), 5);

    // A slot being migrated: its owner answers ASK for the counter it does
    // not hold yet; the replicas ask the importing master.
    let asked_counter = format!("{{api_key:{}}}:requests", token(asked));
    let to = (cluster.node_of(&asked_counter) + 1) % 3;
    let slot = cluster.start_migration(&asked_counter, to);
    let replies = both(&a, &b, asked, &hello("m"), 2, 2);
    assert_eq!(served(&replies), 3);
    assert_refused(&replies, "requests");
    cluster.finish_migration(&slot, to);
    e2e::eventually("the migration ended", Duration::from_secs(10), || {
        (cluster.node_of(&asked_counter) == to).then_some(())
    });
    assert_eq!(
        cluster.window_total(&asked_counter),
        3,
        "counted on the importing master"
    );
    let out = a.output() + &b.output();
    assert!(!out.contains("Redis limiter call failed"), "{out}");
}

#[test]
fn tpm_reservations_and_parallel_slots_hold_across_replicas_on_a_cluster() {
    let cluster = PrivateCluster::start();
    let (tpm, parallel) = ("sk-cluster-tpm-1", "sk-cluster-par-1");
    let (a, b) = replicas(
        &cluster,
        json!([{"key": tpm, "tpm_limit": 200}, {"key": parallel, "max_parallel_requests": 2}]),
        &[],
    );
    // Each reserves ~5 prompt + 120 = 125 tokens: one fits in 200, fleet-wide.
    let mut capped = hello("slow");
    capped["max_tokens"] = json!(120);
    let replies = both_held(&a, &b, tpm, &capped, 4, 4);
    assert_eq!(served(&replies), 1, "{replies:?}");
    assert_refused(&replies, "tokens");
    let used = replies
        .iter()
        .find(|(s, _)| *s == 200)
        .and_then(|(_, body)| body["usage"]["total_tokens"].as_i64())
        .expect("usage");
    let tokens = format!("{{api_key:{}}}:tokens", token(tpm));
    e2e::eventually(
        "the reservation reconciled to the real usage",
        Duration::from_secs(5),
        || (cluster.window_total(&tokens) == used).then_some(()),
    );

    // Two in flight at most, fleet-wide.
    let replies = both_held(&a, &b, parallel, &hello("slow"), 4, 4);
    assert_eq!(served(&replies), 2, "{replies:?}");
    assert_refused(&replies, "parallel");
    let slots = format!("{{api_key:{}}}:parallel", token(parallel));
    e2e::eventually("the slots freed", Duration::from_secs(5), || {
        (cluster.slots(&slots) == 0).then_some(())
    });
    // Every request was counted once on the server's slot, refused or not
    // given back: 1 + 2 served.
    e2e::eventually(
        "the server counts what was served",
        Duration::from_secs(5),
        || (cluster.window_total("{server:global}:requests") == 3).then_some(()),
    );
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_master_killed_and_restarted_under_load_keeps_serving_and_counts_correctly() {
    let cluster = PrivateCluster::start();
    let key = "sk-cluster-kill-1";
    let (a, b) = replicas(
        &cluster,
        json!([{"key": key, "rpm_limit": 100000}]),
        &[
            ("REDIS_CIRCUIT_BREAKER_FAILURE_THRESHOLD", "2"),
            ("REDIS_CIRCUIT_BREAKER_RECOVERY_TIMEOUT", "1"),
        ],
    );
    let counter = format!("{{api_key:{}}}:requests", token(key));
    let victim = cluster.node_of(&counter);
    let stop = AtomicBool::new(false);
    let statuses = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for gw in [&a, &b] {
            let (stop, statuses) = (&stop, &statuses);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (status, body) = chat(gw, key, &hello("m"));
                    let body = (status != 200).then_some(body);
                    statuses.lock().unwrap().push((status, body));
                }
            });
        }
        // The load stops however this scope ends (a failed check too).
        let _stop = StopOnDrop(&stop);
        e2e::eventually(
            "load counted in the Cluster",
            Duration::from_secs(10),
            || (cluster.window_total(&counter) >= 10).then_some(()),
        );
        let before = cluster.window_total(&counter);
        cluster.kill(victim);
        e2e::eventually("the breakers opened", Duration::from_secs(10), || {
            [&a, &b]
                .iter()
                .all(|gw| gw.output().contains("circuit breaker opened"))
                .then_some(())
        });
        // The other masters still answer, but the Cluster is one Redis for
        // the breaker: no probe closes it while a master is down.
        std::thread::sleep(Duration::from_millis(2500));
        for gw in [&a, &b] {
            assert!(
                !gw.output().contains("circuit breaker closed"),
                "{}",
                gw.output()
            );
        }
        cluster.restart(victim);
        cluster.wait_ok();
        e2e::eventually("the breakers closed", Duration::from_secs(15), || {
            [&a, &b]
                .iter()
                .all(|gw| gw.output().contains("circuit breaker closed"))
                .then_some(())
        });
        stop.store(true, Ordering::Relaxed);
        // The restarted master kept what it had counted (its append-only file).
        assert!(cluster.window_total(&counter) >= before);
    });
    let statuses = statuses.into_inner().unwrap();
    let failed: Vec<_> = statuses.iter().filter(|(s, _)| *s != 200).collect();
    assert!(failed.is_empty(), "served throughout: {failed:?}");
    assert!(statuses.len() > 20, "{} requests", statuses.len());
    // Counting in the Cluster again, exactly.
    let start = cluster.window_total(&counter);
    for gw in [&a, &b] {
        for _ in 0..10 {
            assert_eq!(chat(gw, key, &hello("m")).0, 200);
        }
    }
    e2e::eventually("each request counted once", Duration::from_secs(5), || {
        (cluster.window_total(&counter) == start + 20).then_some(())
    });
}

#[test]
fn two_lease_replicas_on_a_cluster_never_admit_more_than_the_limit() {
    let cluster = PrivateCluster::start();
    let key = "sk-cluster-lease-1";
    let (a, b) = replicas(
        &cluster,
        json!([{"key": key, "rpm_limit": 30}]),
        &[("GATEWAY_RATE_LIMIT_MODE", "lease")],
    );
    let replies = both(&a, &b, key, &hello("m"), 30, 30);
    let served = served(&replies) as i64;
    assert!(served > 0 && served <= 30, "{served} admitted over 30");
    assert_refused(&replies, "requests");
    // Leases end through the control plane's Cluster client: Redis then
    // counts exactly what was served.
    let counter = format!("{{api_key:{}}}:requests", token(key));
    e2e::eventually("the leases ended", Duration::from_secs(5), || {
        (cluster.window_total(&counter) == served).then_some(())
    });
}

#[test]
fn two_lease_replicas_on_a_cluster_lease_parallel_slots_within_the_limit() {
    let cluster = PrivateCluster::start();
    let key = "sk-cluster-lease-parallel-1";
    let (a, b) = replicas(
        &cluster,
        json!([{"key": key, "max_parallel_requests": 3}]),
        &[("GATEWAY_RATE_LIMIT_MODE", "lease")],
    );
    // Each admitted request is in flight 3 s: the whole burst overlaps.
    let replies = both(&a, &b, key, &hello("linger"), 5, 5);
    let served = served(&replies);
    assert!(served > 0 && served <= 3, "{served} in flight over 3");
    assert_refused(&replies, "parallel");
    // Slot leases are granted and returned through the slot's node: the
    // counter empties once both replicas are idle.
    let counter = format!("{{api_key:{}}}:parallel", token(key));
    e2e::eventually("the slots returned", Duration::from_secs(5), || {
        (cluster.slots(&counter) == 0).then_some(())
    });
    assert_eq!(chat(&a, key, &hello("m")).0, 200);
}

/// A group `chat` of `cheap` (answering `fails` when given; chosen first,
/// it is free) and `backup`, on the mock; routed by cost.
fn cooling_replica(
    mock: &MockServer,
    cluster: &PrivateCluster,
    fails: Option<u16>,
    settings: Value,
) -> Gateway {
    let mut cheap = json!({
        "model": "openai/cheap-model",
        "input_cost_per_token": 0,
        "output_cost_per_token": 0,
    });
    if let Some(status) = fails {
        cheap["extra_headers"] = json!({"x-mock-status": status.to_string()});
    }
    let mut router = json!({"routing_strategy": "cost-based-routing", "retry_after": 0});
    if let (Some(r), Value::Object(extra)) = (router.as_object_mut(), settings) {
        r.extend(extra);
    }
    let config = json!({
        "model_list": [
            openai_model("chat", "cheap", &mock.api_base(), cheap),
            openai_model("chat", "backup", &mock.api_base(), json!({"model": "openai/backup-model"})),
        ],
        "router_settings": router,
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start(
        &to_yaml(&config),
        &[("REDIS_CLUSTER_NODES", &cluster.nodes_json())],
    )
}

fn served_by(gw: &Gateway) -> (u16, String) {
    let resp = gw.post("/v1/chat/completions", &chat_body("chat"));
    let id = resp.header("x-litellm-model-id").unwrap_or("").to_string();
    (resp.status, id)
}

#[test]
fn cooldowns_and_allowed_fails_are_shared_through_a_cluster() {
    let cluster = PrivateCluster::start();
    let mock = MockServer::start(&[]);
    // A cooldown started on a reaches b by pub/sub, and its key is set.
    let settings = json!({"num_retries": 1, "cooldown_time": 30});
    let a = cooling_replica(&mock, &cluster, Some(429), settings.clone());
    let b = cooling_replica(&mock, &cluster, None, settings);
    assert_eq!(served_by(&b), (200, "cheap".into()));
    assert_eq!(served_by(&a), (200, "backup".into()), "a cooled cheap");
    e2e::eventually("b applies a's cooldown", Duration::from_secs(2), || {
        (served_by(&b) == (200, "backup".into())).then_some(())
    });
    assert!(matches!(
        cluster.command(&["PTTL", "deployment:cheap:cooldown"]),
        e2e::redis::Reply::Int(ms) if ms > 0
    ));
    drop((a, b));

    // Failures on either replica add up in the Cluster's counter.
    let cluster = PrivateCluster::start();
    let settings = json!({"num_retries": 0, "allowed_fails": 2, "cooldown_time": 30});
    let a = cooling_replica(&mock, &cluster, Some(500), settings.clone());
    let b = cooling_replica(&mock, &cluster, Some(500), settings);
    for gw in [&a, &b, &a] {
        assert_ne!(served_by(gw).0, 200, "cheap fails and is not retried");
    }
    e2e::eventually(
        "the fleet's failures exceed allowed_fails",
        Duration::from_secs(2),
        || {
            (cluster.command(&["EXISTS", "deployment:cheap:cooldown"]) == e2e::redis::Reply::Int(1))
                .then_some(())
        },
    );
    for gw in [&a, &b] {
        e2e::eventually("cheap cooling on both", Duration::from_secs(2), || {
            (served_by(gw) == (200, "backup".into())).then_some(())
        });
    }
}
