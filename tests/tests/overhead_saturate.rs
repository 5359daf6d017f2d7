//! `loadgen overhead --saturate` end to end: the real loadgen starts the mock,
//! the gateway (and nginx when installed, Redis and Postgres for the full
//! pipeline), drives each closed-loop in alternating rounds and writes the
//! JSON and the SVG. Checks the shape and the bookkeeping, never a timing.

use std::path::Path;
use std::process::Command;

use e2e::bin_path;
use serde_json::Value;

/// Runs `loadgen overhead --saturate` with `extra` flags on short rounds and
/// returns its JSON report and the SVG beside it.
fn saturate(dir: &Path, extra: &[&str]) -> (Value, String) {
    let json = dir.join("saturate.json");
    let out = Command::new(bin_path("loadgen"))
        .args(["overhead", "--saturate", "--gateway-bin"])
        .arg(bin_path("gateway"))
        .args(["--duration", "1s", "--rounds", "2", "--connections", "4"])
        .args(extra)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run loadgen overhead");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "loadgen overhead --saturate failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("throughput gateway / direct"), "{stdout}");
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let svg = std::fs::read_to_string(json.with_extension("svg")).unwrap();
    (report, svg)
}

/// Every target ran every round in the alternating order without an
/// error, and the mock served exactly the 2xx the load generator counted.
fn check_rounds(report: &Value) -> Vec<String> {
    let targets = report["targets"].as_array().unwrap();
    let names: Vec<String> = targets
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.first().map(String::as_str), Some("direct"));
    assert_eq!(names.last().map(String::as_str), Some("gateway"));
    let count = targets.len() as u64;
    for (i, t) in targets.iter().enumerate() {
        assert_eq!(t["valid_rounds"], 2, "{t}");
        assert_eq!(t["errors"], 0, "{t}");
        assert!(t["requests_per_s"].as_f64().unwrap() > 0.0, "{t}");
        let places: Vec<u64> = t["rounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["position"].as_u64().unwrap())
            .collect();
        // Forward in round 1, reversed in round 2.
        assert_eq!(places, [i as u64 + 1, count - i as u64], "{}", t["name"]);
    }
    assert_eq!(report["mock_served"], report["loadgen_2xx"]);
    assert!(report["gateway_to_direct"]["overall"].as_f64().unwrap() > 0.0);
    names
}

#[test]
fn master_key_against_the_mock_and_nginx() {
    let dir = tempfile::tempdir().unwrap();
    let (report, svg) = saturate(dir.path(), &["--variant", "master-key"]);
    let names = check_rounds(&report);
    let gateway = &report["targets"][names.len() - 1];
    assert!(gateway["cpu_us_per_request"]["gateway"].as_f64().unwrap() > 0.0);
    assert!(gateway["cpu_us_per_request"]["redis"].is_null(), "no Redis");
    if names.iter().any(|n| n == "nginx") {
        assert!(report["gateway_to_nginx"]["overall"].as_f64().unwrap() > 0.0);
        assert!(svg.contains("x nginx</text>"), "the ratio is drawn");
    }
    assert!(svg.contains("requests/s, closed loop"));
}

#[test]
fn full_pipeline_counts_redis_and_postgres() {
    let db = e2e::TestDb::create();
    let dir = tempfile::tempdir().unwrap();
    let (report, _) = saturate(
        dir.path(),
        &[
            "--variant",
            "full-pipeline",
            "--no-nginx",
            "--database-url",
            db.url(),
        ],
    );
    assert_eq!(check_rounds(&report), ["direct", "gateway"]);
    let cpu = &report["targets"][1]["cpu_us_per_request"];
    assert!(cpu["redis"].as_f64().unwrap() > 0.0, "{cpu}");
    assert!(cpu["postgres"].as_f64().unwrap() >= 0.0, "{cpu}");
    assert!(cpu["nginx"].is_null(), "{cpu}");
    assert!(report["gateway_to_nginx"].is_null());
}
