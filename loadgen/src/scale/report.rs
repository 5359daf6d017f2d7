//! The scale report: one row per setting, each figure with its ratio to the
//! first (smallest) setting of its series.

use std::fmt::Write as _;

use serde::Serialize;

use crate::latency::{fmt_us, Summary};

/// One measured setting.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// `keys, walk`, `keys, cached` or `deployments`.
    pub series: String,
    /// Keys or deployments.
    pub count: usize,
    /// Gateway requests of the measured rounds.
    pub requests: u64,
    /// Of those, the ones whose key was used for the first time (a cache
    /// miss read from Postgres).
    pub first_uses: u64,
    /// Requests that failed or got a non-2xx status, through the gateway.
    pub failed: u64,
    /// Straight to the mock.
    pub direct: Summary,
    /// Through the gateway.
    pub gateway: Summary,
    /// Added p50 (gateway minus direct), µs.
    pub added_p50_us: i64,
    /// Added p99, µs.
    pub added_p99_us: i64,
    /// Gateway CPU per request, µs.
    pub cpu_us_per_request: f64,
    /// Gateway RSS after the measured rounds, KiB.
    pub rss_kib: u64,
    /// Keys primed before the measured rounds (`keys, cached`).
    pub primed: u64,
    /// Priming rate (requests/s, closed loop; each a read-through).
    pub primed_per_s: f64,
    /// Priming requests that failed (503: a read-through past its
    /// deadline) and were sent again.
    pub primed_retried: u64,
    /// Seconds waited before the rounds for the spend rows of every
    /// earlier request to be written.
    pub settle_s: f64,
    /// Ratios to the series' first row: added p50, added p99, CPU per
    /// request.
    pub ratios: Ratios,
}

/// A row's figures over its series' first row's.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct Ratios {
    /// Added p50.
    pub added_p50: f64,
    /// Added p99.
    pub added_p99: f64,
    /// CPU per request.
    pub cpu: f64,
}

/// `value / base`, or NaN (no ratio: `n/a`, `null` in JSON) over a base
/// of zero or less, which a latency difference within noise can be.
pub fn ratio(value: f64, base: f64) -> f64 {
    if base > 0.0 {
        value / base
    } else {
        f64::NAN
    }
}

/// Fills every row's ratios from the first row of its series (rows of one
/// series in ascending count, as measured).
pub fn fill_ratios(rows: &mut [Row]) {
    let mut bases: Vec<(String, Row)> = Vec::new();
    for row in rows.iter_mut() {
        let base = match bases.iter().find(|(s, _)| *s == row.series) {
            Some((_, b)) => b.clone(),
            None => {
                bases.push((row.series.clone(), row.clone()));
                row.clone()
            }
        };
        row.ratios = Ratios {
            added_p50: ratio(row.added_p50_us as f64, base.added_p50_us as f64),
            added_p99: ratio(row.added_p99_us as f64, base.added_p99_us as f64),
            cpu: ratio(row.cpu_us_per_request, base.cpu_us_per_request),
        };
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    /// The gateway binary.
    pub gateway_bin: String,
    /// Gateway workers.
    pub gateway_workers: usize,
    /// Where everything ran.
    pub placement: String,
    /// Open-loop rate of the measured rounds.
    pub rate: f64,
    /// Seconds per round and target.
    pub round_s: f64,
    /// Rounds per setting.
    pub rounds: usize,
    /// Client connections.
    pub connections: usize,
    /// Body size.
    pub body_bytes: usize,
    /// Seconds the `COPY` of all keys took.
    pub copy_s: f64,
    /// One row per setting.
    pub rows: Vec<Row>,
}

fn x(r: f64) -> String {
    if r.is_finite() {
        format!("×{r:.2}")
    } else {
        "n/a".into()
    }
}

impl ScaleReport {
    /// The Markdown table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "Scale: {} req/s open loop, {} rounds x {}s per target and setting, {} connections, {} B bodies; {}.",
            self.rate, self.rounds, self.round_s, self.connections, self.body_bytes, self.placement
        );
        if self.copy_s > 0.0 {
            let _ = writeln!(t, "Keys written by COPY in {:.1} s.", self.copy_s);
        }
        t.push('\n');
        t.push_str("| series | count | first uses | added p50 | ratio | added p99 | ratio | CPU / request | ratio | direct p50 / p99 | RSS | failed |\n");
        t.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for r in &self.rows {
            let _ = writeln!(
                t,
                "| {} | {} | {:.0} % | {} | {} | {} | {} | {:.1} µs | {} | {} / {} | {:.0} MiB | {} |",
                r.series,
                super::args::fmt_count(r.count),
                100.0 * r.first_uses as f64 / r.requests.max(1) as f64,
                fmt_us(r.added_p50_us),
                x(r.ratios.added_p50),
                fmt_us(r.added_p99_us),
                x(r.ratios.added_p99),
                r.cpu_us_per_request,
                x(r.ratios.cpu),
                fmt_us(r.direct.p50_us as i64),
                fmt_us(r.direct.p99_us as i64),
                r.rss_kib as f64 / 1024.0,
                r.failed,
            );
        }
        let primed: Vec<String> = self
            .rows
            .iter()
            .filter(|r| r.primed > 0)
            .map(|r| {
                format!(
                    "{} keys at {:.0}/s ({} failed and sent again; their spend rows written {:.0} s after)",
                    r.primed, r.primed_per_s, r.primed_retried, r.settle_s
                )
            })
            .collect();
        if !primed.is_empty() {
            let _ = writeln!(
                t,
                "\nPrimed (one closed-loop request per unused key, 16 at a time, each a read-through): {}.",
                primed.join(", ")
            );
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(series: &str, count: usize, p50: i64, p99: i64, cpu: f64) -> Row {
        Row {
            series: series.into(),
            count,
            requests: 100,
            first_uses: 25,
            failed: 0,
            direct: Summary::default(),
            gateway: Summary::default(),
            added_p50_us: p50,
            added_p99_us: p99,
            cpu_us_per_request: cpu,
            rss_kib: 2048,
            primed: 0,
            primed_per_s: 0.0,
            primed_retried: 0,
            settle_s: 0.0,
            ratios: Ratios::default(),
        }
    }

    #[test]
    fn ratios_are_to_the_first_row_of_each_series() {
        let mut rows = vec![
            row("keys, walk", 10, 100, 400, 50.0),
            row("keys, walk", 1000, 110, 800, 55.0),
            row("deployments", 1, 50, 0, 40.0),
            row("deployments", 10, 75, 10, 20.0),
        ];
        fill_ratios(&mut rows);
        assert_eq!(rows[0].ratios.added_p50, 1.0);
        assert_eq!(rows[1].ratios.added_p50, 1.1);
        assert_eq!(rows[1].ratios.added_p99, 2.0);
        assert_eq!(rows[1].ratios.cpu, 1.1);
        assert!(rows[2].ratios.added_p99.is_nan(), "over a zero base");
        assert_eq!(rows[3].ratios.added_p50, 1.5);
        assert!(rows[3].ratios.added_p99.is_nan());
        assert_eq!(rows[3].ratios.cpu, 0.5);
    }

    #[test]
    fn table_has_a_line_per_row() {
        let mut rows = vec![
            row("keys, cached", 10, 100, 400, 50.0),
            row("keys, cached", 1_000_000, 100, 440, 50.0),
        ];
        rows[1].primed = 999_990;
        rows[1].primed_per_s = 4000.0;
        fill_ratios(&mut rows);
        let report = ScaleReport {
            gateway_bin: "gw".into(),
            gateway_workers: 1,
            placement: "not pinned".into(),
            rate: 1000.0,
            round_s: 5.0,
            rounds: 2,
            connections: 64,
            body_bytes: 1024,
            copy_s: 3.0,
            rows,
        };
        let table = report.table();
        assert!(table.contains("| keys, cached | 1M | 25 % |"), "{table}");
        assert!(table.contains("| ×1.10 |"), "{table}");
        assert!(!table.contains("NaN"), "{table}");
        assert!(table.contains("999990 keys at 4000/s"), "{table}");
        assert_eq!(table.lines().filter(|l| l.starts_with("| keys")).count(), 2);
    }
}
