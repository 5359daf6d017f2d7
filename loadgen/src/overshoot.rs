//! `loadgen overshoot`: how far traffic gets past a per-key budget. For each
//! burst size it creates a key with the budget, drives it with that many
//! concurrent senders until the gateway refuses, and compares the spend the
//! responses report with the budget (overshoot) and with what was left when
//! the first refusal came (headroom refused, i.e. false rejections). With
//! `--rpm`, `--tpm` or `--parallel` it measures a rate limit instead
//! ([`crate::limit_overshoot`]). With `--replicas 2 --database-url URL` it
//! measures a budget across two replicas sharing Postgres, with the
//! budget's counters in a private Redis (fleet-wide) and without Redis
//! (each replica counts alone). `--redis cluster` makes that Redis (and the
//! rate limits' one) a private three-master Redis Cluster; `--replicas`
//! spreads a rate limit's senders over the replicas too.

use crate::cli::Args;
use crate::gateway_proc::{self, GatewayProcess, GatewaySpec, MODEL};
use crate::limit_overshoot::{self, LimitKind, LimitRun, LimiterMode};
use crate::mock::{self, MockConfig};
use crate::redis_target::{RedisKind, RedisTarget};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Usage text of `loadgen overshoot`.
pub const USAGE: &str = "\
Usage: loadgen overshoot [OPTIONS]

Measures how far concurrent requests overshoot a per-key budget: for each
burst size, creates a key with --budget, sends from that many concurrent
senders until the gateway refuses, and compares the spend the responses
report with the budget.

Options:
  --gateway-bin PATH        gateway binary [default: target/release/gateway]
  --budget USD              budget per key [default: 0.01, seed 004's cent]
  --bursts LIST             concurrent senders per run [default: 1,4,64,256]
  --max-tokens N            max_tokens of each request [default: 120]
  --rpm N | --tpm N | --parallel N
                            measure a per-key rate limit instead of a budget
  --modes LIST              limiter modes for rate limits: local, redis, lease
                            [default: local,redis]
  --reservation LIST        TPM reservation settings [default: on,off]
  --replicas N              gateways sharing the key, senders spread over them
                            [default: 1]; 2 or more needs --database-url
  --mock-latency-ms N       how long the mock takes per answer, for rate
                            limits [default: 50]; longer keeps a --parallel
                            burst in flight together on a loaded machine
  --redis-timeout-ms N      the gateways' Redis deadline [default: the
                            gateway's, 100]
  --redis single|cluster    the private Redis of the Redis modes: one
                            redis-server or a three-master Redis Cluster
                            [default: single]
  --database-url URL        an empty Postgres database the replicas share
  --budget-modes LIST       with replicas: redis (budgets in a private
                            redis-server), lease (the same in lease mode: each
                            replica spends slices of the budget taken from
                            Redis), local (each replica alone)
                            [default: redis,local]
  --json FILE               also write the report as JSON
  -h, --help                print this help
";

/// USD per prompt and completion token: the shipped gpt-4o price the
/// gateway charges for the served model.
const PRICE: (f64, f64) = (2.5e-6, 1e-5);
/// Requests one sender makes at most, so a run always ends.
const MAX_PER_SENDER: usize = 2000;

/// One burst's outcome.
#[derive(Debug, Clone, serde::Serialize)]
struct BurstReport {
    replicas: usize,
    /// Where budget counters live: `process` (one replica), `redis`,
    /// `redis cluster` (with `, lease slices` in lease mode) or `local`
    /// (several replicas).
    counters: &'static str,
    senders: usize,
    admitted: usize,
    refused: usize,
    admitted_spend: f64,
    recorded_spend: Option<f64>,
    budget: f64,
    overshoot_pct: f64,
    headroom_requests: f64,
}

/// Entry point of `loadgen overshoot`.
pub fn main(args: &mut Args) -> Result<(), String> {
    let mut budget: f64 = 0.01;
    let mut bursts = vec![1usize, 4, 64, 256];
    let mut max_tokens = 120u64;
    let mut bin: Option<PathBuf> = None;
    let mut json: Option<PathBuf> = None;
    let mut limit: Option<(LimitKind, u64)> = None;
    let mut modes = vec![LimiterMode::Local, LimiterMode::Redis];
    let mut reservation = vec![true, false];
    let mut replicas = 1usize;
    let mut database_url: Option<String> = None;
    let mut budget_modes = vec!["redis", "local"];
    let mut redis = RedisKind::Single;
    let mut redis_timeout_ms: Option<u64> = None;
    let mut latency_ms = 50u64;
    while let Some(flag) = args.next_flag()? {
        match flag.as_str() {
            "budget" => budget = args.value(&flag)?,
            "bursts" => {
                let list: String = args.value(&flag)?;
                bursts = list
                    .split(',')
                    .map(|b| {
                        b.trim()
                            .parse::<usize>()
                            .map_err(|e| format!("--bursts {b}: {e}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "max-tokens" => max_tokens = args.value(&flag)?,
            "rpm" | "tpm" | "parallel" => {
                let value: u64 = args.value(&flag)?;
                limit = Some((
                    match flag.as_str() {
                        "rpm" => LimitKind::Rpm,
                        "tpm" => LimitKind::Tpm,
                        _ => LimitKind::Parallel,
                    },
                    value,
                ));
            }
            "modes" => {
                let list: String = args.value(&flag)?;
                modes = list
                    .split(',')
                    .map(LimiterMode::parse)
                    .collect::<Result<_, _>>()?;
            }
            "reservation" => {
                let list: String = args.value(&flag)?;
                reservation = list
                    .split(',')
                    .map(|v| match v.trim() {
                        "on" => Ok(true),
                        "off" => Ok(false),
                        other => Err(format!("--reservation: {other:?} is not on or off")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "replicas" => replicas = args.value(&flag)?,
            "database-url" => database_url = Some(args.value(&flag)?),
            "budget-modes" => {
                let list: String = args.value(&flag)?;
                budget_modes = list
                    .split(',')
                    .map(|m| match m.trim() {
                        "redis" => Ok("redis"),
                        "lease" => Ok("lease"),
                        "local" => Ok("local"),
                        other => Err(format!(
                            "--budget-modes: {other:?} is not redis, lease or local"
                        )),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "redis" => redis = RedisKind::parse(&args.value::<String>(&flag)?)?,
            "redis-timeout-ms" => redis_timeout_ms = Some(args.value(&flag)?),
            "mock-latency-ms" => latency_ms = args.value(&flag)?,
            "gateway-bin" => bin = Some(args.value::<String>(&flag)?.into()),
            "json" => json = Some(args.value::<String>(&flag)?.into()),
            "help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown option --{other}\n\n{USAGE}")),
        }
    }
    if !budget.is_finite() || budget <= 0.0 || bursts.is_empty() || bursts.contains(&0) {
        return Err("--budget must be positive and --bursts a list of positive numbers".into());
    }
    if replicas == 0 || (replicas > 1 && (database_url.is_none() || budget_modes.is_empty())) {
        return Err(
            "--replicas must be positive; two or more need --database-url and --budget-modes"
                .into(),
        );
    }
    if let Some((kind, limit)) = limit {
        if limit == 0 || modes.is_empty() || reservation.is_empty() {
            return Err("the limit must be positive, --modes and --reservation not empty".into());
        }
        return limit_overshoot::run(&LimitRun {
            kind,
            limit,
            bursts,
            max_tokens,
            modes,
            reservation,
            bin,
            json,
            replicas,
            database_url,
            redis,
            redis_timeout_ms,
            latency_ms,
        });
    }
    let upstream = mock::start(MockConfig {
        port: 0,
        workers: 1,
        ..MockConfig::default()
    })
    .map_err(|e| format!("cannot start the mock: {e}"))?;
    let spec = GatewaySpec {
        bin: bin.unwrap_or_else(gateway_proc::default_bin),
        workers: if replicas > 1 { 1 } else { 2 },
        upstream: upstream.addr(),
        cpus: None,
        env: Vec::new(),
        deployments: 1,
    };
    let mut reports = Vec::with_capacity(bursts.len());
    match database_url.filter(|_| replicas > 1) {
        Some(url) => {
            for mode in budget_modes {
                // Kept until the mode's replicas are gone.
                let (server, counters) = match (mode, redis) {
                    ("redis", kind) => (
                        Some(RedisTarget::start(kind)?),
                        match kind {
                            RedisKind::Single => "redis",
                            RedisKind::Cluster => "redis cluster",
                        },
                    ),
                    ("lease", kind) => (
                        Some(RedisTarget::start(kind)?),
                        match kind {
                            RedisKind::Single => "redis, lease slices",
                            RedisKind::Cluster => "redis cluster, lease slices",
                        },
                    ),
                    _ => (None, "local"),
                };
                let mut spec = spec.clone();
                spec.env.push(("DATABASE_URL".into(), url.clone()));
                if let Some(r) = &server {
                    spec.env.push(r.env());
                }
                if mode == "lease" {
                    spec.env
                        .push(("GATEWAY_RATE_LIMIT_MODE".into(), "lease".into()));
                }
                let yaml = gateway_proc::config_yaml(spec.upstream, 1)
                    + &gateway_proc::redis_timeout_yaml(redis_timeout_ms);
                let fleet: Vec<GatewayProcess> = (0..replicas)
                    .map(|_| GatewayProcess::start_with_config(&spec, &yaml))
                    .collect::<Result<_, _>>()?;
                for &senders in &bursts {
                    reports.push(run_burst(&fleet, counters, budget, senders, max_tokens)?);
                }
            }
        }
        None => {
            let gateway = GatewayProcess::start(&spec)?;
            for senders in bursts {
                reports.push(run_burst(
                    std::slice::from_ref(&gateway),
                    "process",
                    budget,
                    senders,
                    max_tokens,
                )?);
            }
        }
    }
    print_table(budget, max_tokens, &reports);
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&reports).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Drives a fresh key with `senders` concurrent senders until refused, the
/// senders spread over the `fleet`'s replicas in turn.
fn run_burst(
    fleet: &[GatewayProcess],
    counters: &'static str,
    budget: f64,
    senders: usize,
    max_tokens: u64,
) -> Result<BurstReport, String> {
    let key = fleet[0].generate_key_with(&format!(
        "{{\"max_budget\": {budget}, \"models\": [\"{MODEL}\"]}}"
    ))?;
    let addr = fleet[0].addr();
    for replica in fleet {
        known_everywhere(replica.addr(), &key)?;
    }
    let results: Vec<Result<(Vec<f64>, usize), String>> = std::thread::scope(|s| {
        let key = &key;
        let handles: Vec<_> = (0..senders)
            .map(|i| {
                let to = fleet[i % fleet.len()].addr();
                s.spawn(move || send_until_refused(to, key, max_tokens))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a sender panicked".into())))
            .collect()
    });
    let mut costs = Vec::new();
    let mut refused = 0;
    for r in results {
        let (c, n) = r?;
        costs.extend(c);
        refused += n;
    }
    let admitted_spend: f64 = costs.iter().sum();
    let mean_cost = if costs.is_empty() {
        0.0
    } else {
        admitted_spend / costs.len() as f64
    };
    std::thread::sleep(Duration::from_millis(300));
    Ok(BurstReport {
        replicas: fleet.len(),
        counters,
        senders,
        admitted: costs.len(),
        refused,
        admitted_spend,
        recorded_spend: key_spend(addr, &key),
        budget,
        overshoot_pct: ((admitted_spend - budget).max(0.0) / budget) * 100.0,
        headroom_requests: if mean_cost > 0.0 {
            (budget - admitted_spend).max(0.0) / mean_cost
        } else {
            0.0
        },
    })
}

/// Waits (up to 5 s) until the replica at `addr` knows the key made on
/// another one (`GET /v1/models` with the key answers 200), so a
/// burst's first requests are not refused as unknown keys.
fn known_everywhere(addr: SocketAddr, key: &str) -> Result<(), String> {
    let request = format!(
        "GET /v1/models HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"
    );
    let until = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let response = gateway_proc::exchange_once(addr, request.as_bytes())
            .map_err(|e| format!("models with the new key: {e}"))?;
        if response.starts_with("HTTP/1.1 200") {
            return Ok(());
        }
        if std::time::Instant::now() > until {
            return Err(format!(
                "a replica did not know the new key within 5 s: {}",
                response.lines().next().unwrap_or_default()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends requests until the gateway refuses one; returns each admitted
/// request's cost and the refusals seen (one per sender).
fn send_until_refused(
    addr: SocketAddr,
    key: &str,
    max_tokens: u64,
) -> Result<(Vec<f64>, usize), String> {
    let body = format!(
        "{{\"model\":\"{MODEL}\",\"max_tokens\":{max_tokens},\"messages\":[{{\"role\":\"user\",\"content\":\"How far does a burst overshoot a budget?\"}}]}}"
    );
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut costs = Vec::new();
    for _ in 0..MAX_PER_SENDER {
        let response = gateway_proc::exchange_once(addr, request.as_bytes())
            .map_err(|e| format!("chat request: {e}"))?;
        let (head, payload) = response
            .split_once("\r\n\r\n")
            .ok_or("incomplete response")?;
        let json: serde_json::Value =
            serde_json::from_str(payload).map_err(|e| format!("response is not JSON: {e}"))?;
        if head.starts_with("HTTP/1.1 200") {
            costs.push(cost_of(&json["usage"]));
        } else if head.starts_with("HTTP/1.1 422") && json["error"]["type"] == "budget_exceeded" {
            return Ok((costs, 1));
        } else {
            return Err(format!(
                "unexpected answer: {}",
                head.lines().next().unwrap_or_default()
            ));
        }
    }
    Err(format!(
        "the budget never refused after {MAX_PER_SENDER} requests"
    ))
}

/// The cost of a response's usage at [`PRICE`].
fn cost_of(usage: &serde_json::Value) -> f64 {
    let tokens = |f: &str| usage[f].as_f64().unwrap_or(0.0);
    tokens("prompt_tokens") * PRICE.0 + tokens("completion_tokens") * PRICE.1
}

/// The key's spend as the gateway recorded it (`/key/info`).
fn key_spend(addr: SocketAddr, key: &str) -> Option<f64> {
    let request = format!(
        "GET /key/info?key={key} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        gateway_proc::MASTER_KEY
    );
    let response = gateway_proc::exchange_once(addr, request.as_bytes()).ok()?;
    let (_, payload) = response.split_once("\r\n\r\n")?;
    serde_json::from_str::<serde_json::Value>(payload).ok()?["info"]["spend"].as_f64()
}

fn print_table(budget: f64, max_tokens: u64, reports: &[BurstReport]) {
    println!("Budget overshoot: one key per burst, budget {budget} USD, max_tokens {max_tokens}, gpt-4o prices.");
    println!(
        "Baseline: the budget itself (overshoot = admitted spend above it, as a share of it).\n"
    );
    println!("| replicas | budget counters | senders | admitted | refused | admitted spend (USD) | recorded spend (USD) | overshoot | headroom refused (requests) |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in reports {
        let recorded = r
            .recorded_spend
            .map_or("?".to_string(), |s| format!("{s:.6}"));
        println!(
            "| {} | {} | {} | {} | {} | {:.6} | {} | {:.2} % | {:.1} |",
            r.replicas,
            r.counters,
            r.senders,
            r.admitted,
            r.refused,
            r.admitted_spend,
            recorded,
            r.overshoot_pct,
            r.headroom_requests
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: &str) -> Result<(), String> {
        main(&mut Args::new(s.split_whitespace().map(String::from)))
    }

    #[test]
    fn bad_options_are_refused_before_anything_starts() {
        assert!(run("--rpm x").unwrap_err().contains("--rpm"));
        assert!(run("--rpm 0").unwrap_err().contains("positive"));
        assert!(run("--tpm 5 --modes bogus").unwrap_err().contains("bogus"));
        assert!(run("--tpm 5 --reservation maybe")
            .unwrap_err()
            .contains("maybe"));
        assert!(run("--budget 0").unwrap_err().contains("--budget"));
        assert!(run("--bursts 1,x").unwrap_err().contains("--bursts"));
        assert!(run("--replicas 2").unwrap_err().contains("--database-url"));
        assert!(run("--rpm 5 --replicas 2")
            .unwrap_err()
            .contains("--database-url"));
        assert!(run("--redis sentinel").unwrap_err().contains("sentinel"));
        assert!(
            run("--replicas 2 --database-url postgres://x --budget-modes both")
                .unwrap_err()
                .contains("both")
        );
    }

    #[test]
    fn costs_use_the_gpt_4o_price() {
        let usage = serde_json::json!({"prompt_tokens": 1000, "completion_tokens": 100});
        assert!((cost_of(&usage) - (0.0025 + 0.001)).abs() < 1e-12);
    }
}
