//! Formats on the request path: which form of the request a provider gets,
//! and how its answer reaches the client in the client's format. Where the
//! client and the provider speak the same format nothing is translated;
//! otherwise the provider's translator brings the answer to the internal
//! (OpenAI) form and the client format's translator takes it on from there.

use super::held::Form;
use crate::deployment::Deployment;
use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::formats::{self, Chain, Events, Format, StreamTranslator, TranslateError};
use crate::http1::RequestHead;
use crate::inbound::{Endpoint, LlmRequest};
use crate::providers::{self, Provider};
use crate::upstream::{UpstreamError, UpstreamResponse};
use bytes::Bytes;
use std::time::{Duration, Instant};

/// Headers of the client's request that a provider of the client's own
/// format gets too: Anthropic's version and beta features on Messages.
pub(super) fn forward_headers(
    head: &RequestHead,
    endpoint: Endpoint,
) -> Vec<(&'static str, String)> {
    // A form's content type carries its boundary: the upstream gets it as
    // sent (a missing one is refused when the form is read).
    if endpoint.takes_form() {
        let content_type = head.header("content-type").unwrap_or("");
        return vec![("content-type", content_type.to_string())];
    }
    if endpoint.format() != Format::Anthropic {
        return Vec::new();
    }
    ["anthropic-version", "anthropic-beta"]
        .into_iter()
        .filter_map(|name| head.header(name).map(|v| (name, v.to_string())))
        .collect()
}

/// The content type of a request whose body is a multipart form (see
/// [`forward_headers`]); `None` for a JSON body.
pub(super) fn form_content_type<'h>(forward: &'h [(&'static str, String)]) -> Option<&'h str> {
    forward
        .iter()
        .find(|(name, _)| *name == "content-type")
        .map(|(_, v)| v.as_str())
}

/// Which form of `req` `dep` takes: `req` itself when the provider speaks
/// the client's format (or the client speaks the internal one), else the
/// Messages request translated to an internal chat completions request,
/// made once into `internal` and reused by later attempts.
pub(super) fn make_internal(
    req: &LlmRequest,
    dep: &Deployment,
    internal: &mut Option<Box<LlmRequest>>,
) -> Result<Form, GatewayError> {
    let client = req.endpoint.format();
    if !providers::serves(req.endpoint, dep) {
        return Err(GatewayError::InvalidParam {
            param: "model",
            message: format!(
                "provider {} does not serve {}",
                dep.provider_name,
                req.endpoint.path_suffix()
            ),
        });
    }
    // A rerank request is never translated: the provider takes it as it is.
    if req.endpoint == Endpoint::Rerank {
        return Ok(Form::Received);
    }
    if client == Format::OpenAi
        || client == providers::format_of(dep.provider)
        || (client == Format::Responses && providers::serves_responses(dep))
    {
        return Ok(Form::Received);
    }
    if internal.is_none() {
        let body = match client {
            Format::Responses => formats::responses::to_chat(&req.body, &req.model)?,
            _ => formats::anthropic::to_chat(&req.body, &req.model)?,
        };
        let mut chat = LlmRequest::parse(Endpoint::ChatCompletions, Bytes::from(body))?;
        chat.fallbacks = req.fallbacks.clone();
        chat.num_retries = req.num_retries;
        chat.end_user = req.end_user.clone();
        *internal = Some(Box::new(chat));
    }
    Ok(Form::Internal)
}

/// A whole answer body of at most `limit` bytes, read before `deadline`
/// (`timeout` is the deployment's, for the error message).
pub(super) async fn read_body(
    resp: &mut UpstreamResponse,
    limit: usize,
    deadline: Instant,
    dep: &Deployment,
    timeout: Duration,
) -> Result<Vec<u8>, GatewayError> {
    let left = deadline.saturating_duration_since(Instant::now());
    match monoio::time::timeout(left, resp.read_to_end(limit, left)).await {
        Ok(read) => read.map_err(|e| super::relay::upstream_error(e, dep, timeout)),
        Err(_) => Err(super::relay::upstream_error(
            UpstreamError::Timeout,
            dep,
            timeout,
        )),
    }
}

/// The failure of translating `dep`'s answer.
pub(super) fn translate_error(dep: &Deployment, err: TranslateError) -> GatewayError {
    GatewayError::UpstreamProtocol {
        provider: dep.provider_name.clone(),
        reason: err.0,
    }
}

/// Whether an answer in `wire` format reaches a `client` unchanged.
pub(super) fn is_passthrough(wire: Format, client: Format) -> bool {
    wire == client
}

/// What the tools of the client's request `received` make of the calls in
/// its answer (a Responses request's custom and namespaced tools; nothing
/// for other formats).
pub(super) fn call_names(client: Format, received: &[u8]) -> formats::responses::CallNames {
    match client {
        Format::Responses => formats::responses::CallNames::of(received),
        _ => Default::default(),
    }
}

/// A whole success body from `provider` (`None`: the in-process mock,
/// which answers in the internal form) in the `client`'s format; an
/// embeddings answer when `embeddings`; `names` from [`call_names`].
pub(super) fn translate_body(
    provider: Option<&dyn Provider>,
    (client, names): (Format, &formats::responses::CallNames),
    embeddings: bool,
    body: &[u8],
) -> Result<Vec<u8>, TranslateError> {
    let wire = provider.map_or(Format::OpenAi, |p| p.format());
    if is_passthrough(wire, client) {
        return Ok(body.to_vec());
    }
    let translated = provider.and_then(|p| {
        if embeddings {
            p.embeddings_to_internal(body)
        } else {
            p.response_to_internal(body)
        }
    });
    let internal = match translated {
        Some(translated) => translated?,
        None => body.to_vec(),
    };
    match client {
        // No client speaks a provider-only format.
        Format::OpenAi | Format::Bedrock | Format::Gemini | Format::Cohere => Ok(internal),
        Format::Anthropic => formats::anthropic::from_chat(&internal),
        Format::Responses => formats::responses::from_chat(&internal, names),
    }
}

/// A whole rerank answer from `provider` in LiteLLM's shape, for a call
/// that ranked `documents` documents.
pub(super) fn translate_rerank(
    provider: &dyn Provider,
    body: &[u8],
    documents: usize,
) -> Result<Vec<u8>, TranslateError> {
    provider
        .rerank_to_cohere(body, documents)
        .unwrap_or_else(|| Ok(body.to_vec()))
}

/// A whole image generation answer from `provider` in OpenAI's shape.
pub(super) fn translate_images(
    provider: &dyn Provider,
    body: &[u8],
) -> Result<Vec<u8>, GatewayError> {
    provider
        .images_to_openai(body)
        .unwrap_or_else(|| Ok(body.to_vec()))
}

/// The translator of `provider`'s event stream into the `client`'s;
/// `None` when the stream passes unchanged; `names` from [`call_names`].
pub(super) fn stream_translator(
    provider: Option<&dyn Provider>,
    (client, names): (Format, &formats::responses::CallNames),
    include_usage: bool,
) -> Option<Box<dyn StreamTranslator>> {
    let wire = provider.map_or(Format::OpenAi, |p| p.format());
    if is_passthrough(wire, client) {
        return None;
    }
    let to_internal = provider.and_then(|p| p.stream_to_internal(include_usage));
    let to_client: Option<Box<dyn StreamTranslator>> = match client {
        Format::OpenAi | Format::Bedrock | Format::Gemini | Format::Cohere => None,
        Format::Anthropic => Some(Box::new(Events::new(
            formats::anthropic::ChatToMessages::new(),
        ))),
        Format::Responses => Some(Box::new(Events::new(
            formats::responses::ChatToResponses::new(names.clone()),
        ))),
    };
    match (to_internal, to_client) {
        (Some(a), Some(b)) => Some(Box::new(Chain(a, b))),
        (a, b) => a.or(b),
    }
}

/// Sends `err` in the `client`'s error shape.
pub(super) async fn send_error(
    out: &mut Responder<'_>,
    client: Format,
    err: &GatewayError,
    mut head: HeadBuilder,
) {
    match client {
        Format::OpenAi | Format::Bedrock | Format::Gemini | Format::Cohere | Format::Responses => {
            let _ = out.send_error(err, Some(head)).await;
        }
        Format::Anthropic => {
            if let Some(ra) = err.retry_after() {
                head.header("retry-after", ra);
            }
            let body = formats::anthropic::error_body(err);
            let _ = out
                .send(err.status(), head, "application/json", &body)
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn only_differing_formats_are_translated() {
        let names = formats::responses::CallNames::default();
        let anthropic = providers::http_provider(crate::deployment::ProviderKind::Anthropic);
        let openai = providers::http_provider(crate::deployment::ProviderKind::OpenAiCompatible);
        assert!(stream_translator(openai, (Format::OpenAi, &names), true).is_none());
        assert!(stream_translator(anthropic, (Format::Anthropic, &names), true).is_none());
        assert!(stream_translator(None, (Format::OpenAi, &names), true).is_none());
        assert!(stream_translator(openai, (Format::Anthropic, &names), true).is_some());
        assert!(stream_translator(anthropic, (Format::OpenAi, &names), true).is_some());
        let body = br#"{"id":"m","type":"message","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2}}"#;
        assert_eq!(
            translate_body(anthropic, (Format::Anthropic, &names), false, body).unwrap(),
            body
        );
        let chat: Value = serde_json::from_slice(
            &translate_body(anthropic, (Format::OpenAi, &names), false, body).unwrap(),
        )
        .unwrap();
        assert_eq!(chat["choices"][0]["message"]["content"], "hi");
        let openai_body = json!({"id": "c", "model": "m", "choices": [{"message": {"content": "yo"}, "finish_reason": "stop"}]});
        let msg: Value = serde_json::from_slice(
            &translate_body(
                None,
                (Format::Anthropic, &names),
                false,
                openai_body.to_string().as_bytes(),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(msg["content"][0]["text"], "yo");
    }
}
