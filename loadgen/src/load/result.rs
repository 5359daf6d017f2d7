//! What a run measured: latency histograms, status and failure counts.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::client::{Failure, Response};
use crate::latency::Latencies;

/// Measurements of one run (or of several merged).
#[derive(Debug, Clone, Default)]
pub struct LoadResult {
    /// Time to the end of each complete response.
    pub latency: Latencies,
    /// Streams only: time to the first body byte.
    pub first_byte: Latencies,
    /// Complete responses by status code.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests without a complete response, by cause.
    pub failures: BTreeMap<Failure, u64>,
    /// Requests sent (or attempted).
    pub sent: u64,
    /// Open loop: requests no connection was free for when they were due
    /// (the sender fell behind; their latency counts from the due time).
    pub late: u64,
    /// From the start of the run to the last finished request.
    pub elapsed: Duration,
    /// Complete responses answered from the gateway's response cache.
    pub cache_hits: u64,
    /// Time to the end of each cache hit.
    pub hit_latency: Latencies,
    /// Time to the end of each other complete response.
    pub miss_latency: Latencies,
}

impl LoadResult {
    /// Records a finished request whose latency counts from `from`; `at` is
    /// when it finished, relative to the same clock.
    pub fn record(
        &mut self,
        outcome: &Result<Response, Failure>,
        from: std::time::Instant,
        at: std::time::Instant,
        stream: bool,
    ) {
        match outcome {
            Ok(r) => {
                *self.statuses.entry(r.status).or_default() += 1;
                let latency = at.saturating_duration_since(from);
                self.latency.record(latency);
                if r.cache_hit {
                    self.cache_hits += 1;
                    self.hit_latency.record(latency);
                } else {
                    self.miss_latency.record(latency);
                }
                if let (true, Some(first)) = (stream, r.first_byte) {
                    self.first_byte
                        .record(first.saturating_duration_since(from));
                }
            }
            Err(f) => *self.failures.entry(*f).or_default() += 1,
        }
    }

    /// Adds `other`'s measurements.
    pub fn merge(&mut self, other: &LoadResult) {
        self.latency.merge(&other.latency);
        self.first_byte.merge(&other.first_byte);
        self.hit_latency.merge(&other.hit_latency);
        self.miss_latency.merge(&other.miss_latency);
        self.cache_hits += other.cache_hits;
        for (status, n) in &other.statuses {
            *self.statuses.entry(*status).or_default() += n;
        }
        for (failure, n) in &other.failures {
            *self.failures.entry(*failure).or_default() += n;
        }
        self.sent += other.sent;
        self.late += other.late;
        self.elapsed = self.elapsed.max(other.elapsed);
    }

    /// Complete responses, any status.
    pub fn completed(&self) -> u64 {
        self.statuses.values().sum()
    }

    /// Complete responses with a 2xx status.
    pub fn ok(&self) -> u64 {
        self.statuses.range(200..300).map(|(_, n)| n).sum()
    }

    /// Requests that got no complete response.
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }

    /// Complete responses per second of elapsed time.
    pub fn achieved_rps(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.completed() as f64 / secs
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn ok(status: u16) -> Result<Response, Failure> {
        Ok(Response {
            status,
            first_byte: Some(Instant::now()),
            keep_alive: true,
            cache_hit: false,
        })
    }

    #[test]
    fn counts_and_merges() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(3);
        let mut a = LoadResult {
            sent: 3,
            elapsed: Duration::from_secs(1),
            ..LoadResult::default()
        };
        a.record(&ok(200), t0, t1, false);
        a.record(&ok(429), t0, t1, false);
        a.record(&Err(Failure::Timeout), t0, t1, false);
        let mut b = LoadResult {
            sent: 1,
            late: 1,
            elapsed: Duration::from_secs(2),
            ..LoadResult::default()
        };
        b.record(&ok(201), t0, t1, true);
        a.merge(&b);
        assert_eq!(
            (a.sent, a.late, a.completed(), a.ok(), a.failed()),
            (4, 1, 3, 2, 1)
        );
        assert_eq!(a.latency.count(), 3);
        assert_eq!(
            a.first_byte.count(),
            1,
            "first byte is kept for streams only"
        );
        assert_eq!(a.elapsed, Duration::from_secs(2));
        assert_eq!(a.achieved_rps(), 1.5);
        assert!(
            a.latency.summary().p50_us.abs_diff(3000) <= 3,
            "within HDR precision"
        );
    }
}
