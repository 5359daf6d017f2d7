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

/// The protobuf body for `spans`, encoded into one buffer: each nested
/// message is written in place and its length filled in after it.
pub(crate) fn protobuf(origin: &Origin<'_>, spans: &[SpanRecord]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + spans.len() * 512);
    nested(&mut out, 1, |resource_spans| {
        nested(resource_spans, 1, |resource| {
            nested(resource, 1, |kv| {
                key_value(kv, "service.name", &Value::Str(origin.service_name.into()))
            });
        });
        nested(resource_spans, 2, |scope_spans| {
            nested(scope_spans, 1, |scope| string(scope, 1, origin.scope));
            for s in spans {
                nested(scope_spans, 2, |out| span(out, s));
            }
        });
    });
    out
}

/// `opentelemetry.proto.trace.v1.Span`.
fn span(out: &mut Vec<u8>, s: &SpanRecord) {
    bytes(out, 1, &s.trace_id);
    bytes(out, 2, &s.span_id);
    if let Some(parent) = &s.parent {
        bytes(out, 4, parent);
    }
    string(out, 5, s.name);
    tag(out, 6, 0);
    varint(out, s.kind as u64);
    tag(out, 7, 1);
    out.extend_from_slice(&s.start_unix_ns.to_le_bytes());
    tag(out, 8, 1);
    out.extend_from_slice(&s.end_unix_ns.to_le_bytes());
    for (k, v) in &s.attributes {
        nested(out, 9, |kv| key_value(kv, k, v));
    }
    nested(out, 15, |status| {
        if let Some(m) = &s.error {
            string(status, 2, m);
            tag(status, 3, 0);
            varint(status, 2);
        }
    });
}

/// The fields of an `opentelemetry.proto.common.v1.KeyValue`.
fn key_value(out: &mut Vec<u8>, key: &str, value: &Value) {
    string(out, 1, key);
    nested(out, 2, |any| match value {
        Value::Str(s) => string(any, 1, s),
        Value::Int(i) => {
            tag(any, 3, 0);
            varint(any, *i as u64);
        }
    });
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
/// one-byte length is reserved, and widened (the body moved along) only
/// for bodies of 128 bytes or more.
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
    let mut prefix = Vec::with_capacity(10);
    varint(&mut prefix, len as u64);
    out.splice(at..=at, prefix);
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
        let mut kv = Vec::new();
        key_value(&mut kv, "k", &Value::Int(-1));
        assert_eq!(kv.len(), 3 + 2 + 11);
        // Lengths of 128 bytes and more take two varint bytes, in place.
        let mut long = Vec::new();
        nested(&mut long, 1, |out| string(out, 2, &"x".repeat(200)));
        let mut expected = vec![0x0a, 0xcb, 0x01, 0x12, 0xc8, 0x01];
        expected.extend_from_slice(&[b'x'; 200]);
        assert_eq!(long, expected);
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
