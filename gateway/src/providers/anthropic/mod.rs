//! Anthropic's Messages API (`anthropic/` deployments).
//!
//! Requests go to `{api_base}/v1/messages` (unless `api_base` already ends
//! so) with the deployment's key in `x-api-key`, `anthropic-version`
//! (`2023-06-01` unless the client or `extra_headers` set one) and the
//! `anthropic-beta` features of the client's Messages request merged with
//! the deployment's. A Messages request passes through with only `model`
//! replaced; a chat completions request is translated (`request`), and its
//! answer translated back (`response`, `stream`). Usage is read from the
//! native answer (`usage`). Errors keep Anthropic's status, message and
//! type: 429 `rate_limit_error`, 529 `overloaded_error`, and a 400 saying
//! the prompt is too long is the context-window class.

mod request;
mod response;
mod stream;
mod usage;

pub use request::from_chat as request_from_chat;
pub use response::to_chat as response_to_chat;
pub use stream::MessagesToChat;
pub use usage::{from_body as usage_from_body, from_tail as usage_from_tail, StreamUsage};

use super::{with_extra_headers, Header, Provider, UpstreamRequest};
use crate::deployment::Deployment;
use crate::error::{ErrorClass, GatewayError};
use crate::formats::{Events, Format, StreamTranslator, TranslateError};
use crate::inbound::{Endpoint, LlmRequest};
use std::borrow::Cow;

/// The `anthropic-version` sent when nobody sets one.
pub const API_VERSION: &str = "2023-06-01";

/// `max_tokens` for a chat request that sets none and a model whose
/// output cap is unknown (Anthropic requires the field).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// The Messages API translator.
pub struct Anthropic;

/// `{api_base}/v1/messages`, as LiteLLM joins it.
fn messages_path(dep: &Deployment) -> String {
    let base = dep.base.as_ref().map_or("", |b| b.path.as_str());
    if base.ends_with("/v1/messages") {
        base.to_string()
    } else {
        format!("{base}/v1/messages")
    }
}

/// Credentials and versions: the client's `anthropic-version` and
/// `anthropic-beta` (Messages passthrough), then the deployment's
/// `extra_headers`, whose betas are merged rather than replaced.
fn headers(req: &LlmRequest, dep: &Deployment) -> Vec<Header> {
    let mut own: Vec<Header> = Vec::with_capacity(3 + dep.extra_headers.len());
    if let Some(key) = dep.api_key.as_deref().filter(|k| !k.is_empty()) {
        own.push((Cow::Borrowed("x-api-key"), key.to_string()));
    }
    let client = |name: &str| {
        req.forward_headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let version = client("anthropic-version").unwrap_or(API_VERSION);
    own.push((Cow::Borrowed("anthropic-version"), version.to_string()));
    let mut betas: Vec<&str> = Vec::new();
    let extra_betas = dep
        .extra_headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("anthropic-beta"))
        .map(|(_, v)| v.as_str());
    for list in client("anthropic-beta").into_iter().chain(extra_betas) {
        for beta in list.split(',').map(str::trim).filter(|b| !b.is_empty()) {
            if !betas.contains(&beta) {
                betas.push(beta);
            }
        }
    }
    let mut all = with_extra_headers(own, dep);
    all.retain(|(n, _)| !n.eq_ignore_ascii_case("anthropic-beta"));
    if !betas.is_empty() {
        all.push((Cow::Borrowed("anthropic-beta"), betas.join(",")));
    }
    all
}

impl Provider for Anthropic {
    fn format(&self) -> Format {
        Format::Anthropic
    }

    /// Anthropic fetches `https` image URLs itself (`url` sources) but not
    /// plain `http` ones, which are inlined, as LiteLLM does.
    fn inlines_image_url(&self, url: &str) -> bool {
        url.get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
    }

    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> Result<UpstreamRequest, GatewayError> {
        let (body, include_usage) = match req.endpoint {
            Endpoint::Messages => (req.body_with_model(upstream_model), false),
            Endpoint::ChatCompletions => {
                let max_tokens = crate::spend::max_output_tokens(dep, upstream_model)
                    .unwrap_or(DEFAULT_MAX_TOKENS);
                let (body, include_usage) =
                    request::from_chat(&req.body, upstream_model, max_tokens)?;
                (
                    [body.into(), Default::default(), Default::default()],
                    include_usage,
                )
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
                        "provider anthropic serves /chat/completions and /v1/messages, not {}",
                        req.endpoint.path_suffix()
                    ),
                })
            }
        };
        Ok(UpstreamRequest {
            path: messages_path(dep),
            headers: headers(req, dep),
            body,
            include_usage,
        })
    }

    fn response_to_internal(&self, body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(response::to_chat(body))
    }

    fn stream_to_internal(&self, include_usage: bool) -> Option<Box<dyn StreamTranslator>> {
        Some(Box::new(Events::new(MessagesToChat::new(include_usage))))
    }

    fn error(&self, status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
        let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let error = json.as_ref().map(|v| &v["error"]);
        let message = error
            .and_then(|e| e["message"].as_str())
            .map(str::to_string)
            .unwrap_or_else(|| {
                let text: String = String::from_utf8_lossy(body).chars().take(2000).collect();
                if text.trim().is_empty() {
                    format!("upstream returned status {status}")
                } else {
                    text
                }
            });
        let error_type = error
            .and_then(|e| e["type"].as_str())
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        let lower = message.to_ascii_lowercase();
        let class = if lower.contains("prompt is too long")
            || lower.contains("exceed context limit")
            || lower.contains("context window")
            || lower.contains("input length and `max_tokens` exceed")
        {
            ErrorClass::ContextWindow
        } else if status == 529 || error_type.as_deref() == Some("overloaded_error") {
            ErrorClass::Overloaded
        } else if lower.contains("content filtering policy") {
            ErrorClass::ContentPolicy
        } else {
            ErrorClass::from_status(status)
        };
        GatewayError::Upstream {
            status,
            message,
            provider_code: error_type.clone(),
            upstream_param: None,
            error_type,
            retry_after,
            class,
        }
    }

    fn count_tokens_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> Option<UpstreamRequest> {
        (req.endpoint == Endpoint::Messages).then(|| UpstreamRequest {
            path: format!("{}/count_tokens", messages_path(dep)),
            headers: headers(req, dep),
            body: req.body_with_model(upstream_model),
            include_usage: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use serde_json::{json, Value};

    fn dep(params: &str) -> Deployment {
        let text = format!("model_list:\n  - model_name: c\n    litellm_params: {{{params}}}\n");
        Config::parse(std::path::Path::new("c.yaml"), &text, &|_| None)
            .unwrap()
            .deployments
            .remove(0)
    }

    fn headers_of(out: &UpstreamRequest) -> Vec<(&str, &str)> {
        out.headers
            .iter()
            .map(|(n, v)| (n.as_ref(), v.as_str()))
            .collect()
    }

    fn body_of(out: &UpstreamRequest) -> Value {
        let bytes: Vec<u8> = out.body.iter().flat_map(|b| b.to_vec()).collect();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn chat_requests_are_translated_to_messages() {
        let d = dep("model: anthropic/claude-3-5-sonnet-20241022, api_key: sk-ant");
        let req = LlmRequest::parse(
            Endpoint::ChatCompletions,
            r#"{"model":"c","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#.into(),
        )
        .unwrap();
        let out = Anthropic
            .build_request(&req, "claude-3-5-sonnet-20241022", &d)
            .unwrap();
        assert_eq!(out.path, "/v1/messages");
        assert_eq!(
            headers_of(&out),
            [("x-api-key", "sk-ant"), ("anthropic-version", "2023-06-01")]
        );
        assert!(out.include_usage);
        let body = body_of(&out);
        assert_eq!(body["max_tokens"], 8192, "the model's output cap");
        assert_eq!(body["stream"], true);
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn messages_pass_through_with_client_and_deployment_betas() {
        let d = dep("model: anthropic/claude-x, api_key: sk-ant, api_base: 'https://proxy.example/anthropic/v1/messages', extra_headers: {anthropic-beta: 'b2,b3', x-extra: '1'}");
        let mut req = LlmRequest::parse(
            Endpoint::Messages,
            r#"{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#.into(),
        )
        .unwrap();
        req.forward_headers = vec![
            ("anthropic-beta", "b1, b2".to_string()),
            ("anthropic-version", "2023-01-01".to_string()),
        ];
        let out = Anthropic.build_request(&req, "claude-x", &d).unwrap();
        assert_eq!(out.path, "/anthropic/v1/messages");
        assert_eq!(
            headers_of(&out),
            [
                ("x-api-key", "sk-ant"),
                ("anthropic-version", "2023-01-01"),
                ("x-extra", "1"),
                ("anthropic-beta", "b1,b2,b3"),
            ]
        );
        assert_eq!(
            body_of(&out),
            json!({"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
        );
        let count = Anthropic
            .count_tokens_request(&req, "claude-x", &d)
            .unwrap();
        assert_eq!(count.path, "/anthropic/v1/messages/count_tokens");
        let embed =
            LlmRequest::parse(Endpoint::Embeddings, r#"{"model":"c","input":"x"}"#.into()).unwrap();
        assert!(Anthropic.build_request(&embed, "claude-x", &d).is_err());
    }

    #[test]
    fn errors_are_classed() {
        let e = Anthropic.error(429, br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#, Some("30".into()));
        assert_eq!(
            (e.status(), e.class(), e.error_type(), e.retry_after()),
            (429, ErrorClass::RateLimit, "rate_limit_error", Some("30"))
        );
        let e = Anthropic.error(
            529,
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            None,
        );
        assert_eq!((e.status(), e.class()), (529, ErrorClass::Overloaded));
        let e = Anthropic.error(400, br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#, None);
        assert_eq!(e.class(), ErrorClass::ContextWindow);
        let e = Anthropic.error(400, br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"}}"#, None);
        assert_eq!(e.class(), ErrorClass::BadRequest);
        let e = Anthropic.error(401, b"", None);
        assert_eq!(
            (e.class(), e.to_string()),
            (
                ErrorClass::Authentication,
                "upstream returned status 401".to_string()
            )
        );
    }
}
