//! Budgets exact across the fleet: two replicas sharing Redis and Postgres
//! reserve and settle one key's budget in Redis, so hammering the key
//! through both at once overshoots by at most one request's reconciliation
//! (with worst-case reservations: not at all); a new budget period and an
//! admin's spend reset admit again on both; a replica started later (also
//! after Redis lost everything) reads the running totals; spend settled
//! while Redis was frozen reaches its counter once Redis answers again.
//!
//! Each test has its own scratch database ([`TestDb`]) and its own
//! `redis-server` ([`PrivateRedis`]); the model is the in-process `mock/`
//! provider with a latency, so requests overlap.

use e2e::budget_burst::{
    chat, cost_of, hammer, worst_case, INPUT_COST, LATENCY_MS, OUTPUT_COST, REPLY,
};
use e2e::{to_yaml, Gateway, PrivateRedis, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The priced model group (the mock answers after [`LATENCY_MS`]).
const MODEL: &str = "fleet-budget";

/// Replicas sharing one database and one Redis. Fields drop in order: the
/// gateways stop before Redis and the database go.
struct Fleet {
    replicas: Vec<Gateway>,
    redis: PrivateRedis,
    db: TestDb,
    spools: TempDir,
    envs: Vec<(&'static str, &'static str)>,
    /// `gateway_settings.rate_limits` of every replica (none when null).
    rate_limits: Value,
}

impl Fleet {
    /// Two replicas. A Redis call that misses its deadline reserves in the
    /// process (the outage rule, which may overshoot); on a loaded test
    /// machine the default 100 ms was missed, so Redis gets 10 s here.
    fn start() -> Fleet {
        Fleet::start_limited(&[], json!({"redis_timeout_ms": 10000}))
    }

    /// Two replicas with the extra environment `envs`.
    fn start_with(envs: &[(&'static str, &'static str)]) -> Fleet {
        Fleet::start_limited(envs, Value::Null)
    }

    /// Two replicas with the extra environment `envs` and `rate_limits`.
    fn start_limited(envs: &[(&'static str, &'static str)], rate_limits: Value) -> Fleet {
        let mut fleet = Fleet {
            replicas: Vec::new(),
            redis: PrivateRedis::start(),
            db: TestDb::create(),
            spools: tempfile::tempdir().expect("spool temp dir"),
            envs: envs.to_vec(),
            rate_limits,
        };
        for _ in 0..2 {
            let replica = fleet.replica();
            fleet.replicas.push(replica);
        }
        fleet
    }

    /// One more replica on the fleet's database and Redis.
    fn replica(&self) -> Gateway {
        let spool = self.spools.path().join(e2e::unique_id("spool"));
        let mut config = json!({
            "model_list": [{
                "model_name": MODEL,
                "litellm_params": {
                    "model": "mock/priced",
                    "mock_response": REPLY,
                    "mock_latency_ms": LATENCY_MS,
                    "input_cost_per_token": INPUT_COST,
                    "output_cost_per_token": OUTPUT_COST,
                },
            }],
            "general_settings": {"master_key": MASTER_KEY},
            "gateway_settings": {"spool_dir": spool.to_str().expect("utf-8 temp path")},
        });
        if !self.rate_limits.is_null() {
            config["gateway_settings"]["rate_limits"] = self.rate_limits.clone();
        }
        let url = self.redis.url();
        let mut envs = vec![("DATABASE_URL", self.db.url()), ("REDIS_URL", &url)];
        envs.extend(self.envs.iter().copied());
        Gateway::start(&to_yaml(&config), &envs)
    }
}

/// A key with `fields` made through `gw`: (plain key, sha256 token).
fn generate(gw: &Gateway, fields: Value) -> (String, String) {
    let resp = gw.post("/key/generate", &fields).expect_status(200).json();
    let field = |name: &str| resp[name].as_str().expect(name).to_string();
    (field("key"), field("token"))
}

/// The key's spend in Postgres once the writers have flushed `expected`
/// (or what it holds after 5 s, for the caller's assertion to report).
fn recorded_spend(fleet: &Fleet, token: &str, expected: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let spend: f64 = fleet
            .db
            .query(&format!(
                r#"SELECT spend FROM "LiteLLM_VerificationToken" WHERE token = '{token}'"#
            ))
            .trim()
            .parse()
            .expect("a number");
        if (spend - expected).abs() < 1e-9 || Instant::now() > deadline {
            return spend;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Spends through both replicas until both refuse: the admitted spend
/// stays within the budget (the gap to it is less than one more request's
/// worst case) and lands once in Postgres. Returns the spend.
fn exhaust(fleet: &Fleet, key: &str, token: &str, budget: f64, spent_before: f64) -> f64 {
    let (costs, per_replica) = hammer(&fleet.replicas, MODEL, key);
    let spent: f64 = costs.iter().sum::<f64>() + spent_before;
    println!("admitted per replica: {per_replica:?}; spent {spent:.6} of {budget}");
    assert!(
        spent <= budget + 1e-9,
        "two replicas overshot the budget: spent {spent} of {budget}"
    );
    assert!(
        budget - spent < 2.0 * worst_case(MODEL),
        "refused with room left: spent {spent} of {budget}"
    );
    let recorded = recorded_spend(fleet, token, spent);
    assert!(
        (recorded - spent).abs() < 1e-9,
        "Postgres says {recorded}, the responses {spent}"
    );
    spent
}

#[test]
fn two_replicas_hammering_one_key_stay_within_its_budget() {
    // Budget slices, the default with Redis. A Redis call that misses its
    // deadline reserves in the process (the outage rule); on a loaded test
    // machine the default 100 ms was missed, so Redis gets 10 s here.
    hammer_within_budget(Fleet::start_limited(
        &[],
        json!({"redis_timeout_ms": 10000}),
    ));
}

/// `rate_limits.budget_slices: false`: every request holds its worst case
/// in Redis (`reserve.lua`) and settles it (`settle.lua`).
#[test]
fn two_replicas_holding_each_request_in_redis_stay_within_its_budget() {
    let fleet = Fleet::start_limited(
        &[],
        json!({"budget_slices": false, "redis_timeout_ms": 10000}),
    );
    hammer_within_budget(fleet);
}

/// Two replicas hammer one key with a budget of about sixteen requests:
/// together they stay within it, refuse only near its end, and Redis,
/// Postgres and the responses agree on the spend.
fn hammer_within_budget(fleet: Fleet) {
    // About sixteen requests' worth: each replica alone would admit about
    // as many, so counting per replica would spend nearly twice the budget.
    let budget = 0.02;
    let (key, token) = generate(&fleet.replicas[0], json!({"max_budget": budget}));
    // One request on each first, so both have the key cached when the
    // burst starts.
    let mut spent = 0.0;
    for gw in &fleet.replicas {
        let (status, body) = chat(gw, MODEL, &key);
        assert_eq!(status, 200, "{body}");
        spent += cost_of(&body);
    }
    let (costs, per_replica) = hammer(&fleet.replicas, MODEL, &key);
    spent += costs.iter().sum::<f64>();
    println!("admitted per replica: {per_replica:?}; spent {spent:.6} of {budget}");
    assert!(
        per_replica.iter().all(|&n| n > 0),
        "both replicas admitted: {per_replica:?}"
    );
    assert!(
        spent <= budget + 1e-9,
        "two replicas overshot the budget: spent {spent} of {budget}"
    );
    assert!(
        budget - spent < 2.0 * worst_case(MODEL),
        "refused with room left: spent {spent} of {budget}"
    );
    let recorded = recorded_spend(&fleet, &token, spent);
    assert!(
        (recorded - spent).abs() < 1e-9,
        "Postgres says {recorded}, the responses {spent}"
    );
    // Every hold was released; Redis counted what Postgres recorded.
    let hash = format!("{{budget:key:{token}}}");
    let field = |name: &str| match fleet.redis.command(&["HGET", &hash, name]) {
        e2e::redis::Reply::Bulk(Some(v)) => v.parse::<i64>().ok(),
        _ => None,
    };
    e2e::eventually("holds released", Duration::from_secs(5), || {
        (field("reserved") == Some(0)).then_some(())
    });
    let counted = field("spent").expect("a spent counter") as f64 / 1e9;
    assert!(
        (counted - spent).abs() < 1e-6,
        "Redis counted {counted}, the responses say {spent}"
    );
}

/// Spends `key` through both replicas in turn until both refuse.
fn spend_until_both_refuse(fleet: &Fleet, key: &str) {
    let mut refused = [false, false];
    for i in 0.. {
        assert!(i < 200, "the budget never refused");
        let at = i % 2;
        match chat(&fleet.replicas[at], MODEL, key) {
            (200, _) => refused = [false, false],
            (422, body) => {
                assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");
                refused[at] = true;
                if refused == [true, true] {
                    return;
                }
            }
            (status, body) => panic!("unexpected {status}: {body}"),
        }
    }
}

#[test]
fn a_new_budget_period_and_a_spend_reset_admit_again_on_both_replicas() {
    let fleet = Fleet::start();
    let budget = 0.004;
    let key = generate(
        &fleet.replicas[0],
        json!({"max_budget": budget, "budget_duration": "2s"}),
    )
    .0;
    spend_until_both_refuse(&fleet, &key);
    // The period ends on its own: both replicas admit again.
    let exhausted = Instant::now();
    for (i, gw) in fleet.replicas.iter().enumerate() {
        let after = e2e::eventually(
            "admitted again after the budget period",
            Duration::from_secs(10),
            || (chat(gw, MODEL, &key).0 == 200).then(|| exhausted.elapsed()),
        );
        println!("replica {i} admitted again {after:?} after exhaustion");
    }
    // An admin's spend reset on one replica restores the other at once.
    let key = generate(&fleet.replicas[0], json!({"max_budget": budget})).0;
    spend_until_both_refuse(&fleet, &key);
    fleet.replicas[0]
        .post("/key/update", &json!({"key": key, "spend": 0.0}))
        .expect_status(200);
    assert_eq!(
        chat(&fleet.replicas[1], MODEL, &key).0,
        200,
        "a spend reset on one replica restores access on the other at once"
    );
}

#[test]
fn a_replica_started_later_reads_the_running_totals() {
    let mut fleet = Fleet::start();
    let budget = 0.01;
    let (key, token) = generate(&fleet.replicas[0], json!({"max_budget": budget}));
    // About half the budget through replica 0 alone.
    let mut spent = 0.0;
    while spent < budget / 2.0 {
        let (status, body) = chat(&fleet.replicas[0], MODEL, &key);
        assert_eq!(status, 200, "{body}");
        spent += cost_of(&body);
    }
    recorded_spend(&fleet, &token, spent);
    // Restart the whole fleet, and make Redis forget everything: the new
    // replicas read the totals from Postgres and seed the fleet's counter
    // with them.
    fleet.replicas.clear();
    fleet.redis.restart();
    for _ in 0..2 {
        let replica = fleet.replica();
        fleet.replicas.push(replica);
    }
    spent = exhaust(&fleet, &key, &token, budget, spent);
    assert!(spent <= budget + 1e-9);
    // And once more: a restarted replica refuses the exhausted key at once.
    fleet.replicas.remove(0);
    let again = fleet.replica();
    assert_eq!(
        chat(&again, MODEL, &key).0,
        422,
        "the total survives a restart"
    );
}

/// The key's fleet counter in Redis, USD (`None` while Redis has none).
fn counted(fleet: &Fleet, token: &str) -> Option<f64> {
    let hash = format!("{{budget:key:{token}}}");
    match fleet.redis.command(&["HGET", &hash, "spent"]) {
        e2e::redis::Reply::Bulk(Some(v)) => v.parse::<f64>().ok().map(|n| n / 1e9),
        _ => None,
    }
}

#[test]
fn spend_settled_while_redis_is_frozen_reaches_its_counter_afterwards() {
    let fleet = Fleet::start_with(&[("REDIS_CIRCUIT_BREAKER_RECOVERY_TIMEOUT", "1")]);
    let gw = &fleet.replicas[0];
    let (key, token) = generate(gw, json!({"max_budget": 1.0}));
    let mut spent = 0.0;
    let spend = |spent: &mut f64| {
        let (status, body) = chat(gw, MODEL, &key);
        assert_eq!(status, 200, "{body}");
        *spent += cost_of(&body);
    };
    spend(&mut spent);
    spend(&mut spent);
    fleet.redis.freeze();
    // Served on the replica's own counters meanwhile.
    for _ in 0..3 {
        spend(&mut spent);
    }
    fleet.redis.thaw();
    assert!(
        counted(&fleet, &token).is_some_and(|c| c < spent - 1e-6),
        "Redis missed the spend of the outage"
    );
    // Once the breaker lets calls through again, the key's next
    // reservation pays what was settled meanwhile.
    e2e::eventually(
        "Redis counts the outage's spend",
        Duration::from_secs(10),
        || {
            spend(&mut spent);
            std::thread::sleep(Duration::from_millis(100));
            counted(&fleet, &token)
                .filter(|c| (c - spent).abs() < 1e-6)
                .map(|_| ())
        },
    );
    assert!((recorded_spend(&fleet, &token, spent) - spent).abs() < 1e-9);
}

/// The fields of the key's budget hash in Redis whose name starts with
/// `hold:slice:` (budget slices of lease mode).
fn slice_holds(fleet: &Fleet, token: &str) -> Vec<String> {
    let hash = format!("{{budget:key:{token}}}");
    match fleet.redis.command(&["HKEYS", &hash]) {
        e2e::redis::Reply::Array(fields) => fields
            .into_iter()
            .filter_map(|f| match f {
                e2e::redis::Reply::Bulk(Some(name)) => Some(name),
                _ => None,
            })
            .filter(|name| name.starts_with("hold:slice:"))
            .collect(),
        _ => Vec::new(),
    }
}

/// The key's `reserved` field in Redis (holds and slices), nano-USD.
fn reserved(fleet: &Fleet, token: &str) -> Option<i64> {
    let hash = format!("{{budget:key:{token}}}");
    match fleet.redis.command(&["HGET", &hash, "reserved"]) {
        e2e::redis::Reply::Bulk(Some(v)) => v.parse::<i64>().ok(),
        _ => None,
    }
}

/// Lease mode: each replica reserves against a slice of the budget taken
/// from Redis (no Redis call per request), and the two together still never
/// pass a small budget; once they are idle every slice went back and Redis
/// counted exactly what the responses cost.
#[test]
fn two_lease_mode_replicas_with_budget_slices_stay_within_a_small_budget() {
    // Exact while Redis answers within the deadline: a call that gets no
    // answer in time reserves in the process (the documented outage rule),
    // which a loaded test machine must not be mistaken for.
    let fleet = Fleet::start_limited(
        &[("GATEWAY_RATE_LIMIT_MODE", "lease")],
        json!({"redis_timeout_ms": 10_000}),
    );
    let budget = 0.02;
    let (key, token) = generate(&fleet.replicas[0], json!({"max_budget": budget}));
    let mut spent = 0.0;
    for gw in &fleet.replicas {
        let (status, body) = chat(gw, MODEL, &key);
        assert_eq!(status, 200, "{body}");
        spent += cost_of(&body);
    }
    assert_eq!(
        slice_holds(&fleet, &token).len(),
        2,
        "each replica holds a slice of the budget"
    );
    let (costs, per_replica) = hammer(&fleet.replicas, MODEL, &key);
    spent += costs.iter().sum::<f64>();
    println!("admitted per replica: {per_replica:?}; spent {spent:.6} of {budget}");
    assert!(
        spent <= budget + 1e-9,
        "two replicas overshot the budget: spent {spent} of {budget}"
    );
    // Slices parked in the other replica are handed back within a lease
    // life and a half; then what is left is spent until both refuse.
    e2e::eventually("slices handed back", Duration::from_secs(5), || {
        (reserved(&fleet, &token) == Some(0)).then_some(())
    });
    let mut refused = [false, false];
    for i in 0.. {
        assert!(i < 100, "the budget never refused");
        let at = i % 2;
        match chat(&fleet.replicas[at], MODEL, &key) {
            (200, body) => {
                spent += cost_of(&body);
                refused = [false, false];
            }
            (422, _) => {
                refused[at] = true;
                if refused == [true, true] {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1600));
            }
            (status, body) => panic!("unexpected {status}: {body}"),
        }
    }
    assert!(
        spent <= budget + 1e-9,
        "overshot the budget: spent {spent} of {budget}"
    );
    assert!(
        budget - spent < 2.0 * worst_case(MODEL),
        "refused with room left: spent {spent} of {budget}"
    );
    assert!((recorded_spend(&fleet, &token, spent) - spent).abs() < 1e-9);
    e2e::eventually("spend reported", Duration::from_secs(5), || {
        counted(&fleet, &token)
            .filter(|c| (c - spent).abs() < 1e-6)
            .map(|_| ())
    });
}

/// A replica killed while it holds a slice does not take that room with
/// it: the slice lapses (`parallel_slot_ttl_secs`) and the other replica
/// spends the whole budget; a replica stopped normally hands its slice back
/// at once.
#[test]
fn a_killed_replicas_budget_slice_lapses() {
    let fleet = Fleet::start_limited(
        &[("GATEWAY_RATE_LIMIT_MODE", "lease")],
        json!({"parallel_slot_ttl_secs": 6, "lease_ttl_ms": 10_000, "lease_fraction": 0.5}),
    );
    let mut fleet = fleet;
    // The first slice is half the budget, many requests' worth.
    let budget = 0.05;
    let (key, token) = generate(&fleet.replicas[0], json!({"max_budget": budget}));
    let (status, body) = chat(&fleet.replicas[0], MODEL, &key);
    assert_eq!(status, 200, "{body}");
    let mut spent = cost_of(&body);
    // A serving slice's spend is reported once a report interval (half its
    // life: 1.5 s) and a sweep after its grant; the slice serves for half
    // its hold's life (3 s, started again by that report while requests
    // take from it) and is still held.
    e2e::eventually("spend reported", Duration::from_secs(3), || {
        counted(&fleet, &token)
            .filter(|c| (c - spent).abs() < 1e-6)
            .map(|_| ())
    });
    assert_eq!(
        slice_holds(&fleet, &token).len(),
        1,
        "replica 0 holds a slice"
    );
    let parked = reserved(&fleet, &token).expect("the slice's hold");
    assert!(
        parked as f64 / 1e9 > 5.0 * worst_case(MODEL),
        "the slice holds many requests' room: {parked}"
    );
    fleet.replicas[0].signal(libc::SIGKILL);
    fleet.replicas.remove(0);
    // The slice lapses after its hold's life; the other replica then
    // spends everything that is left.
    std::thread::sleep(Duration::from_millis(6500));
    loop {
        match chat(&fleet.replicas[0], MODEL, &key) {
            (200, body) => spent += cost_of(&body),
            (422, _) => break,
            (status, body) => panic!("unexpected {status}: {body}"),
        }
    }
    println!("spent {spent:.6} of {budget}");
    assert!(spent <= budget + 1e-9, "overshot: {spent} of {budget}");
    assert!(
        budget - spent < 2.0 * worst_case(MODEL),
        "the killed replica's slice still holds room: spent {spent} of {budget}"
    );
    // A replica stopped normally hands its slice back before it exits.
    let (key, token) = generate(&fleet.replicas[0], json!({"max_budget": budget}));
    assert_eq!(chat(&fleet.replicas[0], MODEL, &key).0, 200);
    assert!(reserved(&fleet, &token).is_some_and(|r| r > 0));
    let mut stopped = fleet.replicas.remove(0);
    stopped.signal(libc::SIGTERM);
    assert!(stopped.wait_exit(Duration::from_secs(10)).is_some());
    assert_eq!(reserved(&fleet, &token), Some(0), "handed back at shutdown");
    assert!(slice_holds(&fleet, &token).is_empty());
}

/// A key's user without a budget of its own: its spend still goes through
/// a slice (the key's budget puts the request on the fleet path), but with
/// no limit there is no room to park, so the slice is sized to outlast its
/// life, not ten requests' worst case, which a few dozen requests in
/// flight ran dry and sent to a hold each in Redis.
#[test]
fn a_budget_without_a_limit_gets_a_slice_for_many_requests_in_flight() {
    let fleet = Fleet::start_limited(
        &[("GATEWAY_RATE_LIMIT_MODE", "lease")],
        json!({"redis_timeout_ms": 10_000}),
    );
    let gw = &fleet.replicas[0];
    let user = e2e::unique_id("user");
    gw.post("/user/new", &json!({"user_id": user}))
        .expect_status(200);
    let (key, _) = generate(gw, json!({"max_budget": 100.0, "user_id": user}));
    let (status, body) = chat(gw, MODEL, &key);
    assert_eq!(status, 200, "{body}");
    let hash = format!("{{budget:user:{user}}}");
    let reserved = match fleet.redis.command(&["HGET", &hash, "reserved"]) {
        e2e::redis::Reply::Bulk(Some(v)) => v.parse::<f64>().expect("reserved is a number"),
        other => panic!("the user's budget has no slice in Redis: {other:?}"),
    };
    let need = worst_case(MODEL) * 1e9;
    assert!(
        reserved >= 500.0 * need,
        "the user's slice holds {reserved} nano-USD, {:.1} requests' worst case",
        reserved / need
    );
}
