//! A deployment: one validated entry of the served model set (a
//! `model_list` entry or a model added through the API), with what its
//! provider needs to reach it. Built by `config` and `models`; read by the
//! router, the providers, metrics, traces and spend.

mod aws;
mod kind;
mod vertex;

pub use aws::{AwsSettings, Credentials};
pub use kind::ProviderKind;
pub use vertex::VertexSettings;

use crate::upstream::UpstreamBase;
use std::sync::Arc;
use std::time::Duration;

/// One validated deployment of a model group. Two are equal when every
/// setting is: a reload keeps the live state of an equal one.
#[derive(Debug, PartialEq)]
pub struct Deployment {
    /// Stable id (`model_info.id`, else derived from the entry).
    pub id: Arc<str>,
    /// The group clients ask for (`model_name`), `*`-suffixed for wildcards.
    pub group: String,
    /// Which translator serves it.
    pub provider: ProviderKind,
    /// Provider prefix as written (`openai`, `groq`, `mock`).
    pub provider_name: String,
    /// Upstream model name sent to the provider (`*` for wildcard entries).
    pub upstream_model: String,
    /// Where to send requests; `None` for in-process providers.
    pub base: Option<UpstreamBase>,
    /// Provider credential.
    pub api_key: Option<String>,
    /// Provider API version (Azure).
    pub api_version: Option<String>,
    /// Azure AD token, used when there is no `api_key` (Azure).
    pub azure_ad_token: Option<String>,
    /// Region and credentials (Bedrock).
    pub aws: Option<AwsSettings>,
    /// Project, location and token source (Vertex AI).
    pub vertex: Option<VertexSettings>,
    /// `use_chat_completions_api`: bridge Responses requests through chat
    /// completions even where the upstream serves them.
    pub use_chat_completions_api: bool,
    /// Timeout for a non-streamed response (`timeout`, else
    /// `router_settings.timeout`).
    pub timeout: Duration,
    /// Timeout between streamed bytes (`stream_timeout`, else
    /// `router_settings.stream_timeout`, else `timeout`).
    pub stream_timeout: Duration,
    /// Requests per minute the deployment accepts.
    pub rpm: Option<u64>,
    /// Tokens per minute the deployment accepts.
    pub tpm: Option<u64>,
    /// Simple-shuffle weight, when set.
    pub weight: Option<f64>,
    /// Region, for region constraints.
    pub region: Option<String>,
    /// USD per prompt token.
    pub input_cost_per_token: Option<f64>,
    /// USD per completion token.
    pub output_cost_per_token: Option<f64>,
    /// USD per prompt token read from the provider's prompt cache.
    pub cache_read_input_token_cost: Option<f64>,
    /// USD per prompt token written to the provider's prompt cache.
    pub cache_creation_input_token_cost: Option<f64>,
    /// USD per second of a call, prompt and completion sides together
    /// (`input_cost_per_second` + `output_cost_per_second`).
    pub cost_per_second: Option<f64>,
    /// Per-image prices of an image model, where configured.
    pub image_prices: ImagePrices,
    /// Context window and output cap.
    pub max_input_tokens: Option<u64>,
    /// Max completion tokens.
    pub max_output_tokens: Option<u64>,
    /// Added to every upstream request.
    pub extra_headers: Vec<(String, String)>,
    /// Behaviour of the in-process mock provider.
    pub mock: MockSettings,
    /// `litellm_params.tags`, for tag-based routing
    /// (`router_settings.enable_tag_filtering`).
    pub tags: Vec<String>,
    /// `model_info.access_groups`: LiteLLM's model access groups the
    /// deployment's group belongs to.
    pub access_groups: Vec<String>,
    /// Its names as its spend rows carry them, shared by every row.
    pub spend_labels: SpendLabels,
}

/// A deployment's own prices of generated images (`litellm_params`, else
/// `model_info`: LiteLLM's custom pricing fields), laid over the price
/// map's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ImagePrices {
    /// `input_cost_per_image`, USD.
    pub input_per_image: Option<f64>,
    /// `output_cost_per_image`, USD.
    pub output_per_image: Option<f64>,
    /// `input_cost_per_pixel` (of the generated image), USD.
    pub input_per_pixel: Option<f64>,
    /// `output_cost_per_image_token` (`gpt-image` models), USD.
    pub output_per_image_token: Option<f64>,
}

/// A deployment's names as its spend rows carry them, made once so a
/// row shares them instead of copying each.
#[derive(Debug, PartialEq)]
pub struct SpendLabels {
    /// The group (`model_group`).
    pub group: Arc<str>,
    /// The provider prefix (`custom_llm_provider`).
    pub provider: Arc<str>,
    /// The upstream model (`model`).
    pub upstream_model: Arc<str>,
    /// The base URL (`api_base`), empty for in-process providers.
    pub api_base: Arc<str>,
    /// The region.
    pub region: Option<Arc<str>>,
}

impl SpendLabels {
    /// The labels of a deployment with these settings.
    pub fn new(
        group: &str,
        provider: &str,
        upstream_model: &str,
        base: Option<&UpstreamBase>,
        region: Option<&str>,
    ) -> SpendLabels {
        SpendLabels {
            group: group.into(),
            provider: provider.into(),
            upstream_model: upstream_model.into(),
            api_base: base.map_or("", |b| b.url.as_str()).into(),
            region: region.map(Arc::from),
        }
    }

    /// `label` when it reads `value`, else a new `value`: a wildcard
    /// deployment serves the group and model asked for.
    pub fn share(label: &Arc<str>, value: &str) -> Arc<str> {
        if **label == *value {
            label.clone()
        } else {
            Arc::from(value)
        }
    }
}

impl Deployment {
    /// Whether this entry serves any model under a prefix (`openai/*`).
    pub fn is_wildcard(&self) -> bool {
        self.group.ends_with('*')
    }
}

/// Settings of the `mock/` provider.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MockSettings {
    /// Reply text.
    pub response: Option<String>,
    /// Completion tokens to report.
    pub completion_tokens: Option<u32>,
    /// Delay before answering.
    pub latency: Duration,
    /// Delay between streamed chunks.
    pub chunk_delay: Duration,
    /// Answer with this error status.
    pub error_status: Option<u16>,
}
