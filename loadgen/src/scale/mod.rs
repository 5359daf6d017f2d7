//! `loadgen scale`: whether the latency and CPU the gateway adds stay flat
//! as the number of virtual keys (10 to 1M, in Postgres) and of deployments
//! in a model group (1 to 1,000) grow. Each setting gets its own gateway;
//! the same open-loop load goes straight to the mock and through the
//! gateway in alternating rounds.

pub mod args;
pub mod keys;
pub mod report;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::affinity::Split;
use crate::cli::Args;
use crate::client::{RequestSpec, Target};
use crate::fdlimit;
use crate::gateway_proc::{self, MASTER_KEY, MODEL};
use crate::harness::{Harness, HarnessSpec};
use crate::load::{self, LoadConfig, LoadResult, LoadSummary, Mode};
use crate::mock::MockConfig;
use crate::output::write_json;
use crate::procfs;
use args::ScaleArgs;
use keys::Walk;
use report::{Ratios, Row, ScaleReport};

/// Length of the discarded warm-up run per target and setting.
const WARM_UP: Duration = Duration::from_secs(1);
/// Per-request timeout of every run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Keys primed per closed-loop run.
const PRIME_CHUNK: u64 = 20_000;
/// Concurrent priming requests (each a read-through when its key is new).
const PRIME_CONNECTIONS: usize = 16;
/// Runs of one priming chunk before priming gives up.
const PRIME_ATTEMPTS: usize = 5;
/// Longest wait for the spend rows to catch up before measuring.
const SETTLE_MAX: Duration = Duration::from_secs(900);
/// A spend row count that does not move for this long is final.
const SETTLE_STILL: Duration = Duration::from_secs(10);
/// Keys checked through `/key/info` per setting.
const VERIFIED_KEYS: usize = 3;

/// Entry point of `loadgen scale`.
pub fn main(args: &mut Args) -> Result<(), String> {
    let o = match args::parse(args)? {
        args::Parsed::Run(o) => o,
        args::Parsed::Help => {
            print!("{}", args::usage());
            return Ok(());
        }
    };
    // Client sockets, the mock's side, the gateway's two sides, and the
    // upstream connections of up to the largest group's deployments.
    let most = o.deployments.last().copied().unwrap_or(1) as u64;
    fdlimit::raise_to(o.connections as u64 * 4 + most * 4 + 1024)?;
    let mut report = ScaleReport {
        gateway_bin: o.gateway_bin.display().to_string(),
        gateway_workers: o.gateway_workers,
        placement: String::new(),
        rate: o.rate,
        round_s: o.duration.as_secs_f64(),
        rounds: o.rounds,
        connections: o.connections,
        body_bytes: o.spec.body_size,
        copy_s: 0.0,
        rows: Vec::new(),
    };
    // One split for every harness of the session (each pins this process).
    let cpus = Harness::split_for(&harness_spec(&o, None));
    if let Some(url) = o.database_url.as_deref().filter(|_| !o.keys.is_empty()) {
        key_series(&o, url, cpus.as_ref(), &mut report)?;
    }
    for &n in &o.deployments {
        let harness = Harness::start_placed(&harness_spec(&o, None), cpus.clone(), &|mock| {
            group_yaml(mock, n)
        })?;
        eprintln!("scale: {n} deployments: {}", harness.placement());
        report.placement = harness.placement();
        let mut s = Setting::new(&o, &harness, None)?;
        s.warm_up()?;
        report.rows.push(s.measure("deployments", n, 0, 0.0)?);
    }
    report::fill_ratios(&mut report.rows);
    print!("{}", report.table());
    if let Some(path) = &o.json {
        write_json(path, &report)?;
    }
    Ok(())
}

/// The key counts, ascending: the keys go into the database by `COPY`
/// (each setting adds the keys it lacks), then a fresh gateway reads them.
fn key_series(
    o: &ScaleArgs,
    url: &str,
    cpus: Option<&Split>,
    report: &mut ScaleReport,
) -> Result<(), String> {
    // A gateway on the empty database applies the schema; it stops at once.
    drop(Harness::start_placed(
        &harness_spec(o, Some(url)),
        cpus.cloned(),
        &|mock| group_yaml(mock, 1),
    )?);
    let existing: usize = keys::psql(url, r#"SELECT count(*) FROM "LiteLLM_VerificationToken""#)?
        .parse()
        .map_err(|e| format!("counting keys: {e}"))?;
    if existing != 0 {
        return Err(format!(
            "--database-url already holds {existing} keys; scale needs an empty database"
        ));
    }
    let mut inserted = 0;
    for &n in &o.keys {
        let started = Instant::now();
        keys::insert(url, inserted, n)?;
        report.copy_s += started.elapsed().as_secs_f64();
        eprintln!(
            "scale: keys {inserted}..{n} written by COPY in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        inserted = n;
        let harness = Harness::start_placed(&harness_spec(o, Some(url)), cpus.cloned(), &|mock| {
            group_yaml(mock, 1)
        })?;
        report.placement = harness.placement();
        for i in (0..VERIFIED_KEYS).map(|j| j * (n - 1) / (VERIFIED_KEYS - 1).max(1)) {
            keys::verify(harness.gateway.addr(), i)?;
        }
        let mut s = Setting::new(o, &harness, Some((Walk::new(n), url)))?;
        s.warm_up()?;
        report.rows.push(s.measure("keys, walk", n, 0, 0.0)?);
        if o.cached {
            let (primed, per_s, retried) = s.prime()?;
            let mut row = s.measure("keys, cached", n, primed, per_s)?;
            row.primed_retried = retried;
            report.rows.push(row);
        }
    }
    Ok(())
}

/// Spend rows in the database at `url`.
fn spend_rows(url: &str) -> Result<u64, String> {
    keys::psql(url, r#"SELECT count(*) FROM "LiteLLM_SpendLogs""#)?
        .parse()
        .map_err(|e| format!("counting spend rows: {e}"))
}

/// The mock and a gateway serving one group, with the keys' database if
/// any.
fn harness_spec(o: &ScaleArgs, database_url: Option<&str>) -> HarnessSpec {
    HarnessSpec {
        gateway_bin: o.gateway_bin.clone(),
        gateway_workers: o.gateway_workers,
        pin: o.pin,
        mock: MockConfig::default(),
        gateway_env: database_url
            .map(|u| ("DATABASE_URL".to_string(), u.to_string()))
            .into_iter()
            .collect(),
        gateway_deployments: 1,
        gateway_api: gateway_proc::UpstreamApi::OpenAi,
        gateway_extra_config: String::new(),
    }
}

/// The gateway config: one model group of `n` `openai/` deployments on
/// the mock, picked by simple-shuffle, no retries or fallbacks (so one
/// deployment and a thousand differ only in the group's size).
pub fn group_yaml(upstream: SocketAddr, n: usize) -> String {
    let mut yaml = String::from("model_list:\n");
    for i in 0..n.max(1) {
        yaml.push_str(&gateway_proc::deployment_entry(
            upstream,
            MODEL,
            &format!("{MODEL}-{i}"),
        ));
    }
    yaml.push_str(&format!(
        "router_settings:\n  routing_strategy: simple-shuffle\n  num_retries: 0\ngeneral_settings:\n  master_key: {MASTER_KEY}\n"
    ));
    yaml
}

/// Vacuums the tables the requests so far churned (each request adds a
/// spend row and a new version of its key's row: a million dead key rows
/// after priming a million keys), as autovacuum would have on a deployment,
/// so the measured rounds do not pay for them; done whether or not the
/// server's autovacuum is on (a CI image may turn it off).
fn vacuum(url: &str) -> Result<(), String> {
    let started = Instant::now();
    keys::psql(
        url,
        r#"VACUUM (ANALYZE) "LiteLLM_VerificationToken", "LiteLLM_SpendLogs""#,
    )?;
    let secs = started.elapsed().as_secs_f64();
    if secs > 1.0 {
        eprintln!("scale: vacuumed the key and spend tables in {secs:.1} s");
    }
    Ok(())
}

/// Measuring one setting against its harness.
struct Setting<'a> {
    o: &'a ScaleArgs,
    harness: &'a Harness,
    /// The keys' walk; `None` sends the master key.
    walk: Option<Walk>,
    /// The keys' database, whose spend rows [`Setting::settle`] counts.
    database_url: Option<&'a str>,
    /// 2xx answers through the gateway so far (each writes a spend row).
    ok_through_gateway: u64,
    /// Spend rows in the database when this setting's gateway started
    /// (earlier settings' rows).
    rows_before: u64,
}

impl<'a> Setting<'a> {
    fn new(
        o: &'a ScaleArgs,
        harness: &'a Harness,
        walk: Option<(Walk, &'a str)>,
    ) -> Result<Self, String> {
        let database_url = walk.map(|(_, url)| url);
        Ok(Setting {
            o,
            harness,
            walk: walk.map(|(w, _)| w),
            database_url,
            ok_through_gateway: 0,
            rows_before: match database_url {
                Some(url) => spend_rows(url)?,
                None => 0,
            },
        })
    }

    /// Waits until the gateway has written a spend row for every 2xx it
    /// answered (priming leaves a backlog of one row, one key spend update
    /// and one cache refresh per key, which would otherwise be measured
    /// with the next rounds), or until the count stops moving for
    /// [`SETTLE_STILL`]. Returns the seconds waited.
    fn settle(&self) -> Result<f64, String> {
        let Some(url) = self.database_url else {
            return Ok(0.0);
        };
        let started = Instant::now();
        let (mut last, mut still_since) = (u64::MAX, Instant::now());
        loop {
            let rows = spend_rows(url)?.saturating_sub(self.rows_before);
            if rows >= self.ok_through_gateway {
                break;
            }
            if rows != last {
                (last, still_since) = (rows, Instant::now());
            } else if still_since.elapsed() > SETTLE_STILL || started.elapsed() > SETTLE_MAX {
                eprintln!(
                    "scale: {rows} spend rows for {} requests; measuring anyway",
                    self.ok_through_gateway
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let secs = started.elapsed().as_secs_f64();
        if secs > 1.0 {
            eprintln!("scale: spend rows caught up in {secs:.1} s");
        }
        vacuum(url)?;
        Ok(secs)
    }

    fn config_for(&self, target: Target, keys: Vec<String>, mode: Mode) -> LoadConfig {
        LoadConfig {
            target,
            spec: RequestSpec {
                keys,
                ..self.o.spec.clone()
            },
            mode,
            connections: self.o.connections,
            workers: 1,
            duration: None,
            requests: None,
            timeout: REQUEST_TIMEOUT,
            ramp: Duration::ZERO,
        }
    }

    /// One open-loop run of `duration`; through the gateway, the next keys
    /// of the walk. Returns the result and the requests that used a key
    /// for the first time.
    fn run(&mut self, gateway: bool, duration: Duration) -> Result<(LoadResult, u64), String> {
        let target = match gateway {
            true => self.harness.through_gateway(),
            false => self.harness.direct(),
        };
        let mode = Mode::Open { rate: self.o.rate };
        let mut config = self.config_for(target, vec![MASTER_KEY.to_string()], mode);
        config.duration = Some(duration);
        let mut first_uses = 0;
        if let (true, Some(walk)) = (gateway, self.walk.as_mut()) {
            let (keys, first) = walk.take(config.open_slots(self.o.rate));
            config.spec.keys = keys;
            first_uses = first;
        }
        let result = load::run(&config, &Arc::default())?;
        if gateway {
            self.ok_through_gateway += result.ok();
        }
        Ok((result, first_uses))
    }

    fn warm_up(&mut self) -> Result<(), String> {
        self.run(false, WARM_UP)?;
        self.run(true, WARM_UP)?;
        Ok(())
    }

    /// One closed-loop request with every key the walk has not used yet,
    /// so the cache holds them all; returns how many, how fast, and how
    /// many requests failed and were sent again. Goes in chunks; a chunk
    /// with a failure (a 503 when a read-through outlasts its deadline) is
    /// sent again whole (its keys already read are cache hits then).
    fn prime(&mut self) -> Result<(u64, f64, u64), String> {
        let Some(count) = self.walk.map(|w| w.unused()).filter(|&c| c > 0) else {
            return Ok((0, 0.0, 0));
        };
        eprintln!("scale: priming {count} keys");
        let started = Instant::now();
        let mut retried = 0;
        let mut left = count;
        while left > 0 {
            let chunk = left.min(PRIME_CHUNK);
            let (keys, _) = self.walk.as_mut().expect("keys are walked").take(chunk);
            left -= chunk;
            let config = LoadConfig {
                connections: PRIME_CONNECTIONS,
                requests: Some(chunk),
                ..self.config_for(self.harness.through_gateway(), keys, Mode::Closed)
            };
            let mut attempt = 0;
            loop {
                let result = load::run(&config, &Arc::default())?;
                self.ok_through_gateway += result.ok();
                if result.ok() == chunk {
                    break;
                }
                attempt += 1;
                retried += chunk - result.ok();
                if attempt == PRIME_ATTEMPTS {
                    return Err(format!(
                        "priming: {} of {chunk} requests still failed after {attempt} attempts ({:?}, {:?})",
                        chunk - result.ok(),
                        result.statuses,
                        result.failures
                    ));
                }
            }
        }
        let secs = started.elapsed().as_secs_f64();
        eprintln!("scale: primed {count} keys in {secs:.1} s ({retried} requests sent again)");
        Ok((count, count as f64 / secs.max(1e-9), retried))
    }

    /// The measured rounds of one setting.
    fn measure(
        &mut self,
        series: &str,
        count: usize,
        primed: u64,
        primed_per_s: f64,
    ) -> Result<Row, String> {
        let settle_s = self.settle()?;
        let pid = self.harness.gateway.pid();
        let (mut direct, mut gateway) = (LoadResult::default(), LoadResult::default());
        let (mut cpu, mut first_uses) = (Duration::ZERO, 0);
        for _ in 0..self.o.rounds {
            direct.merge(&self.run(false, self.o.duration)?.0);
            let before = procfs::cpu_time(pid)?;
            let (g, first) = self.run(true, self.o.duration)?;
            cpu += procfs::cpu_time(pid)?.saturating_sub(before);
            first_uses += first;
            gateway.merge(&g);
        }
        let stream = self.o.spec.stream;
        let (d, g) = (
            LoadSummary::new(&direct, stream).latency,
            LoadSummary::new(&gateway, stream).latency,
        );
        let requests = gateway.completed() + gateway.failed();
        let row = Row {
            series: series.to_string(),
            count,
            requests,
            first_uses,
            failed: requests - gateway.ok(),
            added_p50_us: g.p50_us as i64 - d.p50_us as i64,
            added_p99_us: g.p99_us as i64 - d.p99_us as i64,
            direct: d,
            gateway: g,
            cpu_us_per_request: cpu.as_secs_f64() * 1e6 / gateway.completed().max(1) as f64,
            rss_kib: procfs::memory(pid)?.rss_kib,
            primed,
            primed_per_s,
            primed_retried: 0,
            settle_s,
            ratios: Ratios::default(),
        };
        eprintln!(
            "scale: {series} {count}: added p50 {} µs, p99 {} µs, {:.1} µs CPU / request, {} failed",
            row.added_p50_us, row.added_p99_us, row.cpu_us_per_request, row.failed
        );
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn group_config_has_n_deployments_and_nothing_else() {
        let upstream = "127.0.0.1:9100".parse().unwrap();
        for n in [1, 10, 1000] {
            let yaml = group_yaml(upstream, n);
            let parsed = gateway::config::Config::parse(Path::new("c.yaml"), &yaml, &|_| None)
                .unwrap_or_else(|e| panic!("{n}: {e}"));
            assert_eq!(parsed.deployments.len(), n);
            assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
            assert!(parsed
                .deployments
                .iter()
                .all(|d| d.group == MODEL && d.provider_name == "openai"));
        }
    }
}
