//! OTLP `ExportTraceServiceRequest` bodies: protobuf (`http/protobuf`,
//! hand-encoded: the few messages a span needs) and JSON (`http/json`, the
//! OTLP JSON mapping: hex ids, nanosecond times as strings).

use super::span::{Caller, SpanRecord, Upstream, Value};
use crate::deployment::Deployment;
use serde_json::json;
use std::sync::Arc;

/// The resource and scope every span is sent under.
pub(crate) struct Origin<'a> {
    pub(crate) service_name: &'a str,
    pub(crate) scope: &'a str,
}

/// The JSON body for `spans`.
pub(crate) fn json(origin: &Origin<'_>, spans: &[SpanRecord]) -> Vec<u8> {
    let attribute = |key: &str, value: Value<'_>| match value {
        Value::Str(s) => json!({"key": key, "value": {"stringValue": s}}),
        Value::Int(i) => json!({"key": key, "value": {"intValue": i.to_string()}}),
        Value::Bool(b) => json!({"key": key, "value": {"boolValue": b}}),
    };
    let spans: Vec<serde_json::Value> = spans
        .iter()
        .map(|s| {
            let mut attributes = Vec::new();
            s.attributes(|k, v| attributes.push(attribute(k, v)));
            let mut span = json!({
                "traceId": hex::encode(s.trace_id),
                "spanId": hex::encode(s.span_id),
                "name": s.name(),
                "kind": s.kind(),
                "startTimeUnixNano": s.start_unix_ns.to_string(),
                "endTimeUnixNano": s.end_unix_ns.to_string(),
                "attributes": attributes,
                "status": match s.error() {
                    Some(message) => json!({"code": 2, "message": message}),
                    None => json!({"code": 0}),
                },
            });
            if let Some(parent) = s.parent {
                span["parentSpanId"] = json!(hex::encode(parent));
            }
            span
        })
        .collect();
    let body = json!({"resourceSpans": [{
        "resource": {"attributes": [attribute("service.name", Value::Str(origin.service_name))]},
        "scopeSpans": [{"scope": {"name": origin.scope}, "spans": spans}],
    }]});
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Slots of each memo of encoded attributes (a power of two).
const BLOCKS: usize = 64;

/// A deployment's encoded attributes: a root span's, then an attempt's
/// additions.
struct DeploymentBlock {
    dep: Arc<Deployment>,
    bytes: Vec<u8>,
    root_len: usize,
}

/// A caller's encoded attributes.
type CallerBlock = (Caller, Vec<u8>);

/// The protobuf encoder of the exporter. Attributes that repeat from span
/// to span (a deployment's, a caller's) are encoded once and kept, by the
/// address of what they describe, which each slot keeps alive.
pub(crate) struct Protobuf {
    deployments: Box<[Option<DeploymentBlock>]>,
    callers: Box<[Option<CallerBlock>]>,
    /// Attributes of a deployment called under another name (not kept).
    scratch: Vec<u8>,
}

impl Default for Protobuf {
    fn default() -> Self {
        Protobuf {
            deployments: (0..BLOCKS).map(|_| None).collect(),
            callers: (0..BLOCKS).map(|_| None).collect(),
            scratch: Vec::new(),
        }
    }
}

/// The memo slot of what lives at `address`.
fn slot_of<T: ?Sized>(address: *const T) -> usize {
    (address.cast::<u8>() as usize >> 4) % BLOCKS
}

impl Protobuf {
    /// Appends the `ExportTraceServiceRequest` of `spans` to `out`.
    pub(crate) fn encode(&mut self, origin: &Origin<'_>, spans: &[SpanRecord], out: &mut Vec<u8>) {
        out.reserve(256 + spans.len() * 300);
        nested(out, 1, |resource_spans| {
            nested(resource_spans, 1, |resource| {
                nested(resource, 1, |kv| {
                    key_value(kv, "service.name", Value::Str(origin.service_name))
                });
            });
            nested(resource_spans, 2, |scope_spans| {
                nested(scope_spans, 1, |scope| string(scope, 1, origin.scope));
                for s in spans {
                    self.span(scope_spans, s);
                }
            });
        });
    }

    /// The encoded attributes of `up` (a root span's, or an attempt's).
    fn upstream(&mut self, up: &Upstream, attempt: bool) -> &[u8] {
        if !up.is_plain() {
            let scratch = &mut self.scratch;
            scratch.clear();
            up.attributes(attempt, |k, v| attribute(scratch, k, v));
            return scratch;
        }
        let slot = &mut self.deployments[slot_of(Arc::as_ptr(&up.dep))];
        if !slot.as_ref().is_some_and(|b| Arc::ptr_eq(&b.dep, &up.dep)) {
            let (mut bytes, mut root_len) = (Vec::new(), 0);
            up.attributes(true, |k, v| {
                attribute(&mut bytes, k, v);
                if root_attribute(k) {
                    root_len = bytes.len();
                }
            });
            *slot = Some(DeploymentBlock {
                dep: up.dep.clone(),
                bytes,
                root_len,
            });
        }
        match &*slot {
            Some(block) if attempt => &block.bytes,
            Some(block) => &block.bytes[..block.root_len],
            None => &[],
        }
    }

    /// The encoded attributes of `caller`.
    fn caller(&mut self, caller: &Caller) -> &[u8] {
        let address = match caller {
            Caller::Key(k) => Arc::as_ptr(k).cast::<u8>(),
            Caller::Master(t) => Arc::as_ptr(t).cast::<u8>(),
            Caller::Unknown => return &[],
        };
        let slot = &mut self.callers[slot_of(address)];
        if !slot.as_ref().is_some_and(|(c, _)| c.same(caller)) {
            let mut bytes = Vec::new();
            caller.attributes(|k, v| attribute(&mut bytes, k, v));
            *slot = Some((caller.clone(), bytes));
        }
        slot.as_ref().map_or(&[], |(_, bytes)| bytes)
    }

    /// Field 2 of `ScopeSpans`: one `opentelemetry.proto.trace.v1.Span`,
    /// sized before it is written.
    fn span(&mut self, out: &mut Vec<u8>, s: &SpanRecord) {
        let error = s.error();
        let mut own = 0;
        s.own_attributes(|k, v| own += field_len(key_value_len(k, v)));
        if let Some(kind) = s.error_type() {
            own += field_len(key_value_len("error.type", Value::Str(kind)));
        }
        let up_len = s
            .upstream()
            .map_or(0, |(up, attempt)| self.upstream(up, attempt).len());
        let caller_len = s.caller().map_or(0, |c| self.caller(c).len());
        let status = error.as_ref().map_or(0, |m| field_len(m.len()) + 2);
        let parent = if s.parent.is_some() { 10 } else { 0 };
        let name = s.name();
        let len = 18
            + 10
            + parent
            + field_len(name.len())
            + 1
            + varint_len(s.kind() as u64)
            + 18
            + own
            + up_len
            + caller_len
            + 1
            + varint_len(status as u64)
            + status;
        out.reserve(len + 4);
        tag(out, 2, 2);
        varint(out, len as u64);
        let start = out.len();
        bytes(out, 1, &s.trace_id);
        bytes(out, 2, &s.span_id);
        if let Some(parent) = &s.parent {
            bytes(out, 4, parent);
        }
        string(out, 5, name);
        tag(out, 6, 0);
        varint(out, s.kind() as u64);
        tag(out, 7, 1);
        out.extend_from_slice(&s.start_unix_ns.to_le_bytes());
        tag(out, 8, 1);
        out.extend_from_slice(&s.end_unix_ns.to_le_bytes());
        s.own_attributes(|k, v| attribute(out, k, v));
        if let Some((up, attempt)) = s.upstream() {
            out.extend_from_slice(self.upstream(up, attempt));
        }
        if let Some(c) = s.caller() {
            out.extend_from_slice(self.caller(c));
        }
        if let Some(kind) = s.error_type() {
            attribute(out, "error.type", Value::Str(kind));
        }
        tag(out, 15, 2);
        varint(out, status as u64);
        if let Some(m) = &error {
            string(out, 2, m);
            tag(out, 3, 0);
            varint(out, 2);
        }
        debug_assert_eq!(out.len() - start, len, "span size");
    }
}

/// Whether a root span names the deployment attribute `key` too.
fn root_attribute(key: &str) -> bool {
    matches!(
        key,
        "gen_ai.system" | "gen_ai.response.model" | "litellm.model_group" | "litellm.model_id"
    )
}

/// Field 9 of a `Span`: one attribute, its length computed first.
fn attribute(out: &mut Vec<u8>, key: &str, value: Value<'_>) {
    let len = key_value_len(key, value);
    out.reserve(len + 11);
    tag(out, 9, 2);
    varint(out, len as u64);
    key_value(out, key, value);
}

/// Bytes of a varint.
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Bytes of a length-delimited field (one-byte tag) with a body of `len`.
fn field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

/// Bytes of the fields of a `KeyValue`.
fn key_value_len(key: &str, value: Value<'_>) -> usize {
    let any = match value {
        Value::Str(s) => field_len(s.len()),
        Value::Int(i) => 1 + varint_len(i as u64),
        Value::Bool(_) => 2,
    };
    field_len(key.len()) + field_len(any)
}

/// The fields of an `opentelemetry.proto.common.v1.KeyValue`.
fn key_value(out: &mut Vec<u8>, key: &str, value: Value<'_>) {
    string(out, 1, key);
    match value {
        Value::Str(s) => {
            tag(out, 2, 2);
            varint(out, field_len(s.len()) as u64);
            string(out, 1, s);
        }
        Value::Int(i) => {
            tag(out, 2, 2);
            varint(out, (1 + varint_len(i as u64)) as u64);
            tag(out, 3, 0);
            varint(out, i as u64);
        }
        Value::Bool(b) => {
            // AnyValue.bool_value (field 2, varint).
            tag(out, 2, 2);
            varint(out, 2);
            tag(out, 2, 0);
            varint(out, u64::from(b));
        }
    }
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn bytes(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    tag(out, field, 2);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

fn string(out: &mut Vec<u8>, field: u32, value: &str) {
    bytes(out, field, value.as_bytes());
}

/// A length-delimited message `field` whose fields `body` writes: a
/// one-byte length is reserved, and widened (the body moved along) for
/// bodies of 128 bytes or more.
fn nested(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    tag(out, field, 2);
    let at = out.len();
    out.push(0);
    body(out);
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
        return;
    }
    let mut prefix = [0u8; 10];
    let mut n = 0;
    let mut v = len as u64;
    while v >= 0x80 {
        prefix[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    prefix[n] = v as u8;
    n += 1;
    let end = out.len();
    out.resize(end + n - 1, 0);
    out.copy_within(at + 1..end, at + n);
    out[at..at + n].copy_from_slice(&prefix[..n]);
}

#[cfg(test)]
mod tests {
    use super::super::span::{AttemptSpan, Caller, Detail, Requested, RootSpan, Upstream};
    use super::*;
    use crate::config::Config;
    use std::sync::Arc;

    fn upstream() -> Upstream {
        upstream_of("gpt-4o")
    }

    fn upstream_of(model: &str) -> Upstream {
        let text = format!("model_list:\n  - model_name: g\n    litellm_params: {{model: openai/{model}, api_base: \"http://up.example/v1\", api_key: k}}\n");
        let dep = Config::parse(std::path::Path::new("c.yaml"), &text, &|_| None)
            .unwrap()
            .deployments
            .remove(0);
        Upstream::new(&Arc::new(dep), "g", model)
    }

    fn root() -> SpanRecord {
        SpanRecord {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent: Some([3; 8]),
            start_unix_ns: 1_000,
            end_unix_ns: 2_000,
            call_id: "call-1".into(),
            detail: Detail::Root(RootSpan {
                operation: "chat",
                route: "/chat/completions",
                status: 429,
                retries: 0,
                fallbacks: 0,
                input_tokens: -1,
                output_tokens: 0,
                requested: Some(Requested::Named("gpt-4o".into())),
                last: None,
                caller: Caller::Master("hash".into()),
                error: Some((429, "rate_limit_error".into())),
                cache_hit: None,
            }),
        }
    }

    fn attempt() -> SpanRecord {
        SpanRecord {
            trace_id: [1; 16],
            span_id: [4; 8],
            parent: Some([2; 8]),
            start_unix_ns: 1_100,
            end_unix_ns: 1_900,
            call_id: "call-1".into(),
            detail: Detail::Attempt(AttemptSpan {
                upstream: upstream(),
                input_tokens: 10,
                output_tokens: 300,
                attempt: 1,
                fallback_depth: 0,
                status: 500,
                error_class: Some("internal_server".into()),
            }),
        }
    }

    /// The fields of a protobuf message: (number, varint or bytes).
    fn fields(mut b: &[u8]) -> Vec<(u64, Result<u64, &[u8]>)> {
        let mut out = Vec::new();
        let read = |b: &mut &[u8]| {
            let (mut v, mut shift) = (0u64, 0);
            loop {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7f) << shift;
                shift += 7;
                if byte < 0x80 {
                    return v;
                }
            }
        };
        while !b.is_empty() {
            let key = read(&mut b);
            let value = match key & 7 {
                0 => Ok(read(&mut b)),
                1 => {
                    let v = u64::from_le_bytes(b[..8].try_into().unwrap());
                    b = &b[8..];
                    Ok(v)
                }
                2 => {
                    let n = read(&mut b) as usize;
                    let (body, rest) = b.split_at(n);
                    b = rest;
                    Err(body)
                }
                w => panic!("wire type {w}"),
            };
            out.push((key >> 3, value));
        }
        out
    }

    #[test]
    fn varints_and_fields_are_encoded_as_protobuf_does() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        assert_eq!(
            [0, 127, 128, 300, 16_383, 16_384, u64::MAX].map(varint_len),
            [1, 1, 2, 2, 2, 3, 10]
        );
        // A negative int64 is ten varint bytes.
        let mut kv = Vec::new();
        key_value(&mut kv, "k", Value::Int(-1));
        assert_eq!(kv.len(), 3 + 2 + 11);
        assert_eq!(kv.len(), key_value_len("k", Value::Int(-1)));
        // A boolean is AnyValue's field 2 as a varint.
        let mut kv = Vec::new();
        key_value(&mut kv, "k", Value::Bool(true));
        assert_eq!(kv, [0x0a, 1, b'k', 0x12, 2, 0x10, 1]);
        assert_eq!(kv.len(), key_value_len("k", Value::Bool(true)));
        // Lengths of 128 bytes and more take two varint bytes, in place.
        let mut long = Vec::new();
        nested(&mut long, 1, |out| string(out, 2, &"x".repeat(200)));
        let mut expected = vec![0x0a, 0xcb, 0x01, 0x12, 0xc8, 0x01];
        expected.extend_from_slice(&[b'x'; 200]);
        assert_eq!(long, expected);
    }

    #[test]
    fn a_batch_decodes_to_its_spans_and_attributes() {
        let origin = Origin {
            service_name: "svc",
            scope: "litellm",
        };
        let mut encoder = Protobuf::default();
        let mut body = vec![0xff; 7];
        encoder.encode(&origin, &[root(), attempt()], &mut body);
        assert_eq!(body[..7], [0xff; 7], "appended after what the buffer held");
        let body = body.split_off(7);
        let mut again = Vec::new();
        encoder.encode(&origin, &[root(), attempt()], &mut again);
        assert_eq!(again, body, "attributes kept from the first batch");
        let [(1, Err(resource_spans))] = fields(&body)[..] else {
            panic!("one ResourceSpans")
        };
        let rs = fields(resource_spans);
        let (1, Err(resource)) = rs[0] else { panic!() };
        let (1, Err(service)) = fields(resource)[0] else {
            panic!()
        };
        assert!(String::from_utf8_lossy(service).ends_with("svc"));
        let (2, Err(scope_spans)) = rs[1] else {
            panic!()
        };
        let ss = fields(scope_spans);
        assert_eq!(ss.len(), 3, "the scope and two spans");
        let mut decoded = Vec::new();
        for (n, span) in &ss[1..] {
            assert_eq!(*n, 2);
            let f = fields(span.unwrap_err());
            let mut attributes = Vec::new();
            let mut status = None;
            for (n, v) in &f {
                match (n, v) {
                    (9, Err(kv)) => {
                        let kv = fields(kv);
                        let (1, Err(key)) = kv[0] else { panic!() };
                        let (2, Err(any)) = kv[1] else { panic!() };
                        let value = match fields(any)[0] {
                            (1, Err(s)) => String::from_utf8_lossy(s).into_owned(),
                            (3, Ok(i)) => (i as i64).to_string(),
                            _ => panic!(),
                        };
                        attributes.push((String::from_utf8_lossy(key).into_owned(), value));
                    }
                    (15, Err(s)) => status = Some(fields(s)),
                    _ => {}
                }
            }
            decoded.push((f, attributes, status.unwrap()));
        }
        let (f, attributes, status) = &decoded[0];
        assert_eq!(f[0], (1, Err(&[1u8; 16][..])));
        assert_eq!(f[2], (4, Err(&[3u8; 8][..])), "the parent");
        assert_eq!(f[3], (5, Err(&b"litellm_request"[..])));
        assert_eq!(f[4], (6, Ok(2)));
        assert_eq!((f[5], f[6]), ((7, Ok(1_000)), (8, Ok(2_000))));
        let mut expected = Vec::new();
        root().attributes(|k, v| {
            expected.push((
                k.to_string(),
                match v {
                    Value::Str(s) => s.to_string(),
                    Value::Int(i) => i.to_string(),
                    Value::Bool(b) => b.to_string(),
                },
            ))
        });
        assert_eq!(attributes, &expected);
        assert!(attributes.contains(&("gen_ai.usage.input_tokens".into(), "-1".into())));
        assert!(attributes.contains(&("metadata.user_api_key_hash".into(), "hash".into())));
        assert_eq!(
            status[..],
            [(2, Err(&b"429 rate_limit_error"[..])), (3, Ok(2))]
        );
        let (f, attributes, status) = &decoded[1];
        assert_eq!(f[4], (6, Ok(3)));
        let get = |k: &str| {
            attributes
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("gen_ai.system"), Some("openai"));
        assert_eq!(get("litellm.model_group"), Some("g"));
        assert_eq!(get("gen_ai.response.model"), Some("gpt-4o"));
        assert_eq!(get("litellm.call_id"), Some("call-1"));
        assert_eq!(get("http.response.status_code"), Some("500"));
        assert_eq!(get("server.address"), Some("http://up.example/v1"));
        assert_eq!(get("error.type"), Some("internal_server"));
        assert_eq!(
            status[..],
            [(2, Err(&b"500 internal_server"[..])), (3, Ok(2))]
        );
    }

    #[test]
    fn kept_attributes_follow_the_deployment_and_names_of_each_span() {
        let origin = Origin {
            service_name: "svc",
            scope: "litellm",
        };
        // The models whose string value (its length, then its bytes) is in
        // `body`.
        let model_of = |body: &[u8]| {
            ["gpt-4o", "gpt-4o-mini", "other-name"]
                .into_iter()
                .filter(|m| {
                    let mut needle = vec![m.len() as u8];
                    needle.extend_from_slice(m.as_bytes());
                    body.windows(needle.len()).any(|w| w == needle)
                })
                .collect::<Vec<_>>()
        };
        let mut encoder = Protobuf::default();
        let mut span = attempt();
        let mut body = Vec::new();
        encoder.encode(&origin, std::slice::from_ref(&span), &mut body);
        assert_eq!(model_of(&body), ["gpt-4o"]);
        // A reloaded deployment is another entry: its own attributes.
        if let Detail::Attempt(a) = &mut span.detail {
            a.upstream = upstream_of("gpt-4o-mini");
        }
        body.clear();
        encoder.encode(&origin, std::slice::from_ref(&span), &mut body);
        assert_eq!(model_of(&body), ["gpt-4o-mini"]);
        // Called under another model name (a wildcard): not the kept block.
        if let Detail::Attempt(a) = &mut span.detail {
            let dep = a.upstream.dep.clone();
            a.upstream = Upstream::new(&dep, "g", "other-name");
        }
        body.clear();
        encoder.encode(&origin, std::slice::from_ref(&span), &mut body);
        assert_eq!(model_of(&body), ["other-name"]);
    }

    #[test]
    fn json_follows_the_otlp_mapping() {
        let body: serde_json::Value = serde_json::from_slice(&json(
            &Origin {
                service_name: "svc",
                scope: "litellm",
            },
            &[root()],
        ))
        .unwrap();
        let span = &body["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "01010101010101010101010101010101");
        assert_eq!(span["parentSpanId"], "0303030303030303");
        assert_eq!(span["startTimeUnixNano"], "1000");
        assert_eq!(span["status"]["code"], 2);
        assert_eq!(span["attributes"][6]["key"], "gen_ai.usage.input_tokens");
        assert_eq!(span["attributes"][6]["value"]["intValue"], "-1");
        assert!(span["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["key"] != "litellm.cache_hit"));
    }

    #[test]
    fn a_cache_hit_is_a_boolean_attribute_of_the_root_span() {
        let mut hit = root();
        if let Detail::Root(r) = &mut hit.detail {
            r.cache_hit = Some(true);
        }
        let body: serde_json::Value = serde_json::from_slice(&json(
            &Origin {
                service_name: "svc",
                scope: "litellm",
            },
            &[hit],
        ))
        .unwrap();
        let attributes = &body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"];
        let found: Vec<_> = attributes
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["key"] == "litellm.cache_hit")
            .collect();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0]["value"]["boolValue"], true);
    }
}
