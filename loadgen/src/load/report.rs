//! A run's results as a JSON-ready summary and as a human table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::LoadResult;
use crate::latency::{fmt_us, Summary};

/// The reported figures of one run.
#[derive(Debug, Clone, Serialize)]
pub struct LoadSummary {
    /// Requests sent (or attempted).
    pub sent: u64,
    /// Complete responses, any status.
    pub completed: u64,
    /// Complete 2xx responses.
    pub ok: u64,
    /// Requests without a complete response.
    pub failed: u64,
    /// Open loop: requests no connection was free for when they were due.
    pub late_sends: u64,
    /// Seconds from the start to the last finished request.
    pub elapsed_s: f64,
    /// Complete responses per second.
    pub achieved_rps: f64,
    /// Complete responses by status code.
    pub status: BTreeMap<String, u64>,
    /// Failures by cause.
    pub failures: BTreeMap<&'static str, u64>,
    /// Time to the last byte of each complete response.
    pub latency: Summary,
    /// Streams: time to the first body byte.
    pub first_byte: Option<Summary>,
    /// Responses from the gateway's response cache (`x-litellm-cache-key`)
    /// among the complete ones; with their latency and the others' apart
    /// (only when there was a hit).
    pub cache: Option<CacheSplit>,
}

/// Hits and misses of the gateway's response cache, apart.
#[derive(Debug, Clone, Serialize)]
pub struct CacheSplit {
    /// Complete responses that were hits.
    pub hits: u64,
    /// Complete responses that were not.
    pub misses: u64,
    /// Hits among complete responses.
    pub hit_ratio: f64,
    /// Time to the last byte of each hit.
    pub hit_latency: Summary,
    /// Time to the last byte of each miss.
    pub miss_latency: Summary,
}

impl LoadSummary {
    /// Summarizes `r`; `stream` adds the first-byte percentiles.
    pub fn new(r: &LoadResult, stream: bool) -> LoadSummary {
        LoadSummary {
            sent: r.sent,
            completed: r.completed(),
            ok: r.ok(),
            failed: r.failed(),
            late_sends: r.late,
            elapsed_s: r.elapsed.as_secs_f64(),
            achieved_rps: r.achieved_rps(),
            status: r
                .statuses
                .iter()
                .map(|(s, n)| (s.to_string(), *n))
                .collect(),
            failures: r.failures.iter().map(|(f, n)| (f.label(), *n)).collect(),
            latency: r.latency.summary(),
            first_byte: stream.then(|| r.first_byte.summary()),
            cache: (r.cache_hits > 0).then(|| CacheSplit::of(r)),
        }
    }

    /// The same with the cache's split even when nothing was a hit (a
    /// run against a gateway with its cache on: a 0 % hit ratio is a
    /// finding, not a missing row).
    pub fn with_cache_split(mut self, r: &LoadResult) -> LoadSummary {
        self.cache = Some(CacheSplit::of(r));
        self
    }

    /// The human table: counts, statuses, failures and latency percentiles
    /// measured from `basis` (e.g. "intended send").
    pub fn table(&self, basis: &str) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "requests  sent {}  completed {}  2xx {}  failed {}  achieved {:.1} req/s over {:.2}s",
            self.sent, self.completed, self.ok, self.failed, self.achieved_rps, self.elapsed_s
        );
        let statuses: Vec<String> = self
            .status
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect();
        let _ = writeln!(t, "status    {}", or_none(&statuses));
        let failures: Vec<String> = self
            .failures
            .iter()
            .map(|(f, n)| format!("{f}: {n}"))
            .collect();
        let _ = writeln!(t, "failures  {}", or_none(&failures));
        if self.late_sends > 0 {
            let _ = writeln!(
                t,
                "late      {} sends fell behind schedule (latency charged from their due time)",
                self.late_sends
            );
        }
        let _ = writeln!(t, "latency from {basis}:");
        t.push_str(&latency_header());
        if let Some(fb) = &self.first_byte {
            t.push_str(&latency_row("first byte", fb));
            t.push_str(&latency_row("last byte", &self.latency));
        } else {
            t.push_str(&latency_row("response", &self.latency));
        }
        if let Some(c) = &self.cache {
            t.push_str(&c.rows(""));
        }
        t
    }
}

impl CacheSplit {
    /// The hits and misses of `r`'s complete responses, apart.
    fn of(r: &LoadResult) -> CacheSplit {
        CacheSplit {
            hits: r.cache_hits,
            misses: r.completed().saturating_sub(r.cache_hits),
            hit_ratio: r.cache_hits as f64 / r.completed().max(1) as f64,
            hit_latency: r.hit_latency.summary(),
            miss_latency: r.miss_latency.summary(),
        }
    }

    /// The hit ratio and the latency rows of hits and misses, named after
    /// `who` ("gateway " or nothing).
    pub fn rows(&self, who: &str) -> String {
        let mut t = format!(
            "  {who}cache hits {} ({:.1} % of complete responses)\n",
            self.hits,
            self.hit_ratio * 100.0
        );
        if self.hits > 0 {
            t.push_str(&latency_row(&format!("{who}hits"), &self.hit_latency));
        }
        if self.misses > 0 {
            t.push_str(&latency_row(&format!("{who}misses"), &self.miss_latency));
        }
        t
    }
}

fn or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join("  ")
    }
}

/// Column headings matching [`latency_row`].
pub fn latency_header() -> String {
    let mut line = format!("  {:<14}", "");
    for (name, _) in Summary::default().columns() {
        let _ = write!(line, "{name:>10}");
    }
    line.push('\n');
    line
}

/// One labelled row of percentiles.
pub fn latency_row(label: &str, s: &Summary) -> String {
    signed_row(label, s.columns().map(|(_, v)| v as i64))
}

/// One labelled row of signed microsecond values (e.g. differences).
pub fn signed_row(label: &str, values: [i64; 5]) -> String {
    let mut line = format!("  {label:<14}");
    for v in values {
        let _ = write!(line, "{:>10}", fmt_us(v));
    }
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Failure, Response};
    use std::time::{Duration, Instant};

    #[test]
    fn table_shows_counts_and_rows() {
        let mut r = LoadResult {
            sent: 2,
            elapsed: Duration::from_secs(1),
            ..LoadResult::default()
        };
        let t0 = Instant::now();
        let resp = Response {
            status: 200,
            first_byte: Some(t0 + Duration::from_micros(300)),
            keep_alive: true,
            cache_hit: false,
        };
        r.record(&Ok(resp), t0, t0 + Duration::from_millis(2), true);
        r.record(&Err(Failure::Closed), t0, t0, true);
        let s = LoadSummary::new(&r, true);
        let table = s.table("actual send");
        assert!(
            table.contains("sent 2  completed 1  2xx 1  failed 1"),
            "{table}"
        );
        assert!(
            table.contains("200: 1") && table.contains("closed: 1"),
            "{table}"
        );
        assert!(
            table.contains("first byte") && table.contains("300µs"),
            "{table}"
        );
        assert!(table.contains("2.00ms"), "{table}");
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["status"]["200"], 1);
        assert_eq!(json["first_byte"]["p50_us"], 300);
    }

    #[test]
    fn cache_hits_and_misses_are_reported_apart() {
        let mut r = LoadResult::default();
        let t0 = Instant::now();
        let answer = |cache_hit| Response {
            status: 200,
            first_byte: None,
            keep_alive: true,
            cache_hit,
        };
        r.record(&Ok(answer(false)), t0, t0 + Duration::from_millis(4), false);
        // No hit yet: no split, unless the run's cache was on.
        assert!(LoadSummary::new(&r, false).cache.is_none());
        let on = LoadSummary::new(&r, false).with_cache_split(&r);
        let table = on.table("intended send");
        assert!(table.contains("cache hits 0 (0.0 % of"), "{table}");
        assert!(
            table.contains("misses") && !table.contains("  hits"),
            "{table}"
        );
        for _ in 0..3 {
            r.record(
                &Ok(answer(true)),
                t0,
                t0 + Duration::from_micros(150),
                false,
            );
        }
        let s = LoadSummary::new(&r, false);
        let split = s.cache.as_ref().expect("a split once there is a hit");
        assert_eq!((split.hits, split.misses), (3, 1));
        assert_eq!(split.hit_ratio, 0.75);
        assert_eq!(split.hit_latency.p50_us, 150);
        // Histogram buckets: 4 ms reads back within 0.1 %.
        assert!((4000..=4004).contains(&split.miss_latency.p50_us));
        let table = s.table("intended send");
        assert!(table.contains("cache hits 3 (75.0 % of"), "{table}");
    }
}
