//! `loadgen overhead`: what the gateway costs on top of the provider. The
//! same open-loop load goes straight to the mock and through the gateway,
//! alternating in rounds within one session so drift affects both alike.
//! `--saturate` (`saturate/`) drives each target closed-loop instead, for
//! its throughput; `--paired` (`paired.rs`) compares two gateways.

pub mod args;
pub mod paired;
pub mod plot;
pub mod report;
pub mod saturate;
pub mod scopes;
pub mod search;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cli::Args;
use crate::client::{RequestSpec, Target};
use crate::fdlimit;
use crate::gateway_proc::{self, UpstreamApi};
use crate::harness::{Harness, HarnessSpec};
use crate::load::{self, LoadConfig, LoadResult, LoadSummary, Mode};
use crate::mock::MockConfig;
use crate::nginx_proc::{self, NginxProcess};
use crate::output::write_json;
use crate::postgres_procs::PostgresProcs;
use crate::procfs;
use crate::redis_target::RedisTarget;
use crate::schedule::Schedule;
use args::{OverheadArgs, Variant};
use report::{Added, MaxRate, NginxBaseline, OverheadReport, Probe, Round, Search};
use search::StepSearch;

/// Length of the discarded warm-up run per target.
const WARM_UP: Duration = Duration::from_secs(1);
/// How long after a gateway round with spend rows in Postgres its CPU
/// (the gateway's, Redis's and Postgres's) is still counted: the spend
/// writer holds a batch up to a second under load and spreads its write
/// over up to 750 ms more, and writing a round's rows is that round's
/// work, not the next round's (nor nobody's).
const SPEND_SETTLE: Duration = Duration::from_millis(2500);
/// Probes per target in the max-rate search.
const SEARCH_STEPS: usize = 12;
/// Highest rate the search tries.
const SEARCH_CEILING: f64 = 1_000_000.0;
/// Where the `messages` variant sends its requests.
const MESSAGES_PATH: &str = "/v1/messages";
/// The path of OpenAI's Responses API, for the `responses` variant.
const RESPONSES_PATH: &str = "/v1/responses";
/// Per-request timeout of every run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Entry point of `loadgen overhead`.
pub fn main(args: &mut Args) -> Result<(), String> {
    let o = match args::parse(args)? {
        args::Parsed::Run(o) => o,
        args::Parsed::Help => {
            print!("{}", args::usage());
            return Ok(());
        }
    };
    // Before any thread or process is started, so that all inherit it.
    if let Some(nice) = o.nice {
        crate::affinity::set_nice(nice)?;
    }
    // Client sockets, the mock's side of them, and the gateway's two sides.
    fdlimit::raise_to(o.connections as u64 * 4 + 1024)?;
    let redis = match o.variant.needs_redis() {
        true => Some(RedisTarget::start(o.redis)?),
        false => None,
    };
    let harness = Harness::start(&harness_spec(&o, redis.as_ref()))?;
    let owners = scopes::make_owners(o.scopes, &harness)?;
    let keys = (0..o.keys)
        .map(|_| variant_key(o.variant, &harness, &owners))
        .collect::<Result<Vec<_>, _>>()?;
    // One more key, for the request that warms Redis up (script cache,
    // connections) before its memory is read.
    let primer = match (o.variant.needs_redis(), o.variant.has_virtual_key()) {
        (true, true) => Some(variant_key(o.variant, &harness, &owners)?),
        _ => None,
    };
    if o.paired {
        let key = keys.into_iter().next().unwrap_or_default();
        return paired_main(&o, &harness, redis.as_ref(), key);
    }
    let nginx = match (o.nginx, nginx_proc::binary()) {
        (true, Some(_)) => Some(NginxProcess::start(
            o.gateway_workers,
            harness.mock.addr(),
            harness.gateway_cpus(),
        )?),
        (true, None) => {
            eprintln!("nginx not installed: no nginx baseline (install Debian's nginx package)");
            None
        }
        (false, _) => None,
    };
    if o.saturate {
        return saturate_main(&o, &harness, nginx.as_ref(), redis.as_ref(), keys);
    }
    let report =
        Session::new(&o, &harness, nginx.as_ref(), redis.as_ref(), keys)?.measure(primer)?;
    print!("{}", report.table());
    if let Some(path) = &o.json {
        write_json_and_picture(path, &report, plot::svg(&report))?;
    }
    Ok(())
}

/// The key `variant`'s requests carry, made on `harness`'s gateway when the
/// variant needs a virtual key (owned by `owners`' user and team, when the
/// run has those scopes).
fn variant_key(variant: Variant, harness: &Harness, owners: &str) -> Result<String, String> {
    match variant {
        Variant::MasterKey
        | Variant::RouterGroup
        | Variant::Anthropic
        | Variant::Messages
        | Variant::Bedrock
        | Variant::Vertex
        | Variant::Responses
        | Variant::Metrics
        | Variant::Tracing
        | Variant::CacheHitLocal
        | Variant::CacheHitRedis
        | Variant::CacheHitRedisFar
        | Variant::CacheMiss
        | Variant::Guardrail => Ok(gateway_proc::MASTER_KEY.to_string()),
        Variant::VirtualKey | Variant::SpendLogging => harness.gateway.generate_key(),
        Variant::LocalLimits
        | Variant::RedisLimits
        | Variant::LeaseLimits
        | Variant::FullPipeline
        | Variant::FullPipelineLease => harness.gateway.generate_key_with(
            &format!("{{\"models\":[\"{}\"],\"rpm_limit\":1000000000,\"tpm_limit\":1000000000000,\"max_parallel_requests\":1000000{}{owners}}}", gateway_proc::MODEL, budget_of(variant)),
        ),
    }
}

/// The budget field of `variant`'s key: the full pipeline's key has a
/// budget it never reaches (reserved and settled per request, in Redis in
/// `redis` mode, against slices in lease mode), as production keys have.
fn budget_of(variant: Variant) -> &'static str {
    match variant {
        Variant::FullPipeline | Variant::FullPipelineLease => ",\"max_budget\":1000000",
        _ => "",
    }
}

/// `--saturate`: every target of the run (the mock direct, nginx when
/// measured, the gateway) driven closed-loop to saturation in alternating
/// rounds; reports each one's throughput, latency, errors and the CPU of
/// every process per request, and the throughput ratios.
fn saturate_main(
    o: &OverheadArgs,
    harness: &Harness,
    nginx: Option<&NginxProcess>,
    redis: Option<&RedisTarget>,
    keys: Vec<String>,
) -> Result<(), String> {
    let (direct, gateway) = targets(o, harness);
    let mut contenders = vec![saturate::Contender {
        name: "direct",
        target: direct.clone(),
        settle: Duration::ZERO,
    }];
    if let Some(n) = nginx {
        contenders.push(saturate::Contender {
            name: "nginx",
            target: Target {
                path: direct.path.clone(),
                ..crate::harness::local_target(n.addr())
            },
            settle: Duration::ZERO,
        });
    }
    let postgres = postgres_procs(o)?;
    contenders.push(saturate::Contender {
        name: "gateway",
        target: gateway,
        settle: match postgres {
            Some(_) => SPEND_SETTLE,
            None => Duration::ZERO,
        },
    });
    let session = saturate::Session {
        contenders,
        meters: saturate::Meters {
            gateway: harness.gateway.pid(),
            nginx,
            redis,
            postgres: postgres.as_ref(),
        },
        spec: RequestSpec {
            keys,
            ..o.spec.clone()
        },
        connections: o.connections,
        cpus: saturate::report::Cpus {
            proxy: harness
                .cpus
                .as_ref()
                .map_or_else(crate::affinity::available_cpus, |s| s.gateway.len()),
            load: harness.load_cpus(),
            machine: procfs::machine_cpu()?.cpus,
        },
    };
    let load_average_before = procfs::load_average()?;
    let measured = session.measure(o.rounds, o.duration)?;
    let t = |name| measured.targets.iter().find(|t| t.name == name);
    let ratio = |of, to| saturate::report::Ratio::between(t(of)?, t(to)?);
    let report = saturate::report::SaturationReport {
        variant: o.variant.name(),
        scopes: o.scopes,
        redis: o.variant.needs_redis().then(|| o.redis.name()),
        gateway_bin: o.gateway_bin.display().to_string(),
        gateway_workers: o.gateway_workers,
        cpus: harness.cpus.clone(),
        placement: saturate_placement(harness, nginx.is_some(), o.nice),
        nice: o.nice,
        connections: o.connections,
        round_s: o.duration.as_secs_f64(),
        rounds: o.rounds,
        body_bytes: o.spec.body_size,
        stream: o.spec.stream,
        gateway_to_nginx: ratio("gateway", "nginx"),
        gateway_to_direct: ratio("gateway", "direct"),
        load_average_before,
        load_average_after: procfs::load_average()?,
        mock_served: harness.mock.stats().total.requests,
        loadgen_2xx: measured.ok_total,
        targets: measured.targets,
    };
    print!("{}", report.table());
    if let Some(path) = &o.json {
        write_json_and_picture(path, &report, plot::saturation_svg(&report))?;
    }
    Ok(())
}

/// Where `--saturate`'s processes run: the harness's split (nginx on the
/// gateway's CPUs), and Redis and Postgres on whichever CPU is free; at
/// which nice value, when `--nice` set one.
fn saturate_placement(harness: &Harness, nginx: bool, nice: Option<i32>) -> String {
    format!(
        "{}{}; redis-server and postgres not pinned (any CPU){}",
        harness.placement(),
        match (nginx, harness.cpus.is_some()) {
            (true, true) => "; nginx on the gateway's CPUs",
            _ => "",
        },
        nice.map_or(String::new(), |n| format!("; all but postgres at nice {n}"))
    )
}

/// The mock's and the gateway's targets for `o`'s variant (its path, for
/// the variants that use another than chat completions).
fn targets(o: &OverheadArgs, harness: &Harness) -> (Target, Target) {
    let (mut direct, mut gateway) = (harness.direct(), harness.through_gateway());
    let path = match o.variant {
        Variant::Messages => Some(MESSAGES_PATH),
        Variant::Responses => Some(RESPONSES_PATH),
        _ => None,
    };
    if let Some(path) = path {
        direct.path = path.to_string();
        gateway.path = path.to_string();
    }
    (direct, gateway)
}

/// `--paired`: starts a gateway beside the variant's (master-key, or with
/// `--baseline-bin` the same variant from that build, sharing its Redis and
/// database) and reports what the variant's gateway adds to the CPU per
/// request.
fn paired_main(
    o: &OverheadArgs,
    harness: &Harness,
    redis: Option<&RedisTarget>,
    key: String,
) -> Result<(), String> {
    let base_args = OverheadArgs {
        variant: paired::base_variant(o),
        gateway_bin: o
            .baseline_bin
            .clone()
            .unwrap_or_else(|| o.gateway_bin.clone()),
        ..o.clone()
    };
    let base = Harness::start_beside(&harness_spec(&base_args, redis), harness)?;
    let base_spec = RequestSpec {
        keys: vec![variant_key(base_args.variant, &base, "")?],
        ..o.spec.clone()
    };
    let variant_spec = RequestSpec {
        keys: vec![key],
        ..o.spec.clone()
    };
    let report = paired::measure(
        o,
        &paired::Side {
            target: base.through_gateway(),
            pid: base.gateway.pid(),
            spec: &base_spec,
        },
        &paired::Side {
            target: harness.through_gateway(),
            pid: harness.gateway.pid(),
            spec: &variant_spec,
        },
    )?;
    print!("{}", report.table());
    if let Some(path) = &o.json {
        write_json(path, &report)?;
    }
    Ok(())
}

/// Writes `report` as JSON to `path` and `svg` beside it (same name,
/// `.svg`), naming the picture on stdout.
fn write_json_and_picture(
    path: &std::path::Path,
    report: &impl serde::Serialize,
    svg: String,
) -> Result<(), String> {
    write_json(path, report)?;
    let picture = path.with_extension("svg");
    std::fs::write(&picture, svg).map_err(|e| format!("{}: {e}", picture.display()))?;
    println!("picture: {}", picture.display());
    Ok(())
}

/// The Postgres processes serving `--database-url`, for the variants that
/// use the database.
fn postgres_procs(o: &OverheadArgs) -> Result<Option<PostgresProcs>, String> {
    o.database_url
        .as_deref()
        .filter(|_| o.variant.needs_database())
        .map(PostgresProcs::for_url)
        .transpose()
}

/// What to start for `o`'s variant: the mock and the gateway configured as
/// the variant asks, with `redis` (and the database) only for the variants
/// that use them, so a master-key gateway beside another variant runs as
/// it would alone.
fn harness_spec(o: &OverheadArgs, redis: Option<&RedisTarget>) -> HarnessSpec {
    HarnessSpec {
        gateway_bin: o.gateway_bin.clone(),
        gateway_workers: o.gateway_workers,
        pin: o.pin,
        mock: MockConfig::default(),
        gateway_env: redis
            .iter()
            .filter(|_| o.variant.needs_redis())
            .map(|r| r.env())
            .chain(
                o.database_url
                    .iter()
                    .filter(|_| o.variant.needs_database())
                    .map(|u| ("DATABASE_URL".to_string(), u.clone())),
            )
            .chain(
                [
                    ("OTEL_EXPORTER", "otlp_http"),
                    ("OTEL_ENDPOINT", "http://{mock}/v1/traces"),
                ]
                .into_iter()
                .filter(|_| o.variant == Variant::Tracing)
                .map(|(k, v)| (k.to_string(), v.to_string())),
            )
            .chain(
                o.variant
                    .leases()
                    .then(|| ("GATEWAY_RATE_LIMIT_MODE".to_string(), "lease".to_string())),
            )
            .collect(),
        gateway_deployments: if o.variant.routes_a_group() { 3 } else { 1 },
        gateway_api: match o.variant {
            Variant::Anthropic | Variant::Messages => UpstreamApi::Anthropic,
            Variant::Bedrock => UpstreamApi::Bedrock,
            Variant::Vertex => UpstreamApi::Vertex,
            _ => UpstreamApi::OpenAi,
        },
        gateway_extra_config: match o.variant {
            Variant::Metrics => "litellm_settings:\n  callbacks: [\"prometheus\"]\n".into(),
            Variant::Tracing => "litellm_settings:\n  callbacks: [\"otel\"]\n".into(),
            Variant::CacheHitLocal | Variant::CacheMiss => {
                "litellm_settings:\n  cache: true\n  cache_params:\n    type: local\n".into()
            }
            Variant::CacheHitRedis => {
                "litellm_settings:\n  cache: true\n  cache_params:\n    type: redis\n".into()
            }
            Variant::CacheHitRedisFar => {
                "litellm_settings:\n  cache: true\n  cache_params:\n    type: redis\n    near_cache: false\n".into()
            }
            Variant::Guardrail => guardrail_config(),
            _ => String::new(),
        },
    }
}

/// LiteLLM's prebuilt content filter patterns (every one the gateway
/// knows), for the `guardrail` variant.
const PREBUILT_PATTERNS: [&str; 19] = [
    "us_ssn",
    "email",
    "us_phone",
    "visa",
    "mastercard",
    "amex",
    "discover",
    "credit_card",
    "iban",
    "ipv4",
    "aws_access_key",
    "aws_secret_key",
    "github_token",
    "slack_token",
    "generic_api_key",
    "openai_api_key",
    "anthropic_api_key",
    "gemini_api_key",
    "private_key",
];

/// The `guardrail` variant's `guardrails:` section: one default-on
/// `litellm_content_filter` on the request and the answer with every
/// prebuilt pattern and 1,000 blocked words, all `MASK` (the filler prose
/// the requests carry matches none, so every request goes through).
fn guardrail_config() -> String {
    let mut yaml = String::from(
        "guardrails:\n  - guardrail_name: content-filter\n    litellm_params:\n      guardrail: litellm_content_filter\n      mode: [pre_call, post_call]\n      default_on: true\n      patterns:\n",
    );
    for name in PREBUILT_PATTERNS {
        yaml.push_str(&format!(
            "        - {{pattern_type: prebuilt, pattern_name: {name}, action: MASK}}\n"
        ));
    }
    yaml.push_str("      blocked_words:\n");
    for i in 0..1000 {
        yaml.push_str(&format!(
            "        - {{keyword: codename{i:04}x, action: MASK}}\n"
        ));
    }
    yaml
}

/// Which process a run measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Direct,
    Nginx,
    Gateway,
}

/// One measuring session against a running harness.
struct Session<'a> {
    o: &'a OverheadArgs,
    harness: &'a Harness,
    nginx: Option<&'a NginxProcess>,
    /// The variant's private Redis (one server or a Cluster's masters),
    /// whose CPU the gateway's requests cost too.
    redis: Option<&'a RedisTarget>,
    /// The Postgres processes serving the variant's database, whose CPU
    /// the gateway's requests cost too.
    postgres: Option<PostgresProcs>,
    direct: Target,
    gateway: Target,
    /// Requests to send: the settings' shape with the variant's key. The
    /// same bytes go to both targets (the mock ignores the key).
    spec: RequestSpec,
    /// 2xx responses over every run, to check against the mock's count.
    ok_total: u64,
}

impl<'a> Session<'a> {
    fn new(
        o: &'a OverheadArgs,
        harness: &'a Harness,
        nginx: Option<&'a NginxProcess>,
        redis: Option<&'a RedisTarget>,
        keys: Vec<String>,
    ) -> Result<Self, String> {
        let (direct, gateway) = targets(o, harness);
        let postgres = postgres_procs(o)?;
        Ok(Session {
            nginx,
            redis,
            postgres,
            spec: RequestSpec {
                keys,
                ..o.spec.clone()
            },
            o,
            harness,
            direct,
            gateway,
            ok_total: 0,
        })
    }

    /// The target of `side`.
    fn target(&self, side: Side) -> Target {
        match (side, self.nginx) {
            (Side::Direct, _) => self.direct.clone(),
            (Side::Nginx, Some(n)) => Target {
                path: self.direct.path.clone(),
                ..crate::harness::local_target(n.addr())
            },
            (Side::Nginx, None) | (Side::Gateway, _) => self.gateway.clone(),
        }
    }

    /// CPU time used so far by the process behind `side` (none for the
    /// mock, which shares the load generator's process).
    fn cpu(&self, side: Side) -> Result<Option<Duration>, String> {
        match (side, self.nginx) {
            (Side::Direct, _) => Ok(None),
            (Side::Nginx, Some(n)) => n.cpu_time().map(Some),
            (Side::Nginx, None) => Ok(None),
            (Side::Gateway, _) => procfs::cpu_time(self.harness.gateway.pid()).map(Some),
        }
    }

    fn measure(mut self, primer: Option<String>) -> Result<OverheadReport, String> {
        let o = self.o;
        let pid = self.harness.gateway.pid();
        let idle = procfs::memory(pid)?;
        if let Some(key) = primer {
            self.prime(key)?;
        }
        let redis_memory_before = self.redis.map(|r| r.used_memory()).transpose()?;
        let sides: &[Side] = if self.nginx.is_some() {
            &[Side::Direct, Side::Nginx, Side::Gateway]
        } else {
            &[Side::Direct, Side::Gateway]
        };
        // Each run uses the keys in turn from the first, so the keys used
        // are as many as the longest run's requests.
        let mut longest_gateway_run = 0;
        for &side in sides {
            let warm = self.run(&self.target(side), o.rate, WARM_UP)?;
            if side == Side::Gateway {
                longest_gateway_run = warm.sent;
            }
        }
        let (mut direct, mut gateway) = (LoadResult::default(), LoadResult::default());
        let mut nginx = LoadResult::default();
        let mut per_round = Vec::with_capacity(o.rounds);
        let (mut cpu, mut nginx_cpu) = (Duration::ZERO, Duration::ZERO);
        let mut redis_cpu = Duration::ZERO;
        let mut postgres_cpu = Duration::ZERO;
        let redis_time = |r: Option<&RedisTarget>| -> Result<Duration, String> {
            let mut total = Duration::ZERO;
            for pid in r.map(RedisTarget::pids).unwrap_or_default() {
                total += procfs::cpu_time(pid)?;
            }
            Ok(total)
        };
        for round in 1..=o.rounds {
            let d = self.run(&self.direct.clone(), o.rate, o.duration)?;
            if self.nginx.is_some() {
                let before = self.cpu(Side::Nginx)?.unwrap_or_default();
                let n = self.run(&self.target(Side::Nginx), o.rate, o.duration)?;
                nginx_cpu += self
                    .cpu(Side::Nginx)?
                    .unwrap_or_default()
                    .saturating_sub(before);
                nginx.merge(&n);
            }
            let before = procfs::cpu_time(pid)?;
            let redis_before = redis_time(self.redis)?;
            let postgres_before = self.postgres.as_ref().map(|p| p.snapshot()).transpose()?;
            let g = self.run(&self.gateway.clone(), o.rate, o.duration)?;
            longest_gateway_run = longest_gateway_run.max(g.sent);
            if self.postgres.is_some() {
                std::thread::sleep(SPEND_SETTLE);
            }
            cpu += procfs::cpu_time(pid)?.saturating_sub(before);
            redis_cpu += redis_time(self.redis)?.saturating_sub(redis_before);
            if let (Some(p), Some(before)) = (&self.postgres, postgres_before) {
                postgres_cpu += p.snapshot()?.used_since(&before);
            }
            per_round.push(Round {
                round,
                direct_p50_us: d.latency.summary().p50_us,
                direct_p99_us: d.latency.summary().p99_us,
                gateway_p50_us: g.latency.summary().p50_us,
                gateway_p99_us: g.latency.summary().p99_us,
            });
            direct.merge(&d);
            gateway.merge(&g);
        }
        let peak = procfs::memory(pid)?.peak_kib;
        let keys_used = (o.keys as u64).min(longest_gateway_run).max(1);
        let redis_bytes_per_key = match (self.redis, redis_memory_before) {
            (Some(r), Some(before)) => {
                Some(r.used_memory()?.saturating_sub(before) as f64 / keys_used as f64)
            }
            _ => None,
        };
        let max_rate = match o.search_duration {
            Some(probe) => Some(self.max_rate(probe)?),
            None => None,
        };
        let stream = o.spec.stream;
        let ds = LoadSummary::new(&direct, stream);
        let gs = match o.variant.caches() {
            true => LoadSummary::new(&gateway, stream).with_cache_split(&gateway),
            false => LoadSummary::new(&gateway, stream),
        };
        let gateway_requests = gateway.completed();
        let gateway_cpu_us_per_request = cpu.as_secs_f64() * 1e6 / gateway_requests.max(1) as f64;
        let nginx = self.nginx.map(|_| {
            let ns = LoadSummary::new(&nginx, stream);
            NginxBaseline::new(
                &ds,
                ns,
                nginx_cpu.as_secs_f64() * 1e6 / nginx.completed().max(1) as f64,
                &gs,
                gateway_cpu_us_per_request,
                max_rate.as_ref(),
            )
        });
        Ok(OverheadReport {
            variant: o.variant.name(),
            scopes: o.scopes,
            redis: o.variant.needs_redis().then(|| o.redis.name()),
            gateway_bin: o.gateway_bin.display().to_string(),
            gateway_workers: o.gateway_workers,
            cpus: self.harness.cpus.clone(),
            placement: self.harness.placement(),
            rate: o.rate,
            round_s: o.duration.as_secs_f64(),
            rounds: o.rounds,
            connections: o.connections,
            body_bytes: o.spec.body_size,
            stream,
            added: Added::between(&ds.latency, &gs.latency),
            added_first_byte: match (&ds.first_byte, &gs.first_byte) {
                (Some(d), Some(g)) => Some(Added::between(d, g)),
                _ => None,
            },
            direct: ds,
            gateway: gs,
            per_round,
            gateway_cpu_us_per_request,
            redis_cpu_us_per_request: self
                .redis
                .map(|_| redis_cpu.as_secs_f64() * 1e6 / gateway_requests.max(1) as f64),
            keys: o.keys,
            keys_used,
            redis_bytes_per_key,
            postgres_cpu_us_per_request: self
                .postgres
                .as_ref()
                .map(|_| postgres_cpu.as_secs_f64() * 1e6 / gateway_requests.max(1) as f64),
            nginx,
            gateway_cpu_s: cpu.as_secs_f64(),
            gateway_requests,
            idle_rss_kib: idle.rss_kib,
            peak_rss_kib: peak,
            max_rate,
            mock_served: self.harness.mock.stats().total.requests,
            loadgen_2xx: self.ok_total,
        })
    }

    /// One request through the gateway with `key`, none of the measured
    /// keys, so what Redis holds for every key alike (scripts, the
    /// gateway's connection) is there before its memory is first read.
    fn prime(&mut self, key: String) -> Result<(), String> {
        let config = LoadConfig {
            target: self.gateway.clone(),
            spec: RequestSpec {
                keys: vec![key],
                ..self.spec.clone()
            },
            mode: Mode::Closed,
            connections: 1,
            workers: 1,
            duration: None,
            requests: Some(1),
            timeout: REQUEST_TIMEOUT,
            ramp: Duration::ZERO,
        };
        let result = load::run(&config, &Arc::default())?;
        // A cache hit is a 2xx the mock never saw.
        self.ok_total += result.ok().saturating_sub(result.cache_hits);
        match result.ok() {
            1 => Ok(()),
            _ => Err(format!(
                "the request that warms Redis up failed: {:?}",
                LoadSummary::new(&result, false).status
            )),
        }
    }

    /// One open-loop run of `duration` at `rate` against `target`.
    fn run(
        &mut self,
        target: &Target,
        rate: f64,
        duration: Duration,
    ) -> Result<LoadResult, String> {
        let config = LoadConfig {
            target: target.clone(),
            spec: self.spec.clone(),
            mode: Mode::Open { rate },
            connections: self.o.connections,
            workers: 1,
            duration: Some(duration),
            requests: None,
            timeout: REQUEST_TIMEOUT,
            ramp: Duration::ZERO,
        };
        let result = load::run(&config, &Arc::default())?;
        // A cache hit is a 2xx the mock never saw.
        self.ok_total += result.ok().saturating_sub(result.cache_hits);
        Ok(result)
    }

    fn max_rate(&mut self, probe: Duration) -> Result<MaxRate, String> {
        let direct = self.search(Side::Direct, probe)?;
        let mut nginx = match self.nginx {
            Some(_) => Some(self.search(Side::Nginx, probe)?),
            None => None,
        };
        let mut gateway = self.search(Side::Gateway, probe)?;
        // Probe the faster side once at the slower one's max rate, so the
        // CPU comparison under load has a rate both held near the limit.
        if let Some(nginx) = nginx.as_mut() {
            if let Some((rate, gateway_side)) = report::rate_to_align(&gateway, nginx) {
                let (side, search) = if gateway_side {
                    (Side::Gateway, &mut gateway)
                } else {
                    (Side::Nginx, nginx)
                };
                search.probes.push(self.probe(side, rate, probe)?);
            }
        }
        Ok(MaxRate {
            nginx,
            p99_bound_us: self.o.p99_bound.as_micros() as u64,
            probe_s: probe.as_secs_f64(),
            ratio: if direct.max_rate > 0.0 {
                gateway.max_rate / direct.max_rate
            } else {
                0.0
            },
            direct,
            gateway,
        })
    }

    /// The step search for `target`'s highest sustained rate. A rate that
    /// fails is probed once more before it counts as failed: noise from
    /// other work on the machine only ever makes a probe worse.
    fn search(&mut self, side: Side, probe: Duration) -> Result<Search, String> {
        let mut steps = StepSearch::new(self.o.rate, SEARCH_STEPS, SEARCH_CEILING);
        let mut probes = Vec::new();
        while let Some(rate) = steps.next_rate() {
            let mut p = self.probe(side, rate, probe)?;
            if !p.held {
                probes.push(p);
                p = self.probe(side, rate, probe)?;
            }
            steps.observe(p.held);
            probes.push(p);
        }
        Ok(Search::new(steps.best(), probes))
    }

    /// One open-loop probe at `rate`: whether it held, and the CPU both
    /// sides used meanwhile.
    fn probe(&mut self, side: Side, rate: f64, probe: Duration) -> Result<Probe, String> {
        let me = std::process::id();
        let (load0, proxy0, t0) = (procfs::cpu_time(me)?, self.cpu(side)?, Instant::now());
        let r = self.run(&self.target(side), rate, probe)?;
        let wall = t0.elapsed().as_secs_f64();
        let pct = |used: Duration, cpus: usize| 100.0 * used.as_secs_f64() / wall / cpus as f64;
        let load_cpu_pct = pct(
            procfs::cpu_time(me)?.saturating_sub(load0),
            self.harness.load_cpus(),
        );
        let gateway_cpu = match (proxy0, self.cpu(side)?) {
            (Some(before), Some(after)) => Some(after.saturating_sub(before)),
            _ => None,
        };
        let slots = Schedule::new(rate).slots_within(probe);
        let p99_us = r.latency.summary().p99_us;
        let errors = r.sent - r.ok();
        Ok(Probe {
            rate,
            held: errors == 0 && r.ok() == slots && p99_us <= self.o.p99_bound.as_micros() as u64,
            p99_us,
            errors,
            achieved_rps: r.achieved_rps(),
            load_cpu_pct,
            gateway_cpu_pct: gateway_cpu.map(|used| pct(used, 1)),
            gateway_cpu_us_per_request: gateway_cpu
                .map(|used| used.as_secs_f64() * 1e6 / r.ok().max(1) as f64),
        })
    }
}
