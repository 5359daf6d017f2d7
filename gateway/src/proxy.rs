//! The life of an LLM request, one phase after another. Each phase is a call
//! into the module that owns it; this file only orders them.
//!
//! 1. **authenticate**: the credential names a principal (`auth`).
//! 2. **read**: the routing fields of the body, borrowed, never re-serialized (`inbound`).
//! 3. **route**: the model group and one of its deployments (`router`).
//! 4. **translate**: the provider builds its native request (`providers`).
//! 5. **call**: the per-core pool sends it and reads the response head (`upstream`).
//! 6. **relay**: the body streams back as it arrives, SSE event by event.
//! 7. **log**: one access line with durations; nothing on this path waits on a database.

use crate::config::Deployment;
use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::inbound::{Endpoint, LlmRequest};
use crate::providers::{self, MockReply, UpstreamRequest};
use crate::server::{HeadBuilder, Responder};
use crate::state::Worker;
use crate::upstream::{UpstreamError, UpstreamResponse};
use bytes::Bytes;
use std::time::{Duration, Instant};

/// Largest upstream error body read to extract its message.
const MAX_ERROR_BODY: usize = 1 << 20;

/// What the access log records of one request.
struct Outcome<'a> {
    call_id: String,
    received_at: Instant,
    group: Option<String>,
    deployment: Option<&'a Deployment>,
    upstream_wait: Duration,
    stream: bool,
}

/// Serves one OpenAI-style LLM request on `endpoint`.
pub async fn handle(
    worker: &Worker,
    head: &RequestHead,
    endpoint: Endpoint,
    body: Bytes,
    out: &mut Responder<'_>,
    received_at: Instant,
) {
    let mut outcome = Outcome {
        call_id: call_id(),
        received_at,
        group: None,
        deployment: None,
        upstream_wait: Duration::ZERO,
        stream: false,
    };
    let result = serve(worker, head, endpoint, body, out, &mut outcome).await;
    let mut error = None;
    if let Err(err) = result {
        if out.started() {
            out.abort_stream();
        } else {
            let headers = litellm_headers(err.status(), &outcome);
            let _ = out.send_error(&err, Some(headers)).await;
        }
        error = Some(err);
    }
    log_access(
        head,
        endpoint,
        out.status().unwrap_or(0),
        &outcome,
        error.as_ref(),
    );
}

async fn serve<'w>(
    worker: &'w Worker,
    head: &RequestHead,
    endpoint: Endpoint,
    body: Bytes,
    out: &mut Responder<'_>,
    outcome: &mut Outcome<'w>,
) -> Result<(), GatewayError> {
    let _principal = worker.shared.auth.authenticate(head).await?;
    let req = LlmRequest::parse(endpoint, body)?;
    outcome.stream = req.stream;
    let route = worker
        .shared
        .registry
        .resolve(&req.model)
        .ok_or_else(|| GatewayError::UnknownModel(req.model.clone()))?;
    outcome.group = Some(route.group.to_string());
    let dep = route.pick();
    outcome.deployment = Some(dep);
    let upstream_model = route.upstream_model(dep);
    match providers::http_provider(dep.provider) {
        Some(provider) => {
            let upstream_req = provider.build_request(&req, &upstream_model, dep);
            forward(worker, dep, upstream_req, req.stream, out, outcome).await
        }
        None => serve_mock(&req, &upstream_model, dep, out, outcome).await,
    }
}

/// Phases 5 and 6 for a provider reached over HTTP.
async fn forward(
    worker: &Worker,
    dep: &Deployment,
    req: UpstreamRequest,
    stream: bool,
    out: &mut Responder<'_>,
    outcome: &mut Outcome<'_>,
) -> Result<(), GatewayError> {
    let base = dep.base.as_ref().expect("HTTP providers have a base URL");
    let timeout = if stream {
        dep.stream_timeout
    } else {
        dep.timeout
    };
    let head = upstream_head(&req, dep);
    let started = Instant::now();
    let deadline = started + timeout;
    let sent = worker.upstream.send(base, head, &req.body, deadline).await;
    outcome.upstream_wait = started.elapsed();
    let mut resp = sent.map_err(|e| upstream_error(e, dep, timeout))?;
    let status = resp.head.status;
    if status >= 400 {
        let body = resp
            .read_to_end(MAX_ERROR_BODY, timeout)
            .await
            .unwrap_or_default();
        return Err(error_from_upstream(
            status,
            &body,
            resp.head.retry_after.take(),
        ));
    }
    let mut headers = litellm_headers(status, outcome);
    if let Some(ra) = &resp.head.retry_after {
        headers.header("retry-after", ra);
    }
    let content_type = resp
        .head
        .content_type
        .clone()
        .unwrap_or_else(|| "application/json".into());
    // Between pieces: a stream may pause up to stream_timeout; a plain body
    // must finish within the request's deadline.
    let idle = |resp_is_stream: bool| {
        if resp_is_stream {
            timeout
        } else {
            deadline.saturating_duration_since(Instant::now())
        }
    };
    let is_stream = resp.head.is_event_stream();
    let io = |_| GatewayError::Unavailable("client connection lost");
    match resp.content_length() {
        Some(len) if !is_stream => {
            out.start_fixed(status, headers, &content_type, len)
                .await
                .map_err(io)?;
            relay(&mut resp, out, false, || idle(false), dep, timeout).await
        }
        _ => {
            out.start_stream(status, headers, &content_type)
                .await
                .map_err(io)?;
            relay(&mut resp, out, true, || idle(is_stream), dep, timeout).await?;
            out.end_stream().await.map_err(io)
        }
    }
}

/// Copies the upstream body to the client piece by piece as it arrives, in
/// chunked coding or raw under the provider's Content-Length.
async fn relay(
    resp: &mut UpstreamResponse,
    out: &mut Responder<'_>,
    chunked: bool,
    idle: impl Fn() -> Duration,
    dep: &Deployment,
    timeout: Duration,
) -> Result<(), GatewayError> {
    loop {
        let mut piece = Vec::new();
        let more = resp
            .next_piece(&mut piece, idle())
            .await
            .map_err(|e| upstream_error(e, dep, timeout))?;
        if !piece.is_empty() {
            let written = if chunked {
                out.send_chunk(&piece).await
            } else {
                out.send_raw(piece).await
            };
            written.map_err(|_| GatewayError::Unavailable("client connection lost"))?;
        }
        if !more {
            return Ok(());
        }
    }
}

/// Phases 5 and 6 for the in-process mock provider.
async fn serve_mock(
    req: &LlmRequest,
    model: &str,
    dep: &Deployment,
    out: &mut Responder<'_>,
    outcome: &mut Outcome<'_>,
) -> Result<(), GatewayError> {
    match providers::mock_reply(req, model, &dep.mock) {
        MockReply::Error { status, message } => Err(GatewayError::Upstream {
            status,
            message,
            error_type: None,
            retry_after: None,
        }),
        MockReply::Success {
            content_type,
            parts,
            latency,
            chunk_delay,
        } => {
            let started = Instant::now();
            if !latency.is_zero() {
                monoio::time::sleep(latency).await;
            }
            outcome.upstream_wait = started.elapsed();
            let headers = litellm_headers(200, outcome);
            let io = |_| GatewayError::Unavailable("client connection lost");
            if content_type != "text/event-stream" {
                let body = parts.concat();
                return out
                    .send(200, headers, content_type, &body)
                    .await
                    .map_err(io);
            }
            out.start_stream(200, headers, content_type)
                .await
                .map_err(io)?;
            for (i, part) in parts.iter().enumerate() {
                if i > 0 && !chunk_delay.is_zero() {
                    monoio::time::sleep(chunk_delay).await;
                }
                out.send_chunk(part).await.map_err(io)?;
            }
            out.end_stream().await.map_err(io)
        }
    }
}

/// The upstream request head: fixed headers, then the provider's, then the
/// deployment's `extra_headers`.
fn upstream_head(req: &UpstreamRequest, dep: &Deployment) -> Vec<u8> {
    let base = dep.base.as_ref().expect("HTTP providers have a base URL");
    let body_len: usize = req.body.iter().map(Bytes::len).sum();
    let mut h = Vec::with_capacity(256 + req.path.len());
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
    let headers = req.headers.iter().map(|(n, v)| (*n, v.as_str()));
    let extra = dep
        .extra_headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()));
    for (name, value) in headers.chain(extra) {
        if value.bytes().any(|b| b == b'\r' || b == b'\n') {
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
fn litellm_headers(status: u16, outcome: &Outcome<'_>) -> HeadBuilder {
    let mut h = HeadBuilder::new(status);
    h.header("x-litellm-call-id", &outcome.call_id);
    if let Some(group) = &outcome.group {
        h.header("x-litellm-model-group", group);
    }
    if let Some(dep) = outcome.deployment {
        h.header("x-litellm-model-id", &dep.id);
        if let Some(base) = &dep.base {
            h.header("x-litellm-model-api-base", &base.url);
        }
    }
    let total = outcome.received_at.elapsed();
    let overhead = total.saturating_sub(outcome.upstream_wait);
    h.header("x-litellm-response-duration-ms", &format_ms(total));
    h.header("x-litellm-overhead-duration-ms", &format_ms(overhead));
    h.header("x-litellm-version", crate::VERSION);
    h
}

fn format_ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

fn call_id() -> String {
    let bytes: [u8; 16] = fastrand::u128(..).to_le_bytes();
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

fn upstream_error(err: UpstreamError, dep: &Deployment, timeout: Duration) -> GatewayError {
    let provider = dep.provider_name.clone();
    let url = dep
        .base
        .as_ref()
        .map_or_else(String::new, |b| b.url.clone());
    match err {
        UpstreamError::Timeout => GatewayError::UpstreamTimeout {
            provider,
            deployment: dep.id.to_string(),
            after: timeout,
        },
        UpstreamError::Connect(reason) | UpstreamError::Io(reason) => {
            GatewayError::UpstreamUnreachable {
                provider,
                url,
                reason,
            }
        }
        UpstreamError::Protocol(reason) => GatewayError::UpstreamProtocol { provider, reason },
    }
}

/// The provider's error, with its status, message, type and `retry-after`.
fn error_from_upstream(status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let error = json.as_ref().and_then(|v| v.get("error"));
    let message = error
        .and_then(|e| e.get("message").and_then(|m| m.as_str()).or(e.as_str()))
        .or_else(|| {
            json.as_ref()
                .and_then(|v| v.get("message").or(v.get("detail")))
                .and_then(|m| m.as_str())
        })
        .map(str::to_string)
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let text: String = text.chars().take(2000).collect();
            if text.trim().is_empty() {
                format!("upstream returned status {status}")
            } else {
                text
            }
        });
    let error_type = error
        .and_then(|e| e.get("type"))
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    GatewayError::Upstream {
        status,
        message,
        error_type,
        retry_after,
    }
}

fn log_access(
    head: &RequestHead,
    endpoint: Endpoint,
    status: u16,
    o: &Outcome<'_>,
    error: Option<&GatewayError>,
) {
    let total = o.received_at.elapsed();
    tracing::info!(
        target: "gateway::access",
        call_id = %o.call_id,
        method = head.method(),
        path = head.path(),
        endpoint = endpoint.path_suffix(),
        status,
        model_group = o.group.as_deref().unwrap_or(""),
        deployment = o.deployment.map_or("", |d| &d.id),
        stream = o.stream,
        duration_ms = %format_ms(total),
        upstream_ms = %format_ms(o.upstream_wait),
        error = error.map(|e| e.to_string()),
        "request"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_openai_style_upstream_errors() {
        let e = error_from_upstream(
            429,
            br#"{"error":{"message":"Rate limit reached","type":"requests","code":"429"}}"#,
            Some("7".into()),
        );
        assert_eq!(
            (e.status(), e.to_string(), e.error_type(), e.retry_after()),
            (429, "Rate limit reached".into(), "requests", Some("7"))
        );
        let e = error_from_upstream(502, b"<html>bad gateway</html>", None);
        assert_eq!(e.to_string(), "<html>bad gateway</html>");
        assert_eq!(e.error_type(), "api_error");
    }
}
