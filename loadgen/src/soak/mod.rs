//! `loadgen soak`: many concurrent long-lived streams through the gateway,
//! watching its memory, CPU and open connections over time.

pub mod args;
pub mod report;
pub mod sampler;

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
use args::SoakArgs;
use report::{Ranges, SoakReport};
use sampler::Sampler;

/// Time between samples.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

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
    fdlimit::raise_to(s.streams as u64 * 2 + 1024)?;
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
        gateway_env: Vec::new(),
        gateway_deployments: 1,
        gateway_api: crate::gateway_proc::UpstreamApi::OpenAi,
    })?;
    let report = soak(&s, &harness)?;
    print!("{}", report.table());
    if let Some(path) = &s.json {
        write_json(path, &report)?;
    }
    Ok(())
}

/// Runs the streams and samples the gateway until they are done.
fn soak(s: &SoakArgs, harness: &Harness) -> Result<SoakReport, String> {
    let pid = harness.gateway.pid();
    let idle = procfs::memory(pid)?;
    let stream_time = s.token_interval * (s.tokens as u32 + 1);
    let config = LoadConfig {
        target: harness.through_gateway(),
        spec: RequestSpec {
            models: vec![gateway_proc::MODEL.to_string()],
            keys: vec![gateway_proc::MASTER_KEY.to_string()],
            body_size: s.body_size,
            stream: true,
            max_tokens: s.tokens,
        },
        mode: Mode::Closed,
        connections: s.streams,
        workers: 1,
        duration: Some(s.duration),
        requests: None,
        timeout: stream_time * 3 + Duration::from_secs(30),
        ramp: s.ramp,
    };
    let progress = Arc::new(Progress::default());
    let mut sampler = Sampler::new(pid)?;
    let streams = {
        let progress = progress.clone();
        std::thread::Builder::new()
            .name("soak-load".into())
            .spawn(move || load::run(&config, &progress))
            .map_err(|e| format!("cannot start the load thread: {e}"))?
    };
    let mut series = Vec::new();
    while !streams.is_finished() {
        std::thread::sleep(SAMPLE_EVERY);
        series.push(sampler.sample(progress.snapshot())?);
    }
    let result = streams
        .join()
        .map_err(|_| "the load thread panicked".to_string())??;
    let peak = procfs::memory(pid)?.peak_kib;
    let ranges = Ranges::of(&series);
    let kib_per_stream = ranges.and_then(|r| {
        (r.streams_open.max > 0.0)
            .then(|| (r.rss_kib.max - idle.rss_kib as f64) / r.streams_open.max)
    });
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
        streams_result: LoadSummary::new(&result, true),
        series,
    })
}
