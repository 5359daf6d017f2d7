//! `loadgen overhead` flags.

use std::path::PathBuf;
use std::time::Duration;

use super::scopes::{END_USER, MAX_SCOPES};
use crate::cli::Args;
use crate::client::request::FLAGS_USAGE;
use crate::client::RequestSpec;
use crate::gateway_proc;
use crate::redis_target::RedisKind;
use crate::units::HumanDuration;

/// Usage text of `loadgen overhead`.
pub fn usage() -> String {
    format!(
        "\
Usage: loadgen overhead [OPTIONS]

Starts the mock provider (in-process) and the gateway (child process,
routing gpt-4o to the mock), then sends the same open-loop load directly to
the mock and through the gateway, alternating in rounds, and reports the
latency the gateway adds, the highest rate each sustains within a p99
bound, the gateway's CPU time per request (and beside it the CPU time per
request of the private redis-server of the variants that use Redis, and of
the Postgres processes serving --database-url: its backends, the postmaster
and the cluster's shared writers) and its idle and peak RSS. With
--saturate, every target is driven closed-loop to its highest throughput
instead, in alternating rounds (see below).

Options:
  --gateway-bin PATH        gateway binary [default: target/release/gateway]
  --gateway-workers N       gateway --workers; the gateway is pinned to that many
                            CPUs and the load side to the rest [default: 1]
  --variant NAME            master-key; virtual-key (one key from /key/generate);
                            local-limits / redis-limits (that key with rpm, tpm and
                            parallel limits it never reaches, counted in the gateway /
                            in a private redis-server); lease-limits (the same in
                            lease mode: shares of each limit taken from Redis and
                            counted down locally); router-group (master key, a
                            group of 3 deployments with retries and a fallback
                            group); spend-logging (virtual key, keys and spend rows
                            in Postgres: needs --database-url); anthropic (chat
                            completions to an anthropic/ deployment, translated both
                            ways); messages (Anthropic /v1/messages, direct and to an
                            anthropic/ deployment, passed through); bedrock (chat
                            completions to a bedrock/ deployment: SigV4, Converse,
                            event-stream decoding when streamed); vertex (chat
                            completions to a vertex_ai/ deployment: Gemini's API and
                            a cached OAuth token); responses (OpenAI /v1/responses,
                            direct and passed through to an openai/ deployment);
                            metrics (master-key with LiteLLM's prometheus callback:
                            every request recorded in the /metrics families);
                            tracing (master-key with LiteLLM's otel callback:
                            one trace per request, exported as OTLP/HTTP to a
                            sink in this process); full-pipeline (the key of
                            redis-limits with a budget it never reaches, spend
                            rows in Postgres, the group of router-group: needs
                            --database-url); full-pipeline-lease (the same with
                            lease-mode limits and budget slices); cache-hit-local /
                            cache-hit-redis (master-key, LiteLLM's response cache on,
                            type local / redis in a private redis-server: every
                            request after the first is a hit; redis hits from
                            each core's near copy); cache-hit-redis-far (the
                            same without the near copy: near_cache: false,
                            every hit a Redis round trip); cache-miss
                            (master-key, local cache, every request with cache:
                            {{\"no-cache\": true}}: hashed and stored, never served
                            from it); guardrail (master-key with a default-on
                            litellm_content_filter guardrail, pre_call and
                            post_call: every prebuilt pattern and 1,000 blocked
                            words, all MASK; use --body-size 4k for requests of a
                            few KB) [default: master-key]
  --database-url URL        an empty Postgres database (spend-logging, full-pipeline,
                            full-pipeline-lease)
  --keys N                  spread the load over N virtual keys (10, 1k, 100k, …),
                            each made as the variant's key, used in turn; reports
                            the private redis-server's memory per active key
                            (variants with a virtual key) [default: 1]
  --scopes N                count each request in N scopes (variants with limits):
                            1 the key, 2 also its user, 3 also its team, 4 also
                            the end user every request names in `user`; each with
                            rpm and tpm limits it never reaches [default: 1]
  --redis single|cluster    the private Redis of the variants that use one: one
                            redis-server, or a three-master Redis Cluster (the CPU
                            of every master counted) [default: single]
  --rate R                  requests/s of the measured rounds [default: 1000]
  --duration D              length of each round, per target [default: 10s]
  --rounds N                direct/gateway rounds [default: 3]
  --connections N           client connections [default: 64]
  --p99-bound D             max-rate search: the p99 a rate must stay under [default: 5ms]
  --search-duration D       max-rate search: length of each probe [default: 2s]
  --no-search               skip the max-rate search
  --no-pin                  do not pin the gateway and the load side to separate CPUs
  --no-nginx                skip the nginx baseline (nginx as a plain reverse proxy to
                            the mock, same workers and CPUs as the gateway; measured
                            whenever /usr/sbin/nginx exists)
  --paired                  measure only what the variant adds to the gateway's CPU
                            per request: a master-key gateway from the same binary
                            runs beside the variant's on the same CPUs, and the same
                            load goes to each in turn (ABBA rounds); not for
                            messages or responses (another path)
  --saturate                closed loop instead of the open-loop rounds and the
                            max-rate search: each of --connections connections
                            sends its next request as soon as its last answer came,
                            for --duration per target and round, against the mock
                            direct, nginx and the gateway in turn (the order
                            reversed every other round: A B C, C B A, ...); reports
                            per target the 2xx/s, p50/p99, errors (any non-2xx or
                            failed request makes its round invalid, left out of
                            every figure), the CPU per request of the gateway,
                            nginx, redis-server, postgres, the load side and the
                            machine (what other work took shows as `other`), and
                            the throughput ratios gateway / nginx and gateway /
                            direct. Pinned as the open-loop rounds: the gateway
                            (and nginx in its rounds) on its CPUs, the load
                            generator + mock on the rest, redis-server and
                            postgres free to run on any CPU
  --nice N                  run the load generator, the mock, the gateway, nginx and
                            redis-server at nice N (-20 to 19; negative needs root or
                            CAP_SYS_NICE), so that other work on a shared machine
                            (builds at nice 0 or above) takes less from the measured
                            processes; Postgres keeps its own [default: unchanged]
  --baseline-bin PATH       with --paired: the gateway beside is this binary,
                            configured as the variant (sharing its Redis and
                            database), so two builds are compared on the same path
                            (add --stream for streamed requests)
{FLAGS_USAGE}  --json FILE               also write the report as JSON, and beside it
                            the same name with .svg: latency percentiles of each
                            target and a stacked bar of CPU per request by process
  -h, --help                print this help
"
    )
}

/// The configuration variant under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Authentication by the master key.
    MasterKey,
    /// Authentication by a virtual key created through `/key/generate`.
    VirtualKey,
    /// A virtual key with rpm, tpm and parallel limits (never reached),
    /// counted by the gateway's own counters.
    LocalLimits,
    /// The same limits counted in Redis, one script call per request.
    RedisLimits,
    /// The same limits in lease mode: each replica takes a share of every
    /// limit from Redis and counts it down locally (far fewer Redis calls).
    LeaseLimits,
    /// The master key on a group of three deployments with retries and a
    /// fallback group configured.
    RouterGroup,
    /// A virtual key on a gateway whose keys and spend rows are in Postgres.
    SpendLogging,
    /// The master key; chat completions served by an `anthropic/`
    /// deployment, so every request and answer is translated.
    Anthropic,
    /// The master key; Anthropic `/v1/messages` requests (to the mock
    /// directly, and through the gateway to an `anthropic/` deployment).
    Messages,
    /// The master key; chat completions served by a `bedrock/` deployment
    /// (SigV4 per request, Converse both ways).
    Bedrock,
    /// The master key; chat completions served by a `vertex_ai/`
    /// deployment (Gemini's API both ways, the cached OAuth token).
    Vertex,
    /// The master key; OpenAI `/v1/responses` requests (to the mock
    /// directly, and through the gateway to an `openai/` deployment).
    Responses,
    /// The master key with Prometheus metrics on
    /// (`litellm_settings.callbacks: ["prometheus"]`).
    Metrics,
    /// The master key with OpenTelemetry traces on
    /// (`litellm_settings.callbacks: ["otel"]`, OTLP/HTTP export).
    Tracing,
    /// Everything a production request goes through at once: the key of
    /// [`Variant::RedisLimits`], keys and spend rows in Postgres, and the
    /// group of [`Variant::RouterGroup`].
    FullPipeline,
    /// [`Variant::FullPipeline`] with its limits in lease mode.
    FullPipelineLease,
    /// The master key with the response cache on (`type: local`): the
    /// same request every time, so all but the first are hits.
    CacheHitLocal,
    /// The same with `type: redis` in a private `redis-server` (each core
    /// serves hits from its near copy, kept coherent by Redis's tracking).
    CacheHitRedis,
    /// [`Variant::CacheHitRedis`] without the near copy (`near_cache:
    /// false`): every hit is a Redis round trip.
    CacheHitRedisFar,
    /// The master key with the local cache on and every request asking
    /// for `no-cache`: each is hashed, relayed and stored (a miss's cost).
    CacheMiss,
    /// The master key with a default-on `litellm_content_filter`
    /// guardrail on the request and the answer: every prebuilt pattern
    /// and 1,000 blocked words (issue 37's benchmark).
    Guardrail,
}

impl Variant {
    /// The variant named `name`.
    pub fn parse(name: &str) -> Result<Variant, String> {
        match name {
            "master-key" => Ok(Variant::MasterKey),
            "virtual-key" => Ok(Variant::VirtualKey),
            "local-limits" => Ok(Variant::LocalLimits),
            "redis-limits" => Ok(Variant::RedisLimits),
            "lease-limits" => Ok(Variant::LeaseLimits),
            "router-group" => Ok(Variant::RouterGroup),
            "spend-logging" => Ok(Variant::SpendLogging),
            "anthropic" => Ok(Variant::Anthropic),
            "messages" => Ok(Variant::Messages),
            "bedrock" => Ok(Variant::Bedrock),
            "vertex" => Ok(Variant::Vertex),
            "responses" => Ok(Variant::Responses),
            "metrics" => Ok(Variant::Metrics),
            "tracing" => Ok(Variant::Tracing),
            "full-pipeline" => Ok(Variant::FullPipeline),
            "full-pipeline-lease" => Ok(Variant::FullPipelineLease),
            "cache-hit-local" => Ok(Variant::CacheHitLocal),
            "cache-hit-redis" => Ok(Variant::CacheHitRedis),
            "cache-hit-redis-far" => Ok(Variant::CacheHitRedisFar),
            "cache-miss" => Ok(Variant::CacheMiss),
            "guardrail" => Ok(Variant::Guardrail),
            other => Err(format!(
                "unknown variant {other:?} (master-key, virtual-key, local-limits, redis-limits, lease-limits, router-group, spend-logging, anthropic, messages, bedrock, vertex, responses, metrics, tracing, full-pipeline, full-pipeline-lease, cache-hit-local, cache-hit-redis, cache-hit-redis-far, cache-miss, guardrail)"
            )),
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Variant::MasterKey => "master-key",
            Variant::VirtualKey => "virtual-key",
            Variant::LocalLimits => "local-limits",
            Variant::RedisLimits => "redis-limits",
            Variant::LeaseLimits => "lease-limits",
            Variant::RouterGroup => "router-group",
            Variant::SpendLogging => "spend-logging",
            Variant::Anthropic => "anthropic",
            Variant::Messages => "messages",
            Variant::Bedrock => "bedrock",
            Variant::Vertex => "vertex",
            Variant::Responses => "responses",
            Variant::Metrics => "metrics",
            Variant::Tracing => "tracing",
            Variant::FullPipeline => "full-pipeline",
            Variant::FullPipelineLease => "full-pipeline-lease",
            Variant::CacheHitLocal => "cache-hit-local",
            Variant::CacheHitRedis => "cache-hit-redis",
            Variant::CacheHitRedisFar => "cache-hit-redis-far",
            Variant::CacheMiss => "cache-miss",
            Variant::Guardrail => "guardrail",
        }
    }

    /// Whether it keeps keys and spend rows in Postgres (`--database-url`).
    pub fn needs_database(self) -> bool {
        matches!(
            self,
            Variant::SpendLogging | Variant::FullPipeline | Variant::FullPipelineLease
        )
    }

    /// Whether its requests carry a virtual key (not the master key).
    pub fn has_virtual_key(self) -> bool {
        matches!(
            self,
            Variant::VirtualKey
                | Variant::SpendLogging
                | Variant::LocalLimits
                | Variant::RedisLimits
                | Variant::LeaseLimits
                | Variant::FullPipeline
                | Variant::FullPipelineLease
        )
    }

    /// Whether its key has rpm, tpm and parallel limits.
    pub fn has_limits(self) -> bool {
        matches!(
            self,
            Variant::LocalLimits
                | Variant::RedisLimits
                | Variant::LeaseLimits
                | Variant::FullPipeline
                | Variant::FullPipelineLease
        )
    }

    /// Whether its gateway has the response cache on (its report shows
    /// the hit ratio and the latency of hits and misses apart).
    pub fn caches(self) -> bool {
        matches!(
            self,
            Variant::CacheHitLocal
                | Variant::CacheHitRedis
                | Variant::CacheHitRedisFar
                | Variant::CacheMiss
        )
    }

    /// Whether it counts its limits in a private `redis-server`.
    pub fn needs_redis(self) -> bool {
        self.leases()
            || matches!(
                self,
                Variant::RedisLimits
                    | Variant::FullPipeline
                    | Variant::CacheHitRedis
                    | Variant::CacheHitRedisFar
            )
    }

    /// Whether its limits run in lease mode (`GATEWAY_RATE_LIMIT_MODE=lease`).
    pub fn leases(self) -> bool {
        matches!(self, Variant::LeaseLimits | Variant::FullPipelineLease)
    }

    /// Whether its model is a group of three deployments with retries and
    /// a fallback group.
    pub fn routes_a_group(self) -> bool {
        matches!(
            self,
            Variant::RouterGroup | Variant::FullPipeline | Variant::FullPipelineLease
        )
    }
}

/// The most virtual keys `--keys` may ask for.
const MAX_KEYS: usize = 1_000_000;

/// Settings of one `loadgen overhead` session.
#[derive(Debug, Clone)]
pub struct OverheadArgs {
    /// The gateway binary.
    pub gateway_bin: PathBuf,
    /// Gateway worker threads.
    pub gateway_workers: usize,
    /// Configuration variant.
    pub variant: Variant,
    /// Rate of the measured rounds.
    pub rate: f64,
    /// Length of each round per target.
    pub duration: Duration,
    /// Number of rounds.
    pub rounds: usize,
    /// Client connections.
    pub connections: usize,
    /// The p99 a rate must stay under in the max-rate search.
    pub p99_bound: Duration,
    /// Length of each search probe; `None` skips the search.
    pub search_duration: Option<Duration>,
    /// Pin gateway and load side to separate CPUs.
    pub pin: bool,
    /// Measure nginx as a reverse proxy beside the gateway.
    pub nginx: bool,
    /// Request shape (the model is always the generated config's; the key
    /// is set by the variant once the gateway runs).
    pub spec: RequestSpec,
    /// Where to write the JSON report.
    pub json: Option<PathBuf>,
    /// The Postgres database of the spend-logging variant.
    pub database_url: Option<String>,
    /// Measure the variant against a master-key gateway beside it instead
    /// of against the mock and nginx.
    pub paired: bool,
    /// With `paired`: the binary of the gateway beside (another build),
    /// instead of `gateway_bin`.
    pub baseline_bin: Option<PathBuf>,
    /// Virtual keys the load is spread over, each made as the variant's
    /// one key is (the variants with a virtual key only).
    pub keys: usize,
    /// Scopes each request is counted in (`scopes.rs`): 1 the key alone,
    /// up to 4 (its user, its team, the end user).
    pub scopes: usize,
    /// The kind of private Redis of the variants that use one.
    pub redis: RedisKind,
    /// Drive every target closed-loop to saturation instead of the
    /// open-loop rounds and the max-rate search (`saturate/`).
    pub saturate: bool,
    /// The nice value of this process and every process it starts, when
    /// asked for.
    pub nice: Option<i32>,
}

/// What the command line asked for.
#[derive(Debug)]
pub enum Parsed {
    /// Measure with these settings.
    Run(Box<OverheadArgs>),
    /// Print the usage text.
    Help,
}

/// Parses `loadgen overhead` flags.
pub fn parse(args: &mut Args) -> Result<Parsed, String> {
    let mut o = OverheadArgs {
        gateway_bin: gateway_proc::default_bin(),
        gateway_workers: 1,
        variant: Variant::MasterKey,
        rate: 1000.0,
        duration: Duration::from_secs(10),
        rounds: 3,
        connections: 64,
        p99_bound: Duration::from_millis(5),
        search_duration: Some(Duration::from_secs(2)),
        pin: true,
        nginx: true,
        spec: RequestSpec::default(),
        json: None,
        database_url: None,
        paired: false,
        baseline_bin: None,
        keys: 1,
        scopes: 1,
        redis: RedisKind::Single,
        saturate: false,
        nice: None,
    };
    let mut search = true;
    while let Some(flag) = args.next_flag()? {
        if flag == "model" {
            return Err(format!(
                "--model: overhead always asks for {}, the group its generated config serves",
                gateway_proc::MODEL
            ));
        }
        if o.spec.parse_flag(&flag, args)? {
            continue;
        }
        match flag.as_str() {
            "gateway-bin" => o.gateway_bin = args.value(&flag)?,
            "gateway-workers" => o.gateway_workers = args.value(&flag)?,
            "variant" => o.variant = Variant::parse(&args.value::<String>(&flag)?)?,
            "rate" => o.rate = args.value(&flag)?,
            "duration" => o.duration = args.value::<HumanDuration>(&flag)?.0,
            "rounds" => o.rounds = args.value(&flag)?,
            "connections" => o.connections = args.value(&flag)?,
            "p99-bound" => o.p99_bound = args.value::<HumanDuration>(&flag)?.0,
            "search-duration" => o.search_duration = Some(args.value::<HumanDuration>(&flag)?.0),
            "no-search" => search = false,
            "no-pin" => o.pin = false,
            "no-nginx" => o.nginx = false,
            "paired" => o.paired = true,
            "saturate" => o.saturate = true,
            "nice" => o.nice = Some(args.value(&flag)?),
            "baseline-bin" => o.baseline_bin = Some(args.value(&flag)?),
            "json" => o.json = Some(args.value(&flag)?),
            "database-url" => o.database_url = Some(args.value(&flag)?),
            "keys" => o.keys = crate::scale::args::parse_count(&args.value::<String>(&flag)?)?,
            "scopes" => o.scopes = args.value(&flag)?,
            "redis" => o.redis = RedisKind::parse(&args.value::<String>(&flag)?)?,
            "help" => return Ok(Parsed::Help),
            other => return Err(format!("unknown option --{other}\n\n{}", usage())),
        }
    }
    if !search {
        o.search_duration = None;
    }
    if o.rounds == 0 || o.gateway_workers == 0 || o.connections == 0 {
        return Err("--rounds, --gateway-workers and --connections must be at least 1".into());
    }
    if !(1..=MAX_KEYS).contains(&o.keys) {
        return Err(format!("--keys must be from 1 to {MAX_KEYS}"));
    }
    if o.keys > 1 && !o.variant.has_virtual_key() {
        return Err(format!(
            "--keys: --variant {} uses the master key",
            o.variant.name()
        ));
    }
    if !(1..=MAX_SCOPES).contains(&o.scopes) {
        return Err(format!("--scopes must be from 1 to {MAX_SCOPES}"));
    }
    if o.scopes > 1 && !o.variant.has_limits() {
        return Err(format!(
            "--scopes: --variant {} has no limits to count in more scopes",
            o.variant.name()
        ));
    }
    if o.scopes > 1 && o.paired {
        return Err("--scopes is not for --paired".into());
    }
    if o.redis == RedisKind::Cluster && !o.variant.needs_redis() {
        return Err(format!(
            "--redis cluster: --variant {} uses no Redis",
            o.variant.name()
        ));
    }
    if o.keys > 1 && o.paired {
        return Err("--keys is not for --paired".into());
    }
    if !(o.rate > 0.0 && o.rate.is_finite()) {
        return Err("--rate must be a positive number".into());
    }
    if o.variant.needs_database() && o.database_url.is_none() {
        return Err(format!(
            "--variant {} needs --database-url (an empty Postgres database)",
            o.variant.name()
        ));
    }
    if o.paired && matches!(o.variant, Variant::Messages | Variant::Responses) {
        return Err(format!(
            "--paired compares chat completions with master-key's; --variant {} uses another path",
            o.variant.name()
        ));
    }
    if o.nice.is_some_and(|n| !(-20..=19).contains(&n)) {
        return Err("--nice must be from -20 to 19".into());
    }
    if o.saturate && o.paired {
        return Err("--saturate measures every target closed-loop; --paired compares two gateways open-loop: choose one".into());
    }
    if o.saturate {
        // Closed-loop rounds replace the open-loop rounds and the search.
        o.search_duration = None;
    }
    if o.baseline_bin.is_some() && !o.paired {
        return Err("--baseline-bin compares two builds with --paired".into());
    }
    o.spec.models = vec![gateway_proc::MODEL.to_string()];
    if o.scopes >= 4 {
        o.spec.extra = Some(serde_json::Map::from_iter([(
            "user".to_string(),
            serde_json::Value::from(END_USER),
        )]));
    }
    if o.variant == Variant::CacheMiss {
        // Both sides of --paired send it: only the variant's gateway acts
        // on it (hashes the request and stores the answer).
        let controls = serde_json::json!({"no-cache": true});
        o.spec.extra = Some(serde_json::Map::from_iter([(
            "cache".to_string(),
            controls,
        )]));
    }
    Ok(Parsed::Run(Box::new(o)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Parsed, String> {
        parse(&mut Args::new(s.split_whitespace().map(String::from)))
    }

    #[test]
    fn keys_spread_a_virtual_key_variants_load() {
        let Parsed::Run(o) = parse_str("--variant redis-limits --keys 100k").unwrap() else {
            panic!("expected a run");
        };
        assert_eq!(o.keys, 100_000);
        let Parsed::Run(o) = parse_str("--variant lease-limits").unwrap() else {
            panic!("expected a run");
        };
        assert_eq!(o.keys, 1);
        for (bad, why) in [
            ("--variant master-key --keys 10", "master key"),
            ("--variant redis-limits --keys 0", "from 1 to"),
            ("--variant redis-limits --keys 2M", "from 1 to"),
            (
                "--variant redis-limits --keys 10 --paired",
                "not for --paired",
            ),
        ] {
            let err = parse_str(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn scopes_and_a_cluster_apply_to_variants_with_limits_in_redis() {
        let Parsed::Run(o) =
            parse_str("--variant full-pipeline --database-url x --scopes 4 --redis cluster")
                .unwrap()
        else {
            panic!("expected a run");
        };
        assert_eq!((o.scopes, o.redis), (4, RedisKind::Cluster));
        let user = o.spec.extra.as_ref().and_then(|e| e.get("user"));
        assert_eq!(
            user,
            Some(&serde_json::json!(END_USER)),
            "scope 4 names the end user"
        );
        let Parsed::Run(o) = parse_str("--variant redis-limits --scopes 3").unwrap() else {
            panic!("expected a run");
        };
        assert_eq!((o.scopes, o.redis), (3, RedisKind::Single));
        assert!(o.spec.extra.is_none(), "no end user below 4 scopes");
        for (bad, why) in [
            ("--variant redis-limits --scopes 0", "from 1 to 4"),
            ("--variant redis-limits --scopes 5", "from 1 to 4"),
            ("--variant virtual-key --scopes 2", "no limits"),
            (
                "--variant redis-limits --scopes 2 --paired",
                "not for --paired",
            ),
            ("--variant local-limits --redis cluster", "uses no Redis"),
            (
                "--variant redis-limits --redis sentinel",
                "not single or cluster",
            ),
        ] {
            let err = parse_str(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn saturate_replaces_the_open_loop_rounds_and_the_search() {
        let Parsed::Run(o) = parse_str(
            "--saturate --variant full-pipeline-lease --database-url x --connections 32 --duration 5s --rounds 3",
        )
        .unwrap() else {
            panic!("expected a run");
        };
        assert!(o.saturate);
        assert_eq!(o.nice, None);
        assert_eq!((o.connections, o.rounds), (32, 3));
        assert_eq!(o.duration, Duration::from_secs(5));
        assert_eq!(o.search_duration, None, "no max-rate search");
        let Parsed::Run(o) = parse_str("--variant master-key").unwrap() else {
            panic!("expected a run");
        };
        assert!(!o.saturate, "open loop unless asked");
        for (bad, why) in [
            ("--saturate --paired", "choose one"),
            ("--saturate --nice -21", "from -20 to 19"),
            ("--saturate --nice 20", "from -20 to 19"),
            ("--saturate --nice x", "--nice"),
            ("--saturate --rounds 0", "at least 1"),
            ("--saturate --connections 0", "at least 1"),
        ] {
            let err = parse_str(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert!(usage().contains("--saturate"));
        let Parsed::Run(o) = parse_str("--saturate --nice -10").unwrap() else {
            panic!("expected a run");
        };
        assert_eq!(o.nice, Some(-10));
    }

    #[test]
    fn parses_settings() {
        let Parsed::Run(o) = parse_str(
            "--gateway-bin /x/gw --gateway-workers 2 --rate 200 --duration 3s --rounds 2 \
             --p99-bound 10ms --no-search --no-pin --body-size 64k --stream",
        )
        .unwrap() else {
            panic!("help")
        };
        assert_eq!(o.gateway_bin, PathBuf::from("/x/gw"));
        assert_eq!((o.gateway_workers, o.rate, o.rounds), (2, 200.0, 2));
        assert_eq!(o.duration, Duration::from_secs(3));
        assert_eq!(o.p99_bound, Duration::from_millis(10));
        assert_eq!((o.search_duration, o.pin), (None, false));
        assert_eq!((o.spec.body_size, o.spec.stream), (65536, true));
        assert_eq!(o.spec.models, [gateway_proc::MODEL]);
    }

    #[test]
    fn variants_parse_and_spend_logging_needs_a_database() {
        let err = parse_str("--variant spend-logging").unwrap_err();
        assert!(err.contains("--database-url"), "{err}");
        let Parsed::Run(o) =
            parse_str("--variant spend-logging --database-url postgres://x/y").unwrap()
        else {
            panic!("help")
        };
        assert_eq!(o.database_url.as_deref(), Some("postgres://x/y"));
        let err = parse_str("--variant full-pipeline").unwrap_err();
        assert!(err.contains("full-pipeline needs --database-url"), "{err}");
        assert!(parse_str("--variant nope")
            .unwrap_err()
            .contains("unknown variant"));
        let Parsed::Run(o) = parse_str("--variant guardrail --paired").unwrap() else {
            panic!("help")
        };
        assert_eq!(o.variant, Variant::Guardrail);
        let Parsed::Run(o) = parse_str("--variant virtual-key").unwrap() else {
            panic!("help")
        };
        assert_eq!(o.variant, Variant::VirtualKey);
        let Parsed::Run(o) = parse_str("--variant redis-limits").unwrap() else {
            panic!("help")
        };
        assert_eq!(o.variant, Variant::RedisLimits);
        let Parsed::Run(o) = parse_str("--variant metrics --paired").unwrap() else {
            panic!("help")
        };
        assert!(o.paired);
        assert!(parse_str("--variant messages --paired")
            .unwrap_err()
            .contains("another path"));
        let Parsed::Run(o) = parse_str("--paired --baseline-bin /x/old --stream").unwrap() else {
            panic!("help")
        };
        assert_eq!(o.baseline_bin, Some(PathBuf::from("/x/old")));
        assert!(parse_str("--baseline-bin /x/old")
            .unwrap_err()
            .contains("two builds with --paired"));
        let Parsed::Run(o) =
            parse_str("--paired --variant lease-limits --baseline-bin /x/old").unwrap()
        else {
            panic!("help")
        };
        assert_eq!(
            super::super::paired::base_variant(&o),
            Variant::LeaseLimits,
            "two builds are compared on the variant's own path"
        );
        assert!(parse_str("--model x")
            .unwrap_err()
            .contains("always asks for"));
    }
}
