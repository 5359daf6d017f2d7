//! Google AI Studio's Gemini API (`gemini/<model>`).
//!
//! Requests go to `{api_base}/v1beta/models/{model}:generateContent` (or
//! `:streamGenerateContent?alt=sse` when streamed; an `api_base` with a
//! path is used as the version prefix itself), default base
//! `https://generativelanguage.googleapis.com`, with the deployment's key
//! (`api_key`, else `GEMINI_API_KEY`) in `x-goog-api-key`, never in the
//! URL. Chat completions requests (and Messages and Responses requests,
//! through the internal form) are translated (`request`), answers and
//! streams translated back (`response`). Errors keep Google's status and
//! message: 429 `RESOURCE_EXHAUSTED` is a rate limit, a 400 about the input
//! token count the context-window class. Embeddings go to
//! `:batchEmbedContents` (`embeddings`).

pub mod embeddings;
mod request;
mod response;

pub use request::from_chat as request_from_chat;
pub use response::{to_chat as response_to_chat, usage_from_body, GeminiToChat};

use super::{openai_error, with_extra_headers, Header, Provider, UpstreamRequest};
use crate::deployment::Deployment;
use crate::error::{ErrorClass, GatewayError};
use crate::formats::{Events, Format, StreamTranslator, TranslateError};
use crate::inbound::{Endpoint, LlmRequest};
use std::borrow::Cow;

/// The Gemini translator.
pub struct Gemini;

/// `{prefix}/models/{model}:{method}` below `dep`'s base for `endpoint`;
/// the prefix is the base's path, else `/v1beta`.
pub(crate) fn model_path(
    dep: &Deployment,
    model: &str,
    endpoint: Endpoint,
    stream: bool,
) -> String {
    let base = dep.base.as_ref().map_or("", |b| b.path.as_str());
    let prefix = if base.is_empty() { "/v1beta" } else { base };
    let model = super::sigv4::uri_encode(model.strip_prefix("models/").unwrap_or(model));
    match (endpoint, stream) {
        (Endpoint::Embeddings, _) => format!("{prefix}/models/{model}:batchEmbedContents"),
        (_, true) => format!("{prefix}/models/{model}:streamGenerateContent?alt=sse"),
        (_, false) => format!("{prefix}/models/{model}:generateContent"),
    }
}

impl Provider for Gemini {
    fn format(&self) -> Format {
        Format::Gemini
    }

    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> Result<UpstreamRequest, GatewayError> {
        let (body, include_usage) = match req.endpoint {
            Endpoint::ChatCompletions => request::from_chat(&req.body)?,
            Endpoint::Embeddings => (embeddings::studio_request(&req.body, upstream_model)?, false),
            _ => {
                return Err(GatewayError::InvalidParam {
                    param: "model",
                    message: format!(
                        "provider gemini serves /chat/completions, /embeddings, /v1/messages and /v1/responses, not {}",
                        req.endpoint.path_suffix()
                    ),
                })
            }
        };
        let mut own: Vec<Header> = Vec::with_capacity(1);
        if let Some(key) = dep.api_key.as_deref().filter(|k| !k.is_empty()) {
            own.push((Cow::Borrowed("x-goog-api-key"), key.to_string()));
        }
        Ok(UpstreamRequest {
            path: model_path(dep, upstream_model, req.endpoint, req.stream),
            headers: with_extra_headers(own, dep),
            body: [body.into(), Default::default(), Default::default()],
            include_usage,
        })
    }

    fn response_to_internal(&self, body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(response::to_chat(body))
    }

    fn embeddings_to_internal(&self, body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(embeddings::to_openai(body))
    }

    fn stream_to_internal(&self, include_usage: bool) -> Option<Box<dyn StreamTranslator>> {
        Some(Box::new(Events::new(GeminiToChat::new(include_usage))))
    }

    /// `inlineData` for every http(s) image: `fileData` takes Google
    /// Cloud Storage and Files API URIs (the gateway sends no `gs://`).
    fn inlines_image_url(&self, _url: &str) -> bool {
        true
    }

    fn accepts_stream_options(&self, _dep: &Deployment) -> bool {
        false
    }

    fn error(&self, status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
        google_error(status, body, retry_after)
    }
}

/// The error for a Google API error answer
/// (`{"error":{"code","message","status"}}`), classed.
pub fn google_error(status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
    let mut err = openai_error(status, body, retry_after);
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let google_status = json
        .as_ref()
        .and_then(|v| v["error"]["status"].as_str())
        .map(str::to_string);
    if let GatewayError::Upstream {
        message,
        error_type,
        provider_code,
        class,
        ..
    } = &mut err
    {
        let lower = message.to_ascii_lowercase();
        if status == 400
            && (lower.contains("input token count")
                || lower.contains("exceeds the maximum number of tokens")
                || lower.contains("context window"))
        {
            *class = ErrorClass::ContextWindow;
        }
        if google_status.is_some() {
            error_type.clone_from(&google_status);
            provider_code.clone_from(&google_status);
        }
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn dep(params: &str, env: &[(&str, &str)]) -> Deployment {
        let text = format!("model_list:\n  - model_name: g\n    litellm_params: {{{params}}}\n");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        Config::parse(std::path::Path::new("c.yaml"), &text, &lookup)
            .unwrap()
            .deployments
            .remove(0)
    }

    #[test]
    fn requests_carry_the_key_in_a_header() {
        let d = dep(
            "model: gemini/gemini-2.0-flash",
            &[("GEMINI_API_KEY", "AIza-k")],
        );
        assert_eq!(
            d.base.as_ref().unwrap().url,
            "https://generativelanguage.googleapis.com"
        );
        let req = LlmRequest::parse(
            Endpoint::ChatCompletions,
            r#"{"model":"g","messages":[{"role":"user","content":"hi"}],"stream":true}"#.into(),
        )
        .unwrap();
        let out = Gemini.build_request(&req, "gemini-2.0-flash", &d).unwrap();
        assert_eq!(
            out.path,
            "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(out.headers[0].0, "x-goog-api-key");
        assert_eq!(out.headers[0].1, "AIza-k");
        let d = dep(
            "model: gemini/m, api_key: k, api_base: 'https://proxy.example/v1'",
            &[],
        );
        let req = LlmRequest::parse(
            Endpoint::ChatCompletions,
            r#"{"model":"g","messages":[]}"#.into(),
        )
        .unwrap();
        assert_eq!(
            Gemini.build_request(&req, "m", &d).unwrap().path,
            "/v1/models/m:generateContent"
        );
    }

    #[test]
    fn errors_are_classed() {
        let e = Gemini.error(429, br#"{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}"#, None);
        assert_eq!(
            (e.class(), e.error_type()),
            (ErrorClass::RateLimit, "RESOURCE_EXHAUSTED")
        );
        let e = Gemini.error(400, br#"{"error":{"code":400,"message":"The input token count (2000000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#, None);
        assert_eq!(e.class(), ErrorClass::ContextWindow);
        let e = Gemini.error(400, br#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT"}}"#, None);
        assert_eq!(e.class(), ErrorClass::BadRequest);
        assert_eq!(
            Gemini.error(503, b"", None).class(),
            ErrorClass::InternalServer
        );
    }
}
