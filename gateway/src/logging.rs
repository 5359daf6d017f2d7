//! Log output: human-readable or JSON (`--json-logs` or LiteLLM's
//! `JSON_LOGS=true`), level from `RUST_LOG`, written by a background thread so
//! the request path never blocks on stdout.

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; keep the guard alive until exit so
/// buffered lines are flushed.
pub fn init(json: bool) -> WorkerGuard {
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .finish(std::io::stdout());
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.with_ansi(false).init();
    }
    guard
}
