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
        }
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
