//! Log output: human-readable or JSON (`--json-logs` or LiteLLM's
//! `JSON_LOGS=true`), level from `RUST_LOG`. Lines go to a background writer
//! thread (lossy, so a stalled stdout never blocks a core), and each core
//! hands over its lines in one batch per flush rather than one per request.

use std::cell::RefCell;
use std::io::Write;
use std::sync::OnceLock;
use tracing_appender::non_blocking::{NonBlocking, WorkerGuard};
use tracing_subscriber::EnvFilter;

static SINK: OnceLock<NonBlocking> = OnceLock::new();
/// Whether lines are JSON objects.
static JSON: OnceLock<bool> = OnceLock::new();

/// Lines a core buffers before handing them over without waiting for its flush.
const MAX_BUFFERED: usize = 64 * 1024;

thread_local! {
    /// `Some` on threads that batch their lines (the data-plane cores).
    static BUFFER: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Installs the global subscriber; keep the guard alive until exit so
/// buffered lines are flushed.
pub fn init(json: bool) -> WorkerGuard {
    let _ = JSON.set(json);
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .finish(std::io::stdout());
    let _ = SINK.set(writer);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LineWriter);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.with_ansi(false).init();
    }
    guard
}

/// Whether `--json-logs` (or `JSON_LOGS=true`) asked for JSON lines.
pub fn json() -> bool {
    JSON.get().copied().unwrap_or(false)
}

/// Writes one error line to stderr at once, bypassing the writer thread,
/// for the moments it may not get to run: a fatal start-up error, an
/// immediate exit, an uncaught panic. A JSON object with `--json-logs`
/// (`json` decides before logging is set up), else plain text.
pub fn emergency(json: bool, target: &str, message: &str) {
    let line = if json {
        let mut line = serde_json::json!({
            "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "level": "ERROR",
            "target": target,
            "message": message,
        })
        .to_string();
        line.push('\n');
        line
    } else {
        format!("gateway: {message}\n")
    };
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Makes this thread batch its log lines until [`flush_this_thread`].
pub fn buffer_this_thread() {
    BUFFER.with(|b| *b.borrow_mut() = Some(Vec::with_capacity(MAX_BUFFERED)));
}

/// Hands this thread's batched lines to the writer thread.
pub fn flush_this_thread() {
    BUFFER.with(|b| {
        if let Some(buf) = b.borrow_mut().as_mut() {
            hand_over(buf);
        }
    });
}

fn hand_over(buf: &mut Vec<u8>) {
    if buf.is_empty() {
        return;
    }
    if let Some(sink) = SINK.get() {
        let _ = sink.clone().write_all(buf);
    }
    buf.clear();
}

/// Where each formatted line goes: this thread's batch, or straight to the
/// writer thread.
struct LineWriter;

impl Write for LineWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let buffered = BUFFER.with(|b| match b.borrow_mut().as_mut() {
            Some(buf) => {
                buf.extend_from_slice(data);
                if buf.len() >= MAX_BUFFERED {
                    hand_over(buf);
                }
                true
            }
            None => false,
        });
        if !buffered {
            match SINK.get() {
                Some(sink) => sink.clone().write_all(data)?,
                None => std::io::stdout().write_all(data)?,
            }
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
