//! Providers translate between the gateway's internal form (OpenAI's API,
//! see `formats`) and each provider's native API, in both directions: the
//! request (URL, headers, credentials, body), the whole response, the
//! stream event by event, the usage, and error answers mapped to an
//! [`ErrorClass`] that retries, cooldowns and fallbacks read. They are pure
//! data translation: they know nothing of auth, limits, routing or
//! connection state.

pub mod anthropic;
mod azure;
pub mod bedrock;
pub mod cohere;
pub mod eventstream;
pub mod files;
pub mod gemini;
pub mod jina;
mod mock;
mod openai;
pub mod passthrough;
pub mod passthrough_cloud;
pub mod realtime;
pub mod rerank;
pub mod sigv4;
pub mod unsupported;
pub mod vertex;
pub mod voyage;

pub use mock::{reply as mock_reply, MockReply};

use crate::deployment::{Deployment, ProviderKind};
use crate::error::{ErrorClass, GatewayError};
use crate::formats::{Format, StreamTranslator, TranslateError};
use crate::inbound::{Endpoint, LlmRequest};
use bytes::Bytes;
use std::borrow::Cow;

/// What the gateway knows about a `provider/` prefix.
#[derive(Debug)]
pub struct ProviderSpec {
    /// Translator.
    pub kind: ProviderKind,
    /// API base used when the deployment sets none.
    pub default_api_base: Option<&'static str>,
}

const fn spec(kind: ProviderKind, base: Option<&'static str>) -> ProviderSpec {
    ProviderSpec {
        kind,
        default_api_base: base,
    }
}

const fn openai_like(base: Option<&'static str>) -> ProviderSpec {
    ProviderSpec {
        kind: ProviderKind::OpenAiCompatible,
        default_api_base: base,
    }
}

/// LiteLLM provider prefixes served so far.
const PROVIDERS: &[(&str, ProviderSpec)] = &[
    ("openai", openai_like(Some("https://api.openai.com/v1"))),
    (
        "text-completion-openai",
        openai_like(Some("https://api.openai.com/v1")),
    ),
    ("hosted_vllm", openai_like(None)),
    // Ollama through its OpenAI-compatible API (`/v1` is appended to a
    // base without it, see `config`).
    ("ollama", openai_like(Some("http://localhost:11434"))),
    ("ollama_chat", openai_like(Some("http://localhost:11434"))),
    ("openai_like", openai_like(None)),
    ("litellm_proxy", openai_like(None)),
    ("lm_studio", openai_like(None)),
    ("groq", openai_like(Some("https://api.groq.com/openai/v1"))),
    (
        "together_ai",
        openai_like(Some("https://api.together.xyz/v1")),
    ),
    (
        "deepinfra",
        openai_like(Some("https://api.deepinfra.com/v1/openai")),
    ),
    (
        "fireworks_ai",
        openai_like(Some("https://api.fireworks.ai/inference/v1")),
    ),
    ("mistral", openai_like(Some("https://api.mistral.ai/v1"))),
    ("perplexity", openai_like(Some("https://api.perplexity.ai"))),
    (
        "openrouter",
        openai_like(Some("https://openrouter.ai/api/v1")),
    ),
    ("deepseek", openai_like(Some("https://api.deepseek.com/v1"))),
    ("xai", openai_like(Some("https://api.x.ai/v1"))),
    (
        "nvidia_nim",
        openai_like(Some("https://integrate.api.nvidia.com/v1")),
    ),
    ("azure", spec(ProviderKind::Azure, None)),
    ("azure_ai", spec(ProviderKind::AzureAi, None)),
    (
        "anthropic",
        spec(ProviderKind::Anthropic, Some("https://api.anthropic.com")),
    ),
    ("bedrock", spec(ProviderKind::Bedrock, None)),
    (
        "gemini",
        spec(
            ProviderKind::Gemini,
            Some("https://generativelanguage.googleapis.com"),
        ),
    ),
    ("vertex_ai", spec(ProviderKind::Vertex, None)),
    (
        "cohere",
        spec(ProviderKind::Cohere, Some("https://api.cohere.com")),
    ),
    (
        "cohere_chat",
        spec(ProviderKind::Cohere, Some("https://api.cohere.com")),
    ),
    (
        "jina_ai",
        spec(ProviderKind::Jina, Some("https://api.jina.ai/v1")),
    ),
    (
        "voyage",
        spec(ProviderKind::Voyage, Some("https://api.voyageai.com/v1")),
    ),
    ("mock", spec(ProviderKind::Mock, None)),
];

/// The spec of a provider prefix, if supported.
pub fn lookup(prefix: &str) -> Option<&'static ProviderSpec> {
    PROVIDERS
        .iter()
        .find(|(name, _)| *name == prefix)
        .map(|(_, spec)| spec)
}

/// Names of the supported prefixes, for error messages.
pub fn supported_names() -> Vec<&'static str> {
    PROVIDERS.iter().map(|(name, _)| *name).collect()
}

/// A header of an upstream request.
pub type Header = (Cow<'static, str>, String);

/// A request ready for the wire: what a provider decides about it.
#[derive(Debug)]
pub struct UpstreamRequest {
    /// Path and query, below the deployment's host.
    pub path: String,
    /// Every header besides the fixed ones (host, length, content type):
    /// credentials, versions, the deployment's `extra_headers`.
    pub headers: Vec<Header>,
    /// Body, in parts written back to back.
    pub body: [Bytes; 3],
    /// Whether the stream the client gets should end with a usage chunk
    /// (`stream_options.include_usage`), for providers that build the
    /// internal stream themselves.
    pub include_usage: bool,
}

impl UpstreamRequest {
    /// A request whose body is one piece, with no usage chunk to add.
    pub fn whole(path: String, headers: Vec<Header>, body: Vec<u8>) -> UpstreamRequest {
        UpstreamRequest {
            path,
            headers,
            body: [body.into(), Bytes::new(), Bytes::new()],
            include_usage: false,
        }
    }
}

/// A translator for a provider reached over HTTP.
pub trait Provider: Sync {
    /// The format of its answers, and of the requests it takes as they are.
    fn format(&self) -> Format;

    /// Builds the upstream request for `req`, asking for `upstream_model`.
    /// A request in the provider's own format (`req.endpoint.format()`)
    /// passes with only the model replaced; any other is in the internal
    /// form and is translated. Fails when the request cannot be expressed
    /// in the provider's API.
    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> Result<UpstreamRequest, GatewayError>;

    /// A whole success body in the internal form; `None` when the body
    /// already is (the provider speaks OpenAI's API).
    fn response_to_internal(&self, _body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        None
    }

    /// A whole embeddings answer in the internal form (OpenAI's); `None`
    /// when the body already is.
    fn embeddings_to_internal(&self, _body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        None
    }

    /// A whole rerank answer in LiteLLM's shape (Cohere's), for a call
    /// that ranked `documents` documents; `None` when the body already is.
    fn rerank_to_cohere(
        &self,
        _body: &[u8],
        _documents: usize,
    ) -> Option<Result<Vec<u8>, TranslateError>> {
        None
    }

    /// A whole image generation answer in OpenAI's shape (`created`,
    /// `data` of `b64_json`); `None` when the body already is.
    fn images_to_openai(&self, _body: &[u8]) -> Option<Result<Vec<u8>, GatewayError>> {
        None
    }

    /// A translator of its event stream into the internal one; `None`
    /// when the stream already is. `include_usage` is
    /// [`UpstreamRequest::include_usage`].
    fn stream_to_internal(&self, _include_usage: bool) -> Option<Box<dyn StreamTranslator>> {
        None
    }

    /// Whether the provider refuses this http(s) image URL, so the gateway
    /// fetches the image and sends it inline (as a data URL in the
    /// request it translates).
    fn inlines_image_url(&self, _url: &str) -> bool {
        false
    }

    /// Whether the deployment accepts OpenAI's `stream_options`, which the
    /// gateway adds to streamed requests to be told the usage.
    fn accepts_stream_options(&self, _dep: &Deployment) -> bool {
        true
    }

    /// The gateway error for an error answer (`status`, `body`,
    /// `retry-after`), classed for retries, cooldowns and fallbacks.
    fn error(&self, status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError;

    /// The upstream request counting the tokens of a Messages request,
    /// when the provider has an endpoint for it.
    fn count_tokens_request(
        &self,
        _req: &LlmRequest,
        _upstream_model: &str,
        _dep: &Deployment,
    ) -> Option<UpstreamRequest> {
        None
    }
}

/// The HTTP translator of `kind`; `None` for in-process providers.
pub fn http_provider(kind: ProviderKind) -> Option<&'static dyn Provider> {
    match kind {
        ProviderKind::OpenAiCompatible => Some(&openai::OpenAiCompatible),
        ProviderKind::Azure => Some(&azure::AZURE),
        ProviderKind::AzureAi => Some(&azure::AZURE_AI),
        ProviderKind::Anthropic => Some(&anthropic::Anthropic),
        ProviderKind::Bedrock => Some(&bedrock::Bedrock),
        ProviderKind::Gemini => Some(&gemini::Gemini),
        ProviderKind::Vertex => Some(&vertex::Vertex),
        ProviderKind::VertexAnthropic => Some(&vertex::VertexAnthropic),
        ProviderKind::Cohere => Some(&cohere::Cohere),
        ProviderKind::Jina => Some(&jina::Jina),
        ProviderKind::Voyage => Some(&voyage::Voyage),
        ProviderKind::Unsupported => Some(&unsupported::Unsupported),
        ProviderKind::Mock => None,
    }
}

/// Whether `dep` serves OpenAI's Responses API itself, so `/v1/responses`
/// passes through to it: OpenAI (`openai/`) and Azure OpenAI deployments,
/// unless `use_chat_completions_api` is set (LiteLLM's rule).
pub fn serves_responses(dep: &Deployment) -> bool {
    !dep.use_chat_completions_api
        && match dep.provider {
            ProviderKind::Azure => true,
            ProviderKind::OpenAiCompatible => dep.provider_name == "openai",
            _ => false,
        }
}

/// Whether `dep` serves `endpoint` where only some providers do: LiteLLM's
/// `/rerank` on Cohere, Jina and Voyage deployments, Bedrock's rerank
/// models and Vertex AI's ranking models, `/moderations` on OpenAI's API (and
/// servers speaking it), `/images/generations` (also on Vertex AI's Imagen
/// and Bedrock's Titan and Stability image models), `/audio/speech` and
/// `/audio/transcriptions`, `/audio/translations` and `/images/edits` on
/// OpenAI's and Azure OpenAI's; every other endpoint is the provider's translation's to
/// accept or refuse. An unsupported deployment serves them all (to refuse
/// them itself).
pub fn serves(endpoint: Endpoint, dep: &Deployment) -> bool {
    match (endpoint, dep.provider) {
        (_, ProviderKind::Unsupported) => true,
        (Endpoint::Rerank, kind) => match kind {
            ProviderKind::Cohere | ProviderKind::Jina | ProviderKind::Voyage => true,
            ProviderKind::Bedrock => bedrock::rerank::is_rerank_model(&dep.upstream_model),
            ProviderKind::Vertex => vertex::rank::is_ranker(&dep.upstream_model),
            _ => false,
        },
        // LiteLLM calls `{api_base}/moderations` with OpenAI's client;
        // Azure OpenAI has no moderation endpoint.
        (Endpoint::Moderations, kind) => kind == ProviderKind::OpenAiCompatible,
        // Image generation on Vertex AI's Imagen models and Bedrock's
        // Titan and Stability image models, translated.
        (Endpoint::ImageGenerations, ProviderKind::Vertex) => {
            vertex::imagen::is_imagen(&dep.upstream_model)
        }
        (Endpoint::ImageGenerations, ProviderKind::Bedrock) => {
            bedrock::images::is_image_model(&dep.upstream_model)
        }
        // OpenAI's images and speech APIs, and Azure OpenAI's under a
        // deployment.
        (
            Endpoint::ImageGenerations
            | Endpoint::AudioSpeech
            | Endpoint::AudioTranscriptions
            | Endpoint::AudioTranslations
            | Endpoint::ImageEdits,
            kind,
        ) => {
            matches!(kind, ProviderKind::OpenAiCompatible | ProviderKind::Azure)
        }
        _ => true,
    }
}

/// The format a deployment of `kind` answers in (the mock answers in
/// OpenAI's).
pub fn format_of(kind: ProviderKind) -> Format {
    http_provider(kind).map_or(Format::OpenAi, |p| p.format())
}

/// `own` headers, then the deployment's `extra_headers`; an extra header
/// replaces an own header of the same name, as LiteLLM's do.
/// `headers` with a multipart form's content type (its boundary, which its
/// body needs) for a request whose body is a form.
fn with_form_type(mut headers: Vec<Header>, req: &LlmRequest) -> Vec<Header> {
    if req.is_form() {
        let sent = req
            .forward_headers
            .iter()
            .find(|(n, _)| *n == "content-type");
        if let Some((_, value)) = sent {
            headers.push((Cow::Borrowed("content-type"), value.clone()));
        }
    }
    headers
}

fn with_extra_headers(mut own: Vec<Header>, dep: &Deployment) -> Vec<Header> {
    own.retain(|(name, _)| {
        !dep.extra_headers
            .iter()
            .any(|(extra, _)| extra.eq_ignore_ascii_case(name))
    });
    own.extend(
        dep.extra_headers
            .iter()
            .map(|(n, v)| (Cow::Owned(n.clone()), v.clone())),
    );
    own
}

/// The error for an answer in OpenAI's shape
/// (`{"error":{"message","type","param","code"}}`, else `message` or `detail`, else
/// the text), classed by its code (context window, content policy) and
/// status. Shared by every provider speaking OpenAI's API.
pub fn openai_error(status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let error = json.as_ref().and_then(|v| v.get("error"));
    let message = error
        .and_then(|e| e.get("message").and_then(|m| m.as_str()).or(e.as_str()))
        .or_else(|| {
            json.as_ref()
                .and_then(|v| v.get("message").or(v.get("detail")))
                .and_then(|m| m.as_str())
        })
        .map(str::to_string)
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let text: String = text.chars().take(2000).collect();
            if text.trim().is_empty() {
                format!("upstream returned status {status}")
            } else {
                text
            }
        });
    let error_type = error
        .and_then(|e| e.get("type"))
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let provider_code = error
        .and_then(|e| e.get("code"))
        .and_then(|c| c.as_str())
        .map(str::to_string);
    let upstream_param = error
        .and_then(|e| e.get("param"))
        .and_then(|p| p.as_str())
        .map(str::to_string);
    let class = match provider_code.as_deref() {
        Some("context_length_exceeded" | "string_above_max_length") => ErrorClass::ContextWindow,
        Some("content_policy_violation" | "content_filter") => ErrorClass::ContentPolicy,
        _ => ErrorClass::from_status(status),
    };
    GatewayError::Upstream {
        status,
        message,
        error_type,
        provider_code,
        upstream_param,
        retry_after,
        class,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_openai_and_azure_serve_the_responses_api() {
        let config = crate::config::Config::parse(
            std::path::Path::new("c.yaml"),
            "model_list:\n  - model_name: a\n    litellm_params: {model: openai/gpt-4o}\n  - model_name: b\n    litellm_params: {model: azure/d, api_base: 'https://r.openai.azure.com'}\n  - model_name: c\n    litellm_params: {model: openai/gpt-4o, use_chat_completions_api: true}\n  - model_name: d\n    litellm_params: {model: groq/llama}\n  - model_name: e\n    litellm_params: {model: anthropic/claude}\n",
            &|_| None,
        )
        .unwrap();
        let serves: Vec<bool> = config.deployments.iter().map(serves_responses).collect();
        assert_eq!(serves, [true, true, false, false, false]);
    }

    #[test]
    fn reads_openai_style_upstream_errors() {
        let e = openai_error(
            429,
            br#"{"error":{"message":"Rate limit reached","type":"requests","code":"429"}}"#,
            Some("7".into()),
        );
        assert_eq!(
            (e.status(), e.to_string(), e.error_type(), e.retry_after()),
            (429, "Rate limit reached".into(), "requests", Some("7"))
        );
        assert_eq!(e.class(), ErrorClass::RateLimit);
        let e = openai_error(502, b"<html>bad gateway</html>", None);
        assert_eq!(e.to_string(), "<html>bad gateway</html>");
        assert_eq!(e.error_type(), "api_error");
        assert_eq!(e.class(), ErrorClass::InternalServer);
        let e = openai_error(
            400,
            br#"{"error":{"message":"too long","code":"context_length_exceeded"}}"#,
            None,
        );
        assert_eq!(e.class(), ErrorClass::ContextWindow);
        let e = openai_error(
            400,
            br#"{"error":{"message":"no","code":"content_filter"}}"#,
            None,
        );
        assert_eq!(e.class(), ErrorClass::ContentPolicy);
    }
}
