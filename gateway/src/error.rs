//! Every error a client can see, and its one mapping to HTTP: status, and
//! LiteLLM's body `{"error":{"message","type","param","code"}}`.

use std::time::Duration;

/// An error answered to a client.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// No credential in any accepted header.
    #[error("Authentication Error, No api key passed in.")]
    MissingKey,
    /// A credential that matches no key.
    #[error("Authentication Error, Invalid proxy server token passed. Received API Key = {0}")]
    InvalidKey(String),
    /// The key is blocked (or its team is).
    #[error(
        "Authentication Error, {0} is blocked. Unblock it with /key/unblock or /team/unblock."
    )]
    KeyBlocked(String),
    /// The key's `expires` is past.
    #[error("Authentication Error - Expired Key. Key Expiry time {0}")]
    KeyExpired(String),
    /// The key store could not be asked in time; refused (fail closed).
    #[error("Authentication Error, the key could not be verified right now: {0}")]
    AuthUnavailable(String),
    /// The key, its team or its user may not use this model.
    #[error("{scope} not allowed to access model. This {scope} can only access models={allowed:?}. Tried to access {requested}")]
    ModelAccessDenied {
        /// `key`, `team` or `user`.
        scope: String,
        /// The allowed models.
        allowed: Vec<String>,
        /// The requested model.
        requested: String,
    },
    /// The key's user may not use this model in the key's team (the
    /// `allowed_models` of its membership's budget row): LiteLLM's refusal.
    #[error("The requested model '{0}' is not available for this API key, or the model name is invalid. Check the models available to you and try again.")]
    MemberModelAccessDenied(String),
    /// A budget would be exceeded.
    #[error("Budget has been exceeded! {scope} spend: {spend}, max budget: {max}{}", .reserve.map(|r| format!("; this request would reserve up to {r} USD (send max_tokens, or set default_estimated_output_tokens on the key, its team or litellm_settings, to reserve less)")).unwrap_or_default())]
    BudgetExceeded {
        /// `key`, `user` or `team`.
        scope: String,
        /// Spend so far, USD.
        spend: f64,
        /// The budget, USD.
        max: f64,
        /// The worst-case cost that did not fit, when the spend alone did not
        /// exhaust the budget.
        reserve: Option<f64>,
    },
    /// The key's team has `require_trace_id` and the request carries no
    /// trace id: LiteLLM's refusal.
    #[error("Team '{0}' requires a trace ID on every LLM, MCP and agent request. Send an x-litellm-trace-id header. LLM requests can also send a W3C traceparent header or set metadata.trace_id in the body.")]
    TraceIdRequired(String),
    /// The key's user is over its budget for one model group in the key's
    /// team (`team_member_model_max_budget`): LiteLLM's message.
    #[error("LiteLLM Team Member: user={user}, team={team}, exceeded budget for model={model}{}", .reserve.map(|r| format!("; this request would reserve up to {r} USD (send max_tokens, or set default_estimated_output_tokens on the key, its team or litellm_settings, to reserve less)")).unwrap_or_default())]
    MemberModelBudgetExceeded {
        /// The user.
        user: String,
        /// The team.
        team: String,
        /// The model group.
        model: String,
        /// The worst-case cost that did not fit, when the spend alone did
        /// not exhaust the budget.
        reserve: Option<f64>,
    },
    /// The key's user is over its budget in the key's team (its own
    /// `max_budget_in_team`, else the team's `team_member_budget`):
    /// LiteLLM's message.
    #[error("Budget has been exceeded! User={user} in Team={team} Current cost: {spend}, Max budget: {max}{}", .reserve.map(|r| format!("; this request would reserve up to {r} USD (send max_tokens, or set default_estimated_output_tokens on the key, its team or litellm_settings, to reserve less)")).unwrap_or_default())]
    MemberBudgetExceeded {
        /// The user.
        user: String,
        /// The team.
        team: String,
        /// What the user spent in the team, USD.
        spend: f64,
        /// The member budget, USD.
        max: f64,
        /// The worst-case cost that did not fit, when the spend alone did
        /// not exhaust the budget.
        reserve: Option<f64>,
    },
    /// A key's or team's budget window (`budget_limits`) is spent:
    /// LiteLLM's message.
    #[error("ExceededBudget: {owner} over {duration} budget. Spend=${spend:.4}, Limit=${max:.2}{}", .reserve.map(|r| format!("; this request would reserve up to {r} USD (send max_tokens, or set default_estimated_output_tokens on the key, its team or litellm_settings, to reserve less)")).unwrap_or_default())]
    WindowBudgetExceeded {
        /// `Key`, or `Team=<id>`.
        owner: String,
        /// The window's length (`1d`, ...).
        duration: String,
        /// The window's spend so far, USD.
        spend: f64,
        /// The window's budget, USD.
        max: f64,
        /// The worst-case cost that did not fit, when the spend alone did
        /// not exhaust the window.
        reserve: Option<f64>,
    },
    /// The key's row, or its team's, holds a field LiteLLM acts on and
    /// this gateway does not (written by LiteLLM): refused rather than
    /// served as if it were absent (`auth::unapplied`).
    #[error("{owner} has {field} set in the database, which LiteLLM acts on and this gateway does not apply: {why}. Its requests are refused rather than served without it; clear the field in its row (or keep this key on LiteLLM)")]
    UnappliedField {
        /// `key <alias>`, or `team <id> (of key <alias>)`.
        owner: String,
        /// The field, as LiteLLM names it (`router_settings`,
        /// `metadata.enable_prompt_caching`, ...).
        field: String,
        /// What LiteLLM does with it.
        why: &'static str,
    },
    /// The request's end user (its `user`) is over its budget row's
    /// `max_budget`: LiteLLM's message.
    #[error("ExceededBudget: End User={end_user} over budget. Spend={spend}, Budget={max}{}", .reserve.map(|r| format!("; this request would reserve up to {r} USD (send max_tokens, or set default_estimated_output_tokens on the key, its team or litellm_settings, to reserve less)")).unwrap_or_default())]
    EndUserBudgetExceeded {
        /// The end user's id.
        end_user: String,
        /// Its spend so far, USD.
        spend: f64,
        /// Its budget, USD.
        max: f64,
        /// The worst-case cost that did not fit, when the spend alone did
        /// not exhaust the budget.
        reserve: Option<f64>,
    },
    /// The request's end user is blocked (`/customer/block`): LiteLLM's
    /// blocked-user refusal.
    #[error("User blocked from making LLM API Calls. User={0}")]
    EndUserBlocked(String),
    /// The management API needs the master key or an admin key.
    #[error("Only the proxy admin (master key or an admin key) can call {0}")]
    NotAdmin(String),
    /// A console login (`/ui/login`) with wrong credentials, or while the
    /// console has no password.
    #[error("{0}")]
    ConsoleLogin(&'static str),
    /// Too many wrong console passwords from this address.
    #[error("Too many failed logins from this address; try again in {retry_after} seconds")]
    ConsoleThrottled {
        /// Seconds until the address may try again (`retry-after`).
        retry_after: String,
    },
    /// A console session cookie that names no open session.
    #[error("Authentication Error, the console session has expired or ended; log in again at /ui")]
    ConsoleSession,
    /// A state-changing call authenticated by a console session without
    /// its CSRF token.
    #[error("Authentication Error, a call authenticated by a console session that changes state needs the session's x-csrf-token header")]
    CsrfRefused,
    /// A management request field is missing or wrong.
    #[error("Invalid field '{field}': {message}")]
    BadField {
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A key, team or user that does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// A key, team or user that already exists.
    #[error("{0} already exists")]
    Conflict(String),
    /// An end user (`/customer/*`) that does not exist: LiteLLM's message.
    #[error("{message}")]
    CustomerNotFound {
        /// LiteLLM's message, naming the ids.
        message: String,
        /// The field that named them.
        param: &'static str,
    },
    /// `/customer/new` of an id that exists: LiteLLM's message.
    #[error("Customer already exists, passed user_id={0}. Please pass a new user_id.")]
    CustomerExists(String),
    /// The database failed a management call.
    #[error("Database error: {0}")]
    Store(String),
    /// The request has a budget but its model has no price, so the budget
    /// could not be enforced.
    #[error("Model '{0}' has no known price, so the budgets of this key, its user or its team cannot be enforced on it. Set input_cost_per_token and output_cost_per_token on its deployment (on a wildcard entry they price every model it routes), or gateway_settings.unpriced_models: free to serve models without a price at cost 0.")]
    Unpriced(String),
    /// `litellm_settings.block_requests_for_models_without_pricing`: every
    /// caller is refused a model without a price (LiteLLM's message).
    #[error("Model '{0}' has no pricing in the cost map, so litellm cannot price the request. Requests for unpriced models are blocked because 'block_requests_for_models_without_pricing' is enabled. Add pricing (input_cost_per_token/output_cost_per_token) to allow the request.")]
    UnpricedBlocked(String),
    /// A model no group or wildcard serves.
    #[error("Invalid model name passed in model={0}. Call `/v1/models` to view available models for your key.")]
    UnknownModel(String),
    /// The request was routed to a deployment whose provider LiteLLM
    /// serves and this gateway does not.
    #[error("Provider \"{provider}\" (deployment {deployment}) is not supported by this gateway; route this model group to a supported provider or give it a fallback")]
    UnsupportedProvider {
        /// The provider prefix (`replicate`).
        provider: String,
        /// The deployment id.
        deployment: String,
    },
    /// The body is not JSON.
    #[error("Invalid JSON in request body: {0}")]
    MalformedJson(String),
    /// A required parameter is absent.
    #[error("Missing required parameter: '{0}'")]
    MissingParam(&'static str),
    /// A parameter has the wrong type or value.
    #[error("Invalid value for '{param}': {message}")]
    InvalidParam {
        /// The parameter.
        param: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A parameter the key's or the config's `enforced_params` requires
    /// is not in the body (LiteLLM's message; `metadata.x` as
    /// `[metadata][x]`).
    #[error(
        "BadRequest please pass param={shown} in request body. This is a required param{note}"
    )]
    EnforcedParamMissing {
        /// The parameter as LiteLLM's message shows it.
        shown: String,
        /// The parameter as the key names it (`metadata.x`).
        param: String,
        /// Said after LiteLLM's message: empty, or where a streamed
        /// upload's form must carry it.
        note: &'static str,
    },
    /// An image named by URL that the gateway had to inline and could not
    /// (refused address, too large, not an image, unreachable, too slow).
    #[error("Invalid value for '{param}': {reason}")]
    ImageUrl {
        /// Where the image is, e.g. `messages[0].content[1].image_url`.
        param: String,
        /// Why it was not inlined.
        reason: String,
    },
    /// A guardrail with action `BLOCK` matched: LiteLLM's 400, its
    /// message, and its detail as `provider_specific_fields`.
    #[error("{message}")]
    GuardrailBlocked {
        /// E.g. `Content blocked: email pattern detected`.
        message: String,
        /// LiteLLM's `HTTPException.detail` (`error`, `pattern` or `keyword`).
        detail: serde_json::Value,
    },
    /// A guardrail service could not judge the text and its settings do
    /// not let the text pass (`unreachable_fallback: fail_closed`,
    /// `fail_on_error`): LiteLLM's 500.
    #[error("{service} failed: {reason} (guardrail '{guardrail}')")]
    GuardrailFailed {
        /// The kind of service, e.g. `Generic Guardrail API`.
        service: &'static str,
        /// `guardrail_name`.
        guardrail: String,
        /// What went wrong (no credentials).
        reason: String,
    },
    /// A request, key or team names a guardrail the config does not have.
    #[error("guardrail '{0}' is not configured (the guardrails section of config.yaml)")]
    UnknownGuardrail(String),
    /// No route for this method and path.
    #[error("Route not found: {method} {path}")]
    RouteNotFound {
        /// Request method.
        method: String,
        /// Request path.
        path: String,
    },
    /// One of LiteLLM's routes this gateway knows and does not serve.
    #[error("{method} {path} is not served by this gateway: {instead}")]
    RouteNotServed {
        /// Request method.
        method: String,
        /// Request path.
        path: String,
        /// What a client can do instead.
        instead: &'static str,
    },
    /// A model id that `/v1/models/{id}` does not know.
    #[error("The model `{0}` does not exist")]
    ModelNotFound(String),
    /// Framing the server cannot parse.
    #[error("Malformed HTTP request: {0}")]
    BadHttp(String),
    /// Body above `max_request_size_mb`.
    #[error("Request body too large: the limit is {limit_bytes} bytes (general_settings.max_request_size_mb)")]
    BodyTooLarge {
        /// The configured limit.
        limit_bytes: usize,
    },
    /// Too many headers or too many header bytes.
    #[error(
        "Request header fields too large: at most {max_headers} headers and {max_bytes} bytes"
    )]
    HeadersTooLarge {
        /// Header count limit.
        max_headers: usize,
        /// Header bytes limit.
        max_bytes: usize,
    },
    /// The client sent its request too slowly.
    #[error("Request timeout: the {part} was not received within {}ms", .after.as_millis())]
    ClientTimeout {
        /// `request head` or `request body`.
        part: &'static str,
        /// The limit.
        after: Duration,
    },
    /// The provider answered with an error status.
    #[error("{message}")]
    Upstream {
        /// The provider's status, passed on.
        status: u16,
        /// The provider's message.
        message: String,
        /// The provider's error type, when it sent one.
        error_type: Option<String>,
        /// The provider's error code (`context_length_exceeded`,
        /// `content_policy_violation`...), which picks the fallback kind.
        provider_code: Option<String>,
        /// The provider's `param` (the request field it names), relayed
        /// in the body as LiteLLM relays it.
        upstream_param: Option<String>,
        /// The provider's `retry-after`, passed on.
        retry_after: Option<String>,
        /// What kind of failure the provider's answer is, as its provider
        /// classified it.
        class: ErrorClass,
    },
    /// The provider did not answer in time.
    #[error("Request timed out: {provider} did not respond within {}s (deployment {deployment})", .after.as_secs_f64())]
    UpstreamTimeout {
        /// Provider name.
        provider: String,
        /// Deployment id.
        deployment: String,
        /// The timeout.
        after: Duration,
    },
    /// The provider could not be reached.
    #[error("Upstream unreachable: {provider} at {url}: {reason}")]
    UpstreamUnreachable {
        /// Provider name.
        provider: String,
        /// The api_base.
        url: String,
        /// Connect/TLS/IO error.
        reason: String,
    },
    /// The provider sent something that is not HTTP.
    #[error("Invalid response from {provider}: {reason}")]
    UpstreamProtocol {
        /// Provider name.
        provider: String,
        /// What was wrong.
        reason: String,
    },
    /// No deployment of the requested group or of its fallbacks is in a
    /// region the caller may use; nothing was sent (fail closed).
    #[error("No deployment of model group '{group}' nor of its fallbacks is in an allowed region (allowed_model_region: {regions:?}); the request was not sent")]
    NoEligibleDeployment {
        /// The requested model group.
        group: String,
        /// The allowed regions.
        regions: Vec<String>,
    },
    /// With `router_settings.enable_tag_filtering`, no deployment of the
    /// group carries one of the request's tags, nor the `default` tag
    /// (LiteLLM's 401).
    #[error("Not allowed to access model due to tags configuration. Passed model={group} and tags={tags:?}")]
    NoTaggedDeployment {
        /// The requested model group.
        group: String,
        /// The request's tags.
        tags: Vec<String>,
    },
    /// A `cache` control the key's `allowed_cache_controls` does not list
    /// (LiteLLM's 403).
    #[error("Not allowed to set {0} as a cache control. Contact admin to change permissions.")]
    CacheControlDenied(String),
    /// A team admin's or org admin's management call on rows outside its
    /// teams or organizations, or beyond what LiteLLM lets those roles do
    /// (LiteLLM's 403 and message).
    #[error("{0}")]
    TeamAccessDenied(String),
    /// A route outside `general_settings.allowed_routes` (LiteLLM's 403).
    #[error("Access forbidden: Route {0} not allowed")]
    RouteForbidden(String),
    /// A route outside the virtual key's own `allowed_routes` (LiteLLM's
    /// 403 and message; the list as Python prints it).
    #[error("Virtual key is not allowed to call this route. Only allowed to call routes: [{}]. Tried to call route: {route}", allowed.iter().map(|r| format!("'{r}'")).collect::<Vec<_>>().join(", "))]
    KeyRouteForbidden {
        /// The key's `allowed_routes`.
        allowed: Vec<String>,
        /// The path called.
        route: String,
    },
    /// A config pass-through endpoint with `auth` that the key's (or its
    /// team's) `allowed_passthrough_routes` does not grant, or that their
    /// `denied_passthrough_routes` names: LiteLLM's 403 and message.
    #[error("{0}")]
    PassThroughRouteDenied(String),
    /// Every eligible deployment (of the group and its fallbacks) is at its
    /// own rpm/tpm limit this minute.
    #[error("No deployments available for model group '{group}': every eligible deployment is at its rpm/tpm limit. Try again in {retry_after} seconds.")]
    NoCapacity {
        /// The requested model group.
        group: String,
        /// Seconds until the limits reset.
        retry_after: String,
    },
    /// A rate limit (rpm, tpm or parallel) of one of the request's scopes
    /// is reached; LiteLLM's message.
    #[error("Rate limit exceeded for {scope}: {value}. Limit type: {kind}. Current limit: {limit}, Remaining: {remaining}. Limit resets at: {resets_at}")]
    RateLimited {
        /// `api_key`, `user`, `team`, `model_per_key`, `end_user` or `server`.
        scope: &'static str,
        /// The scope's value (key hash, user id...).
        value: String,
        /// `requests`, `tokens` or `parallel`.
        kind: &'static str,
        /// The limit.
        limit: u64,
        /// What is left of it.
        remaining: u64,
        /// When it resets, `YYYY-MM-DD HH:MM:SS UTC`.
        resets_at: String,
        /// Seconds until then (`retry-after`).
        retry_after: String,
    },
    /// The client closed the connection before an answer; nothing more is
    /// attempted (the status is only logged).
    #[error("Client closed the connection before the response")]
    ClientGone,
    /// Connection cap reached or shutting down.
    #[error("Service unavailable: {0}")]
    Unavailable(&'static str),
    /// A config reload found the file invalid; the running config serves on.
    #[error("config reload refused, the running config keeps serving: {0}")]
    ConfigRejected(String),
    /// The shutdown grace period ended before the response was complete.
    #[error(
        "Service unavailable: cut off, the gateway shut down before the response was complete"
    )]
    CutOff,
    /// The gateway failed while serving this request (a caught panic); only
    /// this request is affected.
    #[error("Internal server error: {0}")]
    Internal(&'static str),
    /// A file or batch id this gateway has no record of (LiteLLM's
    /// message for a batch).
    #[error("No {kind} found with id '{id}'.")]
    ManagedNotFound {
        /// `file` or `batch`.
        kind: &'static str,
        /// The id asked for.
        id: String,
    },
    /// A file or batch another key created (LiteLLM's message).
    #[error("The caller does not have access to this managed {0} id.")]
    ManagedForbidden(&'static str),
    /// A pass-through route's path this gateway refuses to forward.
    #[error("Invalid pass-through path: {0}")]
    PassThroughPath(&'static str),
    /// A pass-through route whose provider has no base or key configured.
    #[error("The /{provider}/* pass-through route is not configured: {missing}")]
    PassThroughUnconfigured {
        /// The route's provider.
        provider: &'static str,
        /// What the operator must set.
        missing: String,
    },
    /// A request to the realtime route that is not a WebSocket handshake.
    #[error("/v1/realtime is a WebSocket endpoint: {0}")]
    NotWebSocket(String),
    /// A realtime session routed to a deployment whose provider has no
    /// realtime API here.
    #[error("Provider \"{provider}\" (deployment {deployment}) has no realtime API on this gateway; /v1/realtime serves openai/ and azure/ deployments")]
    NoRealtime {
        /// The provider prefix.
        provider: String,
        /// The deployment id.
        deployment: String,
    },
}

impl GatewayError {
    /// HTTP status of this error.
    pub fn status(&self) -> u16 {
        use GatewayError::*;
        match self {
            MissingKey | InvalidKey(_) | KeyBlocked(_) | KeyExpired(_) => 401,
            ConsoleLogin(_) | ConsoleSession => 401,
            CsrfRefused => 403,
            ConsoleThrottled { .. } => 429,
            NoTaggedDeployment { .. } => 401,
            RouteForbidden(_)
            | TeamAccessDenied(_)
            | KeyRouteForbidden { .. }
            | PassThroughRouteDenied(_)
            | UnpricedBlocked(_)
            | CacheControlDenied(_) => 403,
            AuthUnavailable(_) | Store(_) => 503,
            ModelAccessDenied { .. } | MemberModelAccessDenied(_) | NotAdmin(_) => 403,
            // LiteLLM's `budget_exceeded_status_code` (422 since it stopped
            // answering 429, which SDKs retry).
            BudgetExceeded { .. }
            | EndUserBudgetExceeded { .. }
            | WindowBudgetExceeded { .. }
            | MemberBudgetExceeded { .. }
            | MemberModelBudgetExceeded { .. } => 422,
            EndUserBlocked(_) | TraceIdRequired(_) | UnappliedField { .. } => 400,
            BadField { .. } | ConfigRejected(_) => 400,
            NotFound(_) | CustomerNotFound { .. } => 404,
            CustomerExists(_) => 400,
            Conflict(_) => 409,
            UnknownModel(_)
            | Unpriced(_)
            | UnsupportedProvider { .. }
            | MalformedJson(_)
            | MissingParam(_)
            | InvalidParam { .. }
            | EnforcedParamMissing { .. }
            | ImageUrl { .. }
            | GuardrailBlocked { .. }
            | UnknownGuardrail(_)
            | BadHttp(_)
            | NoEligibleDeployment { .. } => 400,
            NoCapacity { .. } | RateLimited { .. } => 429,
            RouteNotFound { .. } | ModelNotFound(_) => 404,
            BodyTooLarge { .. } => 413,
            HeadersTooLarge { .. } => 431,
            ClientTimeout { .. } | UpstreamTimeout { .. } => 408,
            Upstream { status, .. } => *status,
            UpstreamUnreachable { .. } | UpstreamProtocol { .. } => 502,
            Unavailable(_) | CutOff => 503,
            Internal(_) | GuardrailFailed { .. } => 500,
            ClientGone => 499,
            PassThroughPath(_) => 400,
            ManagedNotFound { .. } => 404,
            ManagedForbidden(_) => 403,
            PassThroughUnconfigured { .. } => 503,
            NotWebSocket(_) => 426,
            NoRealtime { .. } => 400,
            RouteNotServed { .. } => 501,
        }
    }

    /// The `type` field, following OpenAI/LiteLLM names.
    pub fn error_type(&self) -> &str {
        use GatewayError::*;
        match self {
            MissingKey
            | InvalidKey(_)
            | KeyBlocked(_)
            | AuthUnavailable(_)
            | NotAdmin(_)
            | ConsoleLogin(_)
            | ConsoleSession
            | CsrfRefused
            | ConsoleThrottled { .. }
            | NoTaggedDeployment { .. }
            | CacheControlDenied(_)
            | RouteForbidden(_)
            | TeamAccessDenied(_)
            | ManagedForbidden(_)
            | PassThroughRouteDenied(_)
            | KeyRouteForbidden { .. } => "auth_error",
            KeyExpired(_) => "expired_key",
            ModelAccessDenied { .. } => "key_model_access_denied",
            MemberModelAccessDenied(_) => "team_model_access_denied",
            BudgetExceeded { .. }
            | EndUserBudgetExceeded { .. }
            | WindowBudgetExceeded { .. }
            | MemberBudgetExceeded { .. }
            | MemberModelBudgetExceeded { .. } => "budget_exceeded",
            NotFound(_) => "not_found_error",
            CustomerNotFound { .. } => "not_found",
            CustomerExists(_) => "bad_request",
            Store(_) | Internal(_) | GuardrailFailed { .. } => "internal_server_error",
            RouteNotFound { .. } | ModelNotFound(_) => "not_found_error",
            ClientTimeout { .. } | UpstreamTimeout { .. } => "timeout_error",
            Upstream {
                error_type: Some(t),
                ..
            } => t,
            Upstream { status, .. } => upstream_type(*status),
            UpstreamUnreachable { .. } | UpstreamProtocol { .. } => "api_connection_error",
            Unavailable(_) | CutOff | PassThroughUnconfigured { .. } => "service_unavailable_error",
            NoCapacity { .. } => "rate_limit_error",
            RateLimited { .. } => "throttling_error",
            UnpricedBlocked(_) => "model_cost_map_missing",
            TraceIdRequired(_) => "bad_request_error",
            RouteNotServed { .. } => "not_implemented_error",
            _ => "invalid_request_error",
        }
    }

    /// The `param` field.
    pub fn param(&self) -> Option<&str> {
        match self {
            GatewayError::UnknownModel(_)
            | GatewayError::Unpriced(_)
            | GatewayError::UnsupportedProvider { .. }
            | GatewayError::NoRealtime { .. }
            | GatewayError::UnpricedBlocked(_)
            | GatewayError::ModelAccessDenied { .. }
            | GatewayError::MemberModelAccessDenied(_) => Some("model"),
            GatewayError::BadField { field, .. }
            | GatewayError::ImageUrl { param: field, .. }
            | GatewayError::EnforcedParamMissing { param: field, .. } => Some(field),
            GatewayError::MissingParam(p)
            | GatewayError::InvalidParam { param: p, .. }
            | GatewayError::CustomerNotFound { param: p, .. } => Some(p),
            GatewayError::CustomerExists(_) => Some("user_id"),
            GatewayError::UnknownGuardrail(_) => Some("guardrails"),
            GatewayError::TraceIdRequired(_) => Some("trace_id"),
            GatewayError::UnappliedField { field, .. } => Some(field),
            GatewayError::Upstream { upstream_param, .. } => upstream_param.as_deref(),
            _ => None,
        }
    }

    /// `retry-after` to send with this error.
    pub fn retry_after(&self) -> Option<&str> {
        match self {
            GatewayError::Upstream { retry_after, .. } => retry_after.as_deref(),
            GatewayError::NoCapacity { retry_after, .. }
            | GatewayError::RateLimited { retry_after, .. }
            | GatewayError::ConsoleThrottled { retry_after } => Some(retry_after),
            GatewayError::Unavailable(_) => Some("1"),
            _ => None,
        }
    }

    /// The failure class retries, cooldowns and fallbacks read: the
    /// provider's classification of an upstream answer, else one implied by
    /// the error itself.
    pub fn class(&self) -> ErrorClass {
        match self {
            GatewayError::Upstream { class, .. } => *class,
            GatewayError::UpstreamTimeout { .. } => ErrorClass::Timeout,
            GatewayError::UpstreamUnreachable { .. } | GatewayError::UpstreamProtocol { .. } => {
                ErrorClass::ApiConnection
            }
            GatewayError::Unavailable(_) | GatewayError::ClientGone => {
                ErrorClass::ClientDisconnected
            }
            GatewayError::CutOff => ErrorClass::CutOff,
            other => ErrorClass::from_status(other.status()),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Vec<u8> {
        let status = self.status().to_string();
        let mut body = serde_json::json!({
            "error": {
                "message": self.to_string(),
                "type": self.error_type(),
                "param": self.param(),
                "code": status,
            }
        });
        if let GatewayError::GuardrailBlocked { detail, .. } = self {
            body["error"]["provider_specific_fields"] = detail.clone();
        }
        serde_json::to_vec(&body).expect("json of strings")
    }
}

/// What kind of failure an attempt ended in, LiteLLM's exception classes:
/// retries (`retry_policy`), cooldowns (`allowed_fails_policy`) and the
/// fallback lists (`context_window_fallbacks`, `content_policy_fallbacks`)
/// decide on it. Providers classify their own error answers; the gateway's
/// own failures (timeouts, connection errors) are classed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The provider did not answer in time (`TimeoutError`).
    Timeout,
    /// The provider refused for rate (`RateLimitError`, 429).
    RateLimit,
    /// The provider is over capacity (Anthropic's 529 `overloaded_error`);
    /// retried and cooled like a rate limit, counted as an internal error
    /// by the policies.
    Overloaded,
    /// The deployment's credential was refused (`AuthenticationError`).
    Authentication,
    /// The request is wrong for the provider (`BadRequestError`).
    BadRequest,
    /// The provider refused the content (`ContentPolicyViolationError`).
    ContentPolicy,
    /// The prompt does not fit the model (`ContextWindowExceededError`, a
    /// bad request in LiteLLM's policies).
    ContextWindow,
    /// The provider failed (`InternalServerError`).
    InternalServer,
    /// The provider could not be reached or spoke no HTTP
    /// (`APIConnectionError`).
    ApiConnection,
    /// The client went away; nobody's fault upstream.
    ClientDisconnected,
    /// The shutdown grace period ended before the response was complete.
    CutOff,
}

impl ErrorClass {
    /// The class an HTTP error status implies when nothing more specific is
    /// known.
    pub fn from_status(status: u16) -> ErrorClass {
        match status {
            401 | 403 => ErrorClass::Authentication,
            408 => ErrorClass::Timeout,
            429 => ErrorClass::RateLimit,
            529 => ErrorClass::Overloaded,
            400..=499 => ErrorClass::BadRequest,
            _ => ErrorClass::InternalServer,
        }
    }

    /// The name written to spend logs (`error_class`) and log lines.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Timeout => "timeout",
            ErrorClass::RateLimit => "rate_limit",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::Authentication => "authentication",
            ErrorClass::BadRequest => "bad_request",
            ErrorClass::ContentPolicy => "content_policy",
            ErrorClass::ContextWindow => "context_window",
            ErrorClass::InternalServer => "internal_server",
            ErrorClass::ApiConnection => "api_connection",
            ErrorClass::ClientDisconnected => "client_disconnected",
            ErrorClass::CutOff => "cut_off",
        }
    }
}

fn upstream_type(status: u16) -> &'static str {
    match status {
        401 | 403 => "auth_error",
        404 => "not_found_error",
        408 => "timeout_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_litellm_shape() {
        let e = GatewayError::UnknownModel("gpt-9".into());
        let v: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(e.status(), 400);
        assert_eq!(v["error"]["param"], "model");
        assert_eq!(v["error"]["code"], "400");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("model=gpt-9"));
    }

    #[test]
    fn routing_refusals() {
        let e = GatewayError::NoEligibleDeployment {
            group: "gpt".into(),
            regions: vec!["eu".into()],
        };
        assert_eq!((e.status(), e.error_type()), (400, "invalid_request_error"));
        assert!(e.to_string().contains("'gpt'") && e.to_string().contains("[\"eu\"]"));
        let e = GatewayError::NoCapacity {
            group: "gpt".into(),
            retry_after: "12".into(),
        };
        assert_eq!(
            (e.status(), e.error_type(), e.retry_after()),
            (429, "rate_limit_error", Some("12"))
        );
    }

    #[test]
    fn upstream_status_and_retry_after_pass_through() {
        let e = GatewayError::Upstream {
            status: 429,
            message: "slow down".into(),
            error_type: None,
            provider_code: None,
            upstream_param: None,
            retry_after: Some("7".into()),
            class: ErrorClass::RateLimit,
        };
        assert_eq!(
            (e.status(), e.error_type(), e.retry_after()),
            (429, "rate_limit_error", Some("7"))
        );
    }
}
