//! OpenTelemetry traces, as LiteLLM's `otel` callback sends them: one trace
//! per LLM request (a `litellm_request` server span) with a child span per
//! upstream attempt (`raw_gen_ai_request`), GenAI semantic-convention
//! attributes plus the call id, key hash and alias, team, deployment,
//! retries and fallbacks; failures are span errors. An incoming W3C
//! `traceparent` is continued, and each attempt sends its own upstream.
//!
//! The request path only builds small records ([`RequestTrace`]) and pushes
//! them onto its core's buffer; the core's flusher hands the buffer to the
//! control plane without waiting ([`flush_this_thread`]), where the exporter
//! batches them and POSTs OTLP/HTTP (protobuf or JSON) or logs them
//! (`console`). Every queue is bounded; spans that find one full are
//! dropped and counted (`/health/readiness` reports the counts).

mod encode;
mod export;
mod request;
mod settings;
mod span;

pub use request::RequestTrace;
pub use settings::{OtelSettings, Protocol};

use span::SpanRecord;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Spans a core holds between flushes.
const MAX_BUFFERED: usize = 4096;
/// Batches waiting for the exporter.
const QUEUE: usize = 256;

/// The process's tracer: settings, the queue to the exporter, counts.
pub struct Tracer {
    settings: OtelSettings,
    tx: mpsc::Sender<Vec<SpanRecord>>,
    rx: Mutex<Option<mpsc::Receiver<Vec<SpanRecord>>>>,
    exported: AtomicU64,
    dropped: AtomicU64,
}

/// A core's spans since its last flush.
struct Buffer {
    tracer: Arc<Tracer>,
    spans: Vec<SpanRecord>,
}

thread_local! {
    static BUFFER: RefCell<Option<Buffer>> = const { RefCell::new(None) };
}

impl Tracer {
    /// A tracer for `settings` (idle when they do not enable tracing).
    pub fn new(settings: OtelSettings) -> Arc<Tracer> {
        let (tx, rx) = mpsc::channel(QUEUE);
        Arc::new(Tracer {
            settings,
            tx,
            rx: Mutex::new(Some(rx)),
            exported: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        })
    }

    /// Whether requests are traced.
    pub fn enabled(&self) -> bool {
        self.settings.enabled
    }

    /// Gives this thread (a data-plane core) its span buffer.
    pub fn attach_this_thread(self: &Arc<Self>) {
        if self.enabled() {
            BUFFER.with(|b| {
                *b.borrow_mut() = Some(Buffer {
                    tracer: self.clone(),
                    spans: Vec::new(),
                })
            });
        }
    }

    /// Starts the exporter on the control plane; `tls` reaches https
    /// collectors.
    pub fn start(
        self: &Arc<Self>,
        control: &crate::control::ControlPlane,
        tls: Arc<rustls::ClientConfig>,
    ) -> Result<(), String> {
        if !self.enabled() {
            return Ok(());
        }
        let rx = self
            .rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or("the trace exporter runs already")?;
        let tracer = self.clone();
        control
            .spawn(move |_| export::run(tracer, rx, tls))
            .map_err(|e| e.to_string())
    }

    /// Spans exported so far, and spans dropped (a full queue, a failed
    /// export).
    pub fn counts(&self) -> (u64, u64) {
        (self.exported.load(Relaxed), self.dropped.load(Relaxed))
    }

    fn drop_spans(&self, n: usize) {
        self.dropped.fetch_add(n as u64, Relaxed);
    }
}

/// Whether this thread traces requests.
fn active() -> bool {
    BUFFER
        .try_with(|b| b.try_borrow().is_ok_and(|b| b.is_some()))
        .unwrap_or(false)
}

/// Queues a finished span on this thread's buffer (dropped and counted when
/// it is full).
fn record(span: SpanRecord) {
    let _ = BUFFER.try_with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            if let Some(buffer) = b.as_mut() {
                if buffer.spans.len() < MAX_BUFFERED {
                    buffer.spans.push(span);
                } else {
                    buffer.tracer.drop_spans(1);
                }
            }
        }
    });
}

/// Hands this thread's spans to the exporter without waiting (the core's
/// flusher calls it); a full queue drops them, counted.
pub fn flush_this_thread() {
    let _ = BUFFER.try_with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            if let Some(buffer) = b.as_mut() {
                if buffer.spans.is_empty() {
                    return;
                }
                // The next buffer starts at this one's size: no regrowing.
                let n = buffer.spans.len();
                let spans = std::mem::replace(&mut buffer.spans, Vec::with_capacity(n));
                if buffer.tracer.tx.try_send(spans).is_err() {
                    buffer.tracer.drop_spans(n);
                }
            }
        }
    });
}
