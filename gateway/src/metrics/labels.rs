//! Label values as LiteLLM writes them: `None` for an unknown value, its
//! exception class names (`Openai.RateLimitError`, `BudgetExceededError`),
//! the route the client called.

use super::families::{Fam, L, LABEL_COUNT, MAX_LABELS};
use super::store::NONE;
use crate::error::GatewayError;

/// The symbol of every label for one observation; unknown ones are `None`.
#[derive(Clone, Copy)]
pub(crate) struct LabelValues([u32; LABEL_COUNT]);

impl Default for LabelValues {
    fn default() -> Self {
        LabelValues([NONE; LABEL_COUNT])
    }
}

impl LabelValues {
    /// Sets label `l` to symbol `v`.
    pub(crate) fn set(&mut self, l: L, v: u32) {
        self.0[l as usize] = v;
    }

    /// Every label's symbol, in [`L`] order.
    pub(crate) fn raw(&self) -> &[u32; LABEL_COUNT] {
        &self.0
    }

    /// The symbol of label `l`.
    pub(crate) fn get(&self, l: L) -> u32 {
        self.0[l as usize]
    }

    /// The symbols of `fam`'s labels, in its order, and how many there are.
    pub(crate) fn of(&self, fam: Fam) -> ([u32; MAX_LABELS], usize) {
        let labels = fam.spec().labels;
        let mut out = [NONE; MAX_LABELS];
        for (slot, l) in out.iter_mut().zip(labels) {
            *slot = self.get(*l);
        }
        (out, labels.len().min(MAX_LABELS))
    }
}

/// The exception class LiteLLM reports for an upstream failure: the
/// provider's name capitalized, a dot, and the OpenAI SDK's class for the
/// failure (`Openai.RateLimitError`).
pub(crate) fn upstream_class(provider: &str, retry_class: &str, status: u16) -> String {
    let class = match retry_class {
        "timeout" => "Timeout",
        "api_connection" | "client_disconnected" => "APIConnectionError",
        "rate_limit" => "RateLimitError",
        "authentication" if status == 403 => "PermissionDeniedError",
        "authentication" => "AuthenticationError",
        "context_window" => "ContextWindowExceededError",
        "content_policy" => "ContentPolicyViolationError",
        _ => match status {
            404 => "NotFoundError",
            408 => "Timeout",
            422 => "UnprocessableEntityError",
            429 => "RateLimitError",
            500 => "InternalServerError",
            503 => "ServiceUnavailableError",
            400..=499 => "BadRequestError",
            _ => "APIError",
        },
    };
    let mut name = String::with_capacity(provider.len() + class.len() + 1);
    let mut chars = provider.chars();
    if let Some(first) = chars.next() {
        name.extend(first.to_uppercase());
        name.push_str(chars.as_str());
        name.push('.');
    }
    name.push_str(class);
    name
}

/// The exception class LiteLLM reports when the gateway itself refused or
/// failed a request (not an upstream error): its proxy-side classes.
pub(crate) fn gateway_class(err: &GatewayError) -> &'static str {
    use GatewayError::*;
    match err {
        BudgetExceeded { .. }
        | EndUserBudgetExceeded { .. }
        | WindowBudgetExceeded { .. }
        | MemberBudgetExceeded { .. }
        | MemberModelBudgetExceeded { .. } => "BudgetExceededError",
        RateLimited { .. } => "HTTPException",
        NoCapacity { .. } => "RateLimitError",
        UnknownModel(_) | NoEligibleDeployment { .. } => "BadRequestError",
        Internal(_) => "InternalServerError",
        Unavailable(_) => "ServiceUnavailableError",
        ClientGone => "APIConnectionError",
        _ => "ProxyException",
    }
}

/// Whether the error came from (or on the way to) an upstream, so its class
/// names the provider.
pub(crate) fn is_upstream(err: &GatewayError) -> bool {
    matches!(
        err,
        GatewayError::Upstream { .. }
            | GatewayError::UpstreamTimeout { .. }
            | GatewayError::UpstreamUnreachable { .. }
            | GatewayError::UpstreamProtocol { .. }
    )
}

/// The `route` label: the LLM path as the client called it, with or
/// without `/v1` (`/v1/chat/completions`); `suffix` is the endpoint's path.
pub(crate) fn route(path: &str, suffix: &'static str) -> &'static str {
    let versioned = path.starts_with("/v1/");
    match (suffix, versioned) {
        ("/chat/completions", true) => "/v1/chat/completions",
        ("/chat/completions", false) => "/chat/completions",
        ("/completions", true) => "/v1/completions",
        ("/completions", false) => "/completions",
        ("/embeddings", true) => "/v1/embeddings",
        ("/embeddings", false) => "/embeddings",
        _ => suffix,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exception_classes_follow_litellm() {
        assert_eq!(
            upstream_class("openai", "rate_limit", 429),
            "Openai.RateLimitError"
        );
        assert_eq!(
            upstream_class("hosted_vllm", "internal_server", 503),
            "Hosted_vllm.ServiceUnavailableError"
        );
        assert_eq!(
            upstream_class("openai", "authentication", 403),
            "Openai.PermissionDeniedError"
        );
        assert_eq!(upstream_class("", "timeout", 408), "Timeout");
        let budget = GatewayError::BudgetExceeded {
            scope: "key".into(),
            spend: 1.0,
            max: 1.0,
            reserve: None,
        };
        assert_eq!(gateway_class(&budget), "BudgetExceededError");
        assert_eq!(gateway_class(&GatewayError::MissingKey), "ProxyException");
        assert_eq!(
            route("/v1/chat/completions", "/chat/completions"),
            "/v1/chat/completions"
        );
        assert_eq!(route("/embeddings", "/embeddings"), "/embeddings");
    }
}
