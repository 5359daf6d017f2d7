//! `loadgen overshoot --rpm N | --tpm N | --parallel N`: how far a burst of
//! concurrent requests gets past a per-key rate limit, per limiter mode
//! (this process's counters, Redis per request, Redis leases) and with TPM
//! reservation on and off.
//!
//! For each burst size a fresh key gets the limit; that many senders start
//! together and each sends until the gateway answers 429 (for `--parallel`,
//! each sends one request, so all are in flight at once). What was admitted
//! is read from the mock's counts (requests, prompt + completion tokens),
//! compared with the limit (overshoot) and with what was left unused when
//! every sender had been refused (headroom refused: false rejections). Redis
//! calls per request come from Redis's own `INFO commandstats` (summed over
//! the masters of a Cluster).
//!
//! With `--replicas N` (and a database the replicas share) the senders are
//! spread over N gateways counting in the same Redis; with `--redis
//! cluster` that Redis is a private three-master Redis Cluster.

use crate::gateway_proc::{self, GatewayProcess, GatewaySpec, MODEL};
use crate::mock::{self, MockConfig};
use crate::redis_target::{RedisKind, RedisTarget};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::Duration;

/// Requests one sender makes at most, so a run always ends.
const MAX_PER_SENDER: usize = 5000;

/// The limit under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitKind {
    /// `rpm_limit`.
    Rpm,
    /// `tpm_limit`.
    Tpm,
    /// `max_parallel_requests`.
    Parallel,
}

impl LimitKind {
    fn field(self) -> &'static str {
        match self {
            LimitKind::Rpm => "rpm_limit",
            LimitKind::Tpm => "tpm_limit",
            LimitKind::Parallel => "max_parallel_requests",
        }
    }
}

/// Where the gateway counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LimiterMode {
    /// The gateway's own counters (no Redis).
    Local,
    /// One Redis script call per request.
    Redis,
    /// Quota leased from Redis, spent locally.
    Lease,
}

impl LimiterMode {
    /// Parses `local`, `redis` or `lease`.
    pub fn parse(s: &str) -> Result<LimiterMode, String> {
        match s.trim() {
            "local" => Ok(LimiterMode::Local),
            "redis" => Ok(LimiterMode::Redis),
            "lease" => Ok(LimiterMode::Lease),
            other => Err(format!(
                "--modes: unknown mode {other:?} (local, redis, lease)"
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            LimiterMode::Local => "local",
            LimiterMode::Redis => "redis",
            LimiterMode::Lease => "lease",
        }
    }
}

/// A rate-limit overshoot run.
#[derive(Debug, Clone)]
pub struct LimitRun {
    /// The limit under test.
    pub kind: LimitKind,
    /// Its value.
    pub limit: u64,
    /// Concurrent senders per burst.
    pub bursts: Vec<usize>,
    /// `max_tokens` of each request.
    pub max_tokens: u64,
    /// Limiter modes to measure.
    pub modes: Vec<LimiterMode>,
    /// TPM reservation settings to measure (only matters for `--tpm`).
    pub reservation: Vec<bool>,
    /// The gateway binary.
    pub bin: Option<PathBuf>,
    /// Where to write the JSON report.
    pub json: Option<PathBuf>,
    /// Gateways sharing the key (two or more share `database_url`).
    pub replicas: usize,
    /// The database the replicas share.
    pub database_url: Option<String>,
    /// One `redis-server` or a Cluster, for the Redis modes.
    pub redis: RedisKind,
    /// The gateways' Redis deadline (`redis_timeout_ms`), when not the
    /// default.
    pub redis_timeout_ms: Option<u64>,
    /// How long the mock takes per answer.
    pub latency_ms: u64,
}

/// One burst's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LimitReport {
    kind: LimitKind,
    mode: LimiterMode,
    replicas: usize,
    /// `single` or `cluster` (Redis modes only).
    redis: Option<&'static str>,
    reservation: bool,
    senders: usize,
    limit: u64,
    admitted_requests: u64,
    /// The most admitted requests the upstream held together.
    held_together: u64,
    admitted_tokens: u64,
    refused: usize,
    /// Admitted units (requests, tokens or in-flight requests) above the limit, % of it.
    overshoot_pct: f64,
    /// Units left unused when every sender had been refused, % of the limit.
    headroom_refused_pct: f64,
    /// Redis script calls per request sent (admitted or refused).
    redis_calls_per_request: Option<f64>,
}

/// Runs every mode × reservation × burst and prints the table.
pub fn run(r: &LimitRun) -> Result<(), String> {
    let needs_redis = r.modes.iter().any(|m| *m != LimiterMode::Local);
    let redis = if needs_redis {
        Some(RedisTarget::start(r.redis)?)
    } else {
        None
    };
    // A slow enough upstream that a burst's requests overlap.
    let upstream = mock::start(MockConfig {
        port: 0,
        workers: 1,
        latency_ms: r.latency_ms,
        ..MockConfig::default()
    })
    .map_err(|e| format!("cannot start the mock: {e}"))?;
    let reservations: Vec<bool> = if r.kind == LimitKind::Tpm {
        r.reservation.clone()
    } else {
        vec![true]
    };
    let mut reports = Vec::new();
    for &mode in &r.modes {
        for &reservation in &reservations {
            let mut env = vec![(
                "LITELLM_TPM_TOKEN_RESERVATION_ENABLED".to_string(),
                reservation.to_string(),
            )];
            if let Some(redis) = &redis {
                redis.reset()?;
                if mode != LimiterMode::Local {
                    env.push(redis.env());
                }
            }
            if mode == LimiterMode::Lease {
                env.push(("GATEWAY_RATE_LIMIT_MODE".into(), "lease".into()));
            }
            if let Some(url) = r.database_url.as_ref().filter(|_| r.replicas > 1) {
                env.push(("DATABASE_URL".into(), url.clone()));
            }
            let spec = GatewaySpec {
                bin: r.bin.clone().unwrap_or_else(gateway_proc::default_bin),
                workers: if r.replicas > 1 { 1 } else { 2 },
                upstream: upstream.addr(),
                cpus: None,
                env,
                deployments: 1,
            };
            let yaml = gateway_proc::config_yaml(upstream.addr(), 1)
                + &gateway_proc::redis_timeout_yaml(r.redis_timeout_ms);
            let fleet: Vec<GatewayProcess> = (0..r.replicas)
                .map(|_| GatewayProcess::start_with_config(&spec, &yaml))
                .collect::<Result<_, _>>()?;
            for &senders in &r.bursts {
                upstream.reset_peak_in_flight();
                let before = upstream.stats().total;
                let calls_before = match &redis {
                    Some(redis) if mode != LimiterMode::Local => Some(redis.script_calls()?),
                    _ => None,
                };
                let (sent, refused) = burst(&fleet, r, senders)?;
                let after_stats = upstream.stats();
                let after = after_stats.total;
                let requests = after.requests - before.requests;
                let tokens = (after.prompt_tokens + after.completion_tokens)
                    - (before.prompt_tokens + before.completion_tokens);
                let calls = match (&redis, calls_before) {
                    (Some(redis), Some(b)) => Some(settled_script_calls(redis)?.saturating_sub(b)),
                    _ => None,
                };
                // Parallel: the most requests the upstream held together,
                // not all the burst admitted (a sender that starts after an
                // earlier request finished is rightly admitted into its
                // freed slot, which a loaded machine makes likely).
                let admitted_units = match r.kind {
                    LimitKind::Rpm => requests,
                    LimitKind::Parallel => after_stats.peak_in_flight,
                    LimitKind::Tpm => tokens,
                };
                // Parallel: at most min(senders, limit) can be in flight together.
                let attainable = match r.kind {
                    LimitKind::Parallel => r.limit.min(senders as u64),
                    _ => r.limit,
                };
                let pct = |units: u64| units as f64 * 100.0 / r.limit as f64;
                reports.push(LimitReport {
                    kind: r.kind,
                    mode,
                    replicas: r.replicas,
                    redis: (mode != LimiterMode::Local).then(|| r.redis.name()),
                    reservation,
                    senders,
                    limit: r.limit,
                    admitted_requests: requests,
                    held_together: after_stats.peak_in_flight,
                    admitted_tokens: tokens,
                    refused,
                    overshoot_pct: pct(admitted_units.saturating_sub(r.limit)),
                    headroom_refused_pct: if refused > 0 {
                        pct(attainable.saturating_sub(admitted_units))
                    } else {
                        0.0
                    },
                    redis_calls_per_request: calls.map(|c| c as f64 / sent.max(1) as f64),
                });
            }
        }
    }
    print_table(r, &reports);
    if let Some(path) = &r.json {
        let text = serde_json::to_string_pretty(&reports).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Redis's script count once settlements, which trail the last response,
/// have stopped arriving: two reads 50 ms apart agree (at most 2 s).
fn settled_script_calls(redis: &RedisTarget) -> Result<u64, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut last = redis.script_calls()?;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = redis.script_calls()?;
        if now == last || std::time::Instant::now() > deadline {
            return Ok(now);
        }
        last = now;
    }
}

/// One burst on a fresh key, the senders spread over the `fleet`'s
/// replicas in turn; returns (requests sent, 429s).
fn burst(fleet: &[GatewayProcess], r: &LimitRun, senders: usize) -> Result<(usize, usize), String> {
    let key = fleet[0].generate_key_with(&format!(
        "{{\"{}\": {}, \"models\": [\"{MODEL}\"]}}",
        r.kind.field(),
        r.limit
    ))?;
    let once = r.kind == LimitKind::Parallel;
    let barrier = Barrier::new(senders);
    let results: Vec<Result<(usize, usize), String>> = std::thread::scope(|s| {
        let (key, barrier) = (&key, &barrier);
        let handles: Vec<_> = (0..senders)
            .map(|i| {
                let addr = fleet[i % fleet.len()].addr();
                s.spawn(move || send(addr, key, r.max_tokens, once, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a sender panicked".into())))
            .collect()
    });
    let (mut sent, mut refused) = (0, 0);
    for res in results {
        let (s, f) = res?;
        sent += s;
        refused += f;
    }
    Ok((sent, refused))
}

/// Sends until refused (or once); returns (sent, refused).
fn send(
    addr: SocketAddr,
    key: &str,
    max_tokens: u64,
    once: bool,
    barrier: &Barrier,
) -> Result<(usize, usize), String> {
    let body = format!(
        "{{\"model\":\"{MODEL}\",\"max_tokens\":{max_tokens},\"messages\":[{{\"role\":\"user\",\"content\":\"Say hi in one word.\"}}]}}"
    );
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    barrier.wait();
    let mut sent = 0;
    for _ in 0..MAX_PER_SENDER {
        let response = gateway_proc::exchange_once(addr, request.as_bytes())
            .map_err(|e| format!("chat request: {e}"))?;
        sent += 1;
        let head = response.split("\r\n").next().unwrap_or_default();
        if head.starts_with("HTTP/1.1 429") && response.contains("throttling_error") {
            return Ok((sent, 1));
        }
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("unexpected answer: {head}"));
        }
        if once {
            return Ok((sent, 0));
        }
    }
    Err(format!(
        "the limit never refused after {MAX_PER_SENDER} requests"
    ))
}

fn print_table(r: &LimitRun, reports: &[LimitReport]) {
    println!(
        "Rate-limit overshoot: one key per burst, {} {}, max_tokens {}, mock latency {} ms, {} replica(s), Redis: {}.",
        r.kind.field(),
        r.limit,
        r.max_tokens,
        r.latency_ms,
        r.replicas,
        r.redis.name()
    );
    if let Some(ms) = r.redis_timeout_ms {
        println!("Redis deadline (redis_timeout_ms): {ms} ms.");
    }
    println!("Baseline: the limit itself. Overshoot = admitted units above it; headroom refused = units left unused when every sender was refused (false rejections); both as % of the limit. Units: requests (rpm), prompt+completion tokens (tpm), requests in flight together (parallel).\n");
    println!("| mode | replicas | Redis | reservation | senders | admitted requests | held together | admitted tokens | refused | overshoot | headroom refused | Redis calls / request |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for x in reports {
        let calls = x
            .redis_calls_per_request
            .map_or("-".to_string(), |c| format!("{c:.2}"));
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} % | {:.1} % | {} |",
            x.mode.name(),
            x.replicas,
            x.redis.unwrap_or("-"),
            if x.reservation { "on" } else { "off" },
            x.senders,
            x.admitted_requests,
            x.held_together,
            x.admitted_tokens,
            x.refused,
            x.overshoot_pct,
            x.headroom_refused_pct,
            calls
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!(LimiterMode::parse("lease"), Ok(LimiterMode::Lease));
        assert!(LimiterMode::parse("x").is_err());
        assert_eq!(LimitKind::Parallel.field(), "max_parallel_requests");
    }
}
