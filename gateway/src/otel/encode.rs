//! OTLP `ExportTraceServiceRequest` bodies: protobuf (`http/protobuf`,
//! hand-encoded: the few messages a span needs) and JSON (`http/json`, the
//! OTLP JSON mapping: hex ids, nanosecond times as strings).

use super::span::{SpanRecord, Value};
use serde_json::json;

/// The resource and scope every span is sent under.
pub(crate) struct Origin<'a> {
    pub(crate) service_name: &'a str,
    pub(crate) scope: &'a str,
}

/// The JSON body for `spans`.
pub(crate) fn json(origin: &Origin<'_>, spans: &[SpanRecord]) -> Vec<u8> {
    let attribute = |key: &str, value: &Value| match value {
        Value::Str(s) => json!({"key": key, "value": {"stringValue": s}}),
        Value::Int(i) => json!({"key": key, "value": {"intValue": i.to_string()}}),
    };
    let spans: Vec<serde_json::Value> = spans
        .iter()
        .map(|s| {
            let mut span = json!({
                "traceId": hex::encode(s.trace_id),
                "spanId": hex::encode(s.span_id),
                "name": s.name,
                "kind": s.kind,
                "startTimeUnixNano": s.start_unix_ns.to_string(),
                "endTimeUnixNano": s.end_unix_ns.to_string(),
                "attributes": s.attributes.iter().map(|(k, v)| attribute(k, v)).collect::<Vec<_>>(),
                "status": match &s.error {
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
        "resource": {"attributes": [attribute("service.name", &Value::Str(origin.service_name.to_string()))]},
        "scopeSpans": [{"scope": {"name": origin.scope}, "spans": spans}],
    }]});
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The protobuf body for `spans`.
pub(crate) fn protobuf(origin: &Origin<'_>, spans: &[SpanRecord]) -> Vec<u8> {
    let mut resource = Vec::new();
    message(
        &mut resource,
        1,
        &key_value("service.name", &Value::Str(origin.service_name.into())),
    );
    let mut scope = Vec::new();
    string(&mut scope, 1, origin.scope);
    let mut scope_spans = Vec::new();
    message(&mut scope_spans, 1, &scope);
    for s in spans {
        message(&mut scope_spans, 2, &span(s));
    }
    let mut resource_spans = Vec::new();
    message(&mut resource_spans, 1, &resource);
    message(&mut resource_spans, 2, &scope_spans);
    let mut request = Vec::new();
    message(&mut request, 1, &resource_spans);
    request
}

/// `opentelemetry.proto.trace.v1.Span`.
fn span(s: &SpanRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    bytes(&mut out, 1, &s.trace_id);
    bytes(&mut out, 2, &s.span_id);
    if let Some(parent) = &s.parent {
        bytes(&mut out, 4, parent);
    }
    string(&mut out, 5, s.name);
    tag(&mut out, 6, 0);
    varint(&mut out, s.kind as u64);
    tag(&mut out, 7, 1);
    out.extend_from_slice(&s.start_unix_ns.to_le_bytes());
    tag(&mut out, 8, 1);
    out.extend_from_slice(&s.end_unix_ns.to_le_bytes());
    for (k, v) in &s.attributes {
        message(&mut out, 9, &key_value(k, v));
    }
    let mut status = Vec::new();
    if let Some(m) = &s.error {
        string(&mut status, 2, m);
        tag(&mut status, 3, 0);
        varint(&mut status, 2);
    }
    message(&mut out, 15, &status);
    out
}

/// `opentelemetry.proto.common.v1.KeyValue`.
fn key_value(key: &str, value: &Value) -> Vec<u8> {
    let mut any = Vec::new();
    match value {
        Value::Str(s) => string(&mut any, 1, s),
        Value::Int(i) => {
            tag(&mut any, 3, 0);
            varint(&mut any, *i as u64);
        }
    }
    let mut out = Vec::new();
    string(&mut out, 1, key);
    message(&mut out, 2, &any);
    out
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

fn message(out: &mut Vec<u8>, field: u32, encoded: &[u8]) {
    bytes(out, field, encoded);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SpanRecord {
        SpanRecord {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent: Some([3; 8]),
            name: "litellm_request",
            kind: 2,
            start_unix_ns: 1_000,
            end_unix_ns: 2_000,
            attributes: vec![
                ("gen_ai.request.model", Value::Str("gpt-4o".into())),
                ("gen_ai.usage.input_tokens", Value::Int(-1)),
            ],
            error: Some("429".into()),
        }
    }

    #[test]
    fn varints_and_fields_are_encoded_as_protobuf_does() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        let body = protobuf(
            &Origin {
                service_name: "svc",
                scope: "litellm",
            },
            &[sample()],
        );
        // ExportTraceServiceRequest.resource_spans (1, length-delimited).
        assert_eq!(body[0], 0x0a);
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("litellm_request") && text.contains("gpt-4o"));
        // A negative int64 is ten varint bytes.
        let kv = key_value("k", &Value::Int(-1));
        assert_eq!(kv.len(), 3 + 2 + 11);
    }

    #[test]
    fn json_follows_the_otlp_mapping() {
        let body: serde_json::Value = serde_json::from_slice(&json(
            &Origin {
                service_name: "svc",
                scope: "litellm",
            },
            &[sample()],
        ))
        .unwrap();
        let span = &body["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "01010101010101010101010101010101");
        assert_eq!(span["parentSpanId"], "0303030303030303");
        assert_eq!(span["startTimeUnixNano"], "1000");
        assert_eq!(span["status"]["code"], 2);
        assert_eq!(span["attributes"][1]["value"]["intValue"], "-1");
    }
}
