//! Headers on both sides: the upstream request head, LiteLLM's
//! `x-litellm-*` response headers and the call id.

use super::Outcome;
use crate::downstream::HeadBuilder;
use crate::providers::UpstreamRequest;
use crate::upstream::UpstreamBase;
use bytes::Bytes;
use std::sync::Arc;

/// The upstream request head for `base`: fixed headers, then the
/// provider's (which include the deployment's `extra_headers`).
/// `streamed` bytes of body follow `req.body` (a streamed upload's rest).
pub(super) fn upstream_head(req: &UpstreamRequest, base: &UpstreamBase, streamed: u64) -> Vec<u8> {
    let body_len: usize = req.body.iter().map(Bytes::len).sum();
    // Room for the body too: the upstream client copies a small one behind
    // the head so both leave in one write.
    let coalesced = if body_len <= crate::upstream::COALESCE_LIMIT {
        body_len
    } else {
        0
    };
    let headers_len: usize = req.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    let mut h = Vec::with_capacity(256 + req.path.len() + headers_len + coalesced);
    h.extend_from_slice(b"POST ");
    h.extend_from_slice(req.path.as_bytes());
    h.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    h.extend_from_slice(base.host.as_bytes());
    let default_port = if base.tls { 443 } else { 80 };
    if base.port != default_port {
        h.push(b':');
        h.extend_from_slice(itoa::Buffer::new().format(base.port).as_bytes());
    }
    // A body that is not JSON (a multipart form) names its own type.
    let typed = req
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
    if !typed {
        h.extend_from_slice(b"\r\ncontent-type: application/json");
    }
    h.extend_from_slice(b"\r\naccept-encoding: identity\r\ncontent-length: ");
    let content_length = (body_len as u64).saturating_add(streamed);
    h.extend_from_slice(itoa::Buffer::new().format(content_length).as_bytes());
    h.extend_from_slice(b"\r\nuser-agent: gateway/");
    h.extend_from_slice(crate::VERSION.as_bytes());
    h.extend_from_slice(b"\r\n");
    for (name, value) in &req.headers {
        let bad = |s: &str| s.bytes().any(|b| b == b'\r' || b == b'\n');
        if bad(name) || bad(value) {
            continue;
        }
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(b": ");
        h.extend_from_slice(value.as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    h.extend_from_slice(b"\r\n");
    h
}

/// LiteLLM's response headers, as far as the request got.
pub(super) fn litellm_headers(status: u16, outcome: &Outcome) -> HeadBuilder {
    let mut h = HeadBuilder::new(status);
    h.header("x-litellm-call-id", &outcome.call_id);
    if let Some(group) = &outcome.group {
        h.header("x-litellm-model-group", group);
    }
    if let Some(dep) = &outcome.deployment {
        h.header("x-litellm-model-id", &dep.id);
        if let Some(base) = &dep.base {
            h.header("x-litellm-model-api-base", &base.url);
        }
        if let Some(region) = &dep.region {
            h.header("x-litellm-model-region", region);
        }
    }
    if let Some(max) = outcome.max_fallbacks {
        h.header_num("x-litellm-attempted-retries", u64::from(outcome.retries));
        h.header_num(
            "x-litellm-attempted-fallbacks",
            u64::from(outcome.fallbacks),
        );
        h.header_num("x-litellm-max-fallbacks", u64::from(max));
    }
    if let Some(rate) = &outcome.rate {
        for (name, value) in rate.pairs() {
            h.header_num(name, value);
        }
    }
    let total = outcome.received_at.elapsed();
    let overhead = total.saturating_sub(outcome.upstream_wait);
    for (name, d) in [
        ("x-litellm-response-duration-ms", total),
        ("x-litellm-overhead-duration-ms", overhead),
    ] {
        h.header_with(name, |buf| super::access::write_millis(buf, d));
    }
    if let Some(names) = &outcome.applied_guardrails {
        h.header("x-litellm-applied-guardrails", names);
    }
    h.header("x-litellm-version", crate::VERSION);
    h
}

/// A new call id: a version 7 UUID (milliseconds since the epoch, then
/// random bits), so ids sort by creation time. Spend-log rows are keyed by
/// it (`request_id`, `litellm_call_id`): time-ordered keys land on the
/// rightmost pages of those indexes instead of random ones, which with a
/// large `LiteLLM_SpendLogs` cut Postgres's CPU per row by ~40% (fewer
/// pages touched and fewer full-page images after each checkpoint).
pub(super) fn call_id() -> Arc<str> {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
        .unwrap_or(0);
    call_id_at(millis, fastrand::u128(..))
}

/// The call id of [`call_id`] at `millis` with `random` bits.
fn call_id_at(millis: u64, random: u128) -> Arc<str> {
    let bytes = random.to_le_bytes();
    let mut tail = [0u8; 10];
    tail.copy_from_slice(&bytes[..10]);
    // Written into a buffer, not through `Display`: one allocation, shared
    // by the headers, the access line and every attempt's spend row.
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    Arc::from(
        &*uuid::Builder::from_unix_timestamp_millis(millis, &tail)
            .into_uuid()
            .hyphenated()
            .encode_lower(&mut text),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_are_uuid_v7_and_sort_by_time() {
        let id = call_id();
        let parsed = uuid::Uuid::parse_str(&id).unwrap();
        assert_eq!(parsed.get_version_num(), 7, "{id}");
        // A later millisecond sorts after, whatever the random bits.
        let t = 1_764_640_000_000;
        let earlier = call_id_at(t, u128::MAX);
        let later = call_id_at(t + 1, 0);
        assert!(earlier < later, "{earlier} !< {later}");
        assert_ne!(call_id_at(t, 1), call_id_at(t, 2));
    }
}
