//! End-to-end test harness for the gateway.
//!
//! Tests run the real `gateway` and `loadgen` binaries (built by
//! `cargo build --workspace --bins`, which `scripts/test.sh` does first) and
//! talk to them over real loopback sockets with a small blocking HTTP/1.1
//! client that gives raw control over the bytes on the wire.
//!
//! - [`MockServer`]: `loadgen mock`, an OpenAI-compatible upstream with faults.
//! - [`Gateway`]: the gateway started on a free port with a given config.
//! - [`http`]: the raw HTTP/1.1 client ([`Conn`], [`Response`], [`SseReader`]).
//! - [`config`]: config builders and a tiny JSON-to-YAML writer.
//! - [`postgres`]: scratch databases ([`TestDb`]) and a killable private
//!   server ([`PrivatePostgres`]) for the multi-replica and outage tests.
//! - [`guardrail_service`]: a guardrail service of LiteLLM's
//!   `generic_guardrail_api` contract ([`guardrail_service::GuardrailService`]).
//! - [`raw_upstream`]: a scripted upstream answering fixed bytes ([`RawUpstream`]).
//! - [`realtime_mock`]: OpenAI's realtime API over WebSocket
//!   ([`realtime_mock::RealtimeMock`]).
//! - [`redis`]: a private, stoppable `redis-server` ([`PrivateRedis`]) for
//!   the rate-limit tests.
//! - [`redis_cluster`]: a private three-master Redis Cluster
//!   ([`PrivateCluster`]) whose masters can be killed and restarted.
//! - [`pki`]: a CA of the test's own and server certificates it signs.
//! - [`tls_client`]: a blocking HTTPS client ([`tls_client::TlsConn`]).
//! - [`budget_burst`]: bursts against a priced model until a budget refuses
//!   (the fleet-budget tests).
//! - [`python`]: the scripts under `tests/python/`, with a deadline.
//! - [`node`]: the coding agents' CLIs from npm (`tests/node/`).
//! - [`load`]: steady client load for the fault tests, recording what each
//!   request saw ([`load::Load`]).
//!
//! Environment: `E2E_BIN_DIR` overrides where the binaries are looked up
//! (default: `target/<profile>/` next to the test executable); `E2E_PYTHON`
//! overrides the interpreter of the OpenAI and Anthropic SDK tests (default
//! `.venv/bin/python`); `E2E_NODE_BIN` where the npm CLIs are (default
//! `tests/node/node_modules/.bin`).

pub mod budget_burst;
pub mod config;
pub mod gate;
pub mod guardrail_service;
pub mod http;
pub mod load;
pub mod node;
pub mod pki;
pub mod postgres;
mod procs;
pub mod python;
pub mod raw_upstream;
pub mod realtime_mock;
pub mod redis;
pub mod redis_cluster;
pub mod tls_client;

pub use config::{base_config, openai_model, to_yaml, MASTER_KEY};
pub use http::{request, Conn, Response, SseReader};
pub use postgres::{PrivatePostgres, TestDb};
pub use procs::{bin_path, free_port, Gateway, MockServer};

/// A field of `/proc/{pid}/status` in kB (`"VmRSS:"`, `"VmHWM:"`); panics
/// when the process or the field is missing.
pub fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}
pub use raw_upstream::RawUpstream;
pub use redis::PrivateRedis;
pub use redis_cluster::PrivateCluster;

use serde_json::Value;
use std::time::{Duration, Instant};

/// Polls `check` every 20 ms until it returns `Some`, for at most `timeout`;
/// panics naming `what` when it never does. Tests wait on a condition with
/// this, not on a fixed sleep.
pub fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that `resp` is an error in the LiteLLM/OpenAI shape
/// `{"error":{"message":str,"type":str,"param":str|null,"code":"<status>"}}`
/// with the given status, and returns the inner `error` object.
pub fn assert_error(resp: &Response, status: u16) -> serde_json::Map<String, Value> {
    assert_eq!(
        resp.status,
        status,
        "expected status {status}, got {}: {}",
        resp.status,
        resp.text()
    );
    let body = resp.json();
    let err = body
        .get("error")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("error body has no `error` object: {body}"))
        .clone();
    assert!(
        err.get("message").is_some_and(Value::is_string),
        "error.message must be a string: {body}"
    );
    assert!(
        err.get("type").is_some_and(Value::is_string),
        "error.type must be a string: {body}"
    );
    assert!(
        err.get("param")
            .is_some_and(|p| p.is_string() || p.is_null()),
        "error.param must be present, a string or null: {body}"
    );
    assert_eq!(
        err.get("code"),
        Some(&Value::String(status.to_string())),
        "error.code must be the status as a string: {body}"
    );
    err
}

/// The `error.message` of an error object returned by [`assert_error`].
pub fn error_message(err: &serde_json::Map<String, Value>) -> &str {
    err["message"].as_str().unwrap_or_default()
}

/// A string unique to this process and call, for fault ids such as
/// `reset-once:<id>` that the mock remembers.
pub fn unique_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A minimal chat completion request body for `model`.
pub fn chat_body(model: &str) -> Value {
    serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say hello"}],
    })
}
