//! `loadgen fleet --cooldowns`: how fast a cooldown started by one gateway
//! replica is honoured by another. Two replicas share a private
//! `redis-server` (or a private three-master Redis Cluster); each trial has its own model group of a free deployment
//! (`cheap-<i>`, always chosen by cost-based routing unless it cools) that
//! fails with a 429 on one replica only, and a `backup-<i>`. A request to
//! the failing side cools `cheap-<i>` there (the retry is served by the
//! backup); the time is from that answer until the other replica's first
//! answer served by `backup-<i>`, and, as an upper bound, from the moment
//! the failing request was sent (the cooldown is announced when the 429
//! comes back, before the retry, so the first figure can be shorter than
//! the hop itself). Trials alternate direction.

use crate::gateway_proc::{self, GatewayProcess, GatewaySpec, MASTER_KEY};
use crate::redis_target::{RedisKind, RedisTarget};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Longest a cooldown may take to be honoured before the run fails.
const GIVE_UP: Duration = Duration::from_secs(5);
/// Pause between probes of the other replica.
const PROBE_EVERY: Duration = Duration::from_millis(1);

/// Runs `trials` cooldowns through two replicas of `bin` on a private Redis
/// of `kind` and the mock at `upstream`; the propagation time of each, from
/// the failing replica's answer and from its request.
pub fn measure(
    bin: PathBuf,
    upstream: SocketAddr,
    trials: usize,
    kind: RedisKind,
) -> Result<(Vec<Duration>, Vec<Duration>), String> {
    let redis = RedisTarget::start(kind)?;
    let replicas: Vec<GatewayProcess> = (0..2)
        .map(|side| {
            let spec = GatewaySpec {
                bin: bin.clone(),
                workers: 1,
                upstream,
                cpus: None,
                env: vec![redis.env()],
                deployments: 1,
            };
            GatewayProcess::start_with_config(&spec, &config_yaml(upstream, trials, side))
        })
        .collect::<Result<_, _>>()?;
    let mut times = Vec::with_capacity(trials);
    let mut bounds = Vec::with_capacity(trials);
    for trial in 0..trials {
        let via = replicas[trial % 2].addr();
        let other = replicas[(trial + 1) % 2].addr();
        let group = format!("cool-{trial}");
        let (cheap, backup) = (format!("cheap-{trial}"), format!("backup-{trial}"));
        if served_by(other, &group)?.as_deref() != Some(cheap.as_str()) {
            return Err(format!(
                "{group}: the other replica does not serve {cheap} first"
            ));
        }
        let sent = Instant::now();
        if served_by(via, &group)?.as_deref() != Some(backup.as_str()) {
            return Err(format!(
                "{group}: the failing {cheap} was not retried on {backup}"
            ));
        }
        let cooled = Instant::now();
        loop {
            if served_by(other, &group)?.as_deref() == Some(backup.as_str()) {
                times.push(cooled.elapsed());
                bounds.push(sent.elapsed());
                break;
            }
            if cooled.elapsed() > GIVE_UP {
                return Err(format!(
                    "{group}: the other replica still sent to {cheap} after {GIVE_UP:?}"
                ));
            }
            std::thread::sleep(PROBE_EVERY);
        }
    }
    Ok((times, bounds))
}

/// The config of replica `side` (0 or 1): `trials` groups, the cheap
/// deployment of group `i` failing here when `i % 2 == side`.
fn config_yaml(upstream: SocketAddr, trials: usize, side: usize) -> String {
    let mut yaml = String::from("model_list:\n");
    for i in 0..trials {
        let fails = if i % 2 == side {
            "      extra_headers: {\"x-mock-status\": \"429\"}\n"
        } else {
            ""
        };
        yaml += &format!(
            "  - model_name: cool-{i}\n    litellm_params:\n      model: openai/cheap-{i}\n      api_base: \"http://{upstream}/v1\"\n      api_key: sk-mock\n      input_cost_per_token: 0\n      output_cost_per_token: 0\n{fails}    model_info:\n      id: cheap-{i}\n  - model_name: cool-{i}\n    litellm_params:\n      model: openai/backup-{i}\n      api_base: \"http://{upstream}/v1\"\n      api_key: sk-mock\n    model_info:\n      id: backup-{i}\n"
        );
    }
    yaml += &format!("router_settings:\n  routing_strategy: cost-based-routing\n  num_retries: 1\n  retry_after: 0\n  cooldown_time: 300\ngeneral_settings:\n  master_key: {MASTER_KEY}\n");
    yaml
}

/// The deployment that served one chat request to `group` on `addr`
/// (`x-litellm-model-id` of a 200), `None` for another status.
fn served_by(addr: SocketAddr, group: &str) -> Result<Option<String>, String> {
    let body = format!("{{\"model\":\"{group}\",\"max_tokens\":1,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}");
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {MASTER_KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let response = gateway_proc::exchange_once(addr, request.as_bytes())
        .map_err(|e| format!("POST /v1/chat/completions: {e}"))?;
    Ok(model_id_of(&response))
}

/// `x-litellm-model-id` of a 200 response.
fn model_id_of(response: &str) -> Option<String> {
    let head = response.split("\r\n\r\n").next()?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("x-litellm-model-id")
            .then(|| value.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_replica_fails_every_other_group() {
        let upstream = "127.0.0.1:9".parse().unwrap();
        for side in 0..2 {
            let yaml = config_yaml(upstream, 4, side);
            let cfg =
                gateway::config::Config::parse(std::path::Path::new("c.yaml"), &yaml, &|_| None)
                    .unwrap();
            assert_eq!(cfg.deployments.len(), 8);
            assert_eq!(yaml.matches("x-mock-status").count(), 2);
            let first_fails = yaml
                .split("- model_name: cool-1")
                .next()
                .unwrap()
                .contains("x-mock-status");
            assert_eq!(first_fails, side == 0);
        }
    }

    #[test]
    fn reads_the_serving_deployment() {
        let ok = "HTTP/1.1 200 OK\r\nX-LiteLLM-Model-Id: backup-3\r\n\r\n{}";
        assert_eq!(model_id_of(ok).as_deref(), Some("backup-3"));
        assert_eq!(
            model_id_of("HTTP/1.1 429 Too Many\r\nx-litellm-model-id: a\r\n\r\n"),
            None
        );
        assert_eq!(model_id_of(""), None);
    }
}
