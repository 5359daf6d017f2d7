//! The exposition: every core's series, merged by label values (counters and
//! histograms summed, gauges: the value set last), in the Prometheus text
//! format 0.0.4 as LiteLLM's Python client writes it (counters with `_total`).

use super::families::{Kind, Spec, ALL};
use super::store::{CoreData, Series};
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The name of the family that counts observations past the series cap.
const DROPPED: &str = "gateway_metrics_series_dropped_total";

/// One merged series.
enum Acc {
    Counter(f64),
    Gauge { value: f64, stamp: u64 },
    Histogram { counts: Vec<u64>, sum: f64 },
}

impl Acc {
    fn new(spec: &Spec) -> Acc {
        match spec.kind {
            Kind::Counter => Acc::Counter(0.0),
            Kind::Gauge => Acc::Gauge {
                value: 0.0,
                stamp: 0,
            },
            Kind::Histogram => Acc::Histogram {
                counts: vec![0; spec.buckets.len() + 1],
                sum: 0.0,
            },
        }
    }

    fn add(&mut self, s: &Series) {
        let cell = |i: usize| s.cells.get(i).map_or(0, |c| c.load(Relaxed));
        match self {
            Acc::Counter(v) => *v += f64::from_bits(cell(0)),
            Acc::Gauge { value, stamp } => {
                let at = cell(1);
                if at > *stamp {
                    *stamp = at;
                    *value = f64::from_bits(cell(0));
                }
            }
            Acc::Histogram { counts, sum } => {
                let n = counts.len();
                for (i, c) in counts.iter_mut().enumerate() {
                    *c = c.saturating_add(cell(i));
                }
                *sum += f64::from_bits(cell(n));
            }
        }
    }
}

/// The text of every family across `cores`.
pub(crate) fn render(cores: &[Arc<CoreData>]) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let mut dropped = Vec::new();
    for fam in ALL {
        let spec = fam.spec();
        let mut index: HashMap<Vec<&str>, usize> = HashMap::new();
        let mut merged: Vec<(Vec<&str>, Acc)> = Vec::new();
        let mut drops = 0u64;
        for core in cores {
            let family = &core.families[fam.index()];
            drops = drops.saturating_add(family.dropped.load(Relaxed));
            for s in family.series.iter() {
                let labels: Vec<&str> = s.labels.iter().map(|&id| core.symbol(id)).collect();
                let slot = match index.get(&labels) {
                    Some(&slot) => slot,
                    None => {
                        index.insert(labels.clone(), merged.len());
                        merged.push((labels, Acc::new(&spec)));
                        merged.len() - 1
                    }
                };
                merged[slot].1.add(s);
            }
        }
        if drops > 0 {
            dropped.push((spec.name, drops));
        }
        write_family(&mut out, &spec, &merged);
    }
    let _ = writeln!(out, "# HELP {DROPPED} Observations that found their metric at its series cap (litellm_settings.prometheus_metrics_max_series_per_metric): counted on the series whose labels are all \"other\", or for a gauge not recorded");
    let _ = writeln!(out, "# TYPE {DROPPED} counter");
    for (name, n) in dropped {
        let _ = writeln!(out, "{DROPPED}{{metric=\"{name}\"}} {n}");
    }
    out
}

fn write_family(out: &mut String, spec: &Spec, series: &[(Vec<&str>, Acc)]) {
    let name = match spec.kind {
        Kind::Counter => format!("{}_total", spec.name),
        _ => spec.name.to_string(),
    };
    let kind = match spec.kind {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
        Kind::Histogram => "histogram",
    };
    let _ = writeln!(out, "# HELP {name} {}", spec.help);
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (values, acc) in series {
        let mut labels = String::with_capacity(256);
        for (l, v) in spec.labels.iter().zip(values) {
            if !labels.is_empty() {
                labels.push(',');
            }
            labels.push_str(l.name());
            labels.push_str("=\"");
            escape(v, &mut labels);
            labels.push('"');
        }
        match acc {
            Acc::Counter(v) => {
                let _ = writeln!(out, "{name}{{{labels}}} {}", number(*v));
            }
            Acc::Gauge { value, .. } => {
                let _ = writeln!(out, "{name}{{{labels}}} {}", number(*value));
            }
            Acc::Histogram { counts, sum } => {
                let sep = if labels.is_empty() { "" } else { "," };
                let mut cumulative = 0u64;
                for (i, count) in counts.iter().enumerate() {
                    cumulative = cumulative.saturating_add(*count);
                    let le = spec
                        .buckets
                        .get(i)
                        .map_or_else(|| "+Inf".to_string(), |b| format!("{b:?}"));
                    let _ = writeln!(
                        out,
                        "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
                    );
                }
                let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
                let _ = writeln!(out, "{name}_sum{{{labels}}} {}", number(*sum));
            }
        }
    }
}

/// A sample value: `+Inf`, `-Inf`, `NaN` or the shortest exact decimal.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// A label value with `\`, `"` and line feeds escaped; other line breaks
/// dropped, as LiteLLM does.
fn escape(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' | '\u{2028}' | '\u{2029}' => {}
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_labels_are_written_in_the_text_format() {
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        let mut s = String::new();
        escape("a\"b\\c\nd\re", &mut s);
        assert_eq!(s, "a\\\"b\\\\c\\nde");
    }
}
