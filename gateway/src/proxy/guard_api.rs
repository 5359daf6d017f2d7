//! Calls to guardrail services on the core's upstream client, under each
//! service's deadline and with its answer's size bounded:
//! `generic_guardrail_api` ([`GenericApi`]; what an unreachable or failing
//! service means is its `unreachable_fallback` and `fail_on_error`) and
//! `lakera_v2` ([`LakeraV2`]), `presidio` ([`Presidio`]),
//! `openai_moderation` ([`OpenAiModeration`]) and `bedrock`
//! ([`BedrockGuard`], signed with SigV4 as Bedrock calls are); for these
//! a failure refuses, as in LiteLLM.

use super::headers::upstream_head;
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::guardrails::api::{CallInfo, GenericApi, Verdict};
use crate::guardrails::bedrock::{self, BedrockGuard};
use crate::guardrails::lakera::LakeraV2;
use crate::guardrails::log::{self, Hook, Log, Outcome, Run};
use crate::guardrails::moderation::{self, OpenAiModeration};
use crate::guardrails::presidio::{BlockedEntity, Presidio};
use crate::guardrails::{Guardrail, Kind, Service};
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
    /// Where each service's run is recorded (the request's log, shared).
    pub log: Log,
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
    let mut log = round.log.clone();
    let rewrote = |changed: bool| match changed {
        true => Outcome::Masked,
        false => Outcome::Passed,
    };
    for (g, extra) in services {
        let began = Instant::now();
        let result = match &g.kind {
            Kind::Api(api) => Box::pin(generic(worker, g, api, extra, texts, round)).await,
            Kind::Lakera(lakera) => Box::pin(lakera_guard(worker, g, lakera, texts, round))
                .await
                .map(|()| Outcome::Passed),
            Kind::Presidio(p) => Box::pin(presidio(worker, g, p, texts)).await.map(rewrote),
            Kind::Moderation(m) => Box::pin(moderate(worker, g, m, texts, round))
                .await
                .map(|()| Outcome::Passed),
            Kind::Bedrock(b) => Box::pin(bedrock_guard(worker, g, b, texts, round))
                .await
                .map(rewrote),
            Kind::Filter(_) => continue,
        };
        let hook = match (round.input_type, g.modes.pre) {
            ("response", _) => Hook::Post,
            (_, true) => Hook::Pre,
            (_, false) => Hook::During,
        };
        let outcome = match &result {
            Ok(outcome) => *outcome,
            Err(err) => log::refusal_outcome(err),
        };
        log.push(Run::ended(g, hook, outcome, began));
        changed |= result? == Outcome::Masked;
    }
    Ok(changed)
}

/// One `generic_guardrail_api` call: whether it rewrote `texts` (or
/// failed, and its settings let them pass).
async fn generic(
    worker: &Worker,
    g: &Guardrail,
    api: &GenericApi,
    extra: &Option<Value>,
    texts: &mut Vec<String>,
    round: &Round<'_>,
) -> Result<Outcome, GatewayError> {
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
    let answer = post(worker, &api.url, api.headers(), body, api.timeout).await;
    let verdict = answer.and_then(|(url, answer)| {
        GenericApi::verdict(&answer, texts.len()).map_err(|e| (format!("{url}: {e}"), false))
    });
    match verdict {
        Ok(Verdict::Pass) => Ok(Outcome::Passed),
        Ok(Verdict::Rewrite(new)) => {
            let changed = new != *texts;
            *texts = new;
            Ok(match changed {
                true => Outcome::Masked,
                false => Outcome::Passed,
            })
        }
        Ok(Verdict::Blocked(reason)) => Err(GatewayError::GuardrailBlocked {
            detail: serde_json::json!({"error": reason, "guardrail_name": g.name}),
            message: reason,
        }),
        Err((reason, unreachable)) => {
            if (unreachable && api.fail_open) || !api.fail_on_error {
                tracing::warn!(
                    guardrail = %g.name,
                    reason = %reason,
                    "guardrail service failed; the text passes unchecked (fail_open)"
                );
                return Ok(Outcome::FailedOpen);
            }
            Err(GatewayError::GuardrailFailed {
                service: "Generic Guardrail API",
                guardrail: g.name.clone(),
                reason,
            })
        }
    }
}

/// One Lakera Guard call: nothing, or the refusal.
async fn lakera_guard(
    worker: &Worker,
    g: &Guardrail,
    lakera: &LakeraV2,
    texts: &[String],
    round: &Round<'_>,
) -> Result<(), GatewayError> {
    let body = lakera.body(lakera_messages(round, texts));
    let answer = post(worker, &lakera.url, lakera.headers(), body, lakera.timeout).await;
    let flagged = answer.and_then(|(url, answer)| {
        LakeraV2::verdict(&answer).map_err(|e| (format!("{url}: {e}"), false))
    });
    match flagged {
        Ok(None) => Ok(()),
        Ok(Some(answer)) if lakera.block => Err(GatewayError::GuardrailBlocked {
            message: "Violated guardrail policy".to_string(),
            detail: serde_json::json!({
                "error": "Violated guardrail policy",
                "lakera_guardrail_response": answer,
            }),
        }),
        Ok(Some(_)) => {
            tracing::warn!(guardrail = %g.name, "lakera_v2 flagged the text (on_flagged: monitor); it passes");
            Ok(())
        }
        Err((reason, _)) => Err(GatewayError::GuardrailFailed {
            service: "Lakera AI",
            guardrail: g.name.clone(),
            reason,
        }),
    }
}

/// One OpenAI moderation call on the request's last user turn (or every
/// text): nothing, or the refusal.
async fn moderate(
    worker: &Worker,
    g: &Guardrail,
    m: &OpenAiModeration,
    texts: &[String],
    round: &Round<'_>,
) -> Result<(), GatewayError> {
    let messages = (round.input_type == "request")
        .then(|| round.doc.get("messages"))
        .flatten();
    let Some(input) = OpenAiModeration::input(messages, texts) else {
        return Ok(());
    };
    let answer = post(worker, &m.url, m.headers(), m.body(&input), m.timeout).await;
    let flagged = answer.and_then(|(url, answer)| {
        OpenAiModeration::verdict(&answer).map_err(|e| (format!("{url}: {e}"), false))
    });
    match flagged {
        Ok(None) => Ok(()),
        Ok(Some(result)) => Err(GatewayError::GuardrailBlocked {
            message: moderation::BLOCKED.to_string(),
            detail: serde_json::json!({
                "error": moderation::BLOCKED,
                "moderation_result": result,
            }),
        }),
        Err((reason, _)) => Err(GatewayError::GuardrailFailed {
            service: "OpenAI Moderation",
            guardrail: g.name.clone(),
            reason,
        }),
    }
}

/// One ApplyGuardrail call on the non-empty texts, signed with SigV4:
/// whether it masked them, or the refusal.
async fn bedrock_guard(
    worker: &Worker,
    g: &Guardrail,
    b: &BedrockGuard,
    texts: &mut Vec<String>,
    round: &Round<'_>,
) -> Result<bool, GatewayError> {
    let failed = |reason: String| GatewayError::GuardrailFailed {
        service: "Bedrock guardrail",
        guardrail: g.name.clone(),
        reason,
    };
    let Some(body) = BedrockGuard::body(round.input_type, texts) else {
        return Ok(false);
    };
    let headers = bedrock_signature(b, &body).map_err(failed)?;
    let answer = post(worker, &b.url, headers, body, b.timeout).await;
    let (url, answer) = answer.map_err(|(reason, _)| failed(reason))?;
    match b
        .verdict(&answer, texts)
        .map_err(|e| failed(format!("{url}: {e}")))?
    {
        bedrock::Verdict::Pass => Ok(false),
        bedrock::Verdict::Rewrite(new) => {
            let changed = new != *texts;
            *texts = new;
            Ok(changed)
        }
        bedrock::Verdict::Blocked(detail) => Err(GatewayError::GuardrailBlocked {
            message: bedrock::BLOCKED.to_string(),
            detail,
        }),
    }
}

/// The SigV4 headers of an ApplyGuardrail `POST` of `body` (service
/// `bedrock`, the guardrail's region), as the upstream client sends it
/// (`host` as [`upstream_head`] writes it, `content-type:
/// application/json`).
fn bedrock_signature(b: &BedrockGuard, body: &[u8]) -> Result<Vec<(String, String)>, String> {
    use crate::providers::sigv4::{self, SigningInput};
    let base = crate::upstream::parse_base(&b.url)?;
    let host = crate::providers::bedrock::host_header(&base);
    let creds = crate::deployment::Credentials {
        access_key_id: b.access_key_id.clone(),
        secret_access_key: b.secret_access_key.clone(),
        session_token: b.session_token.clone(),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    let amz_date = sigv4::amz_date(now);
    let signed = sigv4::sign(
        &creds,
        &SigningInput {
            method: "POST",
            path: &base.path,
            query: "",
            headers: &[("host", &host), ("content-type", "application/json")],
            payload: &[body],
            amz_date: &amz_date,
            region: &b.region,
            service: "bedrock",
            double_encode: true,
        },
    );
    Ok(signed
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect())
}

/// Presidio on each text: analyzed, refused for a `BLOCK` entity, else
/// anonymized when something was found; whether a text changed.
async fn presidio(
    worker: &Worker,
    g: &Guardrail,
    p: &Presidio,
    texts: &mut [String],
) -> Result<bool, GatewayError> {
    let failed = |reason: String| GatewayError::GuardrailFailed {
        service: "Presidio",
        guardrail: g.name.clone(),
        reason,
    };
    let mut changed = false;
    for text in texts.iter_mut().filter(|t| !t.is_empty()) {
        let accept = || vec![("accept".to_string(), "application/json".to_string())];
        let analyzed = post(
            worker,
            &p.analyze_url,
            accept(),
            p.analyze_body(text),
            p.timeout,
        )
        .await;
        let (url, answer) = analyzed.map_err(|(reason, _)| failed(reason))?;
        let findings = p
            .findings(&answer)
            .map_err(|e| failed(format!("{url}: {e}")))?;
        let findings = match findings {
            Ok(findings) => findings,
            Err(BlockedEntity(entity)) => {
                let message = format!(
                    "Blocked entity detected: {entity} by Guardrail: {}. This entity is not allowed to be used in this request.",
                    g.name
                );
                return Err(GatewayError::GuardrailBlocked {
                    detail: serde_json::json!({"error": message, "entity_type": entity}),
                    message,
                });
            }
        };
        if findings.is_empty() {
            continue;
        }
        let body = Presidio::anonymize_body(text, findings);
        let anonymized = post(worker, &p.anonymize_url, accept(), body, p.timeout).await;
        let (url, answer) = anonymized.map_err(|(reason, _)| failed(reason))?;
        let new = Presidio::anonymized(&answer).map_err(|e| failed(format!("{url}: {e}")))?;
        changed |= new != *text;
        *text = new;
    }
    Ok(changed)
}

/// The messages Lakera reads: a chat request's own (role and text;
/// parts' texts joined), else each text as a `user` message, or for an
/// answer as an `assistant` one.
fn lakera_messages(round: &Round<'_>, texts: &[String]) -> Vec<Value> {
    let chat = round.doc.get("messages").and_then(Value::as_array);
    if let (Some(chat), "request") = (chat, round.input_type) {
        let text_of = |c: &Value| match c {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        return chat
            .iter()
            .map(|m| {
                serde_json::json!({
                    "role": m.get("role").and_then(Value::as_str).unwrap_or("user"),
                    "content": m.get("content").map(text_of).unwrap_or_default(),
                })
            })
            .collect();
    }
    let role = if round.input_type == "request" {
        "user"
    } else {
        "assistant"
    };
    texts
        .iter()
        .map(|t| serde_json::json!({"role": role, "content": t}))
        .collect()
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

/// One `POST` of `body` to `url` before `timeout`: the URL as shown and
/// the 2xx answer, or why there is none and whether the service was
/// unreachable (no connection, timeout, 502, 503, 504).
async fn post(
    worker: &Worker,
    url: &str,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    timeout: std::time::Duration,
) -> Result<(String, Vec<u8>), (String, bool)> {
    let base = crate::upstream::parse_base(url).map_err(|e| (e, false))?;
    let req = UpstreamRequest {
        path: base.path.clone(),
        headers: headers.into_iter().map(|(n, v)| (n.into(), v)).collect(),
        body: [Bytes::from(body), Bytes::new(), Bytes::new()],
        include_usage: false,
    };
    let head = upstream_head(&req, &base, 0);
    let deadline = Instant::now() + timeout;
    let unreachable = |e: UpstreamError| (format!("{}: {e}", base.url), true);
    let sending = worker.upstream.send(&base, head, &req.body, deadline);
    let mut resp = Box::pin(sending).await.map_err(unreachable)?;
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
    Ok((base.url, answer))
}
