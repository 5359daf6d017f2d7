//! Two gateway replicas on one Postgres: keys created, changed or deleted
//! through one replica take effect on the other within milliseconds (the
//! `gateway_changes` notifications), spend through both lands once in the
//! shared tables, and a key written straight into LiteLLM's table works.
//!
//! Each test has its own scratch database on the machine's Postgres
//! ([`TestDb`]); the models are the in-process `mock/` provider.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use e2e::{assert_error, to_yaml, Gateway, Response, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use tempfile::TempDir;

/// Prices that make each request cost about a tenth of a cent.
const INPUT_COST: f64 = 0.00001;
const OUTPUT_COST: f64 = 0.0001;
/// The priced mock's reply: ten words, ten completion tokens.
const REPLY: &str = "one two three four five six seven eight nine ten";
/// The priced model group.
const PRICED: &str = "fleet-priced";
/// A second, free model group, for model-access changes.
const OTHER: &str = "fleet-other";
/// The generous bound on how long a change may take to reach the other
/// replica (the expectation is milliseconds).
const PROPAGATION_BOUND: Duration = Duration::from_secs(2);
/// How often the other replica is probed while waiting for a change.
const POLL_EVERY: Duration = Duration::from_millis(5);

/// Two replicas, `a` and `b`, sharing one database. Fields drop in order:
/// the gateways stop before the database is dropped.
struct Fleet {
    a: Gateway,
    b: Gateway,
    db: TestDb,
    _spools: TempDir,
}

impl Fleet {
    fn start() -> Fleet {
        let db = TestDb::create();
        let spools = tempfile::tempdir().expect("spool temp dir");
        let start = |name: &str| {
            let spool = spools.path().join(name);
            let config = json!({
                "model_list": [{
                    "model_name": PRICED,
                    "litellm_params": {
                        "model": "mock/priced",
                        "mock_response": REPLY,
                        "input_cost_per_token": INPUT_COST,
                        "output_cost_per_token": OUTPUT_COST,
                    },
                    "model_info": {"id": "priced-1"},
                }, {
                    "model_name": OTHER,
                    "litellm_params": {"model": "mock/other", "mock_response": "hi"},
                    "model_info": {"id": "other-1"},
                }],
                "general_settings": {"master_key": MASTER_KEY},
                "gateway_settings": {"spool_dir": spool.to_str().expect("utf-8 temp path")},
            });
            Gateway::start(&to_yaml(&config), &[("DATABASE_URL", db.url())])
        };
        let a = start("a");
        let b = start("b");
        Fleet {
            a,
            b,
            db,
            _spools: spools,
        }
    }
}

/// A chat completion on `model` with `key` as the bearer.
fn chat(gw: &Gateway, key: &str, model: &str) -> Response {
    let body = json!({
        "model": model,
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
    });
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

/// `POST path` as the master key on `gw`, expecting 200.
fn admin(gw: &Gateway, path: &str, body: Value) -> Value {
    gw.post(path, &body).expect_status(200).json()
}

/// A new key made through `gw`: (plain key, its sha256 `token`).
fn generate(gw: &Gateway, body: Value) -> (String, String) {
    let answer = admin(gw, "/key/generate", body);
    let field = |name: &str| {
        answer[name]
            .as_str()
            .unwrap_or_else(|| panic!("no {name} in {answer}"))
            .to_string()
    };
    (field("key"), field("token"))
}

/// The cost of a priced response, from its usage and the configured prices.
fn cost_of(body: &Value) -> f64 {
    let usage = &body["usage"];
    let tokens = |name: &str| {
        usage[name]
            .as_f64()
            .unwrap_or_else(|| panic!("no usage.{name} in {body}"))
    };
    tokens("prompt_tokens") * INPUT_COST + tokens("completion_tokens") * OUTPUT_COST
}

/// Probes every [`POLL_EVERY`] until `probe` answers `to`, from the moment
/// `since`; every answer before that must be `from` (the old behaviour).
/// Returns how long after `since` the new behaviour was first seen; panics
/// past [`PROPAGATION_BOUND`].
fn propagation(
    what: &str,
    since: Instant,
    from: u16,
    to: u16,
    probe: impl Fn() -> Response,
) -> Duration {
    let mut probes = 0;
    loop {
        let resp = probe();
        probes += 1;
        let elapsed = since.elapsed();
        if resp.status == to {
            println!("{what}: seen after {elapsed:?} ({probes} probes)");
            return elapsed;
        }
        assert_eq!(
            resp.status,
            from,
            "{what}: unexpected answer while waiting for {to}: {}",
            resp.text()
        );
        assert!(
            elapsed < PROPAGATION_BOUND,
            "{what}: still {from} after {elapsed:?} ({probes} probes)"
        );
        std::thread::sleep(POLL_EVERY);
    }
}

/// Polls `check` every 50 ms for up to `timeout`; returns whether it held.
fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_key_created_on_one_replica_works_on_the_other_at_once() {
    let fleet = Fleet::start();
    for (label, maker, user) in [("A→B", &fleet.a, &fleet.b), ("B→A", &fleet.b, &fleet.a)] {
        let (key, token) = generate(maker, json!({"key_alias": label}));
        let created = Instant::now();
        let resp = chat(user, &key, OTHER);
        let elapsed = created.elapsed();
        assert_eq!(
            resp.status,
            200,
            "{label}: the very next request on the other replica must pass: {}",
            resp.text()
        );
        println!("{label}: key created on one replica answered 200 on the other {elapsed:?} after /key/generate");
        let rows = fleet.db.query(&format!(
            r#"SELECT count(*) FROM "LiteLLM_VerificationToken" WHERE token = '{token}'"#
        ));
        assert_eq!(rows, "1", "{label}: the key is one row in Postgres");
    }
}

#[test]
fn changes_through_one_replica_reach_the_other_within_milliseconds() {
    let fleet = Fleet::start();
    let (a, b) = (&fleet.a, &fleet.b);
    let mut seen = Vec::new();

    // Block and unblock through A; B holds the key in its cache.
    let (key, _) = generate(a, json!({}));
    chat(b, &key, OTHER).expect_status(200);
    let blocked = admin(a, "/key/block", json!({"key": key}));
    assert_eq!(blocked["blocked"], true, "{blocked}");
    let t = propagation("block via A, 401 on B", Instant::now(), 200, 401, || {
        chat(b, &key, OTHER)
    });
    seen.push(("block", t));
    assert_error(&chat(b, &key, OTHER), 401);
    admin(a, "/key/unblock", json!({"key": key}));
    let t = propagation("unblock via A, 200 on B", Instant::now(), 401, 200, || {
        chat(b, &key, OTHER)
    });
    seen.push(("unblock", t));

    // Delete through A.
    let (key, _) = generate(a, json!({}));
    chat(b, &key, OTHER).expect_status(200);
    let deleted = admin(a, "/key/delete", json!({"keys": [key]}));
    assert_eq!(deleted["deleted_keys"], json!([key]), "{deleted}");
    let t = propagation("delete via A, 401 on B", Instant::now(), 200, 401, || {
        chat(b, &key, OTHER)
    });
    seen.push(("delete", t));
    assert_error(&chat(b, &key, OTHER), 401);

    // Models widened, then narrowed, through B; A holds the key.
    let (key, _) = generate(a, json!({"models": [PRICED]}));
    assert_error(&chat(a, &key, OTHER), 403);
    admin(
        b,
        "/key/update",
        json!({"key": key, "models": [PRICED, OTHER]}),
    );
    let t = propagation(
        "models widened via B, 200 on A",
        Instant::now(),
        403,
        200,
        || chat(a, &key, OTHER),
    );
    seen.push(("models widened", t));
    admin(b, "/key/update", json!({"key": key, "models": [PRICED]}));
    let t = propagation(
        "models narrowed via B, 403 on A",
        Instant::now(),
        200,
        403,
        || chat(a, &key, OTHER),
    );
    seen.push(("models narrowed", t));

    // Budget lowered below the spend, then raised, through B.
    let (key, _) = generate(a, json!({"max_budget": 1.0}));
    chat(a, &key, PRICED).expect_status(200);
    admin(b, "/key/update", json!({"key": key, "max_budget": 0.0001}));
    let t = propagation(
        "max_budget lowered via B, 422 on A",
        Instant::now(),
        200,
        422,
        || chat(a, &key, PRICED),
    );
    seen.push(("max_budget lowered", t));
    let err = assert_error(&chat(a, &key, PRICED), 422);
    assert_eq!(err["type"], "budget_exceeded", "{err:?}");
    admin(b, "/key/update", json!({"key": key, "max_budget": 1.0}));
    let t = propagation(
        "max_budget raised via B, 200 on A",
        Instant::now(),
        422,
        200,
        || chat(a, &key, PRICED),
    );
    seen.push(("max_budget raised", t));

    println!("propagation times (management answer → other replica): {seen:?}");
}

#[test]
fn spend_through_both_replicas_is_recorded_once() {
    const N: usize = 25;
    let fleet = Fleet::start();
    let (key, token) = generate(&fleet.a, json!({"key_alias": "shared"}));
    let mut expected_cost = 0.0;
    let mut call_ids = BTreeSet::new();
    for gw in [&fleet.a, &fleet.b] {
        for _ in 0..N {
            let resp = chat(gw, &key, PRICED).expect_status(200);
            let id = resp
                .header("x-litellm-call-id")
                .expect("x-litellm-call-id")
                .to_string();
            assert!(call_ids.insert(id), "call ids are unique");
            expected_cost += cost_of(&resp.json());
        }
    }
    assert!(expected_cost > 0.0);

    let rows_sql = format!(r#"SELECT count(*) FROM "LiteLLM_SpendLogs" WHERE api_key = '{token}'"#);
    let written = eventually(Duration::from_secs(10), || {
        fleet.db.query(&rows_sql) == (2 * N).to_string()
    });
    assert!(
        written,
        "expected {} spend rows, Postgres has {}",
        2 * N,
        fleet.db.query(&rows_sql)
    );
    // Settled: nothing more arrives.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fleet.db.query(&rows_sql), (2 * N).to_string());

    let ids: BTreeSet<String> = fleet
        .db
        .query(&format!(
            r#"SELECT request_id FROM "LiteLLM_SpendLogs" WHERE api_key = '{token}'"#
        ))
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ids, call_ids, "one row per response, keyed by its call id");

    let sql_f64 = |sql: &str| -> f64 {
        let out = fleet.db.query(sql);
        out.parse()
            .unwrap_or_else(|e| panic!("{sql} gave {out:?}: {e}"))
    };
    let logged = sql_f64(&format!(
        r#"SELECT sum(spend)::float8 FROM "LiteLLM_SpendLogs" WHERE api_key = '{token}'"#
    ));
    let key_total = sql_f64(&format!(
        r#"SELECT spend::float8 FROM "LiteLLM_VerificationToken" WHERE token = '{token}'"#
    ));
    println!("{} requests through two replicas: responses cost {expected_cost}, spend logs sum {logged}, key spend {key_total}", 2 * N);
    assert!(
        (logged - expected_cost).abs() < 1e-9,
        "spend logs sum {logged}, responses cost {expected_cost}"
    );
    assert!(
        (key_total - expected_cost).abs() < 1e-9,
        "the key's spend column is {key_total}, responses cost {expected_cost}"
    );
    for (label, gw) in [("A", &fleet.a), ("B", &fleet.b)] {
        let info = gw
            .get(&format!("/key/info?key={key}"))
            .expect_status(200)
            .json();
        let spend = info["info"]["spend"]
            .as_f64()
            .unwrap_or_else(|| panic!("no info.spend in {info}"));
        assert!(
            (spend - expected_cost).abs() < 1e-9,
            "/key/info on {label} says {spend}, responses cost {expected_cost}"
        );
    }
}

#[test]
fn a_key_inserted_into_postgres_the_litellm_way_authenticates() {
    let fleet = Fleet::start();
    // The hashing convention first: the token of an API-made key is the
    // sha256 hex of the plain key, as Postgres computes it.
    let (made, made_token) = generate(&fleet.a, json!({}));
    let sha256 = |plain: &str| {
        fleet.db.query(&format!(
            "SELECT encode(sha256(convert_to('{plain}', 'UTF8')), 'hex')"
        ))
    };
    assert_eq!(sha256(&made), made_token);

    let key = format!("sk-{}", e2e::unique_id("litellm").replace('-', ""));
    let token = sha256(&key);
    assert_eq!(token.len(), 64, "{token}");
    // What LiteLLM's /key/generate writes (through Prisma): the hash as
    // `token`, the abbreviated key as `key_name`, everything else defaults.
    fleet.db.query(&format!(
        r#"INSERT INTO "LiteLLM_VerificationToken"
            (token, key_name, key_alias, spend, max_budget, expires, models, aliases,
             config, user_id, team_id, permissions, metadata, model_spend,
             model_max_budget, created_at, created_by, updated_at, updated_by)
        VALUES ('{token}', 'sk-...{tail}', 'from-litellm', 0.0, 5.0, NULL,
             ARRAY['{PRICED}']::text[], '{{}}'::jsonb, '{{}}'::jsonb, NULL, NULL,
             '{{}}'::jsonb, '{{}}'::jsonb, '{{}}'::jsonb, '{{}}'::jsonb,
             now() AT TIME ZONE 'utc', 'default_user_id', now() AT TIME ZONE 'utc',
             'default_user_id')"#,
        tail = &key[key.len() - 4..],
    ));

    for (label, gw) in [("A", &fleet.a), ("B", &fleet.b)] {
        let resp = chat(gw, &key, PRICED);
        assert_eq!(
            resp.status,
            200,
            "replica {label}: a key inserted into Postgres must authenticate: {}",
            resp.text()
        );
        let err = assert_error(&chat(gw, &key, OTHER), 403);
        assert_eq!(err["type"], "key_model_access_denied", "{label}: {err:?}");
    }
    let info = fleet
        .b
        .get(&format!("/key/info?key={key}"))
        .expect_status(200)
        .json();
    assert_eq!(info["info"]["key_alias"], "from-litellm", "{info}");
    assert_eq!(info["info"]["max_budget"], 5.0, "{info}");
    assert!(
        eventually(Duration::from_secs(10), || {
            fleet.db.query(&format!(
                r#"SELECT count(*) FROM "LiteLLM_SpendLogs" WHERE api_key = '{token}'"#
            )) == "2"
        }),
        "its requests are logged under its hash"
    );
}
