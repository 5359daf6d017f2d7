//! `loadgen overhead --paired`: what one variant adds to the gateway's CPU
//! per request over the master key. A second gateway from the same binary,
//! configured as `master-key`, runs beside the variant's on the same CPUs;
//! the same load goes to each in turn, in ABBA order round by round, so the
//! machine's drift (a neighbour's build, CPU steal) falls on both alike and
//! the per-round differences show how far the figure can be trusted.
//! With `--baseline-bin` the gateway beside runs the variant too, from
//! another build: what a change costs or saves on that path.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::client::{RequestSpec, Target};
use crate::load::{self, LoadConfig, Mode};
use crate::procfs;

use super::args::{OverheadArgs, Variant};

/// Per-request timeout of every run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Length of the discarded warm-up run per gateway.
const WARM_UP: Duration = Duration::from_secs(1);

/// One gateway under paired measurement.
pub struct Side<'a> {
    /// Where its requests go.
    pub target: Target,
    /// Its process, for CPU time.
    pub pid: u32,
    /// The requests it gets (its key).
    pub spec: &'a RequestSpec,
}

/// CPU per request of both gateways in one round.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PairedRound {
    /// Round number, from 1.
    pub round: usize,
    /// The master-key gateway, µs of CPU per request.
    pub base_cpu_us: f64,
    /// The variant's gateway, µs of CPU per request.
    pub variant_cpu_us: f64,
}

impl PairedRound {
    /// What the variant added in this round.
    pub fn added_us(&self) -> f64 {
        self.variant_cpu_us - self.base_cpu_us
    }
}

/// The paired comparison.
#[derive(Debug, Clone, Serialize)]
pub struct PairedReport {
    /// The variant measured.
    pub variant: &'static str,
    /// What the gateway beside runs: `master-key`, or the variant itself
    /// when two builds are compared.
    pub base_variant: &'static str,
    /// The other build the gateway beside ran, if not the variant's.
    pub baseline_bin: Option<String>,
    /// Requests/s of every run.
    pub rate: f64,
    /// Length of each run, seconds.
    pub round_s: f64,
    /// Every round.
    pub rounds: Vec<PairedRound>,
    /// Median over rounds of the master-key gateway's CPU per request.
    pub base_median_us: f64,
    /// Median over rounds of the variant's CPU per request.
    pub variant_median_us: f64,
    /// Median over rounds of the per-round difference: the figure to quote.
    pub added_median_us: f64,
    /// Smallest per-round difference.
    pub added_min_us: f64,
    /// Largest per-round difference.
    pub added_max_us: f64,
    /// Requests that did not get a 2xx, both gateways together (must be 0).
    pub failed: u64,
}

impl PairedReport {
    /// The human-readable table.
    pub fn table(&self) -> String {
        let base = self.base_variant;
        let against = match &self.baseline_bin {
            Some(bin) => format!("{base} of {bin}"),
            None => base.to_string(),
        };
        let mut out = format!(
            "loadgen overhead --paired: {} against {against}, open loop {} req/s, {} rounds x {}s per gateway (ABBA)\n\n",
            self.variant,
            self.rate,
            self.rounds.len(),
            self.round_s
        );
        out.push_str("round     baseline CPU/req   variant CPU/req   added\n");
        for r in &self.rounds {
            out.push_str(&format!(
                "{:>5}   {:>15.2} µs   {:>12.2} µs   {:>+6.2} µs\n",
                r.round,
                r.base_cpu_us,
                r.variant_cpu_us,
                r.added_us()
            ));
        }
        out.push_str(&format!(
            "\nmedian: {against} {:.2} µs, {} {:.2} µs; added {:+.2} µs per request (per-round range {:+.2} to {:+.2} µs); failed requests: {}\n",
            self.base_median_us,
            self.variant,
            self.variant_median_us,
            self.added_median_us,
            self.added_min_us,
            self.added_max_us,
            self.failed
        ));
        out
    }
}

/// What the gateway beside the variant's runs: the variant itself when
/// `--baseline-bin` names another build (the two builds compared on one
/// path), else the master key (what the variant adds).
pub fn base_variant(o: &OverheadArgs) -> Variant {
    match o.baseline_bin {
        Some(_) => o.variant,
        None => Variant::MasterKey,
    }
}

/// Runs `o.rounds` paired rounds at `o.rate`, each `o.duration` long per
/// gateway, the order alternating (base, variant; variant, base; …).
pub fn measure(o: &OverheadArgs, base: &Side, variant: &Side) -> Result<PairedReport, String> {
    let mut failed = 0;
    for side in [base, variant] {
        failed += run(o, side, WARM_UP)?.1;
    }
    let mut rounds = Vec::with_capacity(o.rounds);
    for round in 1..=o.rounds {
        let (base_cpu_us, variant_cpu_us) = if round % 2 == 1 {
            let b = run(o, base, o.duration)?;
            let v = run(o, variant, o.duration)?;
            failed += b.1 + v.1;
            (b.0, v.0)
        } else {
            let v = run(o, variant, o.duration)?;
            let b = run(o, base, o.duration)?;
            failed += b.1 + v.1;
            (b.0, v.0)
        };
        rounds.push(PairedRound {
            round,
            base_cpu_us,
            variant_cpu_us,
        });
    }
    let added: Vec<f64> = rounds.iter().map(PairedRound::added_us).collect();
    Ok(PairedReport {
        variant: o.variant.name(),
        base_variant: base_variant(o).name(),
        baseline_bin: o.baseline_bin.as_ref().map(|p| p.display().to_string()),
        rate: o.rate,
        round_s: o.duration.as_secs_f64(),
        base_median_us: median(rounds.iter().map(|r| r.base_cpu_us).collect()),
        variant_median_us: median(rounds.iter().map(|r| r.variant_cpu_us).collect()),
        added_median_us: median(added.clone()),
        added_min_us: added.iter().copied().fold(f64::INFINITY, f64::min),
        added_max_us: added.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        rounds,
        failed,
    })
}

/// One open-loop run against `side`: its CPU per completed request (µs)
/// and the requests without a 2xx answer.
fn run(o: &OverheadArgs, side: &Side, duration: Duration) -> Result<(f64, u64), String> {
    let config = LoadConfig {
        target: side.target.clone(),
        spec: side.spec.clone(),
        mode: Mode::Open { rate: o.rate },
        connections: o.connections,
        workers: 1,
        duration: Some(duration),
        requests: None,
        timeout: REQUEST_TIMEOUT,
        ramp: Duration::ZERO,
    };
    let before = procfs::cpu_time(side.pid)?;
    let result = load::run(&config, &Arc::default())?;
    let cpu = procfs::cpu_time(side.pid)?.saturating_sub(before);
    let per_request = cpu.as_secs_f64() * 1e6 / result.completed().max(1) as f64;
    Ok((
        per_request,
        result.completed().saturating_sub(result.ok()) + result.failed(),
    ))
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }

    #[test]
    fn the_table_quotes_the_median_difference_and_its_range() {
        let rounds = vec![
            PairedRound {
                round: 1,
                base_cpu_us: 20.0,
                variant_cpu_us: 21.0,
            },
            PairedRound {
                round: 2,
                base_cpu_us: 22.0,
                variant_cpu_us: 22.5,
            },
        ];
        let mut report = PairedReport {
            variant: "metrics",
            base_variant: "master-key",
            baseline_bin: None,
            rate: 5000.0,
            round_s: 5.0,
            base_median_us: 21.0,
            variant_median_us: 21.75,
            added_median_us: 0.75,
            added_min_us: 0.5,
            added_max_us: 1.0,
            rounds,
            failed: 0,
        };
        let table = report.table();
        assert!(table.contains("added +0.75 µs per request"), "{table}");
        assert!(table.contains("range +0.50 to +1.00 µs"), "{table}");
        assert_eq!(report.rounds[1].added_us(), 0.5);
        assert!(
            table.contains("metrics against master-key, open loop"),
            "{table}"
        );
        report.baseline_bin = Some("/x/old".into());
        let table = report.table();
        assert!(table.contains("against master-key of /x/old,"), "{table}");
        report.base_variant = "metrics";
        let table = report.table();
        assert!(
            table.contains("metrics against metrics of /x/old,"),
            "{table}"
        );
        assert!(
            table.contains("median: metrics of /x/old 21.00 µs"),
            "{table}"
        );
    }
}
