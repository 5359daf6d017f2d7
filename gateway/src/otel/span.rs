//! What the request path hands over: finished spans as small records, and
//! the W3C `traceparent` that links them to the caller's trace and the
//! upstream's.

use crate::auth::KeyEntry;
use crate::deployment::Deployment;
use std::sync::Arc;

/// A trace id (16 bytes, never all zero).
pub(crate) type TraceId = [u8; 16];
/// A span id (8 bytes, never all zero).
pub(crate) type SpanId = [u8; 8];

/// OTLP's `SPAN_KIND_INTERNAL`.
pub(crate) const KIND_INTERNAL: i32 = 1;
/// OTLP's `SPAN_KIND_SERVER`.
pub(crate) const KIND_SERVER: i32 = 2;
/// OTLP's `SPAN_KIND_CLIENT`.
pub(crate) const KIND_CLIENT: i32 = 3;

/// LiteLLM's span names.
const ROOT: &str = "litellm_request";
const ATTEMPT: &str = "raw_gen_ai_request";
const GUARDRAIL: &str = "guardrail";

/// An attribute value, as the encoders read it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
}

/// The deployment an attempt went to: shared with the router's snapshot
/// (nothing copied), plus the group and model names when they are not the
/// deployment's own (a wildcard group, an alias).
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    pub(crate) dep: Arc<Deployment>,
    pub(crate) group: Option<Box<str>>,
    pub(crate) model: Option<Box<str>>,
}

impl Upstream {
    /// The deployment `dep` serving `group` with the upstream model `model`.
    pub(crate) fn new(dep: &Arc<Deployment>, group: &str, model: &str) -> Upstream {
        let own = |name: &str, theirs: &str| (name != theirs).then(|| name.into());
        Upstream {
            group: own(group, &dep.group),
            model: own(model, &dep.upstream_model),
            dep: dep.clone(),
        }
    }

    /// Whether the group is named `name`.
    pub(crate) fn group_is(&self, name: &str) -> bool {
        self.group() == name
    }

    fn group(&self) -> &str {
        self.group.as_deref().unwrap_or(&self.dep.group)
    }

    fn model(&self) -> &str {
        self.model.as_deref().unwrap_or(&self.dep.upstream_model)
    }
}

/// Who made the request, as the root span names them.
#[derive(Debug, Clone, Default)]
pub(crate) enum Caller {
    /// Not authenticated (or no master key configured).
    #[default]
    Unknown,
    /// The master key: its hash.
    Master(Arc<str>),
    /// A virtual key: its cached entry.
    Key(Arc<KeyEntry>),
}

/// The model a root span says was requested.
#[derive(Debug, Clone)]
pub(crate) enum Requested {
    /// The group of the last attempt.
    Group,
    /// Another name.
    Named(Box<str>),
}

/// What an upstream attempt's span says beyond its ids and times.
#[derive(Debug, Clone)]
pub(crate) struct AttemptSpan {
    pub(crate) upstream: Upstream,
    pub(crate) input_tokens: i64,
    pub(crate) output_tokens: i64,
    pub(crate) attempt: i32,
    pub(crate) fallback_depth: u32,
    pub(crate) status: i32,
    /// The failure's class (`rate_limit`), if it failed.
    pub(crate) error_class: Option<Box<str>>,
}

/// What a request's root span says beyond its ids and times.
#[derive(Debug, Clone)]
pub(crate) struct RootSpan {
    pub(crate) operation: &'static str,
    pub(crate) route: &'static str,
    pub(crate) status: u16,
    pub(crate) retries: u32,
    pub(crate) fallbacks: u32,
    pub(crate) input_tokens: i64,
    pub(crate) output_tokens: i64,
    pub(crate) requested: Option<Requested>,
    pub(crate) last: Option<Upstream>,
    pub(crate) caller: Caller,
    /// The failure's status and error type, if it failed.
    pub(crate) error: Option<(u16, Box<str>)>,
    /// Whether the response cache answered (`None`: not looked up).
    pub(crate) cache_hit: Option<bool>,
}

/// Which span a record is.
#[derive(Debug, Clone)]
pub(crate) enum Detail {
    Attempt(AttemptSpan),
    Root(RootSpan),
    Guardrail(GuardrailSpan),
}

/// What a guardrail's span says (LiteLLM's `guardrail` span attributes).
#[derive(Debug, Clone)]
pub(crate) struct GuardrailSpan {
    /// `guardrail_name`.
    pub(crate) name: Box<str>,
    /// Its type (`litellm_content_filter`, ...).
    pub(crate) provider: &'static str,
    /// `pre_call`, `during_call` or `post_call`.
    pub(crate) mode: &'static str,
    /// LiteLLM's `guardrail_status`.
    pub(crate) status: &'static str,
    /// LiteLLM's `guardrail_response` summary (`allow`, `mask`, `block`,
    /// `error`).
    pub(crate) response: &'static str,
}

/// One finished span, as the request path hands it over: ids, times and
/// typed fields; the exporter turns them into attributes.
#[derive(Debug, Clone)]
pub(crate) struct SpanRecord {
    pub(crate) trace_id: TraceId,
    pub(crate) span_id: SpanId,
    pub(crate) parent: Option<SpanId>,
    pub(crate) start_unix_ns: u64,
    pub(crate) end_unix_ns: u64,
    /// The call id the client got, shared by the request's spans.
    pub(crate) call_id: Arc<str>,
    pub(crate) detail: Detail,
}

impl SpanRecord {
    /// LiteLLM's span name.
    pub(crate) fn name(&self) -> &'static str {
        match self.detail {
            Detail::Attempt(_) => ATTEMPT,
            Detail::Root(_) => ROOT,
            Detail::Guardrail(_) => GUARDRAIL,
        }
    }

    /// The OTLP span kind.
    pub(crate) fn kind(&self) -> i32 {
        match self.detail {
            Detail::Attempt(_) => KIND_CLIENT,
            Detail::Root(_) => KIND_SERVER,
            Detail::Guardrail(_) => KIND_INTERNAL,
        }
    }

    /// The status message of a failed span (`429 rate_limit`); `None` when
    /// it succeeded.
    pub(crate) fn error(&self) -> Option<String> {
        match &self.detail {
            Detail::Attempt(a) => a
                .error_class
                .as_ref()
                .map(|class| format!("{} {class}", a.status)),
            Detail::Root(r) => r
                .error
                .as_ref()
                .map(|(status, kind)| format!("{status} {kind}")),
            Detail::Guardrail(_) => None,
        }
    }

    /// Calls `f` with every attribute, in order: the span's own, then its
    /// deployment's ([`Self::upstream`]), its caller's ([`Self::caller`]),
    /// and `error.type` ([`Self::error_type`]).
    pub(crate) fn attributes<'a>(&'a self, mut f: impl FnMut(&'static str, Value<'a>)) {
        self.own_attributes(&mut f);
        if let Some((up, attempt)) = self.upstream() {
            up.attributes(attempt, &mut f);
        }
        if let Some(caller) = self.caller() {
            caller.attributes(&mut f);
        }
        if let Some(kind) = self.error_type() {
            f("error.type", Value::Str(kind));
        }
    }

    /// The attributes that differ from span to span: ids, counts, the call
    /// id, the requested model.
    pub(crate) fn own_attributes<'a>(&'a self, mut f: impl FnMut(&'static str, Value<'a>)) {
        let call_id = Value::Str(&self.call_id);
        match &self.detail {
            Detail::Attempt(a) => {
                f("gen_ai.usage.input_tokens", Value::Int(a.input_tokens));
                f("gen_ai.usage.output_tokens", Value::Int(a.output_tokens));
                f("litellm.call_id", call_id);
                f("litellm.attempt", Value::Int(i64::from(a.attempt)));
                f(
                    "litellm.fallback_depth",
                    Value::Int(i64::from(a.fallback_depth)),
                );
                f("http.response.status_code", Value::Int(i64::from(a.status)));
            }
            Detail::Root(r) => {
                f("gen_ai.operation.name", Value::Str(r.operation));
                f("litellm.call_id", call_id);
                f("http.route", Value::Str(r.route));
                f("http.response.status_code", Value::Int(i64::from(r.status)));
                f("litellm.retries", Value::Int(i64::from(r.retries)));
                f("litellm.fallbacks", Value::Int(i64::from(r.fallbacks)));
                f("gen_ai.usage.input_tokens", Value::Int(r.input_tokens));
                f("gen_ai.usage.output_tokens", Value::Int(r.output_tokens));
                if let Some(hit) = r.cache_hit {
                    f("litellm.cache_hit", Value::Bool(hit));
                }
                match (&r.requested, &r.last) {
                    (Some(Requested::Named(model)), _) => {
                        f("gen_ai.request.model", Value::Str(model))
                    }
                    (Some(Requested::Group), Some(last)) => {
                        f("gen_ai.request.model", Value::Str(last.group()))
                    }
                    _ => {}
                }
            }
            Detail::Guardrail(g) => {
                f("openinference.span.kind", Value::Str("GUARDRAIL"));
                f("litellm.call_id", call_id);
                f("guardrail_name", Value::Str(&g.name));
                f("guardrail_provider", Value::Str(g.provider));
                f("guardrail_mode", Value::Str(g.mode));
                f("guardrail_status", Value::Str(g.status));
                f("guardrail_response", Value::Str(g.response));
            }
        }
    }

    /// The deployment the span names, and whether the span is its attempt
    /// (which says more of it than a root span).
    pub(crate) fn upstream(&self) -> Option<(&Upstream, bool)> {
        match &self.detail {
            Detail::Attempt(a) => Some((&a.upstream, true)),
            Detail::Root(r) => r.last.as_ref().map(|up| (up, false)),
            Detail::Guardrail(_) => None,
        }
    }

    /// The caller a root span names.
    pub(crate) fn caller(&self) -> Option<&Caller> {
        match &self.detail {
            Detail::Root(r) => Some(&r.caller),
            Detail::Attempt(_) | Detail::Guardrail(_) => None,
        }
    }

    /// The `error.type` of a failed span.
    pub(crate) fn error_type(&self) -> Option<&str> {
        match &self.detail {
            Detail::Attempt(a) => a.error_class.as_deref(),
            Detail::Root(r) => r.error.as_ref().map(|(_, kind)| &**kind),
            Detail::Guardrail(_) => None,
        }
    }
}

impl Upstream {
    /// Whether its names are the deployment's own, so its attributes are
    /// the same on every span that names it.
    pub(crate) fn is_plain(&self) -> bool {
        self.group.is_none() && self.model.is_none()
    }

    /// Its attributes: those of a root span, then those an attempt adds.
    pub(crate) fn attributes<'a>(
        &'a self,
        attempt: bool,
        mut f: impl FnMut(&'static str, Value<'a>),
    ) {
        let dep = &self.dep;
        f("gen_ai.system", Value::Str(&dep.provider_name));
        f("gen_ai.response.model", Value::Str(self.model()));
        f("litellm.model_group", Value::Str(self.group()));
        f("litellm.model_id", Value::Str(&dep.id));
        if attempt {
            f("gen_ai.request.model", Value::Str(self.model()));
            if let Some(base) = dep.base.as_ref().filter(|b| !b.url.is_empty()) {
                f("server.address", Value::Str(&base.url));
            }
        }
    }
}

impl Caller {
    /// LiteLLM's `metadata.*` attributes of the caller.
    pub(crate) fn attributes<'a>(&'a self, mut f: impl FnMut(&'static str, Value<'a>)) {
        let mut put = |k, v: Option<&'a str>| {
            if let Some(v) = v {
                f(k, Value::Str(v));
            }
        };
        match self {
            Caller::Key(k) => {
                let record = &k.record;
                put("metadata.user_api_key_hash", Some(&record.token));
                put("metadata.user_api_key_alias", record.key_alias.as_deref());
                put("metadata.user_api_key_team_id", record.team_id.as_deref());
                put("metadata.user_api_key_user_id", record.user_id.as_deref());
            }
            Caller::Master(token) => put("metadata.user_api_key_hash", Some(token)),
            Caller::Unknown => {}
        }
    }

    /// Whether `other` is the same caller (the same key entry or token).
    pub(crate) fn same(&self, other: &Caller) -> bool {
        match (self, other) {
            (Caller::Key(a), Caller::Key(b)) => Arc::ptr_eq(a, b),
            (Caller::Master(a), Caller::Master(b)) => Arc::ptr_eq(a, b),
            (Caller::Unknown, Caller::Unknown) => true,
            _ => false,
        }
    }
}

/// A new random trace id.
pub(crate) fn new_trace_id() -> TraceId {
    loop {
        let id = fastrand::u128(..).to_be_bytes();
        if id != [0; 16] {
            return id;
        }
    }
}

/// A new random span id.
pub(crate) fn new_span_id() -> SpanId {
    loop {
        let id = fastrand::u64(..).to_be_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

/// The trace and parent span of a W3C `traceparent` header
/// (`00-<32 hex>-<16 hex>-<2 hex>`); `None` for anything else, all-zero ids
/// included, as the spec asks.
pub(crate) fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId)> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || flags.len() != 2 {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let mut trace_id = [0u8; 16];
    let mut span_id = [0u8; 8];
    hex::decode_to_slice(trace, &mut trace_id).ok()?;
    hex::decode_to_slice(span, &mut span_id).ok()?;
    u8::from_str_radix(flags, 16).ok()?;
    u8::from_str_radix(version, 16).ok()?;
    (trace_id != [0; 16] && span_id != [0; 8]).then_some((trace_id, span_id))
}

/// The `traceparent` naming `span` of `trace`, sampled.
pub(crate) fn traceparent(trace: &TraceId, span: &SpanId) -> String {
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    // Both encodes fill exactly the slices given (twice the input length).
    let _ = hex::encode_to_slice(trace, &mut out[3..35]);
    out[35] = b'-';
    let _ = hex::encode_to_slice(span, &mut out[36..52]);
    out[52..].copy_from_slice(b"-01");
    // ASCII throughout: the check is one pass over 55 bytes.
    std::str::from_utf8(&out).unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_read_and_written_as_w3c_says() {
        let (t, s) =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(hex::encode(t), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex::encode(s), "00f067aa0ba902b7");
        assert_eq!(
            traceparent(&t, &s),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-xyz92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
        assert!(
            parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more")
                .is_some(),
            "a later version may add fields"
        );
        assert_ne!(new_trace_id(), new_trace_id());
    }
}
