//! `loadgen soak`: many concurrent long-lived streams through the gateway,
//! optionally with non-streaming traffic beside them, key churn, limits in
//! a Redis that is killed and restarted in the middle, and spend in
//! Postgres, watching the gateway's memory, CPU and open connections over
//! time and counting the spend rows at the end.

pub mod args;
pub mod churn;
pub mod report;
pub mod sampler;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::cli::Args;
use crate::client::RequestSpec;
use crate::fdlimit;
use crate::gateway_proc;
use crate::harness::{Harness, HarnessSpec};
use crate::load::{self, LoadConfig, LoadSummary, Mode, Progress};
use crate::mock::MockConfig;
use crate::output::write_json;
use crate::procfs;
use crate::redis_proc::RedisProcess;
use args::SoakArgs;
use report::{Ranges, Rows, Slopes, SoakReport};
use sampler::Sampler;

/// Time between samples.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// How long the spend rows may take to reach Postgres after the load.
const ROWS_WAIT: Duration = Duration::from_secs(60);
/// The limits of the load's key with `--redis`: never reached, so every
/// request is admitted, each through Redis.
const REDIS_KEY_LIMITS: &str = r#"{"rpm_limit": 1000000000, "tpm_limit": 1000000000000}"#;

/// Entry point of `loadgen soak`.
pub fn main(args: &mut Args) -> Result<(), String> {
    let s = match args::parse(args)? {
        args::Parsed::Run(s) => s,
        args::Parsed::Help => {
            print!("{}", args::USAGE);
            return Ok(());
        }
    };
    // Per stream: the client socket and the mock's side in this process,
    // the gateway's client and upstream sockets in the child (which
    // inherits the limit).
    fdlimit::raise_to((s.streams + s.plain) as u64 * 2 + 1024)?;
    let redis = s.redis.then(RedisProcess::start).transpose()?;
    let mut gateway_env = Vec::new();
    if let Some(redis) = &redis {
        gateway_env.push(("REDIS_URL".to_string(), redis.url()));
    }
    if let Some(url) = &s.database_url {
        gateway_env.push(("DATABASE_URL".to_string(), url.clone()));
    }
    let harness = Harness::start(&HarnessSpec {
        gateway_bin: s.gateway_bin.clone(),
        gateway_workers: s.gateway_workers,
        pin: s.pin,
        mock: MockConfig {
            ttft_ms: s.token_interval.as_millis() as u64,
            chunk_delay_ms: s.token_interval.as_millis() as u64,
            completion_tokens: s.tokens,
            ..MockConfig::default()
        },
        gateway_env,
        gateway_deployments: 1,
        gateway_api: crate::gateway_proc::UpstreamApi::OpenAi,
        gateway_extra_config: String::new(),
    })?;
    let report = soak(&s, &harness, redis)?;
    print!("{}", report.table());
    if let Some(path) = &s.json {
        write_json(path, &report)?;
    }
    Ok(())
}

/// Runs the streams (and the rest) and samples the gateway until they are
/// done.
fn soak(
    s: &SoakArgs,
    harness: &Harness,
    redis: Option<RedisProcess>,
) -> Result<SoakReport, String> {
    let pid = harness.gateway.pid();
    let idle = procfs::memory(pid)?;
    let key = if s.redis {
        harness.gateway.generate_key_with(REDIS_KEY_LIMITS)?
    } else {
        gateway_proc::MASTER_KEY.to_string()
    };
    let stream_time = s.token_interval * (s.tokens as u32 + 1);
    let load_config = |stream: bool, connections: usize| LoadConfig {
        target: harness.through_gateway(),
        spec: RequestSpec {
            models: vec![gateway_proc::MODEL.to_string()],
            keys: vec![key.clone()],
            body_size: s.body_size,
            stream,
            max_tokens: s.tokens,
            extra: None,
        },
        mode: Mode::Closed,
        connections,
        workers: 1,
        duration: Some(s.duration),
        requests: None,
        timeout: stream_time * 3 + Duration::from_secs(30),
        ramp: s.ramp,
    };
    let streams_config = load_config(true, s.streams);
    let plain_config = (s.plain > 0).then(|| load_config(false, s.plain));
    let progress = Arc::new(Progress::default());
    let plain_progress = Arc::new(Progress::default());
    let mut sampler = Sampler::new(pid)?;
    let stop = AtomicBool::new(false);
    let stop = &stop;
    let mut series = Vec::new();
    let outcome = std::thread::scope(|scope| -> Result<_, String> {
        let spawn_load = |config: &LoadConfig, progress: &Arc<Progress>| {
            let (config, progress) = (config.clone(), progress.clone());
            std::thread::Builder::new()
                .name("soak-load".into())
                .spawn_scoped(scope, move || load::run(&config, &progress))
                .map_err(|e| format!("cannot start a load thread: {e}"))
        };
        let streams = spawn_load(&streams_config, &progress)?;
        let plain = plain_config
            .as_ref()
            .map(|c| spawn_load(c, &plain_progress))
            .transpose()?;
        let churn = s
            .key_churn
            .map(|every| scope.spawn(move || churn::churn(&harness.gateway, every, stop)));
        let restart_after = s.redis_restart().unwrap_or_default();
        let restart =
            redis.map(|r| scope.spawn(move || churn::restart_redis_after(r, restart_after, stop)));
        let running = |h: &Option<std::thread::ScopedJoinHandle<'_, _>>| {
            h.as_ref().is_some_and(|h| !h.is_finished())
        };
        let mut sampled = Ok(());
        while !streams.is_finished() || running(&plain) {
            std::thread::sleep(SAMPLE_EVERY);
            let all = progress.snapshot().completed + plain_progress.snapshot().completed;
            match sampler.sample(progress.snapshot(), all) {
                Ok(sample) => series.push(sample),
                Err(e) => {
                    sampled = Err(e);
                    break;
                }
            }
        }
        stop.store(true, Ordering::Release);
        let joined = |what: &str| format!("the {what} thread panicked");
        let streams = streams.join().map_err(|_| joined("load"))??;
        let plain = match plain {
            Some(h) => Some(h.join().map_err(|_| joined("load"))??),
            None => None,
        };
        let churn = match churn {
            Some(h) => Some(h.join().map_err(|_| joined("key churn"))?),
            None => None,
        };
        let restarted = match restart {
            Some(h) => {
                let (_redis, restarted) = h.join().map_err(|_| joined("Redis restart"))?;
                restarted?.then_some(restart_after.as_secs_f64())
            }
            None => None,
        };
        sampled?;
        Ok((streams, plain, churn, restarted))
    })?;
    let (streams_result, plain_result, churn, redis_restarted_at_s) = outcome;
    let peak = procfs::memory(pid)?.peak_kib;
    let ranges = Ranges::of(&series);
    let kib_per_stream = ranges.and_then(|r| {
        (r.streams_open.max > 0.0)
            .then(|| (r.rss_kib.max - idle.rss_kib as f64) / r.streams_open.max)
    });
    let streams_result = LoadSummary::new(&streams_result, true);
    let plain_result = plain_result.map(|r| LoadSummary::new(&r, false));
    let rows = match &s.database_url {
        Some(url) => {
            let answered = streams_result.ok
                + plain_result.as_ref().map_or(0, |p| p.ok)
                + churn.as_ref().map_or(0, |c| c.served);
            let rows = churn::success_rows(url, answered, ROWS_WAIT)?;
            Some(Rows {
                answered,
                rows,
                lost: answered.saturating_sub(rows),
            })
        }
        None => None,
    };
    Ok(SoakReport {
        gateway_bin: s.gateway_bin.display().to_string(),
        gateway_workers: s.gateway_workers,
        placement: harness.placement(),
        streams: s.streams,
        token_interval_ms: s.token_interval.as_millis() as u64,
        tokens: s.tokens,
        duration_s: s.duration.as_secs_f64(),
        idle_rss_kib: idle.rss_kib,
        peak_rss_kib: peak,
        kib_per_stream,
        ranges,
        streams_result,
        plain_result,
        slopes: Slopes::of(&series, s.ramp.as_secs_f64(), s.duration.as_secs_f64()),
        churn,
        redis_restarted_at_s,
        rows,
        series,
    })
}
