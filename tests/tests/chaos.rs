//! The chaos suite: steady load through a gateway with Redis limits,
//! Postgres keys and spend, and router groups, while a dependency fails:
//! Redis killed (SIGKILL) and frozen (SIGSTOP); Postgres killed and
//! restarted, its connections terminated, and frozen; the upstream
//! resetting, hanging, trickling and truncating; the gateway itself told to
//! stop while streams are open.
//!
//! After each fault: no request took longer than its deadline plus a
//! margin, none hung or failed at the connection (every failure is an HTTP
//! answer or a body the client can tell was cut), no 5xx beyond what the
//! routing policy allows, every 2xx a client received has exactly one
//! success row in `LiteLLM_SpendLogs` once Postgres is back, limits are
//! counted in Redis again within the breaker's recovery time, and the
//! gateway's RSS is back near its level before the fault. Each test prints
//! its figures (`cargo test -p e2e --test chaos -- --nocapture`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::load::{Load, LoadSpec, PhaseReport, Sample, Seen};
use e2e::{
    eventually, openai_model, request, to_yaml, Gateway, MockServer, PrivatePostgres, PrivateRedis,
    TestDb, MASTER_KEY,
};
use serde_json::{json, Value};

const INPUT_COST: f64 = 0.000001;
const OUTPUT_COST: f64 = 0.000002;
/// Client threads of the load.
const THREADS: usize = 4;
/// How long a client waits for a byte before it calls the request hung:
/// longer than any deadline below.
const HANG: Duration = Duration::from_secs(15);
/// Margin on a deadline for a debug build on a busy machine.
const MARGIN: Duration = Duration::from_secs(3);
/// The Redis limiter's deadline (the default).
const REDIS_DEADLINE: Duration = Duration::from_millis(100);
/// Breaker recovery for these tests, seconds.
const RECOVERY_SECS: u64 = 2;
/// Upstream timeout of the `hang` group, seconds.
const HANG_TIMEOUT_SECS: u64 = 1;
/// Stream timeout of the `trickle` group (the longest pause between two
/// pieces of a stream), seconds.
const TRICKLE_TIMEOUT_SECS: u64 = 2;

/// A deployment on `mock` priced for spend rows, with `extra` params.
fn deployment(group: &str, id: &str, mock: &MockServer, extra: Value) -> Value {
    let mut params = json!({
        "input_cost_per_token": INPUT_COST,
        "output_cost_per_token": OUTPUT_COST,
    });
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    openai_model(group, id, &mock.api_base(), params)
}

fn fault(kind: &str) -> Value {
    json!({"extra_headers": {"x-mock-fault": kind}})
}

/// The config: group `chat` (two healthy deployments) and, each beside a
/// healthy one, `reset`, `hang` (1 s timeout) and `truncated`; `trickle`
/// pauses longer between tokens than its 2 s stream timeout allows; `slow`
/// streams for 8 s.
fn config(mock: &MockServer, spool_dir: &std::path::Path) -> String {
    let config = json!({
        "model_list": [
            deployment("chat", "chat-a", mock, json!({})),
            deployment("chat", "chat-b", mock, json!({})),
            deployment("reset", "reset-bad", mock, fault("reset")),
            deployment("reset", "reset-good", mock, json!({})),
            deployment("hang", "hang-bad", mock, {
                let mut v = fault("hang");
                v["timeout"] = json!(HANG_TIMEOUT_SECS);
                v["stream_timeout"] = json!(HANG_TIMEOUT_SECS);
                v
            }),
            deployment("hang", "hang-good", mock, json!({})),
            deployment("truncated", "truncated-bad", mock, fault("close-mid-body")),
            deployment("truncated", "truncated-good", mock, json!({})),
            deployment("trickle", "trickle-1", mock, json!({
                "stream_timeout": TRICKLE_TIMEOUT_SECS,
                "extra_headers": {"x-mock-chunk-delay-ms": "3000"},
            })),
            deployment("slow", "slow-1", mock, json!({
                "extra_headers": {"x-mock-chunk-delay-ms": "400"},
            })),
        ],
        "router_settings": {"num_retries": 2, "routing_strategy": "simple-shuffle"},
        "general_settings": {"master_key": MASTER_KEY},
        "gateway_settings": {
            "spool_dir": spool_dir.to_str().expect("utf-8 temp path"),
            "shutdown_grace_secs": 1,
        },
    });
    to_yaml(&config)
}

/// What the load asks for: the group, by index into [`GROUPS`].
const GROUPS: [&str; 6] = ["chat", "reset", "hang", "truncated", "trickle", "slow"];

/// The load's requests: every other one a stream, on the group
/// `group_of` names for the phase the request is sent in, with `key`.
fn requests(key: &str, group_of: fn(u32) -> usize) -> Arc<e2e::load::MakeRequest> {
    let auth = format!("Bearer {key}");
    Arc::new(move |_thread, n, phase| {
        let group = GROUPS[group_of(phase)];
        let stream = group == "trickle" || group == "slow" || n % 2 == 1;
        let body = json!({
            "model": group,
            "stream": stream,
            "max_tokens": 20,
            "messages": [{"role": "user", "content": "hello there"}],
        });
        let bytes = request(
            "POST",
            "/v1/chat/completions",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.to_string().as_bytes(),
        );
        (bytes, stream)
    })
}

fn start_load(gw: &Gateway, key: &str, group_of: fn(u32) -> usize) -> Load {
    Load::start(LoadSpec {
        port: gw.port(),
        threads: THREADS,
        pause: Duration::from_millis(10),
        read_timeout: HANG,
        request: requests(key, group_of),
    })
}

fn new_key(gw: &Gateway) -> (String, String) {
    let answer = gw
        .post(
            "/key/generate",
            &json!({"rpm_limit": 1_000_000, "max_parallel_requests": 1000, "max_budget": 1000}),
        )
        .expect_status(200)
        .json();
    let field = |name: &str| answer[name].as_str().expect(name).to_string();
    (field("key"), field("token"))
}

/// The gateway's resident memory, kB.
fn rss_kb(gw: &Gateway) -> u64 {
    std::fs::read_to_string(format!("/proc/{}/status", gw.pid()))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// RSS after a fault may exceed the level before it by this much (buffers,
/// pools and allocator caches that grew under the load).
fn rss_allowance(before_kb: u64) -> u64 {
    before_kb / 2 + 32 * 1024
}

/// Asserts no hang, no connection error and the deadline of every sample
/// of `phase`; returns its report.
fn check_phase(samples: &[Sample], phase: u32, name: &str, deadline: Duration) -> PhaseReport {
    let report = PhaseReport::of(samples, phase);
    eprintln!("chaos: {name}: {report}");
    assert!(report.sent > 0, "{name}: no request sent during the phase");
    let bad: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.phase == phase && matches!(s.seen, Seen::Hung | Seen::ConnError(_)))
        .collect();
    assert!(
        bad.is_empty(),
        "{name}: requests hung or failed at the connection: {:?}",
        &bad[..bad.len().min(5)]
    );
    assert!(
        report.worst <= deadline + MARGIN,
        "{name}: the slowest request took {:?}, over its deadline {deadline:?} plus {MARGIN:?}",
        report.worst
    );
    report
}

/// Waits until every 2xx answer of `samples` has exactly one success row
/// (and every cut response at least one row) in `query`'s database;
/// returns the number of rows counted.
fn check_rows(samples: &[Sample], what: &str, query: impl Fn(&str) -> String) -> usize {
    let answered: Vec<&str> = samples
        .iter()
        .filter(|s| matches!(s.seen, Seen::Answer(200..=299)))
        .filter_map(|s| s.call_id.as_deref())
        .collect();
    let cut: Vec<&str> = samples
        .iter()
        .filter(|s| matches!(s.seen, Seen::Truncated(_)))
        .filter_map(|s| s.call_id.as_deref())
        .collect();
    let rows = |status: Option<&str>| -> HashMap<String, usize> {
        let filter = status.map_or(String::new(), |s| format!("WHERE status = '{s}'"));
        let out = query(&format!(
            r#"SELECT call_id, count(*) FROM "LiteLLM_SpendLogs" {filter} GROUP BY call_id"#
        ));
        out.lines()
            .filter_map(|l| {
                let (id, n) = l.split_once('|')?;
                Some((id.to_string(), n.parse().ok()?))
            })
            .collect()
    };
    let success = eventually(
        &format!("{what}: a success row for every 2xx"),
        Duration::from_secs(60),
        || {
            let success = rows(Some("success"));
            answered
                .iter()
                .all(|id| success.contains_key(*id))
                .then_some(success)
        },
    );
    let twice: Vec<&&str> = answered
        .iter()
        .filter(|id| success.get(**id) != Some(&1))
        .collect();
    assert!(
        twice.is_empty(),
        "{what}: 2xx answers without exactly one success row: {twice:?}"
    );
    let all = rows(None);
    let missing: Vec<&&str> = cut.iter().filter(|id| !all.contains_key(**id)).collect();
    assert!(
        missing.is_empty(),
        "{what}: cut responses without a row: {missing:?}"
    );
    eprintln!(
        "chaos: {what}: {} 2xx answers, each with exactly one success row; {} cut responses, each with a row; rows lost: 0",
        answered.len(),
        cut.len()
    );
    all.values().sum()
}

/// Redis SIGKILLed for a few seconds and restarted, then SIGSTOPped for a
/// few seconds and resumed, under load: nothing fails, no request waits
/// much past the limiter's deadline, limits are counted in Redis again
/// within the breaker's recovery time, no parallel slot is left behind.
#[test]
fn redis_killed_and_frozen_under_load() {
    let redis = PrivateRedis::start();
    let db = TestDb::create();
    let mock = MockServer::start(&[]);
    let spool = tempfile::tempdir().expect("spool dir");
    let url = redis.url();
    let recovery = RECOVERY_SECS.to_string();
    let gw = Gateway::start(
        &config(&mock, spool.path()),
        &[
            ("DATABASE_URL", db.url()),
            ("REDIS_URL", &url),
            ("REDIS_CIRCUIT_BREAKER_FAILURE_THRESHOLD", "3"),
            ("REDIS_CIRCUIT_BREAKER_RECOVERY_TIMEOUT", &recovery),
        ],
    );
    let (key, token) = new_key(&gw);
    let requests_counter = format!("{{api_key:{token}}}:requests");
    let parallel_counter = format!("{{api_key:{token}}}:parallel");
    let load = start_load(&gw, &key, |_| 0);
    load.wait_for_more(200, Duration::from_secs(60));
    let rss_before = rss_kb(&gw);
    let counted_before = redis.window_total(&requests_counter);
    assert!(counted_before > 0, "counting in Redis before the faults");

    // Kill.
    load.phase(1);
    redis.stop();
    eventually("the breaker opened", Duration::from_secs(20), || {
        gw.output().contains("circuit breaker opened").then_some(())
    });
    load.wait_for_more(200, Duration::from_secs(60));
    load.phase(2);
    redis.restart();
    let back = Instant::now();
    eventually(
        "limits counted in Redis again",
        Duration::from_secs(RECOVERY_SECS) + Duration::from_secs(20),
        || (redis.window_total(&requests_counter) > 0).then_some(()),
    );
    let recovered_after_kill = back.elapsed();
    load.wait_for_more(200, Duration::from_secs(60));

    // Freeze.
    load.phase(3);
    redis.freeze();
    let frozen = Instant::now();
    load.wait_for_more(200, Duration::from_secs(60));
    eventually("three seconds frozen", Duration::from_secs(30), || {
        (frozen.elapsed() >= Duration::from_secs(3)).then_some(())
    });
    load.phase(4);
    redis.thaw();
    let counted = redis.window_total(&requests_counter);
    let thawed = Instant::now();
    eventually(
        "limits counted in Redis again after the freeze",
        Duration::from_secs(RECOVERY_SECS) + Duration::from_secs(20),
        || (redis.window_total(&requests_counter) > counted).then_some(()),
    );
    let recovered_after_freeze = thawed.elapsed();
    load.wait_for_more(200, Duration::from_secs(60));
    let samples = load.stop();

    let deadline = REDIS_DEADLINE;
    for (phase, name) in [
        (0, "redis: before"),
        (1, "redis: killed"),
        (2, "redis: restarted"),
        (3, "redis: frozen"),
        (4, "redis: thawed"),
    ] {
        let r = check_phase(&samples, phase, name, deadline);
        assert_eq!(
            (r.server_errors, r.truncated),
            (0, 0),
            "{name}: a Redis fault must not fail requests"
        );
    }
    eprintln!(
        "chaos: redis: counted in Redis again {} ms after the restart and {} ms after the thaw (breaker recovery {RECOVERY_SECS} s)",
        recovered_after_kill.as_millis(),
        recovered_after_freeze.as_millis()
    );
    let recovery = Duration::from_secs(RECOVERY_SECS) + MARGIN;
    assert!(
        recovered_after_kill <= recovery && recovered_after_freeze <= recovery,
        "limits fleet-wide again within the breaker's recovery time"
    );
    eventually("no parallel slot left", Duration::from_secs(10), || {
        (redis.slots(&parallel_counter) == 0).then_some(())
    });
    check_rows(&samples, "redis", |sql| db.query(sql));
    let rss_after = eventually("RSS back near its level", Duration::from_secs(20), || {
        let now = rss_kb(&gw);
        (now <= rss_before + rss_allowance(rss_before)).then_some(now)
    });
    eprintln!("chaos: redis: RSS {rss_before} kB before, {rss_after} kB after");
}

/// Postgres killed and restarted, its connections terminated, then frozen,
/// under load: cached keys keep serving, spend rows are spooled and
/// replayed, each exactly once.
#[test]
fn postgres_restarted_and_frozen_under_load() {
    let pg = PrivatePostgres::start();
    let mock = MockServer::start(&[]);
    let spool = tempfile::tempdir().expect("spool dir");
    let gw = Gateway::start(&config(&mock, spool.path()), &[("DATABASE_URL", &pg.url())]);
    let (key, _) = new_key(&gw);
    let load = start_load(&gw, &key, |_| 0);
    load.wait_for_more(200, Duration::from_secs(60));
    let rss_before = rss_kb(&gw);

    load.phase(1);
    pg.kill();
    load.wait_for_more(300, Duration::from_secs(60));
    load.phase(2);
    pg.restart();
    load.wait_for_more(200, Duration::from_secs(60));

    load.phase(3);
    let killed = pg.query(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'gateway'",
    );
    eprintln!("chaos: postgres: terminated {killed} gateway sessions");
    load.wait_for_more(200, Duration::from_secs(60));

    load.phase(4);
    pg.freeze();
    let frozen = Instant::now();
    load.wait_for_more(200, Duration::from_secs(60));
    eventually("three seconds frozen", Duration::from_secs(30), || {
        (frozen.elapsed() >= Duration::from_secs(3)).then_some(())
    });
    pg.thaw();
    load.phase(5);
    load.wait_for_more(200, Duration::from_secs(60));
    let samples = load.stop();

    for (phase, name) in [
        (0, "postgres: before"),
        (1, "postgres: killed"),
        (2, "postgres: restarted"),
        (3, "postgres: sessions terminated"),
        (4, "postgres: frozen"),
        (5, "postgres: thawed"),
    ] {
        let r = check_phase(&samples, phase, name, Duration::ZERO);
        assert_eq!(
            (r.server_errors, r.truncated),
            (0, 0),
            "{name}: a Postgres fault must not fail requests"
        );
    }
    check_rows(&samples, "postgres", |sql| pg.query(sql));
    eventually("the spool drained", Duration::from_secs(30), || {
        let left = std::fs::read_dir(spool.path())
            .map(|d| d.count())
            .unwrap_or(0);
        (left == 0).then_some(())
    });
    let rss_after = eventually("RSS back near its level", Duration::from_secs(20), || {
        let now = rss_kb(&gw);
        (now <= rss_before + rss_allowance(rss_before)).then_some(now)
    });
    eprintln!("chaos: postgres: RSS {rss_before} kB before, {rss_after} kB after");
}

/// The upstream resets connections, hangs, truncates its body and trickles
/// its stream, one group at a time, under load: the router retries a reset
/// or a hang on the healthy deployment (no 5xx), a body cut after bytes
/// reached the client is cut for the client too (it can tell), a trickle
/// pausing longer than the stream timeout is cut then; nothing outlives its
/// deadline.
#[test]
fn upstream_faults_under_load() {
    let db = TestDb::create();
    let mock = MockServer::start(&[]);
    let spool = tempfile::tempdir().expect("spool dir");
    let gw = Gateway::start(&config(&mock, spool.path()), &[("DATABASE_URL", db.url())]);
    let (key, _) = new_key(&gw);
    // Phases 1-4 ask for the faulty groups reset, hang, truncated and
    // trickle in turn; before and after, the healthy `chat`.
    let load = start_load(&gw, &key, |phase| match phase {
        1..=4 => phase as usize,
        _ => 0,
    });
    load.wait_for_more(100, Duration::from_secs(60));
    let rss_before = rss_kb(&gw);
    for (i, n) in [(1, 200), (2, 40), (3, 200), (4, 40)] {
        load.phase(i);
        load.wait_for_more(n, Duration::from_secs(90));
    }
    load.phase(5);
    load.wait_for_more(100, Duration::from_secs(60));
    let samples = load.stop();

    let call = Duration::from_secs(10); // the healthy deployments' timeout
    let r = check_phase(&samples, 0, "upstream: before", Duration::ZERO);
    assert_eq!(r.ok, r.sent, "upstream: before: all 2xx");
    let r = check_phase(&samples, 1, "upstream: resets", Duration::ZERO);
    assert_eq!(
        r.ok, r.sent,
        "upstream: resets are retried on the healthy deployment"
    );
    let hang = Duration::from_secs(HANG_TIMEOUT_SECS);
    let r = check_phase(&samples, 2, "upstream: hangs", hang);
    assert_eq!(
        r.ok, r.sent,
        "upstream: hangs are retried after the timeout"
    );
    let r = check_phase(&samples, 3, "upstream: truncated bodies", call);
    assert_eq!(r.server_errors + r.client_errors, 0, "upstream: truncated");
    assert!(r.ok > 0, "the healthy deployment still serves");
    let r = check_phase(
        &samples,
        4,
        "upstream: trickle",
        Duration::from_secs(TRICKLE_TIMEOUT_SECS),
    );
    assert_eq!(
        (r.ok, r.truncated),
        (0, r.sent),
        "a trickle pausing past the stream timeout is cut"
    );
    let r = check_phase(&samples, 5, "upstream: after", Duration::ZERO);
    assert_eq!(r.ok, r.sent, "upstream: after: all 2xx");
    check_rows(&samples, "upstream", |sql| db.query(sql));
    let rss_after = eventually("RSS back near its level", Duration::from_secs(20), || {
        let now = rss_kb(&gw);
        (now <= rss_before + rss_allowance(rss_before)).then_some(now)
    });
    eprintln!("chaos: upstream: RSS {rss_before} kB before, {rss_after} kB after");
}

/// SIGTERM while streams are open and load flows: every request the
/// gateway took is answered, or cut in a way the client can tell, none
/// hangs; the process exits 0 after the 1 s grace period; every 2xx has its
/// row and every cut stream a row marked cut off.
#[test]
fn sigterm_while_streams_are_open() {
    let db = TestDb::create();
    let mock = MockServer::start(&[]);
    let spool = tempfile::tempdir().expect("spool dir");
    let mut gw = Gateway::start(&config(&mock, spool.path()), &[("DATABASE_URL", db.url())]);
    let (key, _) = new_key(&gw);
    // Slow streams (8 s each) are open when the signal comes.
    let slow = start_load(&gw, &key, |_| 5);
    let load = start_load(&gw, &key, |_| 0);
    load.wait_for_more(100, Duration::from_secs(60));
    let signalled = Instant::now();
    gw.signal(libc::SIGTERM);
    let status = gw
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("gateway still running after SIGTERM\n{}", gw.output()));
    let exited = signalled.elapsed();
    assert!(status.success(), "exit status {status}\n{}", gw.output());
    let mut samples = load.stop();
    samples.extend(slow.stop());
    let report = PhaseReport::of(&samples, 0);
    let refused = samples
        .iter()
        .filter(|s| matches!(&s.seen, Seen::ConnError(e) if e.starts_with("connect")))
        .count();
    eprintln!(
        "chaos: sigterm: {report} ({refused} of them refused at connect once the listener closed); exited {} ms after the signal (grace 1 s)",
        exited.as_millis()
    );
    // Refused or reset before a head once the listener closed: the client
    // can tell; a hang it cannot.
    assert_eq!(report.hung, 0, "requests hung across the shutdown");
    let cut: Vec<&Sample> = samples
        .iter()
        .filter(|s| matches!(s.seen, Seen::Truncated(_)))
        .collect();
    assert!(!cut.is_empty(), "no slow stream was open at the signal");
    check_rows(&samples, "sigterm", |sql| db.query(sql));
    let cut_rows: usize = db
        .query(r#"SELECT count(*) FROM "LiteLLM_SpendLogs" WHERE error_class = 'cut_off'"#)
        .parse()
        .expect("a count");
    eprintln!(
        "chaos: sigterm: {} streams cut, {cut_rows} rows marked cut_off",
        cut.len()
    );
    assert!(cut_rows >= cut.len(), "every cut stream's row says cut_off");
}
