//! The metric families, as LiteLLM's `litellm/integrations/prometheus.py`
//! declares them: name, help text, type and label names in LiteLLM's order
//! (`PrometheusMetricLabels`, with the `org_id` / `org_alias` labels it
//! appends to the request metrics). Counters are exposed with the `_total`
//! suffix, as LiteLLM's Python client writes them.

/// A label name, and the slot of its value in a request's [`LabelValues`].
///
/// [`LabelValues`]: super::labels::LabelValues
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum L {
    EndUser,
    HashedApiKey,
    ApiKeyAlias,
    Team,
    TeamAlias,
    User,
    UserEmail,
    RequestedModel,
    ModelGroup,
    Model,
    LitellmModelName,
    ModelId,
    ApiBase,
    ApiProvider,
    StatusCode,
    ExceptionStatus,
    ExceptionClass,
    Route,
    ClientIp,
    UserAgent,
    OrgId,
    OrgAlias,
    ServiceTier,
    FallbackModel,
    RateLimitType,
    GuardrailName,
    Status,
    ErrorType,
    HookType,
}

/// How many label names there are.
pub(crate) const LABEL_COUNT: usize = L::HookType as usize + 1;

impl L {
    /// LiteLLM's label name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            L::EndUser => "end_user",
            L::HashedApiKey => "hashed_api_key",
            L::ApiKeyAlias => "api_key_alias",
            L::Team => "team",
            L::TeamAlias => "team_alias",
            L::User => "user",
            L::UserEmail => "user_email",
            L::RequestedModel => "requested_model",
            L::ModelGroup => "model_group",
            L::Model => "model",
            L::LitellmModelName => "litellm_model_name",
            L::ModelId => "model_id",
            L::ApiBase => "api_base",
            L::ApiProvider => "api_provider",
            L::StatusCode => "status_code",
            L::ExceptionStatus => "exception_status",
            L::ExceptionClass => "exception_class",
            L::Route => "route",
            L::ClientIp => "client_ip",
            L::UserAgent => "user_agent",
            L::OrgId => "org_id",
            L::OrgAlias => "org_alias",
            L::ServiceTier => "service_tier",
            L::FallbackModel => "fallback_model",
            L::RateLimitType => "rate_limit_type",
            L::GuardrailName => "guardrail_name",
            L::Status => "status",
            L::ErrorType => "error_type",
            L::HookType => "hook_type",
        }
    }
}

/// The Prometheus type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// LiteLLM's `LATENCY_BUCKETS` (seconds), without the final `+Inf`.
pub(crate) const LATENCY_BUCKETS: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 420.0,
    600.0,
];

/// prometheus_client's default buckets, which LiteLLM's latency per output
/// token uses, without `+Inf`.
pub(crate) const DEFAULT_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// One family's declaration.
pub(crate) struct Spec {
    pub(crate) name: &'static str,
    pub(crate) help: &'static str,
    pub(crate) kind: Kind,
    pub(crate) labels: &'static [L],
    /// Bucket bounds of a histogram (empty for the others).
    pub(crate) buckets: &'static [f64],
}

impl Spec {
    /// Value cells a series of this family holds: one for a counter, value
    /// and stamp for a gauge, a count per bucket plus `+Inf` and the sum for
    /// a histogram.
    pub(crate) fn cells(&self) -> usize {
        match self.kind {
            Kind::Counter => 1,
            Kind::Gauge => 2,
            Kind::Histogram => self.buckets.len() + 2,
        }
    }
}

/// Every family this gateway exposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fam {
    ProxyTotalRequests,
    ProxyFailedRequests,
    RequestTotalLatency,
    LlmApiLatency,
    TimeToFirstToken,
    OverheadLatency,
    LatencyPerOutputToken,
    Spend,
    TotalTokens,
    InputTokens,
    OutputTokens,
    RemainingApiKeyBudget,
    ApiKeyMaxBudget,
    RemainingTeamBudget,
    TeamMaxBudget,
    RemainingUserBudget,
    UserMaxBudget,
    ApiKeyRateLimitAllowed,
    ApiKeyRateLimitUsed,
    RemainingRequests,
    RemainingTokens,
    DeploymentState,
    DeploymentSuccess,
    DeploymentFailure,
    DeploymentTotal,
    DeploymentCooledDown,
    SuccessfulFallbacks,
    FailedFallbacks,
    CacheHits,
    CacheMisses,
    CachedTokens,
    UnpricedRequests,
    GuardrailLatency,
    GuardrailErrors,
    GuardrailRequests,
}

/// Every family, in exposition order.
pub(crate) const ALL: [Fam; 35] = [
    Fam::ProxyTotalRequests,
    Fam::ProxyFailedRequests,
    Fam::RequestTotalLatency,
    Fam::LlmApiLatency,
    Fam::TimeToFirstToken,
    Fam::OverheadLatency,
    Fam::LatencyPerOutputToken,
    Fam::Spend,
    Fam::TotalTokens,
    Fam::InputTokens,
    Fam::OutputTokens,
    Fam::RemainingApiKeyBudget,
    Fam::ApiKeyMaxBudget,
    Fam::RemainingTeamBudget,
    Fam::TeamMaxBudget,
    Fam::RemainingUserBudget,
    Fam::UserMaxBudget,
    Fam::ApiKeyRateLimitAllowed,
    Fam::ApiKeyRateLimitUsed,
    Fam::RemainingRequests,
    Fam::RemainingTokens,
    Fam::DeploymentState,
    Fam::DeploymentSuccess,
    Fam::DeploymentFailure,
    Fam::DeploymentTotal,
    Fam::DeploymentCooledDown,
    Fam::SuccessfulFallbacks,
    Fam::FailedFallbacks,
    Fam::CacheHits,
    Fam::CacheMisses,
    Fam::CachedTokens,
    Fam::UnpricedRequests,
    Fam::GuardrailLatency,
    Fam::GuardrailErrors,
    Fam::GuardrailRequests,
];

/// LiteLLM's `_cache_metric_labels`.
const CACHE: &[L] = &[
    Model,
    HashedApiKey,
    ApiKeyAlias,
    Team,
    TeamAlias,
    EndUser,
    User,
    ModelId,
    ApiProvider,
];

use L::*;

const PROXY_TOTAL: &[L] = &[
    EndUser,
    HashedApiKey,
    ApiKeyAlias,
    RequestedModel,
    Team,
    TeamAlias,
    User,
    StatusCode,
    UserEmail,
    Route,
    ClientIp,
    UserAgent,
    ModelId,
    ApiProvider,
    OrgId,
    OrgAlias,
];
const PROXY_FAILED: &[L] = &[
    EndUser,
    HashedApiKey,
    ApiKeyAlias,
    RequestedModel,
    Team,
    TeamAlias,
    User,
    UserEmail,
    ExceptionStatus,
    ExceptionClass,
    Route,
    ClientIp,
    UserAgent,
    ModelId,
    ApiProvider,
    OrgId,
    OrgAlias,
];
const TOTAL_LATENCY: &[L] = &[
    ModelGroup,
    EndUser,
    HashedApiKey,
    ApiKeyAlias,
    RequestedModel,
    Team,
    TeamAlias,
    User,
    Model,
    ModelId,
    ApiProvider,
    ServiceTier,
    OrgId,
    OrgAlias,
];
const API_LATENCY: &[L] = &[
    ModelGroup,
    Model,
    HashedApiKey,
    ApiKeyAlias,
    Team,
    TeamAlias,
    RequestedModel,
    EndUser,
    User,
    ModelId,
    ApiProvider,
    ServiceTier,
    OrgId,
    OrgAlias,
];
const OVERHEAD: &[L] = &[
    ModelGroup,
    ApiProvider,
    ApiBase,
    LitellmModelName,
    HashedApiKey,
    ApiKeyAlias,
    ModelId,
];
const PER_OUTPUT_TOKEN: &[L] = &[
    ModelGroup,
    LitellmModelName,
    ModelId,
    ApiBase,
    ApiProvider,
    HashedApiKey,
    ApiKeyAlias,
    Team,
    TeamAlias,
    OrgId,
    OrgAlias,
];
const SPEND: &[L] = &[
    EndUser,
    HashedApiKey,
    ApiKeyAlias,
    Model,
    Team,
    TeamAlias,
    User,
    UserEmail,
    ClientIp,
    UserAgent,
    RequestedModel,
    ModelId,
    ApiProvider,
    ServiceTier,
    OrgId,
    OrgAlias,
];
const TOKENS: &[L] = &[
    EndUser,
    HashedApiKey,
    ApiKeyAlias,
    Model,
    Team,
    TeamAlias,
    User,
    UserEmail,
    RequestedModel,
    ModelId,
    ApiProvider,
    OrgId,
    OrgAlias,
];
const KEY_BUDGET: &[L] = &[HashedApiKey, ApiKeyAlias];
const TEAM_BUDGET: &[L] = &[Team, TeamAlias];
const USER_BUDGET: &[L] = &[User];
const KEY_RATE_LIMIT: &[L] = &[HashedApiKey, ApiKeyAlias, RateLimitType];
const REMAINING: &[L] = &[
    ModelGroup,
    ApiProvider,
    ApiBase,
    LitellmModelName,
    HashedApiKey,
    ApiKeyAlias,
    ModelId,
];
const DEPLOYMENT_STATE: &[L] = &[LitellmModelName, ModelId, ApiBase, ApiProvider];
const DEPLOYMENT_REQUESTS: &[L] = &[
    ModelGroup,
    RequestedModel,
    LitellmModelName,
    ModelId,
    ApiBase,
    ApiProvider,
    HashedApiKey,
    ApiKeyAlias,
    Team,
    TeamAlias,
    ClientIp,
    UserAgent,
];
const DEPLOYMENT_FAILURES: &[L] = &[
    ModelGroup,
    RequestedModel,
    LitellmModelName,
    ModelId,
    ApiBase,
    ApiProvider,
    ExceptionStatus,
    ExceptionClass,
    HashedApiKey,
    ApiKeyAlias,
    Team,
    TeamAlias,
    ClientIp,
    UserAgent,
];
const COOLED_DOWN: &[L] = &[
    LitellmModelName,
    ModelId,
    ApiBase,
    ApiProvider,
    ExceptionStatus,
];
const FALLBACKS: &[L] = &[
    RequestedModel,
    FallbackModel,
    HashedApiKey,
    ApiKeyAlias,
    Team,
    TeamAlias,
    ExceptionStatus,
    ExceptionClass,
    ModelId,
];
const UNPRICED: &[L] = &[ModelGroup, LitellmModelName, ModelId, ApiProvider];
/// LiteLLM's guardrail families' labels.
const GUARDRAIL_LATENCY: &[L] = &[GuardrailName, Status, ErrorType, HookType];
const GUARDRAIL_ERRORS: &[L] = &[GuardrailName, ErrorType, HookType];
const GUARDRAIL_REQUESTS: &[L] = &[GuardrailName, Status, HookType];

/// The longest label list of any family.
pub(crate) const MAX_LABELS: usize = 17;

impl Fam {
    /// Index of the family in per-core tables.
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The family's declaration.
    pub(crate) fn spec(self) -> Spec {
        let (name, help, kind, labels, buckets): (_, _, _, &'static [L], &'static [f64]) = match self {
            Fam::ProxyTotalRequests => (
                "litellm_proxy_total_requests_metric",
                "Total number of requests made to the proxy server - track number of client side requests",
                Kind::Counter,
                PROXY_TOTAL,
                &[],
            ),
            Fam::ProxyFailedRequests => (
                "litellm_proxy_failed_requests_metric",
                "Total number of failed responses from proxy - the client did not get a success response from litellm proxy",
                Kind::Counter,
                PROXY_FAILED,
                &[],
            ),
            Fam::RequestTotalLatency => (
                "litellm_request_total_latency_metric",
                "End-to-end latency (seconds) for a request to LiteLLM Proxy Server, from the moment the request reached the proxy through the end of processing -- includes authentication, pre-call hooks, the LLM API call, and post-call processing",
                Kind::Histogram,
                TOTAL_LATENCY,
                &LATENCY_BUCKETS,
            ),
            Fam::LlmApiLatency => (
                "litellm_llm_api_latency_metric",
                "Total latency (seconds) for a models LLM API call",
                Kind::Histogram,
                API_LATENCY,
                &LATENCY_BUCKETS,
            ),
            Fam::TimeToFirstToken => (
                "litellm_llm_api_time_to_first_token_metric",
                "Time to first token for a models LLM API call",
                Kind::Histogram,
                API_LATENCY,
                &LATENCY_BUCKETS,
            ),
            Fam::OverheadLatency => (
                "litellm_overhead_latency_metric",
                "Latency overhead (milliseconds) added by LiteLLM processing",
                Kind::Histogram,
                OVERHEAD,
                &LATENCY_BUCKETS,
            ),
            Fam::LatencyPerOutputToken => (
                "litellm_deployment_latency_per_output_token",
                "LLM Deployment Analytics - Latency per output token",
                Kind::Histogram,
                PER_OUTPUT_TOKEN,
                &DEFAULT_BUCKETS,
            ),
            Fam::Spend => (
                "litellm_spend_metric",
                "Total spend on LLM requests",
                Kind::Counter,
                SPEND,
                &[],
            ),
            Fam::TotalTokens => (
                "litellm_total_tokens_metric",
                "Total number of input + output tokens from LLM requests",
                Kind::Counter,
                TOKENS,
                &[],
            ),
            Fam::InputTokens => (
                "litellm_input_tokens_metric",
                "Total number of input tokens from LLM requests",
                Kind::Counter,
                TOKENS,
                &[],
            ),
            Fam::OutputTokens => (
                "litellm_output_tokens_metric",
                "Total number of output tokens from LLM requests",
                Kind::Counter,
                TOKENS,
                &[],
            ),
            Fam::RemainingApiKeyBudget => (
                "litellm_remaining_api_key_budget_metric",
                "Remaining budget for api key",
                Kind::Gauge,
                KEY_BUDGET,
                &[],
            ),
            Fam::ApiKeyMaxBudget => (
                "litellm_api_key_max_budget_metric",
                "Maximum budget set for api key",
                Kind::Gauge,
                KEY_BUDGET,
                &[],
            ),
            Fam::RemainingTeamBudget => (
                "litellm_remaining_team_budget_metric",
                "Remaining budget for team",
                Kind::Gauge,
                TEAM_BUDGET,
                &[],
            ),
            Fam::TeamMaxBudget => (
                "litellm_team_max_budget_metric",
                "Maximum budget set for team",
                Kind::Gauge,
                TEAM_BUDGET,
                &[],
            ),
            Fam::RemainingUserBudget => (
                "litellm_remaining_user_budget_metric",
                "Remaining budget for user",
                Kind::Gauge,
                USER_BUDGET,
                &[],
            ),
            Fam::UserMaxBudget => (
                "litellm_user_max_budget_metric",
                "Maximum budget set for user",
                Kind::Gauge,
                USER_BUDGET,
                &[],
            ),
            Fam::ApiKeyRateLimitAllowed => (
                "litellm_api_key_rate_limit_allowed_metric",
                "Configured rate limit for the API Key in the current window (rpm_limit / tpm_limit), by rate_limit_type",
                Kind::Gauge,
                KEY_RATE_LIMIT,
                &[],
            ),
            Fam::ApiKeyRateLimitUsed => (
                "litellm_api_key_rate_limit_used_metric",
                "Requests or tokens the API Key has consumed in the current rate limit window, by rate_limit_type",
                Kind::Gauge,
                KEY_RATE_LIMIT,
                &[],
            ),
            Fam::RemainingRequests => (
                "litellm_remaining_requests_metric",
                "LLM Deployment Analytics - remaining requests for model, returned from LLM API Provider",
                Kind::Gauge,
                REMAINING,
                &[],
            ),
            Fam::RemainingTokens => (
                "litellm_remaining_tokens_metric",
                "remaining tokens for model, returned from LLM API Provider",
                Kind::Gauge,
                REMAINING,
                &[],
            ),
            Fam::DeploymentState => (
                "litellm_deployment_state",
                "LLM Deployment Analytics - The state of the deployment: 0 = healthy, 1 = partial outage, 2 = complete outage",
                Kind::Gauge,
                DEPLOYMENT_STATE,
                &[],
            ),
            Fam::DeploymentSuccess => (
                "litellm_deployment_success_responses",
                "LLM Deployment Analytics - Total number of successful LLM API calls via litellm",
                Kind::Counter,
                DEPLOYMENT_REQUESTS,
                &[],
            ),
            Fam::DeploymentFailure => (
                "litellm_deployment_failure_responses",
                "LLM Deployment Analytics - Total number of failed LLM API calls for a specific LLM deploymeny. exception_status is the status of the exception from the llm api",
                Kind::Counter,
                DEPLOYMENT_FAILURES,
                &[],
            ),
            Fam::DeploymentTotal => (
                "litellm_deployment_total_requests",
                "LLM Deployment Analytics - Total number of LLM API calls via litellm - success + failure",
                Kind::Counter,
                DEPLOYMENT_REQUESTS,
                &[],
            ),
            Fam::DeploymentCooledDown => (
                "litellm_deployment_cooled_down",
                "LLM Deployment Analytics - Number of times a deployment has been cooled down by LiteLLM load balancing logic. exception_status is the status of the exception that caused the deployment to be cooled down",
                Kind::Counter,
                COOLED_DOWN,
                &[],
            ),
            Fam::SuccessfulFallbacks => (
                "litellm_deployment_successful_fallbacks",
                "LLM Deployment Analytics - Number of successful fallback requests from primary model -> fallback model",
                Kind::Counter,
                FALLBACKS,
                &[],
            ),
            Fam::FailedFallbacks => (
                "litellm_deployment_failed_fallbacks",
                "LLM Deployment Analytics - Number of failed fallback requests from primary model -> fallback model",
                Kind::Counter,
                FALLBACKS,
                &[],
            ),
            Fam::CacheHits => (
                "litellm_cache_hits_metric",
                "Total number of LiteLLM cache hits",
                Kind::Counter,
                CACHE,
                &[],
            ),
            Fam::CacheMisses => (
                "litellm_cache_misses_metric",
                "Total number of LiteLLM cache misses",
                Kind::Counter,
                CACHE,
                &[],
            ),
            Fam::CachedTokens => (
                "litellm_cached_tokens_metric",
                "Total tokens served from LiteLLM cache",
                Kind::Counter,
                CACHE,
                &[],
            ),
            Fam::UnpricedRequests => (
                "gateway_unpriced_requests",
                "Upstream calls to a model without a price (served at cost 0, gateway_settings.unpriced_models); not a LiteLLM metric",
                Kind::Counter,
                UNPRICED,
                &[],
            ),
            Fam::GuardrailLatency => (
                "litellm_guardrail_latency_seconds",
                "Latency (seconds) for guardrail execution",
                Kind::Histogram,
                GUARDRAIL_LATENCY,
                &LATENCY_BUCKETS,
            ),
            Fam::GuardrailErrors => (
                "litellm_guardrail_errors",
                "Total number of errors encountered during guardrail execution",
                Kind::Counter,
                GUARDRAIL_ERRORS,
                &[],
            ),
            Fam::GuardrailRequests => (
                "litellm_guardrail_requests",
                "Total number of guardrail invocations",
                Kind::Counter,
                GUARDRAIL_REQUESTS,
                &[],
            ),
        };
        Spec {
            name,
            help,
            kind,
            labels,
            buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_listed_once_in_index_order_within_the_label_bound() {
        for (i, fam) in ALL.iter().enumerate() {
            assert_eq!(fam.index(), i);
            let spec = fam.spec();
            assert!(spec.labels.len() <= MAX_LABELS, "{}", spec.name);
            assert_eq!(
                spec.kind == Kind::Histogram,
                !spec.buckets.is_empty(),
                "{}",
                spec.name
            );
            let mut names: Vec<_> = spec.labels.iter().map(|l| l.name()).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(
                names.len(),
                spec.labels.len(),
                "{}: a label twice",
                spec.name
            );
        }
        assert_eq!(LABEL_COUNT, 29);
    }
}
