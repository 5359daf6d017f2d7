//! Calls to `generic_guardrail_api` services ([`GenericApi`]) on the core's
//! upstream client, under each service's deadline and with its answer's
//! size bounded; what an unreachable or failing service means is its
//! `unreachable_fallback` and `fail_on_error`.

use super::headers::upstream_head;
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::guardrails::api::{CallInfo, GenericApi, Verdict};
use crate::guardrails::Service;
use crate::providers::UpstreamRequest;
use crate::state::Worker;
use crate::upstream::UpstreamError;
use bytes::Bytes;
use serde_json::{Map, Value};
use std::time::Instant;

/// Largest answer read from a guardrail service.
const MAX_ANSWER: usize = 16 << 20;

/// What one text-checking round needs besides the texts.
pub(super) struct Round<'a> {
    /// `request` or `response`.
    pub input_type: &'static str,
    /// `litellm_call_id`.
    pub call_id: &'a str,
    /// The caller's `user_api_key_*` fields (`request_data`, see
    /// [`caller`]).
    pub caller: &'a Map<String, Value>,
    /// The request (or answer) body, for `model`, `messages`, `tools`.
    pub doc: &'a Value,
}

/// Runs `services` in turn on `texts`: whether a service rewrote them, or
/// the refusal (a block, or a failure the service's settings do not let
/// pass).
pub(super) async fn check(
    worker: &Worker,
    services: &[Service],
    texts: &mut Vec<String>,
    round: &Round<'_>,
) -> Result<bool, GatewayError> {
    let mut changed = false;
    for (g, extra) in services {
        let Some(api) = g.service() else { continue };
        let info = CallInfo {
            call_id: round.call_id,
            model: round.doc.get("model").and_then(Value::as_str),
            caller: round.caller.clone(),
            messages: (round.input_type == "request")
                .then(|| round.doc.get("messages"))
                .flatten(),
            tools: round.doc.get("tools"),
            extra: extra.as_ref(),
        };
        let body = api.body(round.input_type, texts, &info);
        let verdict = match Box::pin(call(worker, api, body, texts.len())).await {
            Ok(v) => v,
            Err((reason, unreachable)) => {
                if (unreachable && api.fail_open) || !api.fail_on_error {
                    tracing::warn!(
                        guardrail = %g.name,
                        reason = %reason,
                        "guardrail service failed; the text passes unchecked (fail_open)"
                    );
                    continue;
                }
                return Err(GatewayError::GuardrailFailed {
                    guardrail: g.name.clone(),
                    reason,
                });
            }
        };
        match verdict {
            Verdict::Pass => {}
            Verdict::Rewrite(new) => {
                changed |= new != *texts;
                *texts = new;
            }
            Verdict::Blocked(reason) => {
                return Err(GatewayError::GuardrailBlocked {
                    detail: serde_json::json!({"error": reason, "guardrail_name": g.name}),
                    message: reason,
                })
            }
        }
    }
    Ok(changed)
}

/// LiteLLM's `request_data`: the caller's `user_api_key_*` fields.
pub(super) fn caller(principal: &Principal) -> Map<String, Value> {
    let mut m = Map::new();
    let Some(key) = super::key_of(principal) else {
        return m;
    };
    let mut put = |name: &str, v: Option<&String>| {
        if let Some(v) = v {
            m.insert(name.to_string(), Value::String(v.clone()));
        }
    };
    let r = &key.record;
    put("user_api_key_hash", Some(&r.token));
    put("user_api_key_alias", r.key_alias.as_ref());
    put("user_api_key_user_id", r.user_id.as_ref());
    put("user_api_key_team_id", r.team_id.as_ref());
    if let Some(team) = &key.team {
        put("user_api_key_team_alias", team.record.team_alias.as_ref());
        put("user_api_key_org_id", team.record.organization_id.as_ref());
    }
    m
}

/// One call: the verdict, or why there is none and whether the service
/// was unreachable (no connection, timeout, 502, 503, 504).
async fn call(
    worker: &Worker,
    api: &GenericApi,
    body: Vec<u8>,
    sent: usize,
) -> Result<Verdict, (String, bool)> {
    let base = crate::upstream::parse_base(&api.url).map_err(|e| (e, false))?;
    let req = UpstreamRequest {
        path: base.path.clone(),
        headers: api
            .headers()
            .into_iter()
            .map(|(n, v)| (n.into(), v))
            .collect(),
        body: [Bytes::from(body), Bytes::new(), Bytes::new()],
        include_usage: false,
    };
    let head = upstream_head(&req, &base);
    let deadline = Instant::now() + api.timeout;
    let unreachable = |e: UpstreamError| (format!("{}: {e}", base.url), true);
    let mut resp = worker
        .upstream
        .send(&base, head, &req.body, deadline)
        .await
        .map_err(unreachable)?;
    let left = deadline.saturating_duration_since(Instant::now());
    let read = monoio::time::timeout(left, resp.read_to_end(MAX_ANSWER, left)).await;
    let answer = match read {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return Err(unreachable(e)),
        Err(_) => return Err(unreachable(UpstreamError::Timeout)),
    };
    let status = resp.head.status;
    if matches!(status, 502..=504) {
        return Err((format!("{} answered {status}", base.url), true));
    }
    if !(200..300).contains(&status) {
        return Err((format!("{} answered {status}", base.url), false));
    }
    GenericApi::verdict(&answer, sent).map_err(|e| (format!("{}: {e}", base.url), false))
}
