//! Postgres dies mid-load: the gateway keeps answering, spools the spend rows
//! it cannot write to `gateway_settings.spool_dir`, and replays them once
//! Postgres is back — every answered request ends as exactly one row in
//! `LiteLLM_SpendLogs`, none lost, none twice, and the spool drains.
//!
//! The database is a [`PrivatePostgres`] of the test's own, killed with
//! `pg_ctl stop -m immediate` (as a crash would) and restarted. The load is
//! sequential: at least [`PER_PHASE`] requests before the kill, during the
//! outage and after the restart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use e2e::{to_yaml, Gateway, PrivatePostgres, Response, MASTER_KEY};
use serde_json::{json, Value};
use tempfile::TempDir;

const INPUT_COST: f64 = 0.00001;
const OUTPUT_COST: f64 = 0.0001;
const REPLY: &str = "one two three four five six seven eight nine ten";
const MODEL: &str = "spool-priced";
/// Requests sent in each phase: before the kill, during the outage, after
/// the restart (at least; the load runs on while each switch completes).
const PER_PHASE: usize = 100;
/// How long the spool may take to drain after the restart.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// The database's state while a request was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Up,
    Down,
    Restarted,
}

const PHASES: [Phase; 3] = [Phase::Up, Phase::Down, Phase::Restarted];

/// One request of the load and what came back.
struct Sent {
    phase: Phase,
    /// When it was answered, from the start of the load.
    at: Duration,
    status: u16,
    call_id: Option<String>,
    cost: f64,
    text: String,
}

fn chat(gw: &Gateway, key: &str) -> Response {
    let body = json!({
        "model": MODEL,
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

fn cost_of(body: &Value) -> f64 {
    let usage = &body["usage"];
    usage["prompt_tokens"].as_f64().unwrap_or_default() * INPUT_COST
        + usage["completion_tokens"].as_f64().unwrap_or_default() * OUTPUT_COST
}

fn record(phase: Phase, at: Duration, resp: &Response) -> Sent {
    let ok = resp.status == 200;
    Sent {
        phase,
        at,
        status: resp.status,
        call_id: resp.header("x-litellm-call-id").map(str::to_string),
        cost: if ok { cost_of(&resp.json()) } else { 0.0 },
        text: if ok { String::new() } else { resp.text() },
    }
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The files left in `dir` (none if it does not exist).
fn spool_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The rows (lines) in the spool files of `dir`.
fn spool_lines(dir: &Path) -> usize {
    spool_files(dir)
        .iter()
        .filter_map(|name| std::fs::read(dir.join(name)).ok())
        .map(|bytes| bytes.iter().filter(|&&b| b == b'\n').count())
        .sum()
}

/// Polls `check` every 100 ms for up to `timeout`; returns whether it held.
fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the load has sent at least `n` requests; panics if it
/// stopped (`stopped` set) or stalled before.
fn wait_sent(sent: &AtomicUsize, stopped: &AtomicBool, n: usize, gw: &Gateway) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while sent.load(Ordering::Acquire) < n {
        assert!(
            !stopped.load(Ordering::Acquire),
            "the load thread ended after {} requests\n{}",
            sent.load(Ordering::Acquire),
            gw.output()
        );
        assert!(
            Instant::now() < deadline,
            "the load stalled at {} requests\n{}",
            sent.load(Ordering::Acquire),
            gw.output()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A private Postgres, a gateway on it with its spool in a temp dir, and a
/// virtual key made before any outage. Fields drop in order: the gateway
/// stops before the database.
struct Setup {
    gw: Gateway,
    pg: PrivatePostgres,
    spool_dir: PathBuf,
    _spool: TempDir,
    key: String,
    token: String,
}

impl Setup {
    fn start() -> Setup {
        let pg = PrivatePostgres::start();
        let spool = tempfile::tempdir().expect("spool temp dir");
        let spool_dir = spool.path().join("spool");
        let config = json!({
            "model_list": [{
                "model_name": MODEL,
                "litellm_params": {
                    "model": "mock/priced",
                    "mock_response": REPLY,
                    "input_cost_per_token": INPUT_COST,
                    "output_cost_per_token": OUTPUT_COST,
                },
                "model_info": {"id": "priced-1"},
            }],
            "general_settings": {"master_key": MASTER_KEY},
            "gateway_settings": {"spool_dir": spool_dir.to_str().expect("utf-8 temp path")},
        });
        let gw = Gateway::start(&to_yaml(&config), &[("DATABASE_URL", &pg.url())]);
        let answer = gw
            .post("/key/generate", &json!({}))
            .expect_status(200)
            .json();
        let field = |name: &str| {
            answer[name]
                .as_str()
                .unwrap_or_else(|| panic!("no {name} in {answer}"))
                .to_string()
        };
        Setup {
            key: field("key"),
            token: field("token"),
            pg,
            gw,
            spool_dir,
            _spool: spool,
        }
    }

    /// Sends requests with `key` from a thread, without pause, while this
    /// thread kills Postgres after [`PER_PHASE`] of them, waits for
    /// [`PER_PHASE`] more and for the spool to hold rows, restarts Postgres
    /// and waits for [`PER_PHASE`] more. Returns every request's answer.
    fn load_through_outage(&self, key: &str) -> Vec<Sent> {
        let phase = AtomicU8::new(0);
        let sent = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let log: Mutex<Vec<Sent>> = Mutex::new(Vec::new());
        let (mut killed_at, mut restarted_at) = (Duration::ZERO, Duration::ZERO);
        let mut spooled = 0;
        let started = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                // A panic here (no answer at all) ends the waits below.
                let _stop_waiting = StopOnDrop(&stop);
                let mut i = 0;
                while !stop.load(Ordering::Acquire) {
                    let now = PHASES[usize::from(phase.load(Ordering::Acquire))];
                    let resp = chat(&self.gw, key);
                    let sent_one = record(now, started.elapsed(), &resp);
                    log.lock().unwrap().push(sent_one);
                    i += 1;
                    sent.store(i, Ordering::Release);
                }
            });
            // Stops the load however this thread leaves the scope, panics
            // included, so a failure here does not hang the scope's join.
            let _stop_load = StopOnDrop(&stop);
            wait_sent(&sent, &stop, PER_PHASE, &self.gw);
            self.pg.kill();
            killed_at = started.elapsed();
            phase.store(1, Ordering::Release);
            let at_kill = sent.load(Ordering::Acquire);
            wait_sent(&sent, &stop, at_kill + PER_PHASE, &self.gw);
            // The outage's rows are on disk before Postgres returns, so the
            // replay is what brings them back. Rows, not files: a spool file
            // is seen as soon as it is created, before its first row is in.
            eventually(Duration::from_secs(5), || spool_lines(&self.spool_dir) > 0);
            spooled = spool_lines(&self.spool_dir);
            phase.store(2, Ordering::Release);
            self.pg.restart();
            restarted_at = started.elapsed();
            let at_restart = sent.load(Ordering::Acquire);
            wait_sent(&sent, &stop, at_restart + PER_PHASE, &self.gw);
        });
        let log = log.into_inner().unwrap();

        let mut counts: BTreeMap<(Phase, u16), usize> = BTreeMap::new();
        for r in &log {
            *counts.entry((r.phase, r.status)).or_default() += 1;
        }
        println!(
            "{} requests; Postgres killed at {killed_at:?}, restarted at {restarted_at:?}; \
             {spooled} rows in the spool at the restart; (phase, status) → count: {counts:?}",
            log.len()
        );
        assert!(
            spooled > 0,
            "no spend row was spooled while Postgres was down\n{}",
            self.gw.output()
        );
        let down = log.iter().filter(|r| r.phase == Phase::Down).count();
        assert!(down >= PER_PHASE, "only {down} requests during the outage");
        log
    }

    /// Panics, with the failures in order and the gateway's warnings, unless
    /// every request of `log` was answered 200.
    fn assert_all_passed(&self, log: &[Sent], what: &str) {
        let failed: Vec<String> = log
            .iter()
            .filter(|r| r.status != 200)
            .map(|r| format!("{:?} at {:?}: {} {}", r.phase, r.at, r.status, r.text))
            .collect();
        if failed.is_empty() {
            return;
        }
        let output = self.gw.output();
        let warnings: Vec<&str> = output
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .collect();
        panic!(
            "{} of {} {what} requests failed; first ones:\n{}\nlast: {}\n\
             gateway warnings and errors:\n{}",
            failed.len(),
            log.len(),
            failed[..failed.len().min(3)].join("\n"),
            failed.last().map_or("", String::as_str),
            warnings.join("\n")
        );
    }

    /// Waits for `answered` rows in `LiteLLM_SpendLogs` and an empty spool,
    /// then checks the rows are exactly `answered`, once each, with `cost`
    /// spent in all.
    fn assert_rows_exactly(&self, answered: &BTreeSet<String>, cost: f64) {
        let count_sql = r#"SELECT count(*) FROM "LiteLLM_SpendLogs""#;
        let started = Instant::now();
        let drained = eventually(DRAIN_TIMEOUT, || {
            self.pg.query(count_sql) == answered.len().to_string()
                && spool_files(&self.spool_dir).is_empty()
        });
        assert!(
            drained,
            "after {DRAIN_TIMEOUT:?}: {} of {} rows in Postgres, spool holds {:?}\n{}",
            self.pg.query(count_sql),
            answered.len(),
            spool_files(&self.spool_dir),
            self.gw.output()
        );
        println!("spool drained {:?} after the load ended", started.elapsed());

        let duplicates = self.pg.query(
            r#"SELECT request_id, count(*) FROM "LiteLLM_SpendLogs"
               GROUP BY request_id HAVING count(*) > 1"#,
        );
        assert_eq!(duplicates, "", "request ids written twice");
        let stored: BTreeSet<String> = self
            .pg
            .query(r#"SELECT request_id FROM "LiteLLM_SpendLogs""#)
            .lines()
            .map(str::to_string)
            .collect();
        let lost: Vec<&String> = answered.difference(&stored).take(5).collect();
        let extra: Vec<&String> = stored.difference(answered).take(5).collect();
        assert!(
            lost.is_empty() && extra.is_empty(),
            "rows lost (e.g. {lost:?}) or unexpected (e.g. {extra:?}): \
             {} answered, {} stored",
            answered.len(),
            stored.len()
        );
        assert_eq!(spool_files(&self.spool_dir), Vec::<String>::new());
        let logged = self.sql_f64(r#"SELECT sum(spend)::float8 FROM "LiteLLM_SpendLogs""#);
        assert!(
            (logged - cost).abs() < 1e-9,
            "spend logs sum {logged}, responses cost {cost}"
        );
    }

    fn sql_f64(&self, sql: &str) -> f64 {
        let out = self.pg.query(sql);
        out.parse()
            .unwrap_or_else(|e| panic!("{sql} gave {out:?}: {e}"))
    }

    /// The key's spend column in `LiteLLM_VerificationToken`.
    fn key_spend(&self) -> f64 {
        self.sql_f64(&format!(
            r#"SELECT spend::float8 FROM "LiteLLM_VerificationToken" WHERE token = '{}'"#,
            self.token
        ))
    }
}

/// The call ids of `log`'s answers (all of them answered 200); panics on a
/// missing or repeated id.
fn call_ids(log: &[Sent]) -> BTreeSet<String> {
    let ids: BTreeSet<String> = log
        .iter()
        .map(|r| {
            r.call_id
                .clone()
                .expect("every 200 has an x-litellm-call-id")
        })
        .collect();
    assert_eq!(ids.len(), log.len(), "call ids are unique");
    ids
}

/// The call id and cost of one request with `key`, which must pass.
fn one_request(gw: &Gateway, key: &str) -> (String, f64) {
    let resp = chat(gw, key).expect_status(200);
    let id = resp
        .header("x-litellm-call-id")
        .expect("x-litellm-call-id")
        .to_string();
    (id, cost_of(&resp.json()))
}

/// Master-key load (auth never needs the database) through a Postgres
/// crash: every request passes and ends as one spend row.
#[test]
fn spend_rows_survive_a_postgres_outage_exactly_once() {
    let setup = Setup::start();
    let (before_id, before_cost) = one_request(&setup.gw, &setup.key);

    let log = setup.load_through_outage(MASTER_KEY);
    // The data plane never needs the database for the master key.
    setup.assert_all_passed(&log, "master-key");

    let mut answered = call_ids(&log);
    answered.insert(before_id);
    let cost = before_cost + log.iter().map(|r| r.cost).sum::<f64>();
    setup.assert_rows_exactly(&answered, cost);
    assert!(
        (setup.key_spend() - before_cost).abs() < 1e-9,
        "the key's spend counts its one request"
    );

    // Management and keys work again on the restarted database.
    let made = setup
        .gw
        .post("/key/generate", &json!({}))
        .expect_status(200)
        .json();
    let new_key = made["key"].as_str().expect("key");
    chat(&setup.gw, new_key).expect_status(200);
    chat(&setup.gw, &setup.key).expect_status(200);
}

/// A virtual key used before the crash is in the replica's cache: its
/// requests pass during the outage and after the restart, and its spend
/// total counts each request once although part of them were replayed.
#[test]
fn a_cached_key_keeps_working_through_a_postgres_outage() {
    let setup = Setup::start();
    let (before_id, before_cost) = one_request(&setup.gw, &setup.key);

    let log = setup.load_through_outage(&setup.key);
    setup.assert_all_passed(&log, "cached-key");

    let mut answered = call_ids(&log);
    answered.insert(before_id);
    let cost = before_cost + log.iter().map(|r| r.cost).sum::<f64>();
    setup.assert_rows_exactly(&answered, cost);
    let total = setup.key_spend();
    assert!(
        (total - cost).abs() < 1e-9,
        "the key's spend is {total}, its responses cost {cost}"
    );
}
