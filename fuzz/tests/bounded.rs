//! The bounded fuzz pass of the test command: each target runs its seed
//! corpus and a fixed number of seeded mutations (deterministic), sized
//! for a few seconds per target in a debug build, about a minute in all. `scripts/fuzz.sh` runs the long campaigns.

use fuzz::{target, Budget};

fn pass(name: &str, inputs: u64) {
    let t = target(name).expect("target exists");
    assert!(!t.corpus().is_empty(), "{name} has no seed corpus");
    let report = t.fuzz(0x5eed, Budget::Inputs(inputs), true);
    assert!(report.executions >= inputs.min(1), "{name} ran nothing");
    if let Some(f) = report.findings.first() {
        panic!(
            "{name}: {}\ninput ({} bytes): {:?}",
            f.message,
            f.input.len(),
            String::from_utf8_lossy(&f.input)
        );
    }
}

#[test]
fn request_head() {
    pass("request_head", 800_000);
}

#[test]
fn chunked() {
    pass("chunked", 300_000);
}

#[test]
fn response_head() {
    pass("response_head", 800_000);
}

#[test]
fn sse() {
    pass("sse", 150_000);
}

#[test]
fn resp() {
    pass("resp", 600_000);
}

#[test]
fn inbound() {
    pass("inbound", 300_000);
}

#[test]
fn form() {
    pass("form", 200_000);
}

#[test]
fn admin() {
    pass("admin", 300_000);
}

#[test]
fn cache() {
    pass("cache", 150_000);
}

#[test]
fn translate() {
    pass("translate", 60_000);
}

#[test]
fn config() {
    pass("config", 100_000);
}

#[test]
fn eventstream() {
    pass("eventstream", 50_000);
}

#[test]
fn cohere() {
    pass("cohere", 60_000);
}

#[test]
fn rerank() {
    pass("rerank", 60_000);
}

#[test]
fn pass_through() {
    pass("pass_through", 300_000);
}

#[test]
fn files() {
    pass("files", 100_000);
}

#[test]
fn images() {
    pass("images", 60_000);
}

#[test]
fn websocket() {
    pass("websocket", 50_000);
}

#[test]
fn usage() {
    pass("usage", 60_000);
}
