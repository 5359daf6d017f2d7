//! `loadgen overhead --saturate`: throughput at saturation, closed loop.
//! Every connection sends its next request as soon as its last answer
//! came, for a round's length, against each target in turn (the mock
//! direct, nginx, the gateway), the order reversed every other round so a
//! drift of the machine weighs on every target alike. Each run reports the
//! 2xx per second, the latency, the errors (any makes the round invalid)
//! and the CPU every process of the run used meanwhile (the gateway,
//! nginx, `redis-server`, Postgres, the load side, and the whole machine,
//! so what other work took is visible too).

pub mod report;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{RequestSpec, Target};
use crate::command_stats::CommandStats;
use crate::latency::Latencies;
use crate::load::{self, LoadConfig, LoadResult, Mode};
use crate::nginx_proc::NginxProcess;
use crate::postgres_procs::{CpuSnapshot, PostgresProcs};
use crate::procfs::{self, MachineCpu};
use crate::redis_target::RedisTarget;
use report::{Cpus, ProcessCpu, RoundFigures, TargetFigures};

/// Length of the discarded warm-up run per target.
const WARM_UP: Duration = Duration::from_secs(1);
/// Per-request timeout of every run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One target of the session.
pub struct Contender {
    /// `direct`, `nginx` or `gateway`.
    pub name: &'static str,
    /// Where its requests go.
    pub target: Target,
    /// How long after each of its runs its CPU is still counted (the spend
    /// writer's batch, for the gateway with spend rows in Postgres).
    pub settle: Duration,
}

/// The processes whose CPU every run counts.
pub struct Meters<'a> {
    /// The gateway's pid.
    pub gateway: u32,
    /// nginx, when measured.
    pub nginx: Option<&'a NginxProcess>,
    /// The variant's private Redis.
    pub redis: Option<&'a RedisTarget>,
    /// The Postgres processes serving the variant's database.
    pub postgres: Option<&'a PostgresProcs>,
}

/// CPU time so far of every process [`Meters`] counts.
struct Reading {
    at: Instant,
    gateway: Duration,
    nginx: Option<Duration>,
    redis: Option<Duration>,
    redis_commands: Option<CommandStats>,
    postgres: Option<CpuSnapshot>,
    load_side: Duration,
    machine: MachineCpu,
}

impl Meters<'_> {
    fn read(&self) -> Result<Reading, String> {
        let redis = match self.redis {
            Some(r) => {
                let mut total = Duration::ZERO;
                for pid in r.pids() {
                    total += procfs::cpu_time(pid)?;
                }
                Some(total)
            }
            None => None,
        };
        Ok(Reading {
            redis_commands: self.redis.map(RedisTarget::command_stats).transpose()?,
            gateway: procfs::cpu_time(self.gateway)?,
            nginx: self.nginx.map(NginxProcess::cpu_time).transpose()?,
            redis,
            postgres: self.postgres.map(PostgresProcs::snapshot).transpose()?,
            load_side: procfs::cpu_time(std::process::id())?,
            machine: procfs::machine_cpu()?,
            at: Instant::now(),
        })
    }
}

impl Reading {
    /// Seconds of wall time, each process's CPU and what Redis ran from
    /// `before` to `self`.
    fn since(&self, before: &Reading) -> (f64, ProcessCpu, Option<CommandStats>) {
        let s = |a: Duration, b: Duration| a.saturating_sub(b).as_secs_f64();
        let opt = |a: Option<Duration>, b: Option<Duration>| Some(s(a?, b?));
        let postgres = match (&self.postgres, &before.postgres) {
            (Some(a), Some(b)) => Some(a.used_since(b).as_secs_f64()),
            _ => None,
        };
        let cpu = ProcessCpu {
            gateway: s(self.gateway, before.gateway),
            nginx: opt(self.nginx, before.nginx),
            redis: opt(self.redis, before.redis),
            postgres,
            load_side: s(self.load_side, before.load_side),
            machine: s(self.machine.busy, before.machine.busy),
            irq: s(self.machine.irq, before.machine.irq),
            steal: s(self.machine.steal, before.machine.steal),
        };
        let redis_commands = match (&self.redis_commands, &before.redis_commands) {
            (Some(a), Some(b)) => Some(a.since(b)),
            _ => None,
        };
        (
            self.at.saturating_duration_since(before.at).as_secs_f64(),
            cpu,
            redis_commands,
        )
    }
}

/// What one session measures and with which load.
pub struct Session<'a> {
    /// The targets, in the order of odd rounds.
    pub contenders: Vec<Contender>,
    /// The processes counted.
    pub meters: Meters<'a>,
    /// The requests (the variant's key or keys).
    pub spec: RequestSpec,
    /// Closed-loop connections.
    pub connections: usize,
    /// The CPUs of the proxies and of the load side (for their use in %).
    pub cpus: Cpus,
}

/// What [`Session::measure`] found: each target's figures, and the 2xx
/// the load generator counted (warm-ups included), to check against the
/// mock's count.
pub struct Measured {
    /// Per target, in the order of [`Session::contenders`].
    pub targets: Vec<TargetFigures>,
    /// 2xx responses over every run, cache hits left out.
    pub ok_total: u64,
}

impl Session<'_> {
    /// Warms each target up, then runs `rounds` rounds of `duration` per
    /// target in [`order`].
    pub fn measure(&self, rounds: usize, duration: Duration) -> Result<Measured, String> {
        let mut ok_total = 0;
        for c in &self.contenders {
            ok_total += counted(&self.run(c, WARM_UP)?);
        }
        let n = self.contenders.len();
        let mut figures: Vec<Vec<RoundFigures>> = vec![Vec::with_capacity(rounds); n];
        let mut latency = vec![Latencies::default(); n];
        for round in 1..=rounds {
            for (place, i) in order(round, n).into_iter().enumerate() {
                let c = &self.contenders[i];
                let before = self.meters.read()?;
                let result = self.run(c, duration)?;
                std::thread::sleep(c.settle);
                let (window_s, cpu_s, redis_commands) = self.meters.read()?.since(&before);
                ok_total += counted(&result);
                let summary = result.latency.summary();
                let r = RoundFigures {
                    round,
                    position: place + 1,
                    ok: result.ok(),
                    errors: errors(&result),
                    elapsed_s: result.elapsed.as_secs_f64(),
                    window_s,
                    requests_per_s: result.ok() as f64
                        / result.elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
                    p50_us: summary.p50_us,
                    p99_us: summary.p99_us,
                    cpu_s,
                    redis_calls: redis_commands.as_ref().map(|c| c.scripts().calls),
                    redis_commands,
                    load_average: procfs::load_average()?[0],
                };
                if r.valid() {
                    latency[i].merge(&result.latency);
                }
                figures[i].push(r);
            }
        }
        let targets = self
            .contenders
            .iter()
            .zip(figures)
            .zip(latency)
            .map(|((c, rounds), l)| TargetFigures::new(c.name, rounds, l.summary(), self.cpus))
            .collect();
        Ok(Measured { targets, ok_total })
    }

    /// One closed-loop run of `duration` against `c`.
    fn run(&self, c: &Contender, duration: Duration) -> Result<LoadResult, String> {
        let config = LoadConfig {
            target: c.target.clone(),
            spec: self.spec.clone(),
            mode: Mode::Closed,
            connections: self.connections,
            workers: 1,
            duration: Some(duration),
            requests: None,
            timeout: REQUEST_TIMEOUT,
            ramp: Duration::ZERO,
        };
        load::run(&config, &Arc::default())
    }
}

/// The 2xx of `r` the mock served (a cache hit is a 2xx it never saw).
fn counted(r: &LoadResult) -> u64 {
    r.ok().saturating_sub(r.cache_hits)
}

/// Requests of `r` without a 2xx: other statuses and failures.
fn errors(r: &LoadResult) -> u64 {
    r.completed().saturating_sub(r.ok()) + r.failed()
}

/// The order of `targets` targets in round `round` (from 1): as given in
/// odd rounds, reversed in even ones (A B C, C B A, A B C, …), so a drift
/// over the session falls on every target alike.
pub fn order(round: usize, targets: usize) -> Vec<usize> {
    let forward = 0..targets;
    match round % 2 {
        1 => forward.collect(),
        _ => forward.rev().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate_forward_and_reversed() {
        assert_eq!(order(1, 3), [0, 1, 2]);
        assert_eq!(order(2, 3), [2, 1, 0]);
        assert_eq!(order(3, 3), [0, 1, 2]);
        assert_eq!(order(4, 2), [1, 0]);
        // Over an even number of rounds every target holds each place
        // as often as its mirror: the mean place is the same for all.
        let mean_place = |t: usize| {
            (1..=4)
                .map(|r| order(r, 3).iter().position(|&i| i == t).unwrap())
                .sum::<usize>()
        };
        assert_eq!([mean_place(0), mean_place(1), mean_place(2)], [4, 4, 4]);
    }

    #[test]
    fn errors_count_non_2xx_and_failures() {
        let mut r = LoadResult::default();
        r.statuses.insert(200, 10);
        r.statuses.insert(429, 2);
        r.statuses.insert(500, 1);
        r.failures.insert(crate::client::Failure::Timeout, 4);
        r.cache_hits = 3;
        assert_eq!((errors(&r), counted(&r)), (7, 7));
    }
}
