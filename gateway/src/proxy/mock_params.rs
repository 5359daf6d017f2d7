//! LiteLLM's mock testing request parameters, acted on only where LiteLLM
//! acts on them.
//!
//! `mock_testing_fallbacks`, `mock_testing_context_fallbacks`,
//! `mock_testing_content_policy_fallbacks`, `mock_testing_rate_limit_error`,
//! `mock_timeout` and `mock_delay` are refused (400) unless
//! `general_settings.dangerously_allow_mock_testing_request_params` is
//! true, as LiteLLM refuses them. With the switch on:
//! - a `mock_testing_*fallbacks` flag (`true`, or a string reading true)
//!   makes every attempt in the requested group fail without an upstream
//!   call, with the error that picks that kind of fallback: an internal
//!   server error (500, `fallbacks`), a context window error (400,
//!   `context_window_fallbacks`), a content policy violation (400,
//!   `content_policy_fallbacks`); the fallback groups are then called as
//!   usual. `mock_testing_rate_limit_error: true` is a 429 the same way.
//!   Each mocked failure leaves its attempt's row (status `failure`,
//!   nothing charged) and cools no deployment down.
//! - `mock_timeout: true`: the requested group's attempts wait the
//!   deployment's timeout and fail with it (408), without an upstream call.
//! - `mock_delay` (seconds, at most [`MAX_DELAY`]) is waited before an
//!   answer made up from `mock_response` or before `mock_timeout`'s wait,
//!   as LiteLLM waits it only before a mock completion.
//!
//! `mock_response` (a string) is answered without an upstream call, as a
//! completion with that content, by the deployment the router picks:
//! usage as LiteLLM's mock completion counts it (the prompt as counted for
//! admission, [`COMPLETION_TOKENS`] completion tokens) and spend at that
//! deployment's price. LiteLLM honours it for a key or team whose
//! metadata has `allow_client_mock_response: true`, and this gateway
//! also while the switch above is on; otherwise it is dropped (never sent
//! to the upstream), as LiteLLM's proxy drops it.

use crate::auth::Principal;
use crate::error::{ErrorClass, GatewayError};
use crate::inbound::LlmRequest;
use std::time::Duration;

/// The longest `mock_delay`, seconds.
pub(super) const MAX_DELAY: f64 = 60.0;

/// The completion tokens of a mock completion
/// (LiteLLM's `DEFAULT_MOCK_RESPONSE_COMPLETION_TOKEN_COUNT`).
pub(super) const COMPLETION_TOKENS: u32 = 20;

/// The failure a `mock_testing_*` flag asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// `mock_testing_fallbacks`: an internal server error.
    Fallbacks,
    /// `mock_testing_context_fallbacks`: a context window error.
    ContextWindow,
    /// `mock_testing_content_policy_fallbacks`: a content policy violation.
    ContentPolicy,
    /// `mock_testing_rate_limit_error`: a rate limit.
    RateLimit,
}

/// What a request's mock parameters ask for.
#[derive(Debug, Default, Clone)]
pub(super) struct Ask {
    /// A failure of the requested group's attempts.
    pub failure: Option<Failure>,
    /// `mock_timeout: true`.
    pub timeout: bool,
    /// `mock_delay`.
    pub delay: Option<Duration>,
    /// `mock_response`, when honoured.
    pub response: Option<String>,
}

impl Ask {
    /// Whether the requested group's attempts fail without a call.
    pub fn fails(&self) -> bool {
        self.failure.is_some() || self.timeout
    }

    /// The error of a mocked failure in `group` (`None`: `mock_timeout`,
    /// which the caller makes after its wait).
    pub fn error(&self, group: &str) -> Option<GatewayError> {
        let (status, class, code, what) = match self.failure? {
            Failure::Fallbacks => (500, ErrorClass::InternalServer, None, "a fallback"),
            Failure::ContextWindow => (
                400,
                ErrorClass::ContextWindow,
                Some("context_length_exceeded"),
                "a context window fallback",
            ),
            Failure::ContentPolicy => (
                400,
                ErrorClass::ContentPolicy,
                Some("content_policy_violation"),
                "a content policy fallback",
            ),
            Failure::RateLimit => (429, ErrorClass::RateLimit, None, "a rate limit error"),
        };
        Some(GatewayError::Upstream {
            status,
            message: format!("This is a mock exception for model={group}, to trigger {what}."),
            error_type: None,
            provider_code: code.map(str::to_string),
            upstream_param: None,
            retry_after: None,
            class,
        })
    }
}

/// What `req` asks for, `allowed` being the switch; `None` when it asks
/// for nothing. Refuses the parameters while the switch is off, and a
/// value of the wrong type or range.
pub(super) fn read(
    req: &LlmRequest,
    allowed: bool,
    principal: &Principal,
) -> Result<Option<Ask>, GatewayError> {
    if !allowed {
        if let Some((param, _)) = req.mock_testing_params.first() {
            let names: Vec<&str> = req.mock_testing_params.iter().map(|(n, _)| *n).collect();
            return Err(GatewayError::InvalidParam {
                param,
                message: format!(
                    "Mock testing request params are disabled on this proxy: {}. Enable them with `general_settings.dangerously_allow_mock_testing_request_params: true`.",
                    names.join(", ")
                ),
            });
        }
    }
    let response = match &req.mock_response {
        Some(raw) if allowed || allows_mock_response(principal) => {
            match serde_json::from_str::<serde_json::Value>(raw) {
                Ok(serde_json::Value::String(text)) => Some(text),
                _ => {
                    return Err(GatewayError::InvalidParam {
                        param: "mock_response",
                        message: "must be a string".into(),
                    })
                }
            }
        }
        _ => None,
    };
    let mut ask = Ask {
        response,
        ..Ask::default()
    };
    for (name, raw) in &req.mock_testing_params {
        let value: serde_json::Value =
            serde_json::from_str(raw).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
        let failure = match *name {
            "mock_testing_fallbacks" => Failure::Fallbacks,
            "mock_testing_context_fallbacks" => Failure::ContextWindow,
            "mock_testing_content_policy_fallbacks" => Failure::ContentPolicy,
            "mock_testing_rate_limit_error" => Failure::RateLimit,
            "mock_timeout" => {
                ask.timeout = value == serde_json::Value::Bool(true);
                continue;
            }
            _ => {
                ask.delay = delay(&value)?;
                continue;
            }
        };
        // The fallback flags read a string as a boolean; the rate limit
        // flag only `true` itself (LiteLLM's `mock_failure`).
        let on = match (&value, failure) {
            (serde_json::Value::Bool(b), _) => *b,
            (serde_json::Value::String(s), f) if f != Failure::RateLimit => {
                matches!(
                    s.to_ascii_lowercase().as_str(),
                    "true" | "1" | "t" | "y" | "yes"
                )
            }
            _ => false,
        };
        // The first fallback flag set wins, then the rate limit.
        let first = match (ask.failure, failure) {
            (None, _) => true,
            (Some(Failure::RateLimit), f) => f != Failure::RateLimit,
            _ => false,
        };
        if on && first {
            ask.failure = Some(failure);
        }
    }
    let asks = ask.fails() || ask.response.is_some();
    Ok(asks.then_some(ask))
}

/// `mock_delay`: seconds from 0 to [`MAX_DELAY`]; `null` is none.
fn delay(value: &serde_json::Value) -> Result<Option<Duration>, GatewayError> {
    match value {
        serde_json::Value::Null => Ok(None),
        v => v
            .as_f64()
            .filter(|s| (0.0..=MAX_DELAY).contains(s))
            .map(|s| Some(Duration::from_secs_f64(s)))
            .ok_or_else(|| GatewayError::InvalidParam {
                param: "mock_delay",
                message: format!("must be a number of seconds from 0 to {MAX_DELAY}"),
            }),
    }
}

/// Whether the caller's key or its team has LiteLLM's
/// `allow_client_mock_response: true` in its metadata.
fn allows_mock_response(principal: &Principal) -> bool {
    let Principal::Key(key) = principal else {
        return false;
    };
    let on = |m: &serde_json::Map<String, serde_json::Value>| {
        m.get("allow_client_mock_response") == Some(&serde_json::Value::Bool(true))
    };
    on(&key.record.metadata) || key.team.as_ref().is_some_and(|t| on(&t.record.metadata))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbound::Endpoint;
    use bytes::Bytes;

    fn req(body: serde_json::Value) -> LlmRequest {
        LlmRequest::parse(Endpoint::ChatCompletions, Bytes::from(body.to_string())).unwrap()
    }

    #[test]
    fn the_switch_decides_and_values_are_checked() {
        let admin = Principal::Master;
        let body = serde_json::json!({"model": "m", "messages": [], "mock_testing_fallbacks": true, "mock_delay": 0.5});
        let err = read(&req(body.clone()), false, &admin).unwrap_err();
        assert_eq!(err.status(), 400);
        let ask = read(&req(body), true, &admin).unwrap().unwrap();
        assert_eq!(ask.failure, Some(Failure::Fallbacks));
        assert_eq!(ask.delay, Some(Duration::from_millis(500)));
        assert_eq!(ask.error("g").unwrap().status(), 500);
        let both = serde_json::json!({"model": "m", "messages": [], "mock_testing_rate_limit_error": true, "mock_testing_context_fallbacks": "True"});
        let ask = read(&req(both), true, &admin).unwrap().unwrap();
        assert_eq!(ask.failure, Some(Failure::ContextWindow));
        let string_rate = serde_json::json!({"model": "m", "messages": [], "mock_testing_rate_limit_error": "true"});
        assert!(read(&req(string_rate), true, &admin).unwrap().is_none());
        for bad in [
            serde_json::json!(-1),
            serde_json::json!(61),
            serde_json::json!("1"),
        ] {
            let body = serde_json::json!({"model": "m", "messages": [], "mock_delay": bad});
            assert_eq!(read(&req(body), true, &admin).unwrap_err().status(), 400);
        }
        let response = serde_json::json!({"model": "m", "messages": [], "mock_response": "hi"});
        assert!(read(&req(response.clone()), false, &admin)
            .unwrap()
            .is_none());
        assert_eq!(
            read(&req(response), true, &admin)
                .unwrap()
                .unwrap()
                .response
                .as_deref(),
            Some("hi")
        );
        let odd = serde_json::json!({"model": "m", "messages": [], "mock_response": {"x": 1}});
        assert_eq!(read(&req(odd), true, &admin).unwrap_err().status(), 400);
    }
}
