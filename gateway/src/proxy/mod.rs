//! The life of an LLM request, one phase after another. Each phase is a call
//! into the module that owns it; this file only orders them.
//!
//! 1. **authenticate**: the credential names a principal (`auth`).
//! 2. **read**: the routing fields of the body, borrowed, never re-serialized (`inbound`).
//! 3. **authorize**: aliases, then the key's, team's and user's allowed models (`auth`).
//! 4. **route**: the model group and one of its deployments (`router`).
//! 5. **admit**: reserve the worst-case cost against every budget (`budget`, `spend`).
//! 6. **translate**: the provider builds its native request (`providers`).
//! 7. **call and relay**: the per-core pool sends it; the body streams back as it
//!    arrives, SSE event by event, while usage is read on the side (`upstream`, `relay`).
//! 8. **settle**: the real cost replaces the reservation; one spend row per
//!    attempt goes to the control plane without waiting (`record`).
//! 9. **log**: one access line with durations.

mod headers;
mod record;
mod relay;

use crate::auth::Principal;
use crate::config::Deployment;
use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::inbound::{Endpoint, LlmRequest};
use crate::providers::{self, MockReply};
use crate::router::PlanInput;
use crate::server::Responder;
use crate::spend;
use crate::state::Worker;
use bytes::Bytes;
use headers::{litellm_headers, upstream_head};
use record::Attempt;
use relay::UsageTap;

pub use record::flush_spend;
use std::time::{Duration, Instant};

/// Largest upstream error body read to extract its message.
const MAX_ERROR_BODY: usize = 1 << 20;

/// What the headers and the access log report of one request.
pub(crate) struct Outcome<'a> {
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
        call_id: headers::call_id(),
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
    headers::log_access(
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
    // 1. authenticate
    let principal = worker.shared.auth.authenticate(head).await?;
    // 2. read
    let mut req = LlmRequest::parse(endpoint, body)?;
    outcome.stream = req.stream;
    // 3. authorize
    let model = principal.resolve_alias(&req.model).to_string();
    principal.check_model(&model)?;
    // 4. route
    let prompt_estimate = spend::estimate_prompt_tokens(&req.body);
    let input = PlanInput {
        prompt_tokens: prompt_estimate,
        stream: req.stream,
        ..PlanInput::default()
    };
    let mut plan = match worker.shared.router.plan(&model, input) {
        Err(GatewayError::UnknownModel(_)) => Err(GatewayError::UnknownModel(req.model.clone())),
        other => other,
    }?;
    let pick = plan.next(None).expect("a plan starts with a pick");
    outcome.group = Some(pick.group.to_string());
    let dep: &Deployment = pick.deployment;
    outcome.deployment = Some(dep);
    let upstream_model = pick.upstream_model.clone();
    // 5. admit
    let price = spend::price_for(dep, &upstream_model);
    let reservation = record::admit(
        &worker.shared.alerts,
        &principal,
        &req,
        dep,
        &upstream_model,
        price,
        prompt_estimate,
    )?;
    // 6 and 7. translate, call and relay
    let mut attempt = Attempt::start(&outcome.call_id, 1);
    let mut tap = UsageTap::new(req.stream, prompt_estimate);
    let result = match providers::http_provider(dep.provider) {
        Some(provider) => {
            let strip_usage = req.stream && ask_for_stream_usage(&mut req);
            let upstream_req = provider.build_request(&req, &upstream_model, dep);
            forward(
                worker,
                dep,
                upstream_req,
                req.stream,
                strip_usage,
                out,
                outcome,
                &mut tap,
                &mut attempt,
            )
            .await
        }
        None => {
            serve_mock(
                &req,
                &upstream_model,
                dep,
                out,
                outcome,
                &mut tap,
                &mut attempt,
            )
            .await
        }
    };
    // 8. settle
    let usage = tap.finish();
    let billable = result.is_ok() || out.started();
    let cost = if billable {
        spend::cost(usage, price)
    } else {
        0.0
    };
    record::settle(&worker.shared.alerts, reservation, cost, &principal);
    let row = attempt.finish(record::AttemptInfo {
        principal: &principal,
        master_token: worker.shared.auth.master_token(),
        group: &pick.group,
        dep,
        upstream_model: &upstream_model,
        endpoint,
        usage: if billable {
            usage
        } else {
            spend::Usage::default()
        },
        cost,
        status: out
            .status()
            .unwrap_or_else(|| result.as_ref().err().map_or(200, GatewayError::status)),
        error: result.as_ref().err(),
    });
    record::submit(worker, row);
    result
}

/// Asks an OpenAI-compatible upstream for the stream's usage when the client
/// did not; returns whether the usage chunk must be kept from the client.
fn ask_for_stream_usage(req: &mut LlmRequest) -> bool {
    match spend::inject_include_usage(&req.body) {
        Some(body) => {
            // The splice lands at the closing brace, after `model`'s span.
            req.body = Bytes::from(body);
            true
        }
        None => false,
    }
}

/// Phase 7 for a provider reached over HTTP.
#[allow(clippy::too_many_arguments)]
async fn forward(
    worker: &Worker,
    dep: &Deployment,
    req: providers::UpstreamRequest,
    stream: bool,
    strip_usage: bool,
    out: &mut Responder<'_>,
    outcome: &mut Outcome<'_>,
    tap: &mut UsageTap,
    attempt: &mut Attempt,
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
    let mut resp = sent.map_err(|e| relay::upstream_error(e, dep, timeout))?;
    attempt.first_byte();
    let status = resp.head.status;
    if status >= 400 {
        let body = resp
            .read_to_end(MAX_ERROR_BODY, timeout)
            .await
            .unwrap_or_default();
        return Err(relay::error_from_upstream(
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
    let is_stream = resp.head.is_event_stream();
    let io = |_| GatewayError::Unavailable("client connection lost");
    let mut relay = relay::Relay::new(dep, timeout, deadline, is_stream, strip_usage && is_stream);
    match resp.content_length() {
        Some(len) if !is_stream => {
            out.start_fixed(status, headers, &content_type, len)
                .await
                .map_err(io)?;
            relay.run(&mut resp, out, false, tap).await
        }
        _ => {
            out.start_stream(status, headers, &content_type)
                .await
                .map_err(io)?;
            relay.run(&mut resp, out, true, tap).await?;
            out.end_stream().await.map_err(io)
        }
    }
}

/// Phase 7 for the in-process mock provider.
async fn serve_mock(
    req: &LlmRequest,
    model: &str,
    dep: &Deployment,
    out: &mut Responder<'_>,
    outcome: &mut Outcome<'_>,
    tap: &mut UsageTap,
    attempt: &mut Attempt,
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
            attempt.first_byte();
            let headers = litellm_headers(200, outcome);
            let io = |_| GatewayError::Unavailable("client connection lost");
            if content_type != "text/event-stream" {
                let body = parts.concat();
                tap.feed(&body);
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
                tap.feed(part);
                out.send_chunk(part).await.map_err(io)?;
            }
            out.end_stream().await.map_err(io)
        }
    }
}

/// Principal of a request, for phases that only need to know whether it is a key.
pub(crate) fn key_of(principal: &Principal) -> Option<&crate::auth::KeyEntry> {
    match principal {
        Principal::Key(k) => Some(k),
        _ => None,
    }
}
