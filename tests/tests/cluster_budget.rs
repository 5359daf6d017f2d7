//! Budgets exact across the fleet on a Redis Cluster: two replicas sharing
//! Postgres and a private three-master Cluster reserve and settle a key's
//! and its team's budgets in the Cluster, whose hashes live on different
//! slots (one `reserve.lua` call per slot, in slot order, with the slots
//! already reserved released when a later one refuses). Hammering the key
//! through both replicas stays within the team's budget and both refuse
//! once it is spent; a master killed mid-way (the replicas fall back to
//! their own counters) neither frees budget nor counts a request twice:
//! once it is back, the Cluster's counters equal what the responses cost
//! and the budget holds again. The standalone versions are in
//! `fleet_budget.rs`.

use e2e::budget_burst::{
    chat, cost_of, hammer, worst_case, INPUT_COST, LATENCY_MS, OUTPUT_COST, REPLY,
};
use e2e::{to_yaml, Gateway, PrivateCluster, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The priced model group (the mock answers after [`LATENCY_MS`]).
const MODEL: &str = "cluster-budget";

/// Two replicas sharing one database and one Cluster. Fields drop in
/// order: the gateways stop before the Cluster and the database go.
struct Fleet {
    replicas: Vec<Gateway>,
    cluster: PrivateCluster,
    db: TestDb,
    _spools: TempDir,
}

impl Fleet {
    fn start(envs: &[(&str, &str)]) -> Fleet {
        let cluster = PrivateCluster::start();
        let db = TestDb::create();
        let spools = tempfile::tempdir().expect("spool temp dir");
        let nodes = cluster.nodes_json();
        let replicas = (0..2)
            .map(|_| {
                let spool = spools.path().join(e2e::unique_id("spool"));
                let config = json!({
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
                    "gateway_settings": {
                        "spool_dir": spool.to_str().expect("utf-8 temp path"),
                        // A slice reports once a `lease_ttl_ms` however
                        // slowly it is used (no slow report interval), as
                        // the outage test's rounds wait for.
                        "rate_limits": {"redis_timeout_ms": 1000, "lease_max_ttl_ms": 1000},
                    },
                });
                let mut all = vec![("DATABASE_URL", db.url()), ("REDIS_CLUSTER_NODES", &nodes)];
                all.extend(envs.iter().copied());
                Gateway::start(&to_yaml(&config), &all)
            })
            .collect();
        Fleet {
            replicas,
            cluster,
            db,
            _spools: spools,
        }
    }

    /// A team with `budget` and a key of it with none of its own, made
    /// through replica 0: (plain key, key's sha256 token).
    fn team_key(&self, team: &str, budget: f64) -> (String, String) {
        self.replicas[0]
            .post("/team/new", &json!({"team_id": team, "max_budget": budget}))
            .expect_status(200);
        let resp = self.replicas[0]
            .post(
                "/key/generate",
                &json!({"team_id": team, "max_budget": 1.0}),
            )
            .expect_status(200)
            .json();
        let field = |name: &str| resp[name].as_str().expect(name).to_string();
        (field("key"), field("token"))
    }

    /// The hash slot of `key`, as the Cluster computes it.
    fn slot(&self, key: &str) -> i64 {
        match self.cluster.on(0, &["CLUSTER", "KEYSLOT", key]) {
            e2e::redis::Reply::Int(slot) => slot,
            other => panic!("CLUSTER KEYSLOT {key}: {other:?}"),
        }
    }

    /// A field of a principal's budget hash, on the master serving it.
    fn field(&self, hash: &str, name: &str) -> Option<i64> {
        match self.cluster.command(&["HGET", hash, name]) {
            e2e::redis::Reply::Bulk(Some(v)) => v.parse().ok(),
            _ => None,
        }
    }

    /// What the Cluster counted for a hash, USD, once its holds are
    /// released.
    fn counted(&self, hash: &str) -> f64 {
        e2e::eventually("holds released", Duration::from_secs(10), || {
            (self.field(hash, "reserved") == Some(0)).then_some(())
        });
        self.field(hash, "spent").expect("a spent counter") as f64 / 1e9
    }

    /// The team's spend in Postgres once the writers flushed `expected`
    /// (or what it holds after 5 s, for the caller's assertion to report).
    fn recorded_team_spend(&self, team: &str, expected: f64) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let spend: f64 = self
                .db
                .query(&format!(
                    r#"SELECT spend FROM "LiteLLM_TeamTable" WHERE team_id = '{team}'"#
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
}

/// Hammers `key` through both replicas until they refuse: the admitted
/// spend (plus `before`) stays within `budget`, less than one more
/// request's worst case short of it, and both replicas refuse the key
/// afterwards, naming the team. Returns the spend.
fn exhaust(fleet: &Fleet, key: &str, budget: f64, before: f64) -> f64 {
    let (costs, per_replica) = hammer(&fleet.replicas, MODEL, key);
    let spent = costs.iter().sum::<f64>() + before;
    println!("admitted per replica: {per_replica:?}; spent {spent:.6} of {budget}");
    assert!(
        spent <= budget + 1e-9,
        "two replicas overshot the team's budget: spent {spent} of {budget}"
    );
    assert!(
        budget - spent < 2.0 * worst_case(MODEL),
        "refused with room left: spent {spent} of {budget}"
    );
    for gw in &fleet.replicas {
        let (status, body) = chat(gw, MODEL, key);
        assert_eq!(status, 422, "refused once spent: {body}");
        assert!(refused_by(&body, "team"), "{body}");
    }
    spent
}

/// Whether `body` is the refusal of the `scope`'s budget.
fn refused_by(body: &Value, scope: &str) -> bool {
    body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with(&format!("Budget has been exceeded! {scope} spend")))
}

fn hashes(team: &str, token: &str) -> (String, String) {
    (
        format!("{{budget:team:{team}}}"),
        format!("{{budget:key:{token}}}"),
    )
}

#[test]
fn two_replicas_on_a_cluster_hold_a_team_budget_whose_counters_span_slots() {
    let fleet = Fleet::start(&[]);
    // About sixteen requests' worth: each replica alone would admit about
    // as many, so counting per replica would spend nearly twice the budget.
    let budget = 0.02;
    let team = "cluster-team-1";
    let (key, token) = fleet.team_key(team, budget);
    let (team_hash, key_hash) = hashes(team, &token);
    assert_ne!(
        fleet.slot(&team_hash),
        fleet.slot(&key_hash),
        "the key's and the team's budgets live on different slots"
    );
    // One request on each first, so both have the key cached.
    let mut spent = 0.0;
    for gw in &fleet.replicas {
        let (status, body) = chat(gw, MODEL, &key);
        assert_eq!(status, 200, "{body}");
        spent += cost_of(&body);
    }
    let spent = exhaust(&fleet, &key, budget, spent);
    // Every hold was released on both slots; each counted every request
    // once, as Postgres recorded it.
    for hash in [&team_hash, &key_hash] {
        let counted = fleet.counted(hash);
        assert!(
            (counted - spent).abs() < 1e-6,
            "{hash} counted {counted}, the responses say {spent}"
        );
    }
    let recorded = fleet.recorded_team_spend(team, spent);
    assert!(
        (recorded - spent).abs() < 1e-9,
        "Postgres says {recorded}, the responses {spent}"
    );
    let out = fleet.replicas[0].output() + &fleet.replicas[1].output();
    assert!(!out.contains("Redis limiter call failed"), "{out}");
}

#[test]
fn a_refusing_slot_releases_the_hold_taken_on_the_slot_before_it() {
    let fleet = Fleet::start(&[]);
    // A team on a low slot with room to spare, and a key of it on a higher
    // slot with room for a few requests: every request reserves on the
    // team's slot first, then the key's, which refuses once it is spent.
    let team = (0..)
        .map(|n| format!("cluster-team-2-{n}"))
        .find(|t| fleet.slot(&format!("{{budget:team:{t}}}")) < 4096)
        .expect("a team id on a low slot");
    let team_hash = format!("{{budget:team:{team}}}");
    fleet.replicas[0]
        .post("/team/new", &json!({"team_id": team, "max_budget": 10.0}))
        .expect_status(200);
    let (key, key_hash) = (0..20)
        .find_map(|_| {
            let resp = fleet.replicas[0]
                .post(
                    "/key/generate",
                    &json!({"team_id": team, "max_budget": 3.0 * worst_case(MODEL)}),
                )
                .expect_status(200)
                .json();
            let key_hash = format!("{{budget:key:{}}}", resp["token"].as_str()?);
            (fleet.slot(&key_hash) > fleet.slot(&team_hash))
                .then(|| (resp["key"].as_str().map(String::from), key_hash))
        })
        .expect("a key on a higher slot than its team");
    let key = key.expect("key");
    let (mut served, mut refused) = (0, 0);
    for i in 0..12 {
        let (status, body) = chat(&fleet.replicas[i % 2], MODEL, &key);
        match status {
            200 => served += 1,
            422 => {
                assert!(refused_by(&body, "key"), "{body}");
                refused += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert!(
        served >= 1 && refused >= 1,
        "{served} served, {refused} refused"
    );
    // Every refusal's hold on the team's slot was given back: the team's
    // counter holds nothing and counted only what was served, as the key's.
    let team_spent = fleet.counted(&team_hash);
    let key_spent = fleet.counted(&key_hash);
    assert!(
        (team_spent - key_spent).abs() < 1e-9 && key_spent > 0.0,
        "team {team_spent}, key {key_spent}"
    );
}

#[test]
fn a_master_killed_mid_way_neither_frees_budget_nor_counts_twice() {
    let fleet = Fleet::start(&[
        ("REDIS_CIRCUIT_BREAKER_FAILURE_THRESHOLD", "2"),
        ("REDIS_CIRCUIT_BREAKER_RECOVERY_TIMEOUT", "1"),
    ]);
    // Room for the outage's spend and more.
    let budget = 0.05;
    let team = "cluster-team-3";
    let (key, token) = fleet.team_key(team, budget);
    let (team_hash, key_hash) = hashes(team, &token);
    let mut spent = 0.0;
    let spend = |gw: &Gateway, spent: &mut f64| {
        let (status, body) = chat(gw, MODEL, &key);
        assert_eq!(status, 200, "{body}");
        *spent += cost_of(&body);
    };
    for i in 0..4 {
        spend(&fleet.replicas[i % 2], &mut spent);
    }
    let before = fleet.counted(&team_hash);
    assert!((before - spent).abs() < 1e-6, "{before} vs {spent}");
    // The team's master dies: both replicas serve on their own counters
    // (the breaker opens) and owe the Cluster what they settle meanwhile.
    let victim = fleet.cluster.node_of(&team_hash);
    fleet.cluster.kill(victim);
    for i in 0..4 {
        spend(&fleet.replicas[i % 2], &mut spent);
    }
    fleet.cluster.restart(victim);
    fleet.cluster.wait_ok();
    // The restarted master kept its counter (nothing freed); once the
    // breakers close, the next reservations pay what was owed, once.
    let after_restart = fleet.field(&team_hash, "spent").expect("kept") as f64 / 1e9;
    assert!(after_restart >= before - 1e-9, "{after_restart} < {before}");
    // A budget slice reports what was settled against it once a
    // `lease_ttl_ms` (1 s), so each round waits that long (and a sweep) for
    // the counters to catch up before it spends again.
    let caught_up = |spent: f64| {
        let team_now = fleet.field(&team_hash, "spent")? as f64 / 1e9;
        let key_now = fleet.field(&key_hash, "spent")? as f64 / 1e9;
        ((team_now - spent).abs() < 1e-6 && (key_now - spent).abs() < 1e-6).then_some(())
    };
    e2e::eventually(
        "the Cluster counts the outage's spend",
        Duration::from_secs(30),
        || {
            for gw in &fleet.replicas {
                spend(gw, &mut spent);
            }
            let until = std::time::Instant::now() + Duration::from_millis(1600);
            while std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100));
                if caught_up(spent).is_some() {
                    return Some(());
                }
            }
            None
        },
    );
    // Exact again: the rest of the budget, and not more.
    let spent = exhaust(&fleet, &key, budget, spent);
    let counted = fleet.counted(&team_hash);
    assert!(
        (counted - spent).abs() < 1e-6,
        "counted {counted}, the responses say {spent}"
    );
    let recorded = fleet.recorded_team_spend(team, spent);
    assert!((recorded - spent).abs() < 1e-9, "{recorded} vs {spent}");
}
