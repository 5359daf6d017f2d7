//! Latency histograms (HDR, microsecond resolution) and their percentile
//! summaries.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest recordable latency: one hour, in microseconds. Longer values are
/// clamped to it.
const MAX_US: u64 = 3_600_000_000;

/// Significant decimal digits kept per value (0.1% relative error).
const SIGFIGS: u8 = 3;

/// A latency histogram in microseconds.
#[derive(Debug, Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Latencies(Histogram::new_with_bounds(1, MAX_US, SIGFIGS).expect("valid histogram bounds"))
    }
}

impl Latencies {
    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.0.saturating_record(us.min(MAX_US));
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Latencies) {
        self.0
            .add(&other.0)
            .expect("histograms share the same bounds");
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// Percentiles of the recorded values.
    pub fn summary(&self) -> Summary {
        let h = &self.0;
        let at = |q: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(q)
            }
        };
        Summary {
            count: h.len(),
            p50_us: at(0.5),
            p90_us: at(0.9),
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: h.max(),
            mean_us: if h.is_empty() { 0.0 } else { h.mean() },
        }
    }
}

/// Percentiles of a latency distribution, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Number of values.
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest value.
    pub max_us: u64,
    /// Arithmetic mean.
    pub mean_us: f64,
}

impl Summary {
    /// The percentile columns, labelled, in table order.
    pub fn columns(&self) -> [(&'static str, u64); 5] {
        [
            ("p50", self.p50_us),
            ("p90", self.p90_us),
            ("p99", self.p99_us),
            ("p99.9", self.p999_us),
            ("max", self.max_us),
        ]
    }
}

/// Formats microseconds for a table: `850µs`, `12.34ms`, `2.500s`.
pub fn fmt_us(us: i64) -> String {
    let abs = us.unsigned_abs();
    let sign = if us < 0 { "-" } else { "" };
    if abs < 1_000 {
        format!("{sign}{abs}µs")
    } else if abs < 1_000_000 {
        format!("{sign}{:.2}ms", abs as f64 / 1e3)
    } else {
        format!("{sign}{:.3}s", abs as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uniform(from: u64, to: u64) -> Latencies {
        let mut l = Latencies::default();
        for us in from..=to {
            l.record(Duration::from_micros(us));
        }
        l
    }

    #[test]
    fn percentiles_of_a_uniform_distribution() {
        let s = uniform(1, 10_000).summary();
        assert_eq!(s.count, 10_000);
        let close = |got: u64, want: u64| got.abs_diff(want) <= want / 500 + 1;
        assert!(close(s.p50_us, 5_000), "{s:?}");
        assert!(close(s.p90_us, 9_000), "{s:?}");
        assert!(close(s.p99_us, 9_900), "{s:?}");
        assert!(close(s.p999_us, 9_990), "{s:?}");
        assert!(close(s.max_us, 10_000), "{s:?}");
        assert!((s.mean_us - 5_000.5).abs() < 10.0, "{s:?}");
    }

    #[test]
    fn merge_adds_counts_and_tails() {
        let mut a = uniform(1, 100);
        let b = uniform(1_000_000, 1_000_000);
        a.merge(&b);
        let s = a.summary();
        assert_eq!(s.count, 101);
        assert!(s.max_us >= 999_000);
        assert!(s.p50_us <= 51);
    }

    #[test]
    fn empty_and_clamped() {
        assert_eq!(Latencies::default().summary(), Summary::default());
        let mut l = Latencies::default();
        l.record(Duration::from_secs(100_000));
        assert!(l.summary().max_us >= MAX_US * 999 / 1000);
    }

    #[test]
    fn formats_units() {
        assert_eq!(fmt_us(850), "850µs");
        assert_eq!(fmt_us(12_345), "12.35ms");
        assert_eq!(fmt_us(-2_500), "-2.50ms");
        assert_eq!(fmt_us(2_500_000), "2.500s");
    }
}
