//! What the request path hands over: finished spans as small records, and
//! the W3C `traceparent` that links them to the caller's trace and the
//! upstream's.

/// A trace id (16 bytes, never all zero).
pub(crate) type TraceId = [u8; 16];
/// A span id (8 bytes, never all zero).
pub(crate) type SpanId = [u8; 8];

/// OTLP's `SPAN_KIND_SERVER`.
pub(crate) const KIND_SERVER: i32 = 2;
/// OTLP's `SPAN_KIND_CLIENT`.
pub(crate) const KIND_CLIENT: i32 = 3;

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Str(String),
    Int(i64),
}

/// One finished span.
#[derive(Debug, Clone)]
pub(crate) struct SpanRecord {
    pub(crate) trace_id: TraceId,
    pub(crate) span_id: SpanId,
    pub(crate) parent: Option<SpanId>,
    pub(crate) name: &'static str,
    pub(crate) kind: i32,
    pub(crate) start_unix_ns: u64,
    pub(crate) end_unix_ns: u64,
    pub(crate) attributes: Vec<(&'static str, Value)>,
    /// `Some(message)`: the span failed (OTLP status code ERROR).
    pub(crate) error: Option<String>,
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
    String::from_utf8_lossy(&out).into_owned()
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
