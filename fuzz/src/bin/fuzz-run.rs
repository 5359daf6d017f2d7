//! The stable fuzz driver, without coverage feedback:
//!
//! - `fuzz-run TARGET SECONDS [SEED]`: the corpus, then seeded mutations
//!   for SECONDS; each failing input is saved under
//!   `fuzz/findings/<target>/` and the figures are printed as one line;
//! - `fuzz-run TARGET --replay FILE...`: runs the given inputs (crashes
//!   found by AFL++, say) and reports each.

use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(target) = args.first().and_then(|n| fuzz::target(n)) else {
        let names: Vec<&str> = fuzz::TARGETS.iter().map(|t| t.name).collect();
        eprintln!(
            "usage: fuzz-run TARGET SECONDS [SEED] | TARGET --replay FILE...; targets {names:?}"
        );
        return ExitCode::from(2);
    };
    // Findings are reported below, once each, not by the panic hook.
    std::panic::set_hook(Box::new(|_| {}));
    if args.get(1).map(String::as_str) == Some("--replay") {
        let mut failed = false;
        for file in &args[2..] {
            let input = std::fs::read(file).unwrap_or_default();
            match target.check(&input) {
                Ok(()) => println!("{file}: ok"),
                Err(f) => {
                    failed = true;
                    println!("{file}: FAILS: {}", f.message);
                }
            }
        }
        return if failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let seconds: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(60);
    let seed: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let report = target.fuzz(
        seed,
        fuzz::Budget::Time(Duration::from_secs(seconds)),
        false,
    );
    let dir = fuzz::root().join("findings").join(target.name);
    let mut distinct = std::collections::BTreeMap::new();
    for f in &report.findings {
        distinct.entry(first_line(&f.message)).or_insert(f);
    }
    for (i, (message, f)) in distinct.iter().enumerate() {
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join(format!("seed{seed}-{i}"));
        let _ = std::fs::write(&path, &f.input);
        println!("finding: {message} (input saved to {})", path.display());
    }
    println!(
        "target={} engine=stable seconds={} executions={} findings={} distinct={}",
        target.name,
        report.elapsed.as_secs(),
        report.executions,
        report.findings.len(),
        distinct.len()
    );
    if report.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn first_line(message: &str) -> String {
    message
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect()
}
