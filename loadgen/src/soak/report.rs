//! The soak report: the per-second series, its ranges and the streams'
//! latencies.

use std::fmt::Write as _;

use serde::Serialize;

use super::sampler::{Range, Sample};
use crate::load::report::{latency_header, latency_row};
use crate::load::LoadSummary;

/// Ranges of the sampled series.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Ranges {
    /// Gateway RSS, KiB.
    pub rss_kib: Range,
    /// Gateway CPU, % of one CPU.
    pub cpu_pct: Range,
    /// Gateway open file descriptors.
    pub open_fds: Range,
    /// Client-side streams in flight.
    pub streams_open: Range,
}

impl Ranges {
    /// The ranges of `series`; `None` when it is empty.
    pub fn of(series: &[Sample]) -> Option<Ranges> {
        Some(Ranges {
            rss_kib: Range::of(series.iter().map(|s| s.rss_kib as f64))?,
            cpu_pct: Range::of(series.iter().map(|s| s.cpu_pct))?,
            open_fds: Range::of(series.iter().map(|s| s.open_fds as f64))?,
            streams_open: Range::of(series.iter().map(|s| s.streams_open as f64))?,
        })
    }
}

/// How the gateway's footprint moved over the steady part of the run
/// (after the ramp, while the load runs): least squares slopes, flat being
/// the goal.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Slopes {
    /// RSS, KiB per minute.
    pub rss_kib_per_min: f64,
    /// Open file descriptors per minute.
    pub fds_per_min: f64,
    /// CPU per completed request, ms, in the first tenth of the run.
    pub cpu_ms_per_request_first: Option<f64>,
    /// The same in the last tenth.
    pub cpu_ms_per_request_last: Option<f64>,
    /// Its slope over the tenths, ms per request per hour.
    pub cpu_ms_per_request_per_hour: Option<f64>,
}

impl Slopes {
    /// The slopes of `series` between `from_s` and `to_s` seconds (the
    /// steady part: after the ramp, before the load stops); `None` with
    /// fewer than two samples there.
    pub fn of(series: &[Sample], from_s: f64, to_s: f64) -> Option<Slopes> {
        let after: Vec<&Sample> = series
            .iter()
            .filter(|s| s.t_s >= from_s && s.t_s <= to_s)
            .collect();
        if after.len() < 2 {
            return None;
        }
        let minutes = |s: &&Sample| s.t_s / 60.0;
        let rss = slope(after.iter().map(|s| (minutes(s), s.rss_kib as f64)))?;
        let fds = slope(after.iter().map(|s| (minutes(s), s.open_fds as f64)))?;
        // CPU per request in ten windows of the run.
        let span = after.len().div_ceil(10).max(1);
        let per_request: Vec<(f64, f64)> = after
            .windows(2)
            .collect::<Vec<_>>()
            .chunks(span)
            .filter_map(|w| {
                let cpu_ms: f64 = w
                    .iter()
                    .map(|p| p[1].cpu_pct / 100.0 * (p[1].t_s - p[0].t_s) * 1000.0)
                    .sum();
                let (first, last) = (w.first()?, w.last()?);
                let done = last[1].all_completed.saturating_sub(first[0].all_completed);
                (done > 0).then(|| (first[0].t_s / 3600.0, cpu_ms / done as f64))
            })
            .collect();
        Some(Slopes {
            rss_kib_per_min: rss,
            fds_per_min: fds,
            cpu_ms_per_request_first: per_request.first().map(|p| p.1),
            cpu_ms_per_request_last: per_request.last().map(|p| p.1),
            cpu_ms_per_request_per_hour: slope(per_request.iter().copied()),
        })
    }
}

/// The least squares slope of `(x, y)` points; `None` with fewer than two
/// distinct x.
fn slope(points: impl Iterator<Item = (f64, f64)>) -> Option<f64> {
    let points: Vec<(f64, f64)> = points.collect();
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Spend rows against the 2xx answers they stand for.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rows {
    /// 2xx answers (streams, non-streaming, key churn).
    pub answered: u64,
    /// Success rows in `LiteLLM_SpendLogs`.
    pub rows: u64,
    /// Answers without a row.
    pub lost: u64,
}

/// Everything `loadgen soak` reports.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// The gateway binary.
    pub gateway_bin: String,
    /// Gateway worker threads.
    pub gateway_workers: usize,
    /// Where everything ran, in words.
    pub placement: String,
    /// Target concurrent streams.
    pub streams: usize,
    /// Mock delay before each token, ms.
    pub token_interval_ms: u64,
    /// Tokens per stream.
    pub tokens: u64,
    /// Seconds new streams were opened.
    pub duration_s: f64,
    /// Gateway VmRSS before any load, KiB.
    pub idle_rss_kib: u64,
    /// Gateway VmHWM at the end, KiB.
    pub peak_rss_kib: u64,
    /// Gateway memory per open stream at the busiest sample: (max RSS − idle
    /// RSS) / max streams open, KiB.
    pub kib_per_stream: Option<f64>,
    /// Ranges of the series.
    pub ranges: Option<Ranges>,
    /// The streams' outcome and latencies.
    pub streams_result: LoadSummary,
    /// The non-streaming requests' outcome, with `--plain`.
    pub plain_result: Option<LoadSummary>,
    /// Footprint slopes after the ramp.
    pub slopes: Option<Slopes>,
    /// Key churn, with `--key-churn-every`.
    pub churn: Option<super::churn::ChurnReport>,
    /// Seconds into the run Redis was restarted, with `--redis`.
    pub redis_restarted_at_s: Option<f64>,
    /// Spend rows, with `--database-url`.
    pub rows: Option<Rows>,
    /// One sample a second.
    pub series: Vec<Sample>,
}

impl SoakReport {
    /// The human table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "loadgen soak: {} streams x {} tokens every {} ms, new streams for {:.0}s",
            self.streams, self.tokens, self.token_interval_ms, self.duration_s
        );
        let _ = writeln!(
            t,
            "{} ({} worker(s)); {}",
            self.gateway_bin, self.gateway_workers, self.placement
        );
        let _ = writeln!(
            t,
            "\n{:>6} {:>10} {:>7} {:>8} {:>8} {:>10} {:>7}",
            "t (s)", "RSS (MiB)", "CPU %", "fds", "streams", "completed", "failed"
        );
        for s in &self.series {
            let _ = writeln!(
                t,
                "{:>6.0} {:>10.1} {:>7.1} {:>8} {:>8} {:>10} {:>7}",
                s.t_s,
                s.rss_kib as f64 / 1024.0,
                s.cpu_pct,
                s.open_fds,
                s.streams_open,
                s.completed,
                s.failed
            );
        }
        if let Some(r) = &self.ranges {
            let _ = writeln!(t, "\n{:<16} {:>10} {:>10} {:>10}", "", "min", "max", "last");
            let mib = |v: f64| v / 1024.0;
            for (name, range, scale) in [
                ("RSS (MiB)", r.rss_kib, mib as fn(f64) -> f64),
                ("CPU (% of 1)", r.cpu_pct, |v| v),
                ("open fds", r.open_fds, |v| v),
                ("streams open", r.streams_open, |v| v),
            ] {
                let _ = writeln!(
                    t,
                    "{name:<16} {:>10.1} {:>10.1} {:>10.1}",
                    scale(range.min),
                    scale(range.max),
                    scale(range.last)
                );
            }
        }
        let _ = writeln!(
            t,
            "\ngateway RSS: idle {:.1} MiB, peak {:.1} MiB{}",
            self.idle_rss_kib as f64 / 1024.0,
            self.peak_rss_kib as f64 / 1024.0,
            self.kib_per_stream.map_or(String::new(), |k| format!(
                ", about {k:.1} KiB per open stream"
            ))
        );
        let r = &self.streams_result;
        let _ = writeln!(
            t,
            "streams: {} completed ({} 2xx), {} failed {:?}",
            r.completed, r.ok, r.failed, r.failures
        );
        let _ = writeln!(t, "stream latency from request send:");
        t.push_str(&latency_header());
        if let Some(fb) = &r.first_byte {
            t.push_str(&latency_row("first byte", fb));
        }
        t.push_str(&latency_row("last byte", &r.latency));
        if let Some(p) = &self.plain_result {
            let _ = writeln!(
                t,
                "non-streaming: {} completed ({} 2xx), {} failed {:?}",
                p.completed, p.ok, p.failed, p.failures
            );
            t.push_str(&latency_header());
            t.push_str(&latency_row("last byte", &p.latency));
        }
        if let Some(sl) = &self.slopes {
            let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
            let _ = writeln!(
                t,
                "slopes after the ramp: RSS {:+.1} KiB/min, open fds {:+.2}/min, CPU per request {} ms first tenth, {} ms last tenth ({} ms per hour)",
                sl.rss_kib_per_min,
                sl.fds_per_min,
                ms(sl.cpu_ms_per_request_first),
                ms(sl.cpu_ms_per_request_last),
                ms(sl.cpu_ms_per_request_per_hour)
            );
        }
        if let Some(at) = self.redis_restarted_at_s {
            let _ = writeln!(t, "Redis killed and restarted {at:.0} s into the run");
        }
        if let Some(c) = &self.churn {
            let _ = writeln!(
                t,
                "key churn: {} created, {} served, {} deleted, {} refused after deletion, {} unexpected {:?}",
                c.created, c.served, c.deleted, c.refused_after_delete, c.error_count, c.errors
            );
        }
        if let Some(r) = &self.rows {
            let _ = writeln!(
                t,
                "spend rows: {} success rows for {} 2xx answers; lost {}",
                r.rows, r.answered, r.lost
            );
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_s: f64, rss_kib: u64, streams_open: u64) -> Sample {
        Sample {
            t_s,
            rss_kib,
            cpu_pct: 10.0,
            open_fds: 20,
            streams_open,
            completed: 0,
            failed: 0,
            all_completed: 0,
        }
    }

    #[test]
    fn slopes_of_a_growing_and_a_flat_series() {
        let series: Vec<Sample> = (0..120)
            .map(|i| Sample {
                t_s: i as f64,
                rss_kib: 1000 + i as u64 * 2,
                cpu_pct: 50.0,
                open_fds: 40,
                streams_open: 10,
                completed: 0,
                failed: 0,
                all_completed: i as u64 * 100,
            })
            .collect();
        let s = Slopes::of(&series, 0.0, 200.0).unwrap();
        assert!((s.rss_kib_per_min - 120.0).abs() < 1e-6, "{s:?}");
        assert!(s.fds_per_min.abs() < 1e-9);
        // 0.5 CPU-seconds a second for 100 requests a second: 5 ms each.
        assert!((s.cpu_ms_per_request_first.unwrap() - 5.0).abs() < 1e-6);
        assert!(s.cpu_ms_per_request_per_hour.unwrap().abs() < 1e-6);
        assert!(Slopes::of(&series, 1000.0, 2000.0).is_none());
    }

    #[test]
    fn ranges_over_the_series() {
        let r = Ranges::of(&[
            sample(1.0, 2048, 10),
            sample(2.0, 4096, 30),
            sample(3.0, 3072, 0),
        ])
        .unwrap();
        assert_eq!(
            (r.rss_kib.min, r.rss_kib.max, r.rss_kib.last),
            (2048.0, 4096.0, 3072.0)
        );
        assert_eq!(r.streams_open.max, 30.0);
        assert!(Ranges::of(&[]).is_none());
    }
}
