//! The exporter, on the control plane: batches of spans from the cores,
//! sent every second or every [`MAX_BATCH`] spans, as OTLP/HTTP (protobuf
//! or JSON) or log lines (`console`). A failed export is logged (at most
//! every [`WARN_EVERY`]) and its spans counted as dropped; the pending
//! batch is bounded by [`MAX_PENDING`].

use super::encode::{self, Origin};
use super::settings::Protocol;
use super::span::{SpanRecord, Value};
use super::Tracer;
use crate::upstream::once as http_once;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Spans per export.
const MAX_BATCH: usize = 512;
/// Spans waiting while an export runs; more are dropped.
const MAX_PENDING: usize = 8192;
/// Longest time between a span's hand-over and its export.
const EXPORT_EVERY: Duration = Duration::from_secs(1);
/// Longest an export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// At most one warning about failed exports per this period.
const WARN_EVERY: Duration = Duration::from_secs(60);
/// The instrumentation scope, LiteLLM's tracer name.
const SCOPE: &str = "litellm";

/// Receives span batches until the process ends, exporting them.
pub(super) async fn run(
    tracer: Arc<Tracer>,
    mut rx: mpsc::Receiver<Vec<SpanRecord>>,
    tls: Arc<rustls::ClientConfig>,
) {
    let mut pending: Vec<SpanRecord> = Vec::new();
    let mut tick = tokio::time::interval(EXPORT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warned: Option<Instant> = None;
    let mut encoder = Encoder {
        protobuf: encode::Protobuf::default(),
        buffer: Vec::new(),
    };
    loop {
        tokio::select! {
            batch = rx.recv() => {
                let Some(batch) = batch else { break };
                let room = MAX_PENDING.saturating_sub(pending.len());
                if batch.len() > room {
                    tracer.drop_spans(batch.len() - room);
                }
                pending.extend(batch.into_iter().take(room));
                while pending.len() >= MAX_BATCH {
                    export(&tracer, &pending[..MAX_BATCH], (&tls, &mut encoder), &mut warned).await;
                    pending.drain(..MAX_BATCH);
                }
            }
            _ = tick.tick() => {
                if !pending.is_empty() {
                    export(&tracer, &pending, (&tls, &mut encoder), &mut warned).await;
                    // The capacity stays for the next batches.
                    pending.clear();
                }
            }
        }
    }
}

/// What the exporter keeps from batch to batch: the protobuf encoder's
/// memos and the request buffer.
struct Encoder {
    protobuf: encode::Protobuf,
    buffer: Vec<u8>,
}

/// Room left before a body for the request head, which is written in front
/// of it afterwards (a longer head is copied in front instead).
const HEAD_ROOM: usize = 1024;

/// Sends one batch; counts it exported or dropped.
async fn export(
    tracer: &Tracer,
    spans: &[SpanRecord],
    (tls, encoder): (&Arc<rustls::ClientConfig>, &mut Encoder),
    warned: &mut Option<Instant>,
) {
    let s = &tracer.settings;
    let origin = Origin {
        service_name: &s.service_name,
        scope: SCOPE,
    };
    let buffer = &mut encoder.buffer;
    buffer.clear();
    buffer.resize(HEAD_ROOM, 0);
    let content_type = match s.protocol {
        Protocol::Console => {
            for span in spans {
                log_span(span);
            }
            tracer.exported.fetch_add(spans.len() as u64, Relaxed);
            return;
        }
        Protocol::HttpProtobuf => {
            encoder.protobuf.encode(&origin, spans, buffer);
            "application/x-protobuf"
        }
        Protocol::HttpJson => {
            buffer.extend_from_slice(&encode::json(&origin, spans));
            "application/json"
        }
    };
    let base = &s.endpoint;
    let headers = std::iter::once(("content-type", content_type))
        .chain(s.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let head = http_once::head(base, "POST", &base.path, buffer.len() - HEAD_ROOM, headers);
    let joined;
    let request = match HEAD_ROOM.checked_sub(head.len()) {
        Some(at) => {
            buffer[at..HEAD_ROOM].copy_from_slice(&head);
            &buffer[at..]
        }
        None => {
            joined = [&head[..], &buffer[HEAD_ROOM..]].concat();
            &joined[..]
        }
    };
    let sent = tokio::time::timeout(EXPORT_TIMEOUT, http_once::exchange(base, request, tls)).await;
    let failure = match sent {
        Ok(Ok(answer)) if (200..300).contains(&answer.status) => None,
        Ok(Ok(answer)) => Some(format!("the collector answered {}", answer.status)),
        Ok(Err(e)) => Some(e),
        Err(_) => Some(format!("no answer within {EXPORT_TIMEOUT:?}")),
    };
    match failure {
        None => {
            tracer.exported.fetch_add(spans.len() as u64, Relaxed);
        }
        Some(reason) => {
            tracer.drop_spans(spans.len());
            if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                *warned = Some(Instant::now());
                tracing::warn!(
                    target: "gateway::otel",
                    collector = %base.host,
                    spans = spans.len(),
                    error = %reason,
                    "trace export failed; spans dropped"
                );
            }
        }
    }
}

/// The `console` exporter: one log line per span.
fn log_span(span: &SpanRecord) {
    let mut attributes = serde_json::Map::new();
    span.attributes(|k, v| {
        let v = match v {
            Value::Str(s) => serde_json::Value::from(s),
            Value::Int(i) => serde_json::Value::from(i),
            Value::Bool(b) => serde_json::Value::from(b),
        };
        attributes.insert(k.to_string(), v);
    });
    tracing::info!(
        target: "gateway::otel",
        trace_id = %hex::encode(span.trace_id),
        span_id = %hex::encode(span.span_id),
        parent_span_id = %span.parent.map(hex::encode).unwrap_or_default(),
        name = span.name(),
        duration_ms = span.end_unix_ns.saturating_sub(span.start_unix_ns) as f64 / 1e6,
        error = span.error().as_deref(),
        attributes = %serde_json::Value::Object(attributes),
        "span"
    );
}
