//! The `config.yaml` document as LiteLLM writes it, before validation.
//!
//! Field names follow LiteLLM so an operator's existing file loads unchanged.
//! Sections owned by later features (`router_settings`, `litellm_settings`) are
//! kept as raw YAML so nothing an operator wrote is lost.

use serde::Deserialize;
use std::collections::BTreeMap;

/// The whole configuration file.
#[derive(Debug, Default, Deserialize)]
pub struct ConfigFile {
    /// Deployments, grouped by `model_name`.
    #[serde(default)]
    pub model_list: Vec<ModelEntry>,
    /// Proxy-wide settings (master key, request size, database).
    #[serde(default)]
    pub general_settings: GeneralSettings,
    /// Gateway-only knobs that LiteLLM has no name for (timeouts, connection caps).
    #[serde(default)]
    pub gateway_settings: GatewaySettings,
    /// Router behaviour; parsed and kept for the router.
    #[serde(default)]
    pub router_settings: Option<serde_yaml::Value>,
    /// LiteLLM module settings; parsed and kept.
    #[serde(default)]
    pub litellm_settings: Option<serde_yaml::Value>,
    /// LiteLLM's guardrails (`guardrails:` at the top level).
    #[serde(default)]
    pub guardrails: Option<serde_yaml::Value>,
    /// LiteLLM's `files_settings`: the upstreams of `/v1/files` and
    /// `/v1/batches` by `custom_llm_provider`.
    #[serde(default)]
    pub files_settings: Option<serde_yaml::Value>,
    /// LiteLLM's `default_vertex_config` (`vertex_project`,
    /// `vertex_location`, `vertex_credentials`): the `/vertex_ai/*`
    /// pass-through route's credentials for paths no deployment matches.
    #[serde(default)]
    pub default_vertex_config: Option<DefaultVertexConfig>,
    /// LiteLLM's environment block; its values are exported at start-up.
    #[serde(default)]
    pub environment_variables: BTreeMap<String, serde_yaml::Value>,
    /// Any other top-level section; named at start-up as not read.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_yaml::Value>,
}

/// LiteLLM's `default_vertex_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultVertexConfig {
    /// Google Cloud project.
    pub vertex_project: Option<String>,
    /// Location.
    pub vertex_location: Option<String>,
    /// A key file's JSON text or path.
    pub vertex_credentials: Option<String>,
}

/// One `model_list` entry: a deployment of a model group.
#[derive(Debug, Deserialize)]
pub struct ModelEntry {
    /// The group name clients ask for; may end in `*` (wildcard).
    pub model_name: Option<String>,
    /// How to reach the provider.
    pub litellm_params: Option<LitellmParams>,
    /// Metadata: id, token limits, prices.
    #[serde(default)]
    pub model_info: ModelInfo,
}

/// `litellm_params` of a deployment.
#[derive(Debug, Default, Deserialize)]
pub struct LitellmParams {
    /// `provider/upstream-model`, e.g. `openai/gpt-4o` or `mock/anything`.
    pub model: Option<String>,
    /// Base URL of the provider (ends before `/chat/completions`).
    pub api_base: Option<String>,
    /// Provider credential, sent upstream.
    pub api_key: Option<String>,
    /// Provider API version (Azure); else `AZURE_API_VERSION`.
    pub api_version: Option<String>,
    /// Azure AD token, sent as a Bearer token when there is no `api_key`
    /// (Azure); else `AZURE_AD_TOKEN`.
    pub azure_ad_token: Option<String>,
    /// AWS access key id (Bedrock); else `AWS_ACCESS_KEY_ID`.
    pub aws_access_key_id: Option<String>,
    /// AWS secret access key (Bedrock); else `AWS_SECRET_ACCESS_KEY`.
    pub aws_secret_access_key: Option<String>,
    /// AWS session token (Bedrock); else `AWS_SESSION_TOKEN`.
    pub aws_session_token: Option<String>,
    /// AWS region (Bedrock); else `AWS_REGION_NAME`, `AWS_REGION`.
    pub aws_region_name: Option<String>,
    /// Bedrock runtime endpoint; else `AWS_BEDROCK_RUNTIME_ENDPOINT`.
    pub aws_bedrock_runtime_endpoint: Option<String>,
    /// Google Cloud project (Vertex AI); else `VERTEXAI_PROJECT`.
    pub vertex_project: Option<String>,
    /// Vertex AI location; else `VERTEXAI_LOCATION`, else `us-central1`.
    pub vertex_location: Option<String>,
    /// Service-account key (Vertex AI): JSON text, a mapping or a file
    /// path; else `VERTEXAI_CREDENTIALS`, `GOOGLE_APPLICATION_CREDENTIALS`.
    pub vertex_credentials: Option<serde_yaml::Value>,
    /// Bridge `/v1/responses` through chat completions even though the
    /// deployment (`openai/`, `azure/`) serves the Responses API.
    pub use_chat_completions_api: Option<bool>,
    /// Upstream timeout in seconds.
    pub timeout: Option<f64>,
    /// Upstream timeout for streamed responses, in seconds.
    pub stream_timeout: Option<f64>,
    /// Requests per minute the deployment accepts.
    pub rpm: Option<u64>,
    /// Tokens per minute the deployment accepts.
    pub tpm: Option<u64>,
    /// Load-balancing weight.
    pub weight: Option<f64>,
    /// Region of the deployment, for region constraints.
    pub region_name: Option<String>,
    /// Price per prompt token, USD.
    pub input_cost_per_token: Option<f64>,
    /// Price per completion token, USD.
    pub output_cost_per_token: Option<f64>,
    /// Price per prompt token read from the provider's cache, USD.
    pub cache_read_input_token_cost: Option<f64>,
    /// Price per prompt token written to the provider's cache, USD.
    pub cache_creation_input_token_cost: Option<f64>,
    /// Price per second of the call's prompt side, USD (hosts that bill
    /// by time).
    pub input_cost_per_second: Option<f64>,
    /// Price per second of the call's completion side, USD.
    pub output_cost_per_second: Option<f64>,
    /// Price per generated image, USD (LiteLLM's per-image price read
    /// first for OpenAI-style models).
    pub input_cost_per_image: Option<f64>,
    /// Price per generated image, USD (read first for Bedrock and Vertex AI).
    pub output_cost_per_image: Option<f64>,
    /// Price per pixel of a generated image, USD.
    pub input_cost_per_pixel: Option<f64>,
    /// Price per generated image token (`gpt-image` models), USD.
    pub output_cost_per_image_token: Option<f64>,
    /// Headers added to every upstream request.
    #[serde(default)]
    pub extra_headers: BTreeMap<String, String>,
    /// `mock/` provider: the reply text.
    pub mock_response: Option<String>,
    /// `mock/` provider: completion tokens to report (default: words of the reply).
    pub mock_completion_tokens: Option<u32>,
    /// `mock/` provider: delay before the response, milliseconds.
    pub mock_latency_ms: Option<u64>,
    /// `mock/` provider: delay between streamed chunks, milliseconds.
    pub mock_chunk_delay_ms: Option<u64>,
    /// `mock/` provider: answer every request with this HTTP error status.
    pub mock_error_status: Option<u16>,
    /// Any other parameter LiteLLM knows; kept and reported as unused.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_yaml::Value>,
}

/// `model_info` of a deployment.
#[derive(Debug, Default, Deserialize)]
pub struct ModelInfo {
    /// Stable deployment id (`x-litellm-model-id`).
    pub id: Option<String>,
    /// Context window.
    pub max_tokens: Option<u64>,
    /// Max prompt tokens.
    pub max_input_tokens: Option<u64>,
    /// Max completion tokens.
    pub max_output_tokens: Option<u64>,
    /// Price per prompt token, USD.
    pub input_cost_per_token: Option<f64>,
    /// Price per completion token, USD.
    pub output_cost_per_token: Option<f64>,
    /// Price per prompt token read from the provider's cache, USD.
    pub cache_read_input_token_cost: Option<f64>,
    /// Price per prompt token written to the provider's cache, USD.
    pub cache_creation_input_token_cost: Option<f64>,
    /// Price per second of the call's prompt side, USD (hosts that bill
    /// by time).
    pub input_cost_per_second: Option<f64>,
    /// Price per second of the call's completion side, USD.
    pub output_cost_per_second: Option<f64>,
    /// Price per generated image, USD (LiteLLM's per-image price read
    /// first for OpenAI-style models).
    pub input_cost_per_image: Option<f64>,
    /// Price per generated image, USD (read first for Bedrock and Vertex AI).
    pub output_cost_per_image: Option<f64>,
    /// Price per pixel of a generated image, USD.
    pub input_cost_per_pixel: Option<f64>,
    /// Price per generated image token (`gpt-image` models), USD.
    pub output_cost_per_image_token: Option<f64>,
    /// LiteLLM's model access groups the deployment belongs to: a key,
    /// team or user naming one in `models` may use the deployment's group.
    pub access_groups: Option<serde_yaml::Value>,
    /// Anything else (mode, base_model, ...).
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_yaml::Value>,
}

/// `general_settings`.
#[derive(Debug, Default, Deserialize)]
pub struct GeneralSettings {
    /// The admin key (`sk-...`).
    pub master_key: Option<String>,
    /// Request body limit in MB (LiteLLM's name).
    pub max_request_size_mb: Option<f64>,
    /// Postgres URL, used by governance.
    pub database_url: Option<String>,
    /// Alert channels (`webhook`, `slack`), LiteLLM's names; their URLs come
    /// from `WEBHOOK_URL` and `SLACK_WEBHOOK_URL`.
    pub alerting: Option<Vec<String>>,
    /// Everything else, kept for later features.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_yaml::Value>,
}

/// `gateway_settings`: limits of the HTTP server.
#[derive(Debug, Default, Deserialize)]
pub struct GatewaySettings {
    /// Time allowed to receive a request head, milliseconds.
    pub header_timeout_ms: Option<u64>,
    /// Time allowed to receive the whole request body, milliseconds.
    pub body_timeout_ms: Option<u64>,
    /// Time an idle keep-alive connection is kept, milliseconds.
    pub keepalive_timeout_ms: Option<u64>,
    /// Time after a request arrives during which retries and fallbacks may
    /// still start, milliseconds.
    pub retry_deadline_ms: Option<u64>,
    /// Most retries a request body's `num_retries` may ask for.
    pub max_request_retries: Option<u32>,
    /// Time allowed for each write to a client, milliseconds: a client that
    /// stops reading is disconnected after it.
    pub write_timeout_ms: Option<u64>,
    /// Open client connections per process.
    pub max_connections: Option<usize>,
    /// Max bytes of a request head.
    pub max_header_bytes: Option<usize>,
    /// Max number of request headers.
    pub max_headers: Option<usize>,
    /// Seconds in-flight requests get to finish on SIGTERM.
    pub shutdown_grace_secs: Option<u64>,
    /// Virtual keys declared in the file, for a single machine without the
    /// management API; each is the plain `key` plus any key field.
    #[serde(default)]
    pub virtual_keys: Vec<ConfigKey>,
    /// Directory where spend rows wait while the database is down.
    pub spool_dir: Option<String>,
    /// Seconds an idle upstream connection is kept in the pool.
    pub upstream_idle_secs: Option<u64>,
    /// The only environment variables a model added through the API may
    /// name with `os.environ/` (`NAME` or `PREFIX*`); unset: any but the
    /// gateway's own.
    pub model_env_allowlist: Option<Vec<String>>,
    /// What a model without a price costs a caller with a budget: `free`
    /// or `refuse`; unset, a listed deployment is free and a name only a
    /// wildcard resolves is refused.
    pub unpriced_models: Option<String>,
    /// Rate limiter knobs LiteLLM has no name for (mode, fallback policy,
    /// server and end-user limits).
    #[serde(default)]
    pub rate_limits: crate::limits::RateLimitsFile,
    /// Prometheus metrics without LiteLLM's callback, and their series cap.
    #[serde(default)]
    pub metrics: crate::metrics::MetricsFile,
    /// How images named by URL are fetched for providers that refuse URLs.
    #[serde(default)]
    pub image_url_fetch: crate::upstream::fetch::ImageFetchFile,
}

/// A virtual key declared in `gateway_settings.virtual_keys`.
#[derive(Debug, Deserialize)]
pub struct ConfigKey {
    /// The plain key (`sk-...`), usually an `os.environ/` reference.
    pub key: String,
    /// Limits and permissions, with the management API's field names.
    #[serde(flatten)]
    pub fields: crate::store::KeyRecord,
}
