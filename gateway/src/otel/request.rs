//! One request's trace: its ids (continuing the caller's `traceparent`),
//! the caller, the attempts as child spans, and the root span at the end.
//! Nothing is kept or allocated when tracing is off.

use super::span::{
    new_span_id, new_trace_id, parse_traceparent, traceparent, AttemptSpan, Caller, Detail,
    GuardrailSpan, Requested, RootSpan, SpanId, SpanRecord, TraceId, Upstream,
};
use super::{active, record};
use crate::auth::Principal;
use crate::deployment::Deployment;
use crate::http1::RequestHead;
use crate::metrics::Finish;
use crate::store::SpendLogRow;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// One request's trace; see the module documentation.
#[derive(Default)]
pub struct RequestTrace(Option<Box<Context>>);

struct Context {
    trace_id: TraceId,
    root: SpanId,
    parent: Option<SpanId>,
    start_unix_ns: u64,
    /// The span id sent upstream for the attempt under way.
    attempt_span: Option<SpanId>,
    caller: Caller,
    /// The call id, once a span needs it (shared by the request's spans).
    call_id: Option<Arc<str>>,
    input_tokens: i64,
    output_tokens: i64,
    /// The last attempt's deployment.
    last: Option<Upstream>,
    /// Whether the response cache answered.
    cache_hit: Option<bool>,
}

impl Context {
    fn call_id(&mut self, call_id: &str) -> Arc<str> {
        self.call_id.get_or_insert_with(|| call_id.into()).clone()
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl RequestTrace {
    /// Starts the trace of a request that arrived at `received_at`,
    /// continuing its `traceparent`; inert when this thread does not trace.
    pub fn begin(head: &RequestHead, received_at: Instant) -> RequestTrace {
        if !active() {
            return RequestTrace(None);
        }
        let (trace_id, parent) = match head.header("traceparent").and_then(parse_traceparent) {
            Some((trace, span)) => (trace, Some(span)),
            None => (new_trace_id(), None),
        };
        let waited = u64::try_from(received_at.elapsed().as_nanos()).unwrap_or(0);
        RequestTrace(Some(Box::new(Context {
            trace_id,
            root: new_span_id(),
            parent,
            start_unix_ns: unix_ns().saturating_sub(waited),
            attempt_span: None,
            caller: Caller::Unknown,
            call_id: None,
            input_tokens: 0,
            output_tokens: 0,
            last: None,
            cache_hit: None,
        })))
    }

    /// The caller's key hash, alias, team and user (LiteLLM's `metadata.*`),
    /// kept as references to the key's entry.
    pub fn identify(&mut self, principal: &Principal, master_token: Option<&Arc<str>>) {
        let Some(c) = self.0.as_mut() else { return };
        c.caller = match principal {
            Principal::Key(k) => Caller::Key(k.clone()),
            Principal::Master => {
                master_token.map_or(Caller::Unknown, |t| Caller::Master(t.clone()))
            }
            Principal::Anonymous => Caller::Unknown,
        };
    }

    /// The `traceparent` for the upstream request of the attempt under
    /// way (its span's id); `None` when not tracing.
    pub fn traceparent(&mut self) -> Option<String> {
        let c = self.0.as_mut()?;
        let span = *c.attempt_span.get_or_insert_with(new_span_id);
        Some(traceparent(&c.trace_id, &span))
    }

    /// An upstream attempt to `dep` (serving `group` with the upstream model
    /// `model`) ended, as its spend row says: its child span.
    pub fn attempt(
        &mut self,
        row: &SpendLogRow,
        (dep, group, model): (&Arc<Deployment>, &str, &str),
        fallback_depth: u32,
    ) {
        let Some(c) = self.0.as_mut() else { return };
        let span_id = c.attempt_span.take().unwrap_or_else(new_span_id);
        let ns = |t: chrono::DateTime<chrono::Utc>| {
            t.timestamp_nanos_opt()
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0)
        };
        c.input_tokens = c.input_tokens.saturating_add(row.prompt_tokens);
        c.output_tokens = c.output_tokens.saturating_add(row.completion_tokens);
        let upstream = Upstream::new(dep, group, model);
        let call_id = c.call_id(&row.call_id);
        record(SpanRecord {
            trace_id: c.trace_id,
            span_id,
            parent: Some(c.root),
            start_unix_ns: ns(row.start_time),
            end_unix_ns: ns(row.end_time),
            call_id,
            detail: Detail::Attempt(AttemptSpan {
                upstream: upstream.clone(),
                input_tokens: row.prompt_tokens,
                output_tokens: row.completion_tokens,
                attempt: row.attempt,
                fallback_depth,
                status: row.status_code,
                error_class: row.error_class.as_deref().map(Box::from),
            }),
        });
        c.last = Some(upstream);
    }

    /// A guardrail's run for the request `call_id`: its child span.
    pub fn guardrail(&mut self, call_id: &str, run: &crate::guardrails::log::Run) {
        let Some(c) = self.0.as_mut() else { return };
        let call_id = c.call_id(call_id);
        record(SpanRecord {
            trace_id: c.trace_id,
            span_id: new_span_id(),
            parent: Some(c.root),
            start_unix_ns: run.start_unix_ns(),
            end_unix_ns: run.end_unix_ns(),
            call_id,
            detail: Detail::Guardrail(GuardrailSpan {
                name: run.guardrail.name.as_str().into(),
                provider: run.guardrail.provider(),
                mode: run.hook.as_str(),
                status: run.outcome.status(),
                response: run.outcome.summary(),
            }),
        });
    }

    /// Whether the response cache answered the request.
    pub fn cache(&mut self, hit: bool) {
        if let Some(c) = self.0.as_mut() {
            c.cache_hit = Some(hit);
        }
    }

    /// The request ended: its root span.
    pub fn finish(&mut self, end: &Finish<'_>) {
        let Some(mut c) = self.0.take() else { return };
        let status = end
            .status
            .filter(|s| *s != 0)
            .or(end.error.map(|e| e.status()))
            .unwrap_or(200);
        let operation = match end.endpoint {
            "/chat/completions" => "chat",
            "/completions" => "text_completion",
            "/embeddings" => "embeddings",
            other => other.trim_start_matches('/'),
        };
        let requested = end.requested.map(|model| match &c.last {
            Some(last) if last.group_is(model) => Requested::Group,
            _ => Requested::Named(model.into()),
        });
        let call_id = c.call_id(end.call_id);
        record(SpanRecord {
            trace_id: c.trace_id,
            span_id: c.root,
            parent: c.parent,
            start_unix_ns: c.start_unix_ns,
            end_unix_ns: unix_ns(),
            call_id,
            detail: Detail::Root(RootSpan {
                operation,
                route: end.endpoint,
                status,
                retries: end.retries,
                fallbacks: end.fallbacks,
                input_tokens: c.input_tokens,
                output_tokens: c.output_tokens,
                requested,
                last: c.last,
                caller: c.caller,
                error: end.error.map(|e| (e.status(), e.error_type().into())),
                cache_hit: c.cache_hit,
            }),
        });
    }
}
