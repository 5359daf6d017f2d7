//! Anthropic's models on Vertex AI (`vertex_ai/claude-…`): the Messages
//! API behind `…/publishers/anthropic/models/{model}:rawPredict` (and
//! `:streamRawPredict` when streamed), with Vertex's OAuth token. The body
//! is Anthropic's without `model` (the path names it) and with
//! `anthropic_version: "vertex-2023-10-16"`; Messages requests pass through
//! so changed, chat completions requests are translated by `anthropic`,
//! answers and streams translated back by it.

use super::authorization;
use crate::deployment::Deployment;
use crate::deployment::VertexSettings;
use crate::error::GatewayError;
use crate::formats::{Events, Format, StreamTranslator, TranslateError};
use crate::inbound::{Endpoint, LlmRequest};
use crate::providers::anthropic::{self, Anthropic, MessagesToChat};
use crate::providers::{with_extra_headers, Provider, UpstreamRequest};
use serde_json::{Map, Value};
use std::borrow::Cow;

/// The `anthropic_version` Vertex AI requires in the body.
pub const VERTEX_ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// The translator of Anthropic models on Vertex AI.
pub struct VertexAnthropic;

/// `body` (a Messages request) as Vertex takes it.
fn vertex_body(body: &[u8]) -> Result<Vec<u8>, GatewayError> {
    let mut req: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    req.remove("model");
    req.insert(
        "anthropic_version".into(),
        Value::String(VERTEX_ANTHROPIC_VERSION.into()),
    );
    serde_json::to_vec(&req).map_err(|e| GatewayError::MalformedJson(e.to_string()))
}

/// The path of `model` below `dep`'s base, as for Gemini models but under
/// publisher `anthropic`.
fn raw_predict_path(
    dep: &Deployment,
    settings: &VertexSettings,
    model: &str,
    stream: bool,
) -> String {
    let method = if stream {
        "streamRawPredict"
    } else {
        "rawPredict"
    };
    let base = dep.base.as_ref().map_or("", |b| b.path.as_str());
    let enc = crate::providers::sigv4::uri_encode;
    if base.is_empty() || base == "/v1" || base == "/v1beta1" {
        format!(
            "{}/projects/{}/locations/{}/publishers/anthropic/models/{}:{method}",
            if base.is_empty() { "/v1" } else { base },
            enc(&settings.project),
            enc(&settings.location),
            enc(model),
        )
    } else {
        format!("{base}:{method}")
    }
}

impl Provider for VertexAnthropic {
    fn format(&self) -> Format {
        Format::Anthropic
    }

    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> Result<UpstreamRequest, GatewayError> {
        let settings = dep.vertex.as_ref().ok_or(GatewayError::Internal(
            "a vertex_ai deployment without settings",
        ))?;
        let (body, include_usage) = match req.endpoint {
            Endpoint::Messages => (vertex_body(&req.body)?, false),
            Endpoint::ChatCompletions => {
                let max_tokens = crate::spend::max_output_tokens(dep, upstream_model)
                    .unwrap_or(anthropic::DEFAULT_MAX_TOKENS);
                let (body, include_usage) =
                    anthropic::request_from_chat(&req.body, upstream_model, max_tokens)?;
                (vertex_body(&body)?, include_usage)
            }
            Endpoint::Completions
            | Endpoint::Embeddings
            | Endpoint::Responses
            | Endpoint::Rerank
            | Endpoint::Moderations
            | Endpoint::ImageGenerations
            | Endpoint::AudioSpeech
            | Endpoint::AudioTranscriptions
            | Endpoint::AudioTranslations
            | Endpoint::ImageEdits => {
                return Err(GatewayError::InvalidParam {
                    param: "model",
                    message: format!(
                        "Anthropic models on vertex_ai serve /chat/completions, /v1/messages and /v1/responses, not {}",
                        req.endpoint.path_suffix()
                    ),
                })
            }
        };
        let mut own = vec![authorization(settings)?];
        if let Some((_, beta)) = req
            .forward_headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("anthropic-beta"))
        {
            own.push((Cow::Borrowed("anthropic-beta"), beta.clone()));
        }
        Ok(UpstreamRequest {
            path: raw_predict_path(dep, settings, upstream_model, req.stream),
            headers: with_extra_headers(own, dep),
            body: [body.into(), Default::default(), Default::default()],
            include_usage,
        })
    }

    fn response_to_internal(&self, body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(anthropic::response_to_chat(body))
    }

    fn stream_to_internal(&self, include_usage: bool) -> Option<Box<dyn StreamTranslator>> {
        Some(Box::new(Events::new(MessagesToChat::new(include_usage))))
    }

    fn accepts_stream_options(&self, _dep: &Deployment) -> bool {
        false
    }

    /// As Anthropic's own API: plain `http` images go inline.
    fn inlines_image_url(&self, url: &str) -> bool {
        Anthropic.inlines_image_url(url)
    }

    /// Anthropic's errors in Anthropic's shape; Google's front end (auth,
    /// quota, paths) answers in Google's.
    fn error(&self, status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
        let anthropic_shaped =
            serde_json::from_slice::<Value>(body).is_ok_and(|v| v["type"] == "error");
        if anthropic_shaped {
            Anthropic.error(status, body, retry_after)
        } else {
            crate::providers::gemini::google_error(status, body, retry_after)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_lose_the_model_and_gain_the_vertex_version() {
        let out =
            vertex_body(br#"{"model":"claude-sonnet-4","max_tokens":5,"messages":[]}"#).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert!(v.get("model").is_none());
        assert_eq!(v["anthropic_version"], VERTEX_ANTHROPIC_VERSION);
        assert_eq!(v["max_tokens"], 5);
        assert!(vertex_body(b"[").is_err());
    }
}
