//! The guardrails' two places in a request's life: on its body before it
//! is read (`pre_call`, `during_call`) and on a whole answer before the
//! client sees it (`post_call`).

use super::{headers::litellm_headers, key_of, Outcome};
use crate::auth::Principal;
use crate::downstream::HeadBuilder;
use crate::downstream::Responder;
use crate::error::GatewayError;
use crate::formats::Format;
use crate::guardrails::Scope;
use crate::state::Worker;
use bytes::Bytes;

/// The body to read and send on, after the request's guardrails; keeps
/// its `post_call` ones in `outcome`.
pub(super) fn pre_call(
    worker: &Worker,
    principal: &Principal,
    body: Bytes,
    outcome: &mut Outcome,
) -> Result<Bytes, GatewayError> {
    let key = key_of(principal);
    let scope = Scope {
        key: key.map(|k| &k.record.metadata),
        team: key
            .and_then(|k| k.team.as_ref())
            .map(|t| &t.record.metadata),
    };
    let (body, checked) = worker.shared.guardrails.pre_call(scope, body)?;
    outcome.post_call = checked.post;
    outcome.applied_guardrails = checked.applied;
    Ok(body)
}

/// The guardrails on an image edit form's `prompt` (an audio form has no
/// text): run as on a JSON body holding it; a prompt they would mask is
/// refused, as the form is forwarded as received.
pub(super) fn form_prompt(
    worker: &Worker,
    principal: &Principal,
    form: &crate::inbound::LlmRequest,
    outcome: &mut Outcome,
) -> Result<(), GatewayError> {
    let Some(range) = form.form_prompt.clone() else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(&form.body[range]);
    let json = serde_json::json!({ "prompt": text }).to_string();
    let sent = Bytes::from(json);
    let checked = pre_call(worker, principal, sent.clone(), outcome)?;
    if checked != sent {
        return Err(GatewayError::InvalidParam {
            param: "prompt",
            message: "a guardrail masks this prompt; an image edit's form is forwarded as received, so it is refused".into(),
        });
    }
    Ok(())
}

/// Sends a whole 2xx answer `body` in the `client`'s format after its
/// `post_call` guardrails: masked, or replaced by their refusal (the
/// answer was generated, so the attempt is still billed as a success).
pub(super) async fn send_answer(
    out: &mut Responder<'_>,
    client: Format,
    outcome: &Outcome,
    (status, headers, content_type): (u16, HeadBuilder, &str),
    body: &[u8],
) -> Result<(), GatewayError> {
    let io = |_| GatewayError::Unavailable("client connection lost");
    let checked = match &outcome.post_call {
        None => Ok(std::borrow::Cow::Borrowed(body)),
        Some(post) => post.answer(body),
    };
    match checked {
        Ok(body) => out
            .send(status, headers, content_type, &body)
            .await
            .map_err(io),
        Err(err) => {
            let headers = litellm_headers(err.status(), outcome);
            super::convert::send_error(out, client, &err, headers).await;
            Ok(())
        }
    }
}
