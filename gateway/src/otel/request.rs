//! One request's trace: its ids (continuing the caller's `traceparent`),
//! the caller, the attempts as child spans, and the root span at the end.
//! Nothing is kept or allocated when tracing is off.

use super::span::{
    new_span_id, new_trace_id, parse_traceparent, traceparent, SpanId, SpanRecord, TraceId, Value,
    KIND_CLIENT, KIND_SERVER,
};
use super::{active, record};
use crate::auth::Principal;
use crate::http1::RequestHead;
use crate::metrics::Finish;
use crate::store::SpendLogRow;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// LiteLLM's span names.
const ROOT: &str = "litellm_request";
const ATTEMPT: &str = "raw_gen_ai_request";

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
    caller: Vec<(&'static str, Value)>,
    input_tokens: i64,
    output_tokens: i64,
    /// The last attempt's provider, model, group and deployment.
    last: Option<[String; 4]>,
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
            caller: Vec::new(),
            input_tokens: 0,
            output_tokens: 0,
            last: None,
        })))
    }

    /// The caller's key hash, alias, team and user (LiteLLM's `metadata.*`).
    pub fn identify(&mut self, principal: &Principal, master_token: Option<&str>) {
        let Some(c) = self.0.as_mut() else { return };
        let mut put = |k: &'static str, v: Option<&str>| {
            if let Some(v) = v {
                c.caller.push((k, Value::Str(v.to_string())));
            }
        };
        match principal {
            Principal::Key(k) => {
                put("metadata.user_api_key_hash", Some(&k.record.token));
                put("metadata.user_api_key_alias", k.record.key_alias.as_deref());
                put("metadata.user_api_key_team_id", k.record.team_id.as_deref());
                put("metadata.user_api_key_user_id", k.record.user_id.as_deref());
            }
            Principal::Master => put("metadata.user_api_key_hash", master_token),
            Principal::Anonymous => {}
        }
    }

    /// The `traceparent` for the upstream request of the attempt under
    /// way (its span's id); `None` when not tracing.
    pub fn traceparent(&mut self) -> Option<String> {
        let c = self.0.as_mut()?;
        let span = *c.attempt_span.get_or_insert_with(new_span_id);
        Some(traceparent(&c.trace_id, &span))
    }

    /// An upstream attempt ended, as its spend row says: its child span.
    pub fn attempt(&mut self, row: &SpendLogRow, fallback_depth: u32) {
        let Some(c) = self.0.as_mut() else { return };
        let span_id = c.attempt_span.take().unwrap_or_else(new_span_id);
        let ns = |t: chrono::DateTime<chrono::Utc>| {
            t.timestamp_nanos_opt()
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0)
        };
        c.input_tokens = c.input_tokens.saturating_add(row.prompt_tokens);
        c.output_tokens = c.output_tokens.saturating_add(row.completion_tokens);
        let mut attributes = vec![
            ("gen_ai.system", Value::Str(row.custom_llm_provider.clone())),
            ("gen_ai.request.model", Value::Str(row.model.clone())),
            ("gen_ai.response.model", Value::Str(row.model.clone())),
            ("gen_ai.usage.input_tokens", Value::Int(row.prompt_tokens)),
            (
                "gen_ai.usage.output_tokens",
                Value::Int(row.completion_tokens),
            ),
            ("litellm.call_id", Value::Str(row.call_id.clone())),
            ("litellm.model_group", Value::Str(row.model_group.clone())),
            ("litellm.model_id", Value::Str(row.model_id.clone())),
            ("litellm.attempt", Value::Int(i64::from(row.attempt))),
            (
                "litellm.fallback_depth",
                Value::Int(i64::from(fallback_depth)),
            ),
            (
                "http.response.status_code",
                Value::Int(i64::from(row.status_code)),
            ),
        ];
        if !row.api_base.is_empty() {
            attributes.push(("server.address", Value::Str(row.api_base.clone())));
        }
        if let Some(class) = &row.error_class {
            attributes.push(("error.type", Value::Str(class.clone())));
        }
        record(SpanRecord {
            trace_id: c.trace_id,
            span_id,
            parent: Some(c.root),
            name: ATTEMPT,
            kind: KIND_CLIENT,
            start_unix_ns: ns(row.start_time),
            end_unix_ns: ns(row.end_time),
            attributes,
            error: row
                .error_class
                .as_ref()
                .map(|class| format!("{} {class}", row.status_code)),
        });
        c.last = Some([
            row.custom_llm_provider.clone(),
            row.model.clone(),
            row.model_group.clone(),
            row.model_id.clone(),
        ]);
    }

    /// The request ended: its root span.
    pub fn finish(&mut self, end: &Finish<'_>) {
        let Some(c) = self.0.take() else { return };
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
        let mut attributes = vec![
            ("gen_ai.operation.name", Value::Str(operation.to_string())),
            ("litellm.call_id", Value::Str(end.call_id.to_string())),
            ("http.route", Value::Str(end.endpoint.to_string())),
            ("http.response.status_code", Value::Int(i64::from(status))),
            ("litellm.retries", Value::Int(i64::from(end.retries))),
            ("litellm.fallbacks", Value::Int(i64::from(end.fallbacks))),
            ("gen_ai.usage.input_tokens", Value::Int(c.input_tokens)),
            ("gen_ai.usage.output_tokens", Value::Int(c.output_tokens)),
        ];
        if let Some(model) = end.requested {
            attributes.push(("gen_ai.request.model", Value::Str(model.to_string())));
        }
        if let Some([provider, model, group, id]) = c.last {
            attributes.push(("gen_ai.system", Value::Str(provider)));
            attributes.push(("gen_ai.response.model", Value::Str(model)));
            attributes.push(("litellm.model_group", Value::Str(group)));
            attributes.push(("litellm.model_id", Value::Str(id)));
        }
        attributes.extend(c.caller);
        let error = end.error.map(|e| {
            attributes.push(("error.type", Value::Str(e.error_type().to_string())));
            format!("{} {}", e.status(), e.error_type())
        });
        record(SpanRecord {
            trace_id: c.trace_id,
            span_id: c.root,
            parent: c.parent,
            name: ROOT,
            kind: KIND_SERVER,
            start_unix_ns: c.start_unix_ns,
            end_unix_ns: unix_ns(),
            attributes,
            error,
        });
    }
}
