//! The overhead report: JSON-ready figures and the human table.

use std::fmt::Write as _;

use serde::Serialize;

use crate::affinity::Split;
use crate::latency::{fmt_us, Summary};
use crate::load::report::{latency_header, latency_row, signed_row};
use crate::load::LoadSummary;

/// Latency the gateway adds at each percentile (gateway minus direct), in
/// microseconds; negative when the difference is within noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Added {
    /// At the median.
    pub p50_us: i64,
    /// At p90.
    pub p90_us: i64,
    /// At p99.
    pub p99_us: i64,
    /// At p99.9.
    pub p999_us: i64,
    /// At the maximum.
    pub max_us: i64,
}

impl Added {
    /// `gateway` minus `direct`, percentile by percentile.
    pub fn between(direct: &Summary, gateway: &Summary) -> Added {
        let d = |g: u64, d: u64| g as i64 - d as i64;
        Added {
            p50_us: d(gateway.p50_us, direct.p50_us),
            p90_us: d(gateway.p90_us, direct.p90_us),
            p99_us: d(gateway.p99_us, direct.p99_us),
            p999_us: d(gateway.p999_us, direct.p999_us),
            max_us: d(gateway.max_us, direct.max_us),
        }
    }

    fn values(&self) -> [i64; 5] {
        [
            self.p50_us,
            self.p90_us,
            self.p99_us,
            self.p999_us,
            self.max_us,
        ]
    }
}

/// Median and p99 of one round, per target.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Round {
    /// Round number, from 1.
    pub round: usize,
    /// Direct p50.
    pub direct_p50_us: u64,
    /// Direct p99.
    pub direct_p99_us: u64,
    /// Through-gateway p50.
    pub gateway_p50_us: u64,
    /// Through-gateway p99.
    pub gateway_p99_us: u64,
}

/// One probe of the max-rate search.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Probe {
    /// Scheduled requests/s.
    pub rate: f64,
    /// Whether every request got a 2xx and p99 stayed within the bound.
    pub held: bool,
    /// Measured p99.
    pub p99_us: u64,
    /// Requests that failed or got a non-2xx status.
    pub errors: u64,
    /// Complete responses per second.
    pub achieved_rps: f64,
    /// CPU use of the load side (load generator + mock), in % of its CPUs.
    pub load_cpu_pct: f64,
    /// CPU use of the proxy probed (the gateway, or nginx on nginx's
    /// probes), in % of one CPU; none on direct probes.
    pub gateway_cpu_pct: Option<f64>,
    /// The proxy's CPU time per 2xx response, µs (the gateway's, or nginx's
    /// on nginx's probes); none on direct probes.
    pub gateway_cpu_us_per_request: Option<f64>,
}

/// The search result for one target.
#[derive(Debug, Clone, Serialize)]
pub struct Search {
    /// Highest rate that held (0 if none).
    pub max_rate: f64,
    /// Whether the load side was near saturation (>= 90% CPU) on the
    /// failed probes just above `max_rate`, making it a lower bound set by
    /// the load generator rather than by the target.
    pub load_bound: bool,
    /// Every probe, in order.
    pub probes: Vec<Probe>,
}

impl Search {
    /// The probe at [`Search::max_rate`], if any rate held.
    pub fn best_probe(&self) -> Option<&Probe> {
        self.probes
            .iter()
            .filter(|p| p.held)
            .max_by(|a, b| a.rate.total_cmp(&b.rate))
    }

    /// The probe that held `rate`, if one did.
    pub fn held_at(&self, rate: f64) -> Option<&Probe> {
        self.probes.iter().find(|p| p.held && p.rate == rate)
    }

    /// The result of a search that found `max_rate` after `probes`.
    pub fn new(max_rate: f64, probes: Vec<Probe>) -> Search {
        let above: Vec<&Probe> = probes
            .iter()
            .filter(|p| !p.held && p.rate > max_rate)
            .collect();
        let lowest = above.iter().map(|p| p.rate).fold(f64::INFINITY, f64::min);
        let load_bound = above
            .iter()
            .filter(|p| p.rate == lowest)
            .any(|p| p.load_cpu_pct >= 90.0);
        Search {
            max_rate,
            load_bound,
            probes,
        }
    }
}

/// The max-rate comparison.
#[derive(Debug, Clone, Serialize)]
pub struct MaxRate {
    /// The p99 bound a rate must hold.
    pub p99_bound_us: u64,
    /// Seconds per probe.
    pub probe_s: f64,
    /// Straight to the mock.
    pub direct: Search,
    /// Through nginx, when measured.
    pub nginx: Option<Search>,
    /// Through the gateway.
    pub gateway: Search,
    /// Gateway max rate / direct max rate.
    pub ratio: f64,
}

/// nginx as a plain reverse proxy, measured in the same session: the floor
/// any proxy pays here, and the gateway's figures as ratios to it.
#[derive(Debug, Clone, Serialize)]
pub struct NginxBaseline {
    /// All rounds through nginx.
    pub latency: LoadSummary,
    /// Latency nginx adds over direct.
    pub added: Added,
    /// Streams: first-byte latency nginx adds.
    pub added_first_byte: Option<Added>,
    /// nginx CPU time (master and workers) per proxied request, µs.
    pub cpu_us_per_request: f64,
    /// Gateway CPU per request / nginx CPU per request.
    pub cpu_ratio: f64,
    /// Gateway max rate / nginx max rate, when searched.
    pub throughput_ratio: Option<f64>,
    /// CPU per request of both at the highest rate both held in the
    /// max-rate search (the faster one probed once more at the slower one's
    /// max rate), when searched: the comparison under load, where a
    /// wake-up serves several requests (at the rounds' rate each request
    /// pays its own wake-ups, for nginx as for the gateway).
    pub cpu_at_load: Option<CpuAtLoad>,
    /// Gateway added p99 minus nginx added p99, µs.
    pub added_p99_over_nginx_us: i64,
    /// Streams: the same at the first byte.
    pub added_ttfb_p99_over_nginx_us: Option<i64>,
}

/// The gateway's and nginx's CPU per request at one rate both sustained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuAtLoad {
    /// The rate, requests/s: the highest both held in the search.
    pub rate: f64,
    /// Gateway CPU per request there, µs.
    pub gateway_us: f64,
    /// nginx CPU per request there, µs.
    pub nginx_us: f64,
    /// `gateway_us / nginx_us`.
    pub ratio: f64,
}

/// Which search lacks a held probe at the lower of the two max rates:
/// `(rate, gateway_side)` to probe once more, so that [`CpuAtLoad`]
/// compares the two near the slower one's limit rather than wherever their
/// bisections happened to meet. `None` when both already held it (or
/// either held nothing).
pub fn rate_to_align(gateway: &Search, nginx: &Search) -> Option<(f64, bool)> {
    let rate = gateway.max_rate.min(nginx.max_rate);
    if rate <= 0.0 {
        return None;
    }
    match (
        gateway.held_at(rate).is_some(),
        nginx.held_at(rate).is_some(),
    ) {
        (true, false) => Some((rate, false)),
        (false, true) => Some((rate, true)),
        _ => None,
    }
}

impl CpuAtLoad {
    /// From the two searches' probes: the highest rate each held, with the
    /// CPU each used there; none when they held no rate in common.
    pub fn of(gateway: &Search, nginx: &Search) -> Option<CpuAtLoad> {
        gateway
            .probes
            .iter()
            .filter(|p| p.held)
            .filter_map(|g| {
                let n = nginx.held_at(g.rate)?;
                Some((
                    g.rate,
                    g.gateway_cpu_us_per_request?,
                    n.gateway_cpu_us_per_request?,
                ))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .filter(|&(_, _, nginx_us)| nginx_us > 0.0)
            .map(|(rate, gateway_us, nginx_us)| CpuAtLoad {
                rate,
                gateway_us,
                nginx_us,
                ratio: gateway_us / nginx_us,
            })
    }
}

impl NginxBaseline {
    /// The baseline from nginx's rounds, with the gateway's figures of the
    /// same session as ratios.
    pub fn new(
        direct: &LoadSummary,
        nginx: LoadSummary,
        cpu_us_per_request: f64,
        gateway: &LoadSummary,
        gateway_cpu_us_per_request: f64,
        max_rate: Option<&MaxRate>,
    ) -> NginxBaseline {
        let added = Added::between(&direct.latency, &nginx.latency);
        let gateway_added = Added::between(&direct.latency, &gateway.latency);
        let first_byte = |s: &LoadSummary| s.first_byte;
        let added_first_byte = match (first_byte(direct), first_byte(&nginx)) {
            (Some(d), Some(n)) => Some(Added::between(&d, &n)),
            _ => None,
        };
        let added_ttfb_p99_over_nginx_us = match (first_byte(direct), first_byte(gateway)) {
            (Some(d), Some(g)) => {
                added_first_byte.map(|n| Added::between(&d, &g).p99_us - n.p99_us)
            }
            _ => None,
        };
        NginxBaseline {
            cpu_ratio: gateway_cpu_us_per_request / cpu_us_per_request.max(f64::MIN_POSITIVE),
            throughput_ratio: max_rate.and_then(|m| {
                let n = m.nginx.as_ref()?.max_rate;
                (n > 0.0).then(|| m.gateway.max_rate / n)
            }),
            cpu_at_load: max_rate.and_then(|m| CpuAtLoad::of(&m.gateway, m.nginx.as_ref()?)),
            added_p99_over_nginx_us: gateway_added.p99_us - added.p99_us,
            added_ttfb_p99_over_nginx_us,
            latency: nginx,
            added,
            added_first_byte,
            cpu_us_per_request,
        }
    }
}

/// Everything `loadgen overhead` reports.
#[derive(Debug, Clone, Serialize)]
pub struct OverheadReport {
    /// Configuration variant.
    pub variant: &'static str,
    /// Scopes each request was counted in (`--scopes`).
    pub scopes: usize,
    /// The private Redis (`single` or `cluster`), for variants that use one.
    pub redis: Option<&'static str>,
    /// The gateway binary.
    pub gateway_bin: String,
    /// Gateway worker threads.
    pub gateway_workers: usize,
    /// CPU placement, when pinned.
    pub cpus: Option<Split>,
    /// Where everything ran, in words.
    pub placement: String,
    /// Scheduled rate of the rounds.
    pub rate: f64,
    /// Seconds per round per target.
    pub round_s: f64,
    /// Number of rounds.
    pub rounds: usize,
    /// Client connections.
    pub connections: usize,
    /// Request body size.
    pub body_bytes: usize,
    /// Whether responses were streamed.
    pub stream: bool,
    /// All rounds straight to the mock (the baseline).
    pub direct: LoadSummary,
    /// All rounds through the gateway.
    pub gateway: LoadSummary,
    /// Per-round medians and p99s.
    pub per_round: Vec<Round>,
    /// Latency added by the gateway (last byte).
    pub added: Added,
    /// Streams: latency added to the first byte.
    pub added_first_byte: Option<Added>,
    /// Gateway CPU time per proxied request, µs.
    pub gateway_cpu_us_per_request: f64,
    /// The variant's private `redis-server`: its CPU time over the gateway
    /// rounds per proxied request, µs (none without Redis).
    pub redis_cpu_us_per_request: Option<f64>,
    /// Virtual keys the load was spread over.
    pub keys: usize,
    /// Keys the requests used (each run takes them in turn from the first,
    /// so a run shorter than `keys` requests leaves the rest unused).
    pub keys_used: u64,
    /// What the private `redis-server` held more after the rounds than
    /// before them, per key used: its memory per active key, in bytes (none
    /// without Redis).
    pub redis_bytes_per_key: Option<f64>,
    /// The Postgres processes serving the variant's database (its backends,
    /// the postmaster and the cluster's shared writers): their CPU time
    /// over the gateway rounds per proxied request, µs (none without a
    /// database).
    pub postgres_cpu_us_per_request: Option<f64>,
    /// nginx as a reverse proxy in the same session, when measured.
    pub nginx: Option<NginxBaseline>,
    /// Gateway CPU time over the gateway rounds, s.
    pub gateway_cpu_s: f64,
    /// Requests the gateway completed in those rounds.
    pub gateway_requests: u64,
    /// Gateway VmRSS before any load, KiB.
    pub idle_rss_kib: u64,
    /// Gateway VmHWM after the rounds (before the search), KiB.
    pub peak_rss_kib: u64,
    /// Max-rate search, unless skipped.
    pub max_rate: Option<MaxRate>,
    /// Requests the mock served over the whole session.
    pub mock_served: u64,
    /// 2xx responses the load generator counted over the whole session,
    /// the gateway's cache hits left out (the mock never saw them).
    pub loadgen_2xx: u64,
}

/// The line of the table that adds up the CPU per request of every process
/// a request touches (gateway, `redis-server`, Postgres) and compares the
/// sum with nginx's; none when the gateway is the only one.
fn processes_cpu_line(
    gateway_us: f64,
    redis_us: Option<f64>,
    postgres_us: Option<f64>,
    nginx_us: Option<f64>,
) -> Option<String> {
    if redis_us.is_none() && postgres_us.is_none() {
        return None;
    }
    let mut line = format!("CPU per request by process: gateway {gateway_us:.1} µs");
    let mut total = gateway_us;
    for (name, us) in [("redis-server", redis_us), ("postgres", postgres_us)] {
        if let Some(us) = us {
            let _ = write!(line, ", {name} {us:.1} µs");
            total += us;
        }
    }
    let _ = write!(line, "; all of them {total:.1} µs");
    if let Some(nginx) = nginx_us.filter(|n| *n > 0.0) {
        let _ = write!(line, " ({:.2}x nginx's)", total / nginx);
    }
    Some(line)
}

impl OverheadReport {
    /// The human table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "loadgen overhead: variant {}{}{}, open loop {} req/s, {} rounds x {:.0}s per target, {} connections, {}-byte bodies{}",
            self.variant,
            match self.scopes {
                1 => String::new(),
                n => format!(", {n} scopes"),
            },
            self.redis.map_or(String::new(), |r| format!(", Redis {r}")),
            self.rate,
            self.rounds,
            self.round_s,
            self.connections,
            self.body_bytes,
            if self.stream { ", streamed" } else { "" }
        );
        let _ = writeln!(
            t,
            "{} ({} worker(s)); {}",
            self.gateway_bin, self.gateway_workers, self.placement
        );
        if self.keys > 1 {
            let _ = writeln!(
                t,
                "spread over {} virtual keys, used in turn ({} of them by the longest run)",
                self.keys, self.keys_used
            );
        }
        let _ = writeln!(t, "\nlatency from intended send, all rounds merged:");
        t.push_str(&latency_header());
        if let (Some(d), Some(g), Some(a)) = (
            &self.direct.first_byte,
            &self.gateway.first_byte,
            &self.added_first_byte,
        ) {
            t.push_str(&latency_row("direct ttfb", d));
            t.push_str(&latency_row("gateway ttfb", g));
            t.push_str(&signed_row("added ttfb", a.values()));
        }
        if let Some(n) = &self.nginx {
            if let (Some(f), Some(a)) = (&n.latency.first_byte, &n.added_first_byte) {
                t.push_str(&latency_row("nginx ttfb", f));
                t.push_str(&signed_row("nginx added ttfb", a.values()));
            }
        }
        t.push_str(&latency_row("direct", &self.direct.latency));
        if let Some(n) = &self.nginx {
            t.push_str(&latency_row("nginx", &n.latency.latency));
            t.push_str(&signed_row("nginx added", n.added.values()));
        }
        t.push_str(&latency_row("gateway", &self.gateway.latency));
        t.push_str(&signed_row("added", self.added.values()));
        if let Some(c) = &self.gateway.cache {
            t.push_str(&c.rows("gateway "));
        }
        let _ = writeln!(t, "\nper round (p50 / p99):");
        for r in &self.per_round {
            let _ = writeln!(
                t,
                "  round {}: direct {} / {}, gateway {} / {}",
                r.round,
                fmt_us(r.direct_p50_us as i64),
                fmt_us(r.direct_p99_us as i64),
                fmt_us(r.gateway_p50_us as i64),
                fmt_us(r.gateway_p99_us as i64)
            );
        }
        let _ = writeln!(
            t,
            "\nrequests: direct {} ok / {} failed, gateway {} ok / {} failed; status through gateway: {:?}",
            self.direct.ok, self.direct.failed, self.gateway.ok, self.gateway.failed, self.gateway.status
        );
        let _ = writeln!(
            t,
            "gateway CPU: {:.1} µs/request ({:.2} s over {} requests)",
            self.gateway_cpu_us_per_request, self.gateway_cpu_s, self.gateway_requests
        );
        if let Some(line) = processes_cpu_line(
            self.gateway_cpu_us_per_request,
            self.redis_cpu_us_per_request,
            self.postgres_cpu_us_per_request,
            self.nginx.as_ref().map(|n| n.cpu_us_per_request),
        ) {
            let _ = writeln!(t, "{line}");
        }
        if let Some(bytes) = self.redis_bytes_per_key {
            let _ = writeln!(
                t,
                "redis-server memory: {bytes:.0} bytes per active key ({} keys used)",
                self.keys_used
            );
        }
        if let Some(n) = &self.nginx {
            let _ = writeln!(
                t,
                "nginx CPU: {:.1} µs/request; gateway / nginx: CPU {:.2}x, added p99 {:+} µs{}{}",
                n.cpu_us_per_request,
                n.cpu_ratio,
                n.added_p99_over_nginx_us,
                n.added_ttfb_p99_over_nginx_us
                    .map(|d| format!(", added ttfb p99 {d:+} µs"))
                    .unwrap_or_default(),
                n.throughput_ratio
                    .map(|r| format!(", max rate {r:.2}x"))
                    .unwrap_or_default(),
            );
        }
        let _ = writeln!(
            t,
            "gateway RSS: idle {:.1} MiB, peak {:.1} MiB",
            self.idle_rss_kib as f64 / 1024.0,
            self.peak_rss_kib as f64 / 1024.0
        );
        if let Some(m) = &self.max_rate {
            let _ = writeln!(
                t,
                "\nmax rate with p99 <= {} and no errors ({:.0}s probes):",
                fmt_us(m.p99_bound_us as i64),
                m.probe_s
            );
            let searched = [
                Some(("direct", &m.direct)),
                m.nginx.as_ref().map(|n| ("nginx", n)),
                Some(("gateway", &m.gateway)),
            ];
            for (name, s) in searched.into_iter().flatten() {
                let probes: Vec<String> = s
                    .probes
                    .iter()
                    .map(|p| format!("{:.0}{}", p.rate, if p.held { "✓" } else { "✗" }))
                    .collect();
                let _ = writeln!(
                    t,
                    "  {name:<8} {:>8.0} req/s{}  (probes: {})",
                    s.max_rate,
                    if s.load_bound {
                        "  [load side saturated: a lower bound]"
                    } else {
                        ""
                    },
                    probes.join(" ")
                );
            }
            let _ = writeln!(t, "  ratio    {:.2} (gateway / direct)", m.ratio);
            if let Some(c) = self.nginx.as_ref().and_then(|n| n.cpu_at_load) {
                let _ = writeln!(
                    t,
                    "  CPU at {:.0} req/s (the highest rate both held): gateway {:.1}, nginx {:.1} µs/request ({:.2}x)",
                    c.rate, c.gateway_us, c.nginx_us, c.ratio
                );
            }
            if let Some((p, us)) = m
                .gateway
                .best_probe()
                .and_then(|p| Some((p, p.gateway_cpu_us_per_request?)))
            {
                let _ = writeln!(
                    t,
                    "  gateway CPU at {:.0} req/s: {us:.1} µs/request ({:.0}% of a CPU)",
                    p.rate,
                    p.gateway_cpu_pct.unwrap_or(0.0)
                );
            }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_line_adds_every_process_a_request_touches() {
        assert_eq!(processes_cpu_line(40.0, None, None, Some(17.0)), None);
        assert_eq!(
            processes_cpu_line(40.0, Some(57.3), None, None).as_deref(),
            Some("CPU per request by process: gateway 40.0 µs, redis-server 57.3 µs; all of them 97.3 µs")
        );
        assert_eq!(
            processes_cpu_line(40.0, Some(50.0), Some(12.0), Some(17.0)).as_deref(),
            Some("CPU per request by process: gateway 40.0 µs, redis-server 50.0 µs, postgres 12.0 µs; all of them 102.0 µs (6.00x nginx's)")
        );
    }

    #[test]
    fn added_is_signed_per_percentile() {
        let direct = Summary {
            p50_us: 100,
            p90_us: 200,
            p99_us: 400,
            p999_us: 900,
            max_us: 5000,
            ..Summary::default()
        };
        let gateway = Summary {
            p50_us: 150,
            p90_us: 260,
            p99_us: 500,
            p999_us: 800,
            max_us: 6000,
            ..Summary::default()
        };
        assert_eq!(
            Added::between(&direct, &gateway).values(),
            [50, 60, 100, -100, 1000]
        );
    }

    #[test]
    fn load_bound_looks_just_above_the_max_rate() {
        let probe = |held, load_cpu_pct| Probe {
            rate: 1.0,
            held,
            p99_us: 1,
            errors: 0,
            achieved_rps: 1.0,
            load_cpu_pct,
            gateway_cpu_pct: None,
            gateway_cpu_us_per_request: None,
        };
        let s = |probes| Search::new(1.0, probes);
        let at = |rate, held, load_cpu_pct| Probe {
            rate,
            ..probe(held, load_cpu_pct)
        };
        assert!(s(vec![at(1.0, true, 50.0), at(2.0, false, 95.0)]).load_bound);
        assert!(!s(vec![at(1.0, true, 50.0), at(2.0, false, 40.0)]).load_bound);
        assert!(!s(vec![at(1.0, true, 99.0)]).load_bound);
        // A noisy failure below the max rate does not count; the lowest
        // failed rate above it does.
        assert!(
            !s(vec![
                at(0.5, false, 99.0),
                at(1.0, true, 50.0),
                at(4.0, false, 99.0),
                at(2.0, false, 50.0)
            ])
            .load_bound
        );
        let mut low = probe(true, 10.0);
        low.rate = 0.5;
        assert_eq!(
            s(vec![low, probe(true, 10.0), probe(false, 10.0)])
                .best_probe()
                .unwrap()
                .rate,
            1.0
        );
    }

    /// A probe of a proxy at `rate` that used `cpu` µs a request.
    fn probe(rate: f64, held: bool, cpu: f64) -> Probe {
        Probe {
            rate,
            held,
            p99_us: 1,
            errors: 0,
            achieved_rps: rate,
            load_cpu_pct: 10.0,
            gateway_cpu_pct: Some(50.0),
            gateway_cpu_us_per_request: Some(cpu),
        }
    }

    #[test]
    fn cpu_at_load_compares_the_highest_rate_both_held() {
        let gateway = Search::new(
            16000.0,
            vec![
                probe(1000.0, true, 90.0),
                probe(8000.0, true, 30.0),
                probe(16000.0, true, 25.0),
                probe(32000.0, false, 22.0),
            ],
        );
        // nginx failed 16000 once, then held it; 32000 it never held.
        let nginx = Search::new(
            16000.0,
            vec![
                probe(1000.0, true, 60.0),
                probe(8000.0, true, 24.0),
                probe(16000.0, false, 21.0),
                probe(16000.0, true, 20.0),
                probe(32000.0, false, 19.0),
            ],
        );
        assert_eq!(
            CpuAtLoad::of(&gateway, &nginx),
            Some(CpuAtLoad {
                rate: 16000.0,
                gateway_us: 25.0,
                nginx_us: 20.0,
                ratio: 1.25
            })
        );
        // The gateway held less than nginx: compared where the gateway held.
        let slower = Search::new(8000.0, gateway.probes[..2].to_vec());
        assert_eq!(CpuAtLoad::of(&slower, &nginx).map(|c| c.rate), Some(8000.0));
        // No rate in common: nothing to compare.
        let none = Search::new(0.0, vec![probe(1000.0, false, 1.0)]);
        assert_eq!(CpuAtLoad::of(&none, &nginx), None);
    }

    #[test]
    fn the_faster_side_is_probed_at_the_slower_ones_max_rate() {
        let probe = |rate, held| probe(rate, held, 10.0);
        let slow = Search::new(6500.0, vec![probe(4000.0, true), probe(6500.0, true)]);
        let fast = Search::new(24000.0, vec![probe(4000.0, true), probe(24000.0, true)]);
        // The gateway slower: nginx is probed at 6,500.
        assert_eq!(rate_to_align(&slow, &fast), Some((6500.0, false)));
        // nginx slower: the gateway is probed at nginx's max rate.
        assert_eq!(rate_to_align(&fast, &slow), Some((6500.0, true)));
        // Both held the rate already, or one held nothing: no probe.
        assert_eq!(rate_to_align(&slow, &slow), None);
        let nothing = Search::new(0.0, vec![probe(1000.0, false)]);
        assert_eq!(rate_to_align(&nothing, &fast), None);
    }
}
