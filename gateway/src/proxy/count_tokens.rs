//! `POST /v1/messages/count_tokens`: the input tokens of a Messages
//! request. A group served by an `anthropic/` deployment asks Anthropic's
//! own endpoint with the deployment's credentials; any other answers with
//! the gateway's estimate (4 characters a token), never a 404. Errors take
//! Anthropic's shape. Counting is free: no limit or budget is charged.

use super::{convert, headers};
use crate::auth::Principal;
use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::formats::Format;
use crate::http1::RequestHead;
use crate::inbound::{Endpoint, LlmRequest};
use crate::providers;
use crate::router::PlanInput;
use crate::spend;
use crate::state::Worker;
use bytes::Bytes;
use std::time::Instant;

/// Largest answer read from the upstream counting endpoint.
const MAX_ANSWER: usize = 1 << 20;

/// Answers one count-tokens request from `caller` (authenticated from the
/// head).
pub async fn handle(
    worker: &Worker,
    head: &RequestHead,
    caller: Result<Principal, GatewayError>,
    body: Bytes,
    out: &mut Responder<'_>,
) {
    let call_id = headers::call_id();
    if let Err(err) = serve(worker, head, caller, body, out, &call_id).await {
        if out.started() {
            out.abort_stream();
            return;
        }
        let mut h = HeadBuilder::new(err.status());
        h.header("x-litellm-call-id", &call_id);
        convert::send_error(out, Format::Anthropic, &err, h).await;
    }
}

async fn serve(
    worker: &Worker,
    head: &RequestHead,
    caller: Result<Principal, GatewayError>,
    body: Bytes,
    out: &mut Responder<'_>,
    call_id: &str,
) -> Result<(), GatewayError> {
    let shared = &worker.shared;
    let principal = caller?;
    let mut req = LlmRequest::parse(Endpoint::Messages, body)?;
    req.forward_headers = convert::forward_headers(head, Endpoint::Messages);
    let model = super::authorize_model(worker, &principal, &req.model)?;
    let router = shared.models.router_for(&shared.control, &model).await;
    let input = PlanInput {
        allowed_regions: principal.allowed_regions(),
        ..PlanInput::default()
    };
    let mut plan = match router.plan(&model, input) {
        Err(GatewayError::UnknownModel(_)) => Err(GatewayError::UnknownModel(req.model.clone())),
        other => other,
    }?;
    let pick = plan
        .next(None)
        .ok_or_else(|| GatewayError::UnknownModel(req.model.clone()))?;
    let dep = pick.deployment;
    let head_for = |status: u16| {
        let mut h = HeadBuilder::new(status);
        h.header("x-litellm-call-id", call_id);
        h.header("x-litellm-model-group", &pick.group);
        h.header("x-litellm-model-id", &dep.id);
        h
    };
    let upstream = providers::http_provider(dep.provider).and_then(|provider| {
        let counted = provider.count_tokens_request(&req, &pick.upstream_model, dep)?;
        Some((provider, counted, dep.base.as_ref()?))
    });
    let Some((provider, counted, base)) = upstream else {
        let tokens = spend::estimate_prompt_tokens(&req.body);
        let body = serde_json::to_vec(&serde_json::json!({"input_tokens": tokens}))
            .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
        return out
            .send(200, head_for(200), "application/json", &body)
            .await
            .map_err(|_| GatewayError::Unavailable("client connection lost"));
    };
    let deadline = Instant::now() + dep.timeout;
    let upstream_head = headers::upstream_head(&counted, base, 0);
    let mut resp = worker
        .upstream
        .send(base, upstream_head, &counted.body, deadline)
        .await
        .map_err(|e| super::relay::upstream_error(e, dep, dep.timeout))?;
    let status = resp.head.status;
    let body = convert::read_body(&mut resp, MAX_ANSWER, deadline, dep, dep.timeout).await?;
    if status >= 400 {
        return Err(provider.error(status, &body, resp.head.retry_after.take()));
    }
    out.send(status, head_for(status), "application/json", &body)
        .await
        .map_err(|_| GatewayError::Unavailable("client connection lost"))
}
