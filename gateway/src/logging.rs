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

/// Writes (a core's buffer of up to [`MAX_BUFFERED`] bytes, or one line)
/// queued for the writer thread before new ones are dropped: a log
/// destination that stalls (a full disk, a pipe nobody reads) costs at most
/// 16 MiB here, never unbounded memory. The default (128,000) would hold
/// 8 GiB of core buffers.
const MAX_QUEUED_WRITES: usize = 256;

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
        .buffered_lines_limit(MAX_QUEUED_WRITES)
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

/// Appends one pre-formatted line (`write` must end it with `\n`) the way
/// `tracing` lines go: into this thread's batch on a core, else straight to
/// the writer thread. For hot lines formatted by hand (the access line).
pub fn write_line(write: impl FnOnce(&mut Vec<u8>)) {
    let handed = BUFFER.with(|b| match b.borrow_mut().as_mut() {
        Some(buf) => {
            write(buf);
            if buf.len() >= MAX_BUFFERED {
                hand_over(buf);
            }
            None
        }
        None => Some(write),
    });
    if let Some(write) = handed {
        let mut line = Vec::with_capacity(256);
        write(&mut line);
        hand_over(&mut line);
    }
}

/// Appends `now` as `tracing`'s timestamps read (RFC 3339, UTC, to the
/// microsecond: `2026-12-01T14:33:33.655958Z`).
pub fn write_timestamp(buf: &mut Vec<u8>, now: std::time::SystemTime) {
    let since = now
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days(secs / 86_400);
    let of_day = secs % 86_400;
    buf.extend_from_slice(itoa::Buffer::new().format(year).as_bytes());
    // The rest has a fixed width: filled in place, appended once.
    let mut rest = *b"-MM-DDTHH:MM:SS.uuuuuuZ";
    put_digits(&mut rest[1..3], month);
    put_digits(&mut rest[4..6], day);
    put_digits(&mut rest[7..9], of_day / 3600);
    put_digits(&mut rest[10..12], of_day / 60 % 60);
    put_digits(&mut rest[13..15], of_day % 60);
    put_digits(&mut rest[16..22], u64::from(since.subsec_micros()));
    buf.extend_from_slice(&rest);
}

/// The last `out.len()` decimal digits of `n`, zero-padded.
fn put_digits(out: &mut [u8], mut n: u64) {
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// The proleptic Gregorian date of `days` after 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn stamp(secs: u64, micros: u32) -> String {
        let mut buf = Vec::new();
        let at = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros.into());
        write_timestamp(&mut buf, at);
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn timestamps_read_as_chrono_writes_them() {
        for secs in [
            0,
            59,
            86_399,
            951_782_400,
            1_709_164_800,
            1_764_599_613,
            4_102_444_799,
        ] {
            for micros in [0, 7, 655_958, 999_999] {
                let at = chrono::DateTime::from_timestamp(secs as i64, micros * 1000).unwrap();
                let want = at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
                assert_eq!(stamp(secs, micros), want);
            }
        }
    }
}
