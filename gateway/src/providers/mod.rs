//! Providers translate between the OpenAI API the gateway speaks and each
//! provider's native API. They are pure data translation: they know nothing
//! of auth, limits, routing or connection state.

mod mock;
mod openai;

pub use mock::{reply as mock_reply, MockReply};

use crate::config::Deployment;
use crate::inbound::LlmRequest;
use bytes::Bytes;

/// Which translator serves a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI and every server speaking its API.
    OpenAiCompatible,
    /// The in-process mock: no network.
    Mock,
}

/// What the gateway knows about a `provider/` prefix.
#[derive(Debug)]
pub struct ProviderSpec {
    /// Translator.
    pub kind: ProviderKind,
    /// API base used when the deployment sets none.
    pub default_api_base: Option<&'static str>,
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
    (
        "mock",
        ProviderSpec {
            kind: ProviderKind::Mock,
            default_api_base: None,
        },
    ),
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

/// A request ready for the wire: what a provider decides about it.
#[derive(Debug)]
pub struct UpstreamRequest {
    /// Path and query, below the deployment's host.
    pub path: String,
    /// Provider-specific headers (credentials, versions).
    pub headers: Vec<(&'static str, String)>,
    /// Body, in parts written back to back.
    pub body: [Bytes; 3],
}

/// A translator for a provider reached over HTTP.
pub trait Provider: Sync {
    /// Builds the upstream request for `req`, asking for `upstream_model`.
    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> UpstreamRequest;
}

/// The HTTP translator of `kind`; `None` for in-process providers.
pub fn http_provider(kind: ProviderKind) -> Option<&'static dyn Provider> {
    match kind {
        ProviderKind::OpenAiCompatible => Some(&openai::OpenAiCompatible),
        ProviderKind::Mock => None,
    }
}
