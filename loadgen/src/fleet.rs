//! `loadgen fleet`: how fast a change made through one gateway replica is
//! honoured by the others. Two or more replicas share one Postgres database
//! (changes travel by NOTIFY); each trial creates a key through one replica
//! and times, on another, how long until it authenticates, until a block is
//! refused, an unblock admitted again and a delete refused; then adds a
//! model through `/model/new` and times how long until the other serves it
//! (by notification or by its read-through of an unknown name), and until
//! it stops serving it after `/model/delete`. With `--cooldowns`, two
//! replicas on a private `redis-server` time how fast a cooldown started
//! by one is honoured by the other (see `fleet_cooldowns`).

use crate::cli::Args;
use crate::gateway_proc::{self, GatewayProcess, GatewaySpec, MASTER_KEY, MODEL};
use crate::mock::{self, MockConfig};
use crate::redis_target::RedisKind;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Usage text of `loadgen fleet`.
pub const USAGE: &str = "\
Usage: loadgen fleet [--database-url URL] [--cooldowns] [OPTIONS]

Starts gateway replicas on one Postgres database and measures how fast a
change made through one replica is honoured by another: a key created,
blocked, unblocked, deleted; a model added and removed at runtime. With
--cooldowns, also (or only, without a database) two replicas on a private
redis-server: a deployment cooled down by one until the other stops
sending to it.

Options:
  --database-url URL        an empty Postgres database the replicas share
  --cooldowns               measure cooldown propagation through Redis (needs redis-server)
  --redis single|cluster    the cooldowns' Redis: one redis-server or a private
                            three-master Redis Cluster [default: single]
  --gateway-bin PATH        gateway binary [default: target/release/gateway]
  --replicas N              gateway processes [default: 2]
  --trials N                keys and models created and deleted [default: 20]
  --json FILE               also write the report as JSON
  -h, --help                print this help
";

/// Longest a change may take to be honoured before the run fails.
const GIVE_UP: Duration = Duration::from_secs(5);
/// Pause between probes of the other replica.
const PROBE_EVERY: Duration = Duration::from_millis(1);

/// The changes timed, in trial order.
const CHANGES: [&str; 6] = [
    "key create",
    "key block",
    "key unblock",
    "key delete",
    "model create",
    "model delete",
];

/// Entry point of `loadgen fleet`.
pub fn main(args: &mut Args) -> Result<(), String> {
    let mut replicas: usize = 2;
    let mut trials: usize = 20;
    let mut database_url: Option<String> = None;
    let mut bin: Option<PathBuf> = None;
    let mut json: Option<PathBuf> = None;
    let mut cooldowns = false;
    let mut redis = RedisKind::Single;
    while let Some(flag) = args.next_flag()? {
        match flag.as_str() {
            "replicas" => replicas = args.value(&flag)?,
            "trials" => trials = args.value(&flag)?,
            "database-url" => database_url = Some(args.value(&flag)?),
            "gateway-bin" => bin = Some(args.value::<String>(&flag)?.into()),
            "json" => json = Some(args.value::<String>(&flag)?.into()),
            "cooldowns" => cooldowns = true,
            "redis" => redis = RedisKind::parse(&args.value::<String>(&flag)?)?,
            "help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown option --{other}\n\n{USAGE}")),
        }
    }
    if replicas < 2 {
        return Err("--replicas must be at least 2 (one replica is `loadgen overhead`)".into());
    }
    if trials == 0 {
        return Err("--trials must be positive".into());
    }
    if database_url.is_none() && !cooldowns {
        return Err("fleet needs --database-url (an empty Postgres database the replicas share), --cooldowns, or both".into());
    }
    let upstream = mock::start(MockConfig {
        port: 0,
        workers: 1,
        ..MockConfig::default()
    })
    .map_err(|e| format!("cannot start the mock: {e}"))?;
    let bin = bin.unwrap_or_else(gateway_proc::default_bin);
    let mut rows: Vec<(&str, Vec<Duration>)> = Vec::new();
    if let Some(url) = database_url {
        let times = postgres_trials(&bin, upstream.addr(), &url, replicas, trials)?;
        rows.extend(CHANGES.into_iter().zip(times));
    }
    if cooldowns {
        let (times, bounds) =
            crate::fleet_cooldowns::measure(bin.clone(), upstream.addr(), trials, redis)?;
        rows.push(match redis {
            RedisKind::Single => ("cooldown (Redis pub/sub)", times),
            RedisKind::Cluster => ("cooldown (Redis Cluster pub/sub)", times),
        });
        rows.push(("cooldown, from the failing request sent", bounds));
    }
    print_report(replicas, trials, &rows);
    if let Some(path) = json {
        let report: Vec<serde_json::Value> = rows
            .iter()
            .map(|(change, ts)| {
                let us: Vec<u128> = ts.iter().map(Duration::as_micros).collect();
                serde_json::json!({"change": change, "micros": us})
            })
            .collect();
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The key and model trials on `replicas` gateways sharing the database at
/// `database_url`; the times of each change in [`CHANGES`] order.
fn postgres_trials(
    bin: &std::path::Path,
    upstream: SocketAddr,
    database_url: &str,
    replicas: usize,
    trials: usize,
) -> Result<Vec<Vec<Duration>>, String> {
    let fleet: Vec<GatewayProcess> = (0..replicas)
        .map(|_| {
            GatewayProcess::start(&GatewaySpec {
                bin: bin.to_path_buf(),
                workers: 1,
                upstream,
                cpus: None,
                env: vec![("DATABASE_URL".into(), database_url.to_string())],
                deployments: 1,
            })
        })
        .collect::<Result<_, _>>()?;
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(trials); CHANGES.len()];
    for trial in 0..trials {
        let via = &fleet[trial % replicas];
        let other = fleet[(trial + 1) % replicas].addr();
        let key_times = run_trial(via, other)?;
        let model_times = run_model_trial(via.addr(), other, trial)?;
        for (i, t) in key_times.into_iter().chain(model_times).enumerate() {
            times[i].push(t);
        }
    }
    Ok(times)
}

/// One key's life through `via`, timed on `other`.
fn run_trial(via: &GatewayProcess, other: SocketAddr) -> Result<[Duration; 4], String> {
    let key = via.generate_key()?;
    let created = wait_for(other, &key, MODEL, 200, Instant::now())?;
    let body = format!("{{\"key\":\"{key}\"}}");
    let at = admin(via.addr(), "/key/block", &body)?;
    let blocked = wait_for(other, &key, MODEL, 401, at)?;
    let at = admin(via.addr(), "/key/unblock", &body)?;
    let unblocked = wait_for(other, &key, MODEL, 200, at)?;
    let at = admin(
        via.addr(),
        "/key/delete",
        &format!("{{\"keys\":[\"{key}\"]}}"),
    )?;
    let deleted = wait_for(other, &key, MODEL, 401, at)?;
    Ok([created, blocked, unblocked, deleted])
}

/// One model's life through `via` (a `mock/` deployment, group
/// `fleet-model-<trial>`), timed on `other`: from the `/model/new` answer
/// until `other` serves it, from the `/model/delete` answer until it
/// refuses it as unknown.
fn run_model_trial(
    via: SocketAddr,
    other: SocketAddr,
    trial: usize,
) -> Result<[Duration; 2], String> {
    let (name, id) = (
        format!("fleet-model-{trial}"),
        format!("fleet-model-id-{trial}"),
    );
    let body = format!(
        "{{\"model_name\":\"{name}\",\"litellm_params\":{{\"model\":\"mock/fleet\",\"mock_response\":\"hi\"}},\"model_info\":{{\"id\":\"{id}\"}}}}"
    );
    let at = admin(via, "/model/new", &body)?;
    let created = wait_for(other, MASTER_KEY, &name, 200, at)?;
    let at = admin(via, "/model/delete", &format!("{{\"id\":\"{id}\"}}"))?;
    let deleted = wait_for(other, MASTER_KEY, &name, 400, at)?;
    Ok([created, deleted])
}

/// Calls a management endpoint with the master key; returns when it answered.
fn admin(addr: SocketAddr, path: &str, body: &str) -> Result<Instant, String> {
    let status = request(addr, path, MASTER_KEY, body)?;
    if status != 200 {
        return Err(format!("POST {path}: status {status}"));
    }
    Ok(Instant::now())
}

/// Probes `addr` with `key` and `model` until it answers `status`; the
/// time since `since`.
fn wait_for(
    addr: SocketAddr,
    key: &str,
    model: &str,
    status: u16,
    since: Instant,
) -> Result<Duration, String> {
    let body = format!("{{\"model\":\"{model}\",\"max_tokens\":1,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}");
    loop {
        if request(addr, "/v1/chat/completions", key, &body)? == status {
            return Ok(since.elapsed());
        }
        if since.elapsed() > GIVE_UP {
            return Err(format!(
                "the other replica did not answer {status} within {GIVE_UP:?}"
            ));
        }
        std::thread::sleep(PROBE_EVERY);
    }
}

/// One POST with `key` as the bearer; the response status.
fn request(addr: SocketAddr, path: &str, key: &str, body: &str) -> Result<u16, String> {
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let response = gateway_proc::exchange_once(addr, request.as_bytes())
        .map_err(|e| format!("POST {path}: {e}"))?;
    response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("POST {path}: no status line"))
}

fn print_report(replicas: usize, trials: usize, rows: &[(&str, Vec<Duration>)]) {
    println!("Fleet freshness: {replicas} replicas on one Postgres (cooldowns: 2 replicas on one Redis), {trials} trials; time from the answer of the replica that made the change to the first answer of another replica that honours it (probed every {PROBE_EVERY:?}).\n");
    println!("| change | p50 | max |");
    println!("| --- | --- | --- |");
    for (change, ts) in rows {
        let mut sorted = ts.clone();
        sorted.sort();
        let (Some(p50), Some(max)) = (sorted.get(sorted.len() / 2), sorted.last()) else {
            continue;
        };
        println!(
            "| {change} | {:.2} ms | {:.2} ms |",
            p50.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
    println!("\nA model is served by the other replica on its first request when that request reads the new name through (an unknown name costs one database read); a deleted one goes with the notification. A cooldown travels by Redis pub/sub (LiteLLM's replicas poll Redis every second).");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: &str) -> Result<(), String> {
        main(&mut Args::new(s.split_whitespace().map(String::from)))
    }

    #[test]
    fn needs_a_database_and_two_replicas() {
        assert!(run("--replicas 1 --database-url x")
            .unwrap_err()
            .contains("--replicas"));
        assert!(run("--trials 0 --database-url x")
            .unwrap_err()
            .contains("--trials"));
        assert!(run("").unwrap_err().contains("--cooldowns"));
    }
}
