//! Cohere (`cohere/<model>`, `cohere_chat/<model>`) on its v2 API.
//!
//! Chat completions go to `{api_base}/v2/chat` (streamed when asked, in
//! Cohere's named SSE events), embeddings to `{api_base}/v2/embed`,
//! LiteLLM's rerank to `{api_base}/v2/rerank` (`rerank`);
//! default base `https://api.cohere.com`. LiteLLM's `api_base` for Cohere
//! is a whole endpoint URL (`…/v2/chat`): a base ending in `/v2/chat`,
//! `/v2/embed`, `/v2/rerank` or `/v2` is cut back to the server's. The
//! key (`api_key`, else `COHERE_API_KEY`, else `CO_API_KEY`) goes in
//! `Authorization: Bearer`. Requests are translated (`request`,
//! `embed`), answers and streams back (`response`, `stream`), usage read
//! from `billed_units` (`usage`). Errors (`{"message": …}`) keep Cohere's
//! status and message: 401 and 498 (invalid token) are authentication
//! errors, 429 a rate limit, a 400 or 422 about too many tokens the
//! context-window class.

pub mod embed;
mod request;
pub mod rerank;
mod response;
mod stream;
mod usage;

pub use request::from_chat as request_from_chat;
pub use response::to_chat as response_to_chat;
pub use stream::CohereToChat;
pub use usage::{search_units, usage_from_body};

use super::{openai_error, with_extra_headers, Header, Provider, UpstreamRequest};
use crate::deployment::Deployment;
use crate::error::{ErrorClass, GatewayError};
use crate::formats::{Events, Format, StreamTranslator, TranslateError};
use crate::inbound::{Endpoint, LlmRequest};
use std::borrow::Cow;

/// The Cohere translator.
pub struct Cohere;

/// Endpoint paths a LiteLLM-style `api_base` may end in.
const ENDPOINT_SUFFIXES: &[&str] = &["/v2/chat", "/v2/embed", "/v2/rerank", "/v2"];

/// `{prefix}/v2/{endpoint}` below `dep`'s base (`chat`, `embed`, `rerank`).
pub fn path(dep: &Deployment, endpoint: &str) -> String {
    let base = dep.base.as_ref().map_or("", |b| b.path.as_str());
    let prefix = ENDPOINT_SUFFIXES
        .iter()
        .find_map(|s| base.strip_suffix(s))
        .unwrap_or(base);
    format!("{prefix}/v2/{endpoint}")
}

/// `Authorization: Bearer` with `dep`'s key, then its extra headers.
pub fn headers(dep: &Deployment) -> Vec<Header> {
    let mut own: Vec<Header> = Vec::with_capacity(1);
    if let Some(key) = dep.api_key.as_deref().filter(|k| !k.is_empty()) {
        own.push((Cow::Borrowed("authorization"), format!("Bearer {key}")));
    }
    with_extra_headers(own, dep)
}

impl Provider for Cohere {
    fn format(&self) -> Format {
        Format::Cohere
    }

    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> Result<UpstreamRequest, GatewayError> {
        let (body, include_usage, endpoint) = match req.endpoint {
            Endpoint::ChatCompletions => {
                let (body, usage) = request::from_chat(&req.body, upstream_model)?;
                (body, usage, "chat")
            }
            Endpoint::Embeddings => (embed::request(&req.body, upstream_model)?, false, "embed"),
            Endpoint::Rerank => (rerank::request(&req.body, upstream_model)?, false, "rerank"),
            _ => {
                return Err(GatewayError::InvalidParam {
                    param: "model",
                    message: format!(
                        "provider cohere serves /chat/completions, /embeddings, /rerank, /v1/messages and /v1/responses, not {}",
                        req.endpoint.path_suffix()
                    ),
                })
            }
        };
        Ok(UpstreamRequest {
            path: path(dep, endpoint),
            headers: headers(dep),
            body: [body.into(), Default::default(), Default::default()],
            include_usage,
        })
    }

    fn response_to_internal(&self, body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(response::to_chat(body))
    }

    fn embeddings_to_internal(&self, body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(embed::to_openai(body))
    }

    fn stream_to_internal(&self, include_usage: bool) -> Option<Box<dyn StreamTranslator>> {
        Some(Box::new(Events::new(CohereToChat::new(include_usage))))
    }

    fn accepts_stream_options(&self, _dep: &Deployment) -> bool {
        false
    }

    fn error(&self, status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
        cohere_error(status, body, retry_after)
    }
}

/// The error for a Cohere error answer (`{"id", "message"}`), classed.
pub fn cohere_error(status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
    let mut err = openai_error(status, body, retry_after);
    if let GatewayError::Upstream { message, class, .. } = &mut err {
        let lower = message.to_ascii_lowercase();
        if status == 498 {
            *class = ErrorClass::Authentication;
        } else if matches!(status, 400 | 422)
            && (lower.contains("too many tokens")
                || lower.contains("context length")
                || (lower.contains("tokens") && lower.contains("exceed")))
        {
            *class = ErrorClass::ContextWindow;
        }
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn dep(params: &str, env: &[(&str, &str)]) -> Deployment {
        let text = format!("model_list:\n  - model_name: c\n    litellm_params: {{{params}}}\n");
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
    fn requests_go_to_v2_with_a_bearer_key() {
        let d = dep("model: cohere/command-r", &[("CO_API_KEY", "co-k")]);
        assert_eq!(d.base.as_ref().unwrap().url, "https://api.cohere.com");
        let req = LlmRequest::parse(
            Endpoint::ChatCompletions,
            r#"{"model":"c","messages":[{"role":"user","content":"hi"}],"stream":true}"#.into(),
        )
        .unwrap();
        let out = Cohere.build_request(&req, "command-r", &d).unwrap();
        assert_eq!(out.path, "/v2/chat");
        assert_eq!(
            (out.headers[0].0.as_ref(), out.headers[0].1.as_str()),
            ("authorization", "Bearer co-k")
        );
        let body: serde_json::Value = serde_json::from_slice(&out.body[0]).unwrap();
        assert_eq!(
            (&body["model"], &body["stream"]),
            (&"command-r".into(), &true.into())
        );
        let d = dep(
            "model: cohere_chat/command-a, api_key: k1, api_base: 'https://proxy.example/cohere/v2/chat'",
            &[("COHERE_API_KEY", "other")],
        );
        assert_eq!(d.api_key.as_deref(), Some("k1"));
        assert_eq!(path(&d, "embed"), "/cohere/v2/embed");
        let req =
            LlmRequest::parse(Endpoint::Embeddings, r#"{"model":"c","input":"x"}"#.into()).unwrap();
        assert_eq!(
            Cohere.build_request(&req, "m", &d).unwrap().path,
            "/cohere/v2/embed"
        );
        let d = dep("model: cohere/m, api_base: 'http://127.0.0.1:9/v2'", &[]);
        assert_eq!(path(&d, "rerank"), "/v2/rerank");
        let req = LlmRequest::parse(
            Endpoint::Completions,
            r#"{"model":"c","prompt":"x"}"#.into(),
        )
        .unwrap();
        assert_eq!(
            Cohere.build_request(&req, "m", &d).unwrap_err().status(),
            400
        );
    }

    #[test]
    fn errors_are_classed() {
        let e = Cohere.error(429, br#"{"id":"1","message":"You are using a Trial key, which is limited to 10 API calls / minute."}"#, Some("3".into()));
        assert_eq!(
            (e.class(), e.status(), e.retry_after()),
            (ErrorClass::RateLimit, 429, Some("3"))
        );
        assert!(e.to_string().contains("Trial key"));
        let e = Cohere.error(498, br#"{"message":"invalid api token"}"#, None);
        assert_eq!(e.class(), ErrorClass::Authentication);
        let e = Cohere.error(401, br#"{"message":"no api key supplied"}"#, None);
        assert_eq!(e.class(), ErrorClass::Authentication);
        let e = Cohere.error(400, br#"{"message":"too many tokens: size limit exceeded by 1200 tokens. Try using shorter or fewer inputs."}"#, None);
        assert_eq!(e.class(), ErrorClass::ContextWindow);
        let e = Cohere.error(
            400,
            br#"{"message":"invalid request: model 'x' not found"}"#,
            None,
        );
        assert_eq!(e.class(), ErrorClass::BadRequest);
        assert_eq!(
            Cohere.error(503, b"", None).class(),
            ErrorClass::InternalServer
        );
    }
}
