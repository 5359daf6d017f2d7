//! Headers on both sides: the upstream request head, LiteLLM's
//! `x-litellm-*` response headers and the call id.

use super::Outcome;
use crate::downstream::HeadBuilder;
use crate::providers::UpstreamRequest;
use crate::upstream::UpstreamBase;
use bytes::Bytes;

/// The upstream request head for `base`: fixed headers, then the
/// provider's (which include the deployment's `extra_headers`).
pub(super) fn upstream_head(req: &UpstreamRequest, base: &UpstreamBase) -> Vec<u8> {
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
    h.extend_from_slice(
        b"\r\ncontent-type: application/json\r\naccept-encoding: identity\r\ncontent-length: ",
    );
    h.extend_from_slice(itoa::Buffer::new().format(body_len).as_bytes());
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
    h.header("x-litellm-version", crate::VERSION);
    h
}

pub(super) fn call_id() -> String {
    let bytes: [u8; 16] = fastrand::u128(..).to_le_bytes();
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}
