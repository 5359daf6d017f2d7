//! `loadgen overhead`'s picture: an SVG with the latency percentiles of
//! each target (log scale) and a stacked bar of the CPU per request of
//! each process a request touches, written beside the JSON report; with
//! `--saturate`, a third panel with each target's throughput.

use std::fmt::Write as _;

use super::report::OverheadReport;
use super::saturate::report::SaturationReport;

/// Canvas size, px (wider with the throughput panel).
const WIDTH: f64 = 960.0;
const WIDTH_WITH_RATES: f64 = 1300.0;
const HEIGHT: f64 = 420.0;
/// The latency panel's plotting area.
const LAT_X: f64 = 70.0;
const LAT_W: f64 = 420.0;
const TOP: f64 = 50.0;
const PLOT_H: f64 = 300.0;
/// The CPU panel's plotting area.
const CPU_X: f64 = 600.0;
const CPU_W: f64 = 300.0;
/// The throughput panel's plotting area.
const RATE_X: f64 = 1000.0;
const RATE_W: f64 = 260.0;
/// Caption of the latency panel of open-loop runs.
const OPEN_LOOP_LATENCY: &str = "latency from intended send (log scale)";

/// Colours of the targets and processes.
const DIRECT: &str = "#7f7f7f";
const NGINX: &str = "#2ca02c";
const GATEWAY: &str = "#1f77b4";
const REDIS: &str = "#d62728";
const POSTGRES: &str = "#9467bd";

/// One series of the latency panel.
struct Series<'a> {
    name: &'a str,
    colour: &'a str,
    /// (label, µs) per percentile.
    points: Vec<(&'static str, u64)>,
}

/// One bar of the CPU panel: (process, colour, µs per request) parts,
/// stacked from the bottom.
type Bar<'a> = (&'a str, Vec<(&'a str, &'a str, f64)>);

/// One bar of the throughput panel: target, colour, requests/s, and a note
/// under its value (its ratio to nginx).
type Rate<'a> = (&'a str, &'a str, f64, String);

/// The SVG of `report`.
pub fn svg(report: &OverheadReport) -> String {
    let title = format!(
        "loadgen overhead, variant {}: {} req/s, {} rounds x {:.0}s, {} connections",
        report.variant, report.rate, report.rounds, report.round_s, report.connections
    );
    let mut series = vec![Series {
        name: "direct",
        colour: DIRECT,
        points: percentiles(&report.direct.latency),
    }];
    let mut bars: Vec<Bar> = Vec::new();
    if let Some(n) = &report.nginx {
        series.push(Series {
            name: "nginx",
            colour: NGINX,
            points: percentiles(&n.latency.latency),
        });
        bars.push(("nginx", vec![("nginx", NGINX, n.cpu_us_per_request)]));
    }
    series.push(Series {
        name: "gateway",
        colour: GATEWAY,
        points: percentiles(&report.gateway.latency),
    });
    bars.push(gateway_bar(
        report.gateway_cpu_us_per_request,
        report.redis_cpu_us_per_request,
        report.postgres_cpu_us_per_request,
    ));
    render(&title, OPEN_LOOP_LATENCY, &series, &bars, &[])
}

/// The gateway's stacked bar: its CPU per request, then Redis's and
/// Postgres's where they were measured.
fn gateway_bar(gateway: f64, redis: Option<f64>, postgres: Option<f64>) -> Bar<'static> {
    let mut parts = vec![("gateway", GATEWAY, gateway)];
    parts.extend(redis.map(|us| ("redis-server", REDIS, us)));
    parts.extend(postgres.map(|us| ("postgres", POSTGRES, us)));
    ("gateway", parts)
}

/// The SVG of a `--saturate` report: each target's latency, the CPU per
/// request of nginx and of the gateway with Redis and Postgres, and each
/// target's throughput with the gateway's ratio to nginx.
pub fn saturation_svg(report: &SaturationReport) -> String {
    let title = format!(
        "loadgen overhead --saturate, variant {}: closed loop, {} connections, {} rounds x {:.0}s per target",
        report.variant, report.connections, report.rounds, report.round_s
    );
    let colour = |name: &str| match name {
        "nginx" => NGINX,
        "gateway" => GATEWAY,
        _ => DIRECT,
    };
    let series: Vec<Series> = report
        .targets
        .iter()
        .map(|t| Series {
            name: t.name,
            colour: colour(t.name),
            points: percentiles(&t.latency),
        })
        .collect();
    let mut bars: Vec<Bar> = Vec::new();
    for t in &report.targets {
        let c = &t.cpu_us_per_request;
        match t.name {
            "nginx" => bars.push(("nginx", vec![("nginx", NGINX, c.nginx.unwrap_or(0.0))])),
            "gateway" => bars.push(gateway_bar(c.gateway, c.redis, c.postgres)),
            _ => {}
        }
    }
    let rates: Vec<Rate> = report
        .targets
        .iter()
        .map(|t| {
            let note = match (t.name, &report.gateway_to_nginx) {
                ("gateway", Some(r)) => format!("{:.2}x nginx", r.overall),
                _ if t.valid_rounds < t.rounds.len() => "invalid rounds".to_string(),
                _ => String::new(),
            };
            (
                t.name,
                colour(t.name),
                t.requests_per_s.unwrap_or(0.0),
                note,
            )
        })
        .collect();
    render(
        &title,
        "latency from the actual send (log scale)",
        &series,
        &bars,
        &rates,
    )
}

/// Draws the panels: latency (captioned `caption`), CPU, and throughput
/// when `rates` has bars.
fn render(title: &str, caption: &str, series: &[Series], bars: &[Bar], rates: &[Rate]) -> String {
    let width = match rates.is_empty() {
        true => WIDTH,
        false => WIDTH_WITH_RATES,
    };
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LAT_X}" y="24" font-size="14">{}</text>"#,
        escape(title)
    );
    latency_panel(&mut out, caption, series);
    cpu_panel(&mut out, bars);
    if !rates.is_empty() {
        rate_panel(&mut out, rates);
    }
    out.push_str("</svg>\n");
    out
}

fn percentiles(s: &crate::latency::Summary) -> Vec<(&'static str, u64)> {
    s.columns()
        .into_iter()
        .filter(|(label, _)| *label != "max")
        .collect()
}

fn latency_panel(out: &mut String, caption: &str, series: &[Series]) {
    let values = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (lo, hi) = values.fold((u64::MAX, 1), |(lo, hi), v| (lo.min(v.max(1)), hi.max(v)));
    let (lo, hi) = decades(lo.min(hi), hi);
    let y = |us: u64| {
        let f = ((us.max(1) as f64).log10() - lo) / (hi - lo);
        TOP + PLOT_H * (1.0 - f)
    };
    let _ = write!(
        out,
        r#"<text x="{LAT_X}" y="{}">{}</text>"#,
        TOP - 8.0,
        escape(caption)
    );
    axes(out, LAT_X, LAT_W);
    for decade in (lo as i32)..=(hi as i32) {
        let us = 10u64.saturating_pow(decade.max(0) as u32);
        let py = y(us);
        let _ = write!(
            out,
            r##"<line x1="{LAT_X}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            LAT_X + LAT_W,
            LAT_X - 6.0,
            py + 4.0,
            fmt_us(us)
        );
    }
    let count = series.first().map_or(1, |s| s.points.len().max(1));
    let x = |i: usize| LAT_X + LAT_W * (i as f64 + 0.5) / count as f64;
    if let Some(first) = series.first() {
        for (i, (label, _)) in first.points.iter().enumerate() {
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{label}</text>"#,
                x(i),
                TOP + PLOT_H + 16.0
            );
        }
    }
    for (n, s) in series.iter().enumerate() {
        let points: Vec<String> = s
            .points
            .iter()
            .enumerate()
            .map(|(i, (_, us))| format!("{:.1},{:.1}", x(i), y(*us)))
            .collect();
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            s.colour,
            points.join(" ")
        );
        for (i, (_, us)) in s.points.iter().enumerate() {
            let _ = write!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"><title>{} {}</title></circle>"#,
                x(i),
                y(*us),
                s.colour,
                s.name,
                fmt_us(*us)
            );
        }
        legend(out, LAT_X + 10.0 + 90.0 * n as f64, s.colour, s.name);
    }
}

fn cpu_panel(out: &mut String, bars: &[Bar]) {
    let total = |parts: &[(&str, &str, f64)]| parts.iter().map(|p| p.2.max(0.0)).sum::<f64>();
    let top = bars
        .iter()
        .map(|(_, parts)| total(parts))
        .fold(1.0, f64::max)
        * 1.15;
    let _ = write!(
        out,
        r#"<text x="{CPU_X}" y="{}">CPU per request, µs, by process</text>"#,
        TOP - 8.0
    );
    axes(out, CPU_X, CPU_W);
    let slot = CPU_W / bars.len() as f64;
    let mut legends = Vec::new();
    for (i, (name, parts)) in bars.iter().enumerate() {
        let bx = CPU_X + slot * i as f64 + slot * 0.2;
        let bw = slot * 0.6;
        let mut base = TOP + PLOT_H;
        for (part, colour, us) in parts {
            let h = PLOT_H * us.max(0.0) / top;
            base -= h;
            let _ = write!(
                out,
                r#"<rect x="{bx:.1}" y="{base:.1}" width="{bw:.1}" height="{h:.1}" fill="{colour}"><title>{part} {us:.1} µs</title></rect>"#
            );
            if !legends.iter().any(|(seen, _)| seen == part) {
                legends.push((*part, *colour));
            }
        }
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{:.1}</text><text x="{:.1}" y="{}" text-anchor="middle">{name}</text>"#,
            bx + bw / 2.0,
            base - 4.0,
            total(parts),
            bx + bw / 2.0,
            TOP + PLOT_H + 16.0
        );
    }
    for (n, (part, colour)) in legends.iter().enumerate() {
        legend(out, CPU_X + 95.0 * n as f64, colour, part);
    }
}

fn rate_panel(out: &mut String, rates: &[Rate]) {
    let top = rates.iter().map(|r| r.2).fold(1.0, f64::max) * 1.15;
    let _ = write!(
        out,
        r#"<text x="{RATE_X}" y="{}">requests/s, closed loop</text>"#,
        TOP - 8.0
    );
    axes(out, RATE_X, RATE_W);
    let slot = RATE_W / rates.len() as f64;
    for (i, (name, colour, rps, note)) in rates.iter().enumerate() {
        let bx = RATE_X + slot * i as f64 + slot * 0.2;
        let bw = slot * 0.6;
        let h = PLOT_H * rps.max(0.0) / top;
        let y = TOP + PLOT_H - h;
        let cx = bx + bw / 2.0;
        let _ = write!(
            out,
            r#"<rect x="{bx:.1}" y="{y:.1}" width="{bw:.1}" height="{h:.1}" fill="{colour}"><title>{name} {rps:.0} req/s</title></rect><text x="{cx:.1}" y="{:.1}" text-anchor="middle">{rps:.0}</text><text x="{cx:.1}" y="{}" text-anchor="middle">{name}</text><text x="{cx:.1}" y="{}" text-anchor="middle">{}</text>"#,
            y - 4.0,
            TOP + PLOT_H + 16.0,
            TOP + PLOT_H + 30.0,
            escape(note)
        );
    }
}

/// The lowest and highest power of ten around `lo..=hi`, as exponents.
fn decades(lo: u64, hi: u64) -> (f64, f64) {
    let lo = (lo.max(1) as f64).log10().floor();
    let hi = (hi.max(1) as f64).log10().ceil().max(lo + 1.0);
    (lo, hi)
}

fn axes(out: &mut String, x: f64, w: f64) {
    let _ = write!(
        out,
        r##"<line x1="{x}" x2="{x}" y1="{TOP}" y2="{}" stroke="#333"/><line x1="{x}" x2="{}" y1="{}" y2="{}" stroke="#333"/>"##,
        TOP + PLOT_H,
        x + w,
        TOP + PLOT_H,
        TOP + PLOT_H
    );
}

fn legend(out: &mut String, x: f64, colour: &str, name: &str) {
    let y = TOP + PLOT_H + 40.0;
    let _ = write!(
        out,
        r#"<rect x="{x:.1}" y="{:.1}" width="10" height="10" fill="{colour}"/><text x="{:.1}" y="{y:.1}">{}</text>"#,
        y - 9.0,
        x + 14.0,
        escape(name)
    );
}

fn fmt_us(us: u64) -> String {
    match us {
        0..=999 => format!("{us} µs"),
        1_000..=999_999 => format!("{:.1} ms", us as f64 / 1e3),
        _ => format!("{:.1} s", us as f64 / 1e6),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_each_target_and_stacks_each_process() {
        let points = |p50, p99| {
            vec![
                ("p50", p50),
                ("p90", p50 + 5),
                ("p99", p99),
                ("p99.9", p99 * 2),
            ]
        };
        let series = [
            Series {
                name: "direct",
                colour: DIRECT,
                points: points(80, 300),
            },
            Series {
                name: "nginx",
                colour: NGINX,
                points: points(120, 400),
            },
            Series {
                name: "gateway",
                colour: GATEWAY,
                points: points(150, 2_500),
            },
        ];
        let bars: Vec<Bar> = vec![
            ("nginx", vec![("nginx", NGINX, 17.0)]),
            (
                "gateway",
                vec![
                    ("gateway", GATEWAY, 40.0),
                    ("redis-server", REDIS, 57.0),
                    ("postgres", POSTGRES, 12.0),
                ],
            ),
        ];
        let svg = render("t <1>", OPEN_LOOP_LATENCY, &series, &bars, &[]);
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("t &lt;1&gt;"));
        assert_eq!(svg.matches("<polyline").count(), 3);
        // One rect per stacked part (plus the background and the legend swatches).
        for part in [
            "nginx 17.0 µs",
            "gateway 40.0 µs",
            "redis-server 57.0 µs",
            "postgres 12.0 µs",
        ] {
            assert!(svg.contains(&format!("<title>{part}</title>")), "{part}");
        }
        // The gateway bar is labelled with its total.
        assert!(svg.contains(">109.0</text>"));
        assert!(svg.contains("<title>gateway 2.5 ms</title>"));
        assert!(svg.contains(r#"width="960""#), "no throughput panel");
        let rates: Vec<Rate> = vec![
            ("nginx", NGINX, 30_000.0, String::new()),
            ("gateway", GATEWAY, 12_000.0, "0.40x nginx".into()),
        ];
        let svg = render("t", "closed", &series, &bars, &rates);
        assert!(svg.contains(r#"width="1300""#));
        assert!(svg.contains("<title>nginx 30000 req/s</title>"));
        assert!(svg.contains(">0.40x nginx</text>"));
        assert!(svg.contains(">closed</text>"));
    }

    #[test]
    fn decades_cover_the_values() {
        assert_eq!(decades(80, 2_500), (1.0, 4.0));
        assert_eq!(decades(100, 100), (2.0, 3.0));
        assert_eq!(decades(0, 0), (0.0, 1.0));
    }

    #[test]
    fn durations_read_in_their_unit() {
        assert_eq!(fmt_us(950), "950 µs");
        assert_eq!(fmt_us(12_000), "12.0 ms");
        assert_eq!(fmt_us(3_000_000), "3.0 s");
        assert_eq!(escape("a<b&c>"), "a&lt;b&amp;c&gt;");
    }
}
