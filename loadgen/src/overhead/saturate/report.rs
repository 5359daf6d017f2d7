//! `--saturate`'s figures: per round and per target, the ratios between
//! targets, and the human table.

use std::fmt::Write as _;

use serde::Serialize;

use crate::affinity::Split;
use crate::command_stats::CommandStats;
use crate::latency::{fmt_us, Summary};

/// Load-side CPU use (in % of its CPUs) from which a target's throughput is
/// reported as bounded by the load generator rather than by the target.
pub const LOAD_BOUND_PCT: f64 = 90.0;

/// CPU time each process used over a window, in seconds; `None` for a
/// process the run does not have.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ProcessCpu {
    /// The gateway (idle in the other targets' rounds).
    pub gateway: f64,
    /// nginx's master and workers.
    pub nginx: Option<f64>,
    /// The private `redis-server` (every master of a Cluster).
    pub redis: Option<f64>,
    /// The Postgres processes serving the variant's database.
    pub postgres: Option<f64>,
    /// This process: the load generator and the in-process mock.
    pub load_side: f64,
    /// The whole machine, every CPU busy time summed (`/proc/stat`).
    pub machine: f64,
    /// Of `machine`, the time in interrupts (the loopback network's
    /// receive work). Informative: quiet rounds show most of it inside
    /// the processes' own figures (`other` goes below zero by nearly all
    /// of it when it is subtracted as well).
    pub irq: f64,
    /// Time the hypervisor gave to others, every CPU summed.
    pub steal: f64,
}

impl ProcessCpu {
    /// What the machine ran besides the processes of the run (other
    /// sessions' work): the machine's busy time minus every process
    /// counted. Clock-tick rounding can make it slightly negative.
    pub fn other(&self) -> f64 {
        self.machine
            - self.gateway
            - self.nginx.unwrap_or(0.0)
            - self.redis.unwrap_or(0.0)
            - self.postgres.unwrap_or(0.0)
            - self.load_side
    }

    /// The sum of `self` and `other`, field by field.
    pub fn add(&self, other: &ProcessCpu) -> ProcessCpu {
        let opt = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        ProcessCpu {
            gateway: self.gateway + other.gateway,
            nginx: opt(self.nginx, other.nginx),
            redis: opt(self.redis, other.redis),
            postgres: opt(self.postgres, other.postgres),
            load_side: self.load_side + other.load_side,
            machine: self.machine + other.machine,
            irq: self.irq + other.irq,
            steal: self.steal + other.steal,
        }
    }

    /// Every figure divided by `requests` and scaled to µs: CPU per
    /// request (zero requests give zeros).
    pub fn per_request_us(&self, requests: u64) -> ProcessCpu {
        let n = requests.max(1) as f64;
        let f = |s: f64| s * 1e6 / n;
        ProcessCpu {
            gateway: f(self.gateway),
            nginx: self.nginx.map(f),
            redis: self.redis.map(f),
            postgres: self.postgres.map(f),
            load_side: f(self.load_side),
            machine: f(self.machine),
            irq: f(self.irq),
            steal: f(self.steal),
        }
    }
}

/// One target's run in one round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundFigures {
    /// Round number, from 1.
    pub round: usize,
    /// Its place in the round's order, from 1.
    pub position: usize,
    /// 2xx responses.
    pub ok: u64,
    /// Non-2xx responses and requests without a complete response.
    pub errors: u64,
    /// Seconds from the first send to the last answer.
    pub elapsed_s: f64,
    /// Seconds the CPU figures cover (the run, and for the gateway with
    /// spend rows the settling time after it).
    pub window_s: f64,
    /// 2xx responses per second of `elapsed_s`.
    pub requests_per_s: f64,
    /// Median latency (from the actual send).
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// CPU time of each process over the window, seconds.
    pub cpu_s: ProcessCpu,
    /// Script calls (`EVALSHA`, `EVAL`) the private Redis ran over the
    /// window, every master of a Cluster (those of `redis_commands`, kept
    /// apart for the JSON's readers); none without Redis.
    pub redis_calls: Option<u64>,
    /// Every command the private Redis ran over the window, with its
    /// time (`INFO commandstats`, every master); none without Redis.
    pub redis_commands: Option<CommandStats>,
    /// The 1-minute load average when the run ended.
    pub load_average: f64,
}

impl RoundFigures {
    /// Whether the round counts: every request got a 2xx, and some did.
    pub fn valid(&self) -> bool {
        self.errors == 0 && self.ok > 0
    }
}

/// One target over every round.
#[derive(Debug, Clone, Serialize)]
pub struct TargetFigures {
    /// `direct`, `nginx` or `gateway`.
    pub name: &'static str,
    /// Every round, in order.
    pub rounds: Vec<RoundFigures>,
    /// Rounds without an error.
    pub valid_rounds: usize,
    /// Errors over every round (any makes its round invalid).
    pub errors: u64,
    /// 2xx responses per second over the valid rounds (their 2xx summed
    /// over their elapsed time summed); none when no round was valid.
    pub requests_per_s: Option<f64>,
    /// Latency over the valid rounds (from the actual send).
    pub latency: Summary,
    /// CPU per 2xx response of each process over the valid rounds, µs.
    pub cpu_us_per_request: ProcessCpu,
    /// Redis script calls per 2xx response over the valid rounds (below 1
    /// when a call carries several requests' operations: the limiter's
    /// group commit); none without Redis.
    pub redis_calls_per_request: Option<f64>,
    /// Where Redis's time went per 2xx response over the valid rounds, as
    /// Redis clocks its commands; none without Redis.
    pub redis_time: Option<RedisTime>,
    /// The proxy's CPU use over the valid rounds (nginx's, or the
    /// gateway's alone), % of the CPUs it is pinned to; none for the mock.
    pub proxy_cpu_pct: Option<f64>,
    /// The load side's CPU use over the valid rounds, % of its CPUs.
    pub load_cpu_pct: f64,
    /// The machine's CPU use over the valid rounds, % of all its CPUs.
    pub machine_busy_pct: f64,
    /// Whether the load side was near saturation (>= [`LOAD_BOUND_PCT`]):
    /// then the target's throughput is a lower bound, set by the load side.
    pub load_bound: bool,
}

/// Where Redis's time went per request, as `INFO commandstats` clocks it
/// (µs). A command a script calls is counted in the script's time and
/// under its own name: `scripts_us` less the time of the commands they
/// called is the scripts' own work (Lua, their arguments and replies).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RedisTime {
    /// Script calls (`EVALSHA`, `EVAL`, `FCALL`), their commands included.
    pub scripts_us: f64,
    /// Every other command, inside scripts or sent directly (not the
    /// measuring side's `INFO` and resets).
    pub commands_us: f64,
    /// The commands that took the most time: name, calls and µs per
    /// request.
    pub top: Vec<(String, f64, f64)>,
}

/// Commands [`RedisTime::top`] lists.
const TOP_COMMANDS: usize = 6;

impl RedisTime {
    /// `stats` over `requests` requests.
    fn per_request(stats: &CommandStats, requests: u64) -> RedisTime {
        let n = requests.max(1) as f64;
        RedisTime {
            scripts_us: stats.scripts().usec as f64 / n,
            commands_us: stats.commands().usec as f64 / n,
            top: stats
                .top_commands(TOP_COMMANDS)
                .into_iter()
                .map(|(name, t)| (name.to_uppercase(), t.calls as f64 / n, t.usec as f64 / n))
                .collect(),
        }
    }
}

impl TargetFigures {
    /// The figures of `name` from its `rounds`, with `latency` merged over
    /// the valid ones; the proxy runs on `cpus.proxy` CPUs, the load side
    /// on `cpus.load` of the machine's `cpus.machine`.
    pub fn new(
        name: &'static str,
        rounds: Vec<RoundFigures>,
        latency: Summary,
        cpus: Cpus,
    ) -> TargetFigures {
        let valid: Vec<&RoundFigures> = rounds.iter().filter(|r| r.valid()).collect();
        let ok: u64 = valid.iter().map(|r| r.ok).sum();
        let elapsed: f64 = valid.iter().map(|r| r.elapsed_s).sum();
        let window: f64 = valid.iter().map(|r| r.window_s).sum();
        let cpu = valid
            .iter()
            .fold(ProcessCpu::default(), |sum, r| sum.add(&r.cpu_s));
        let redis_commands = valid
            .iter()
            .try_fold(CommandStats::default(), |mut sum, r| {
                sum.add(r.redis_commands.as_ref()?);
                Some(sum)
            });
        let pct = |used: f64, cpus: usize| match window > 0.0 {
            true => 100.0 * used / window / cpus.max(1) as f64,
            false => 0.0,
        };
        let load_cpu_pct = pct(cpu.load_side, cpus.load);
        let proxy = match name {
            "nginx" => cpu.nginx,
            "gateway" => Some(cpu.gateway),
            _ => None,
        };
        TargetFigures {
            name,
            valid_rounds: valid.len(),
            errors: rounds.iter().map(|r| r.errors).sum(),
            requests_per_s: (elapsed > 0.0).then(|| ok as f64 / elapsed),
            latency,
            cpu_us_per_request: cpu.per_request_us(ok),
            redis_calls_per_request: redis_commands
                .as_ref()
                .filter(|_| ok > 0)
                .map(|c| c.scripts().calls as f64 / ok as f64),
            redis_time: redis_commands
                .filter(|_| ok > 0)
                .map(|c| RedisTime::per_request(&c, ok)),
            proxy_cpu_pct: proxy.map(|used| pct(used, cpus.proxy)),
            load_cpu_pct,
            machine_busy_pct: pct(cpu.machine, cpus.machine),
            load_bound: load_cpu_pct >= LOAD_BOUND_PCT,
            rounds,
        }
    }

    /// The CPU per request of the process serving this target (nginx, or
    /// the gateway with Redis and Postgres), µs; none for the mock direct.
    pub fn serving_cpu_us(&self) -> Option<f64> {
        let c = &self.cpu_us_per_request;
        match self.name {
            "nginx" => c.nginx,
            "gateway" => Some(c.gateway + c.redis.unwrap_or(0.0) + c.postgres.unwrap_or(0.0)),
            _ => None,
        }
    }
}

/// How many CPUs each side of the run has, for CPU use in %.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpus {
    /// The proxy's (the gateway's or nginx's): its pinned CPUs.
    pub proxy: usize,
    /// The load generator's and the mock's.
    pub load: usize,
    /// The machine's.
    pub machine: usize,
}

/// One target's throughput as a multiple of another's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratio {
    /// The target divided.
    pub of: &'static str,
    /// The target it is divided by.
    pub to: &'static str,
    /// Over all valid rounds of each.
    pub overall: f64,
    /// Rounds in which both were valid.
    pub rounds: usize,
    /// The lowest per-round ratio among them.
    pub round_min: f64,
    /// Their median.
    pub round_median: f64,
    /// The highest.
    pub round_max: f64,
}

impl Ratio {
    /// `of`'s throughput over `to`'s; none unless both have a valid round.
    pub fn between(of: &TargetFigures, to: &TargetFigures) -> Option<Ratio> {
        let overall = of.requests_per_s? / to.requests_per_s.filter(|r| *r > 0.0)?;
        let mut per_round: Vec<f64> = of
            .rounds
            .iter()
            .filter(|r| r.valid())
            .filter_map(|a| {
                let b = to
                    .rounds
                    .iter()
                    .find(|b| b.round == a.round && b.valid() && b.requests_per_s > 0.0)?;
                Some(a.requests_per_s / b.requests_per_s)
            })
            .collect();
        per_round.sort_by(f64::total_cmp);
        Some(Ratio {
            of: of.name,
            to: to.name,
            overall,
            rounds: per_round.len(),
            round_min: per_round.first().copied().unwrap_or(overall),
            round_median: median(&per_round).unwrap_or(overall),
            round_max: per_round.last().copied().unwrap_or(overall),
        })
    }
}

/// The median of sorted `values` (the mean of the middle two for an even
/// count).
fn median(sorted: &[f64]) -> Option<f64> {
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[mid]),
        _ => Some((sorted[mid - 1] + sorted[mid]) / 2.0),
    }
}

/// Everything `loadgen overhead --saturate` reports.
#[derive(Debug, Clone, Serialize)]
pub struct SaturationReport {
    /// Configuration variant.
    pub variant: &'static str,
    /// Scopes each request was counted in (`--scopes`).
    pub scopes: usize,
    /// The private Redis (`single` or `cluster`), for variants that use one.
    pub redis: Option<&'static str>,
    /// The gateway binary.
    pub gateway_bin: String,
    /// Gateway worker threads (and nginx's workers).
    pub gateway_workers: usize,
    /// CPU placement, when pinned.
    pub cpus: Option<Split>,
    /// Where everything ran, in words.
    pub placement: String,
    /// The nice value of every process but Postgres's (`--nice`), if set.
    pub nice: Option<i32>,
    /// Closed-loop connections, each sending its next request when its
    /// last answer came.
    pub connections: usize,
    /// Seconds per round per target.
    pub round_s: f64,
    /// Number of rounds.
    pub rounds: usize,
    /// Request body size.
    pub body_bytes: usize,
    /// Whether responses were streamed.
    pub stream: bool,
    /// Every target, in the order of odd rounds (even rounds reverse it).
    pub targets: Vec<TargetFigures>,
    /// The gateway's throughput over nginx's, when both were measured.
    pub gateway_to_nginx: Option<Ratio>,
    /// The gateway's throughput over the mock's alone.
    pub gateway_to_direct: Option<Ratio>,
    /// Load averages (1, 5, 15 minutes) before the first round.
    pub load_average_before: [f64; 3],
    /// The same after the last round.
    pub load_average_after: [f64; 3],
    /// Requests the mock served over the whole session.
    pub mock_served: u64,
    /// 2xx responses the load generator counted over the whole session,
    /// the gateway's cache hits left out (the mock never saw them).
    pub loadgen_2xx: u64,
}

impl SaturationReport {
    /// Every round valid for every target.
    pub fn all_valid(&self) -> bool {
        self.targets.iter().all(|t| t.valid_rounds == self.rounds)
    }

    /// The human table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let names: Vec<&str> = self.targets.iter().map(|x| x.name).collect();
        let mut reversed = names.clone();
        reversed.reverse();
        let _ = writeln!(
            t,
            "loadgen overhead --saturate: variant {}{}{}, closed loop, {} connections, {} rounds x {:.0}s per target (order {} / {}), {}-byte bodies{}",
            self.variant,
            match self.scopes {
                1 => String::new(),
                n => format!(", {n} scopes"),
            },
            self.redis.map_or(String::new(), |r| format!(", Redis {r}")),
            self.connections,
            self.rounds,
            self.round_s,
            names.join(" "),
            reversed.join(" "),
            self.body_bytes,
            if self.stream { ", streamed" } else { "" }
        );
        let _ = writeln!(
            t,
            "{} ({} worker(s)); {}",
            self.gateway_bin, self.gateway_workers, self.placement
        );
        let la = |l: [f64; 3]| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]);
        let _ = writeln!(
            t,
            "load average before {}, after {}\n",
            la(self.load_average_before),
            la(self.load_average_after)
        );
        let _ = writeln!(
            t,
            "  {:<8} {:>9} {:>6} {:>6} {:>9} {:>9}   {:>7} {:>7} {:>7} {:>8} {:>7} {:>5} {:>7} {:>8}   {:>6} {:>5} {:>5}",
            "target", "req/s", "valid", "errors", "p50", "p99",
            "gateway", "nginx", "redis", "postgres", "load", "irq", "other", "machine",
            "proxy%", "load%", "busy%"
        );
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        for x in &self.targets {
            let c = &x.cpu_us_per_request;
            let _ = writeln!(
                t,
                "  {:<8} {:>9} {:>6} {:>6} {:>9} {:>9}   {:>7.1} {:>7} {:>7} {:>8} {:>7.1} {:>5.1} {:>7.1} {:>8.1}   {:>6} {:>5.0} {:>5.0}{}",
                x.name,
                x.requests_per_s.map_or("-".into(), |r| format!("{r:.0}")),
                format!("{}/{}", x.valid_rounds, x.rounds.len()),
                x.errors,
                fmt_us(x.latency.p50_us as i64),
                fmt_us(x.latency.p99_us as i64),
                c.gateway,
                opt(c.nginx),
                opt(c.redis),
                opt(c.postgres),
                c.load_side,
                c.irq,
                c.other(),
                c.machine,
                x.proxy_cpu_pct.map_or("-".into(), |p| format!("{p:.0}")),
                x.load_cpu_pct,
                x.machine_busy_pct,
                if x.load_bound { "  [load side saturated]" } else { "" }
            );
        }
        let _ = writeln!(
            t,
            "  (CPU columns: µs per 2xx response of each process over the valid rounds; irq = the machine's interrupt\n   time (loopback receive work, mostly inside the processes' figures); other = its busy time minus every process of the run; proxy% = nginx's or the gateway's use of its pinned CPUs;\n   load% = the load side's use of its CPUs; busy% = the machine's)"
        );
        t.push('\n');
        for r in [&self.gateway_to_nginx, &self.gateway_to_direct]
            .into_iter()
            .flatten()
        {
            let _ = writeln!(
                t,
                "throughput {} / {}: {:.2}x (per round {:.2}-{:.2}, median {:.2}, over {} rounds)",
                r.of, r.to, r.overall, r.round_min, r.round_max, r.round_median, r.rounds
            );
        }
        if let (Some(g), Some(n)) = (
            self.target("gateway")
                .and_then(TargetFigures::serving_cpu_us),
            self.target("nginx").and_then(TargetFigures::serving_cpu_us),
        ) {
            if n > 0.0 {
                let _ = writeln!(
                    t,
                    "CPU per request at saturation: gateway + redis-server + postgres {g:.1} µs, nginx {n:.1} µs ({:.2}x)",
                    g / n
                );
            }
        }
        if let Some(calls) = self
            .target("gateway")
            .and_then(|g| g.redis_calls_per_request)
            .filter(|c| *c > 0.0)
        {
            let _ = writeln!(
                t,
                "Redis script calls per request (gateway): {calls:.3} (one call a {:.1} requests' operations)",
                1.0 / calls
            );
        }
        if let Some(time) = self.target("gateway").and_then(|g| g.redis_time.as_ref()) {
            let top: Vec<String> = time
                .top
                .iter()
                .map(|(name, calls, us)| format!("{name} {calls:.2} / {us:.2} µs"))
                .collect();
            let _ = writeln!(
                t,
                "Redis time per request (gateway, INFO commandstats): scripts {:.1} µs; commands {:.1} µs (calls / time: {})",
                time.scripts_us,
                time.commands_us,
                top.join(", ")
            );
        }
        if self.targets.iter().any(|x| x.load_bound) {
            let _ = writeln!(
                t,
                "a target marked [load side saturated] was held back by the load generator: its req/s is a lower bound"
            );
        }
        if !self.all_valid() {
            let _ = writeln!(
                t,
                "INVALID ROUNDS: a round with any non-2xx or failed request is left out of every figure above"
            );
        }
        let _ = writeln!(t, "\nper round (req/s, p50 / p99, 1-minute load average):");
        for round in 1..=self.rounds {
            let mut parts: Vec<(usize, String)> = self
                .targets
                .iter()
                .filter_map(|x| {
                    let r = x.rounds.iter().find(|r| r.round == round)?;
                    Some((
                        r.position,
                        format!(
                            "{} {:.0} {} / {}{}",
                            x.name,
                            r.requests_per_s,
                            fmt_us(r.p50_us as i64),
                            fmt_us(r.p99_us as i64),
                            match r.valid() {
                                true => String::new(),
                                false => format!(" INVALID ({} errors)", r.errors),
                            }
                        ),
                    ))
                })
                .collect();
            parts.sort_by_key(|p| p.0);
            let load = self
                .targets
                .iter()
                .filter_map(|x| x.rounds.iter().find(|r| r.round == round))
                .map(|r| r.load_average)
                .fold(0.0, f64::max);
            let parts: Vec<String> = parts.into_iter().map(|p| p.1).collect();
            let _ = writeln!(t, "  round {round}: {}; load {load:.2}", parts.join(", "));
        }
        let check = if self.mock_served == self.loadgen_2xx {
            "matches"
        } else {
            "DOES NOT match"
        };
        let _ = writeln!(
            t,
            "\nmock served {} requests; {check} the load generator's {} 2xx (cache hits left out)",
            self.mock_served, self.loadgen_2xx
        );
        t
    }

    /// The target named `name`.
    pub fn target(&self, name: &str) -> Option<&TargetFigures> {
        self.targets.iter().find(|x| x.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round of `rps` 2xx/s over 5 s with `errors`, the proxy having used
    /// `proxy_s` CPU seconds and the load side 4 s.
    fn round(round: usize, rps: f64, errors: u64, proxy_s: f64) -> RoundFigures {
        RoundFigures {
            round,
            position: 1,
            ok: (rps * 5.0) as u64,
            errors,
            elapsed_s: 5.0,
            window_s: 5.0,
            requests_per_s: rps,
            p50_us: 500,
            p99_us: 2_000,
            cpu_s: ProcessCpu {
                gateway: proxy_s,
                nginx: Some(0.0),
                redis: Some(proxy_s / 2.0),
                postgres: None,
                load_side: 4.0,
                machine: proxy_s * 1.5 + 4.5,
                irq: 0.25,
                steal: 0.0,
            },
            redis_calls: Some((rps * 5.0 / 10.0) as u64),
            redis_commands: Some(commands(rps * 5.0)),
            load_average: 2.0,
        }
    }

    /// What Redis ran for `requests` requests: a script call a ten, 20 µs
    /// each; two HMGETs a request, 1 µs each; a ZADD a call, 3 µs; and
    /// the measuring side's INFO.
    fn commands(requests: f64) -> CommandStats {
        let r = requests as u64;
        CommandStats::parse(&format!(
            "cmdstat_evalsha:calls={},usec={}\r\ncmdstat_hmget:calls={},usec={}\r\ncmdstat_zadd:calls={},usec={}\r\ncmdstat_info:calls=5,usec=900\r\n",
            r / 10,
            r * 2,
            r * 2,
            r * 2,
            r / 10,
            r * 3 / 10
        ))
    }

    fn target(name: &'static str, rounds: Vec<RoundFigures>) -> TargetFigures {
        let cpus = Cpus {
            proxy: 1,
            load: 1,
            machine: 2,
        };
        TargetFigures::new(name, rounds, Summary::default(), cpus)
    }

    #[test]
    fn a_round_with_an_error_counts_in_no_figure() {
        let t = target(
            "gateway",
            vec![
                round(1, 10_000.0, 0, 4.0),
                round(2, 1_000.0, 3, 4.0),
                round(3, 12_000.0, 0, 4.0),
            ],
        );
        assert_eq!((t.valid_rounds, t.errors), (2, 3));
        // (50,000 + 60,000) 2xx over 10 s of the valid rounds.
        assert_eq!(t.requests_per_s, Some(11_000.0));
        // 8 s of gateway CPU over 110,000 requests.
        let c = t.cpu_us_per_request;
        assert!((c.gateway - 8.0e6 / 110_000.0).abs() < 1e-9, "{c:?}");
        assert_eq!(c.redis, Some(c.gateway / 2.0));
        assert_eq!(c.postgres, None);
        // A Redis call a ten requests, over the valid rounds only.
        assert_eq!(t.redis_calls_per_request, Some(0.1));
        // Redis's time per request over the valid rounds only: scripts
        // 2 µs, commands (not INFO) 2.3 µs, HMGET first.
        let time = t.redis_time.as_ref().unwrap();
        assert!((time.scripts_us - 2.0).abs() < 1e-9, "{time:?}");
        assert!((time.commands_us - 2.3).abs() < 1e-9, "{time:?}");
        assert_eq!(
            time.top,
            vec![
                ("HMGET".to_string(), 2.0, 2.0),
                ("ZADD".to_string(), 0.1, 0.3)
            ]
        );
        // Machine: 2 x (4 x 1.5 + 4.5) s; other = machine - gateway -
        // redis - load side (interrupt time is mostly inside them).
        let other_s = 21.0 - 8.0 - 4.0 - 8.0;
        assert!((c.other() - other_s * 1e6 / 110_000.0).abs() < 1e-6);
        // The load side used 8 s of its one CPU over 10 s.
        assert!((t.load_cpu_pct - 80.0).abs() < 1e-9);
        assert_eq!(
            t.proxy_cpu_pct,
            Some(80.0),
            "8 s of the gateway's one CPU over 10 s"
        );
        assert!(!t.load_bound);
        assert!(
            (t.machine_busy_pct - 105.0).abs() < 1e-9,
            "21 s of 2 CPUs x 10 s"
        );
        assert_eq!(
            t.serving_cpu_us(),
            Some(c.gateway + c.redis.unwrap()),
            "the gateway's requests cost Redis's CPU too"
        );
        let none = target("nginx", vec![round(1, 10_000.0, 1, 4.0)]);
        assert_eq!((none.valid_rounds, none.requests_per_s), (0, None));
        let empty = RoundFigures {
            ok: 0,
            ..round(1, 0.0, 0, 0.0)
        };
        assert!(!empty.valid(), "a round without any 2xx is invalid");
    }

    #[test]
    fn the_load_side_at_saturation_marks_a_lower_bound() {
        let mut r = round(1, 30_000.0, 0, 4.0);
        r.cpu_s.load_side = 4.6;
        assert!(target("nginx", vec![r]).load_bound);
    }

    #[test]
    fn ratios_overall_and_per_round_over_rounds_valid_for_both() {
        let nginx = target(
            "nginx",
            vec![
                round(1, 20_000.0, 0, 1.0),
                round(2, 25_000.0, 0, 1.0),
                round(3, 40_000.0, 0, 1.0),
                round(4, 30_000.0, 1, 1.0),
            ],
        );
        let gateway = target(
            "gateway",
            vec![
                round(1, 10_000.0, 0, 4.0),
                round(2, 10_000.0, 0, 4.0),
                round(3, 12_000.0, 0, 4.0),
                round(4, 12_000.0, 0, 4.0),
            ],
        );
        let r = Ratio::between(&gateway, &nginx).unwrap();
        assert_eq!((r.of, r.to, r.rounds), ("gateway", "nginx", 3));
        // 44,000 / 4 rounds over 85,000 / 3 rounds.
        assert!((r.overall - 11_000.0 / (85_000.0 / 3.0)).abs() < 1e-12);
        assert_eq!((r.round_min, r.round_max), (0.3, 0.5));
        assert_eq!(r.round_median, 0.4);
        let broken = target("nginx", vec![round(1, 1.0, 5, 1.0)]);
        assert_eq!(Ratio::between(&gateway, &broken), None);
        assert_eq!(median(&[1.0, 2.0, 3.0, 4.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn the_table_states_ratios_processes_and_invalid_rounds() {
        let mut n = round(1, 20_000.0, 0, 1.0);
        n.cpu_s.nginx = Some(2.0);
        let nginx = target("nginx", vec![n]);
        let mut gateway = target(
            "gateway",
            vec![round(1, 10_000.0, 0, 4.0), round(2, 9_000.0, 2, 4.0)],
        );
        gateway.rounds[1].position = 3;
        let mut report = SaturationReport {
            variant: "full-pipeline",
            scopes: 1,
            redis: Some("single"),
            gateway_bin: "gw".into(),
            gateway_workers: 1,
            cpus: None,
            placement: "here".into(),
            nice: None,
            connections: 32,
            round_s: 5.0,
            rounds: 2,
            body_bytes: 1024,
            stream: false,
            gateway_to_nginx: Ratio::between(&gateway, &nginx),
            gateway_to_direct: None,
            targets: vec![nginx, gateway],
            load_average_before: [1.0, 0.5, 0.25],
            load_average_after: [2.0, 1.0, 0.5],
            mock_served: 7,
            loadgen_2xx: 7,
        };
        let t = report.table();
        assert!(t.contains("order nginx gateway / gateway nginx"), "{t}");
        assert!(t.contains("throughput gateway / nginx: 0.50x"), "{t}");
        assert!(t.contains("load average before 1.00 0.50 0.25, after 2.00 1.00 0.50"));
        assert!(t.contains("INVALID ROUNDS"), "{t}");
        assert!(
            t.contains("gateway 9000 500µs / 2.00ms INVALID (2 errors)"),
            "{t}"
        );
        // 4 s of gateway and 2 s of Redis over 50,000 requests; nginx 2 s
        // over 100,000.
        assert!(
            t.contains("gateway + redis-server + postgres 120.0 µs, nginx 20.0 µs (6.00x)"),
            "{t}"
        );
        assert!(t.contains("; matches the load generator's 7 2xx"), "{t}");
        assert!(
            t.contains(
                "Redis script calls per request (gateway): 0.100 (one call a 10.0 requests' operations)"
            ),
            "{t}"
        );
        assert!(
            t.contains(
                "Redis time per request (gateway, INFO commandstats): scripts 2.0 µs; commands 2.3 µs (calls / time: HMGET 2.00 / 2.00 µs, ZADD 0.10 / 0.30 µs)"
            ),
            "{t}"
        );
        assert!(!report.all_valid());
        report.targets[1].valid_rounds = 2;
        report.targets[0].valid_rounds = 2;
        assert!(report.all_valid());
    }
}
