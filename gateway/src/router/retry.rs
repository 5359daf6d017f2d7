//! How many retries an error class gets, and how long to wait before one.

use super::settings::{count, show};
use crate::error::ErrorClass;
use serde_yaml::Value;
use std::time::Duration;

/// An upstream `retry-after` longer than this is not waited for: the
/// request moves on to another deployment or group instead (LiteLLM ignores
/// such a header and backs off as if it were absent).
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// First backoff before retrying the same deployment (LiteLLM's).
const INITIAL_BACKOFF_SECS: f64 = 0.5;
/// Longest backoff (LiteLLM's).
const MAX_BACKOFF_SECS: f64 = 8.0;

/// A number per LiteLLM error class, as `retry_policy` and
/// `allowed_fails_policy` give them (`TimeoutErrorRetries`,
/// `RateLimitErrorAllowedFails`, ...).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PerClass {
    /// `Timeout...`.
    pub timeout: Option<u32>,
    /// `RateLimitError...`.
    pub rate_limit: Option<u32>,
    /// `AuthenticationError...`.
    pub authentication: Option<u32>,
    /// `ContentPolicyViolationError...`.
    pub content_policy: Option<u32>,
    /// `BadRequestError...` (also context-window errors, as in LiteLLM
    /// where they are bad requests).
    pub bad_request: Option<u32>,
    /// `InternalServerError...`.
    pub internal_server: Option<u32>,
}

impl PerClass {
    /// Reads `{<Class><suffix>: n}` entries; an unknown key is an error.
    pub(crate) fn parse(v: &Value, suffix: &str) -> Result<PerClass, String> {
        let map = v
            .as_mapping()
            .ok_or_else(|| format!("expected a mapping, got {}", show(v)))?;
        let mut p = PerClass::default();
        for (k, n) in map {
            let key = k.as_str().unwrap_or_default();
            let slot = match key.strip_suffix(suffix) {
                Some("TimeoutError") => &mut p.timeout,
                Some("RateLimitError") => &mut p.rate_limit,
                Some("AuthenticationError") => &mut p.authentication,
                Some("ContentPolicyViolationError") => &mut p.content_policy,
                Some("BadRequestError") => &mut p.bad_request,
                Some("InternalServerError") => &mut p.internal_server,
                _ => {
                    return Err(format!(
                        "unknown key {} (expected TimeoutError{suffix}, RateLimitError{suffix}, AuthenticationError{suffix}, ContentPolicyViolationError{suffix}, BadRequestError{suffix} or InternalServerError{suffix})",
                        show(k)
                    ))
                }
            };
            *slot = Some(count(n).map_err(|e| format!("{key}: {e}"))?);
        }
        Ok(p)
    }

    /// The number for an error class, when set (an overloaded provider
    /// counts as an internal server error, a context-window error as a bad
    /// request, as in LiteLLM).
    pub fn for_class(&self, class: ErrorClass) -> Option<u32> {
        match class {
            ErrorClass::Timeout => self.timeout,
            ErrorClass::RateLimit => self.rate_limit,
            ErrorClass::Authentication => self.authentication,
            ErrorClass::ContentPolicy => self.content_policy,
            ErrorClass::BadRequest | ErrorClass::ContextWindow => self.bad_request,
            ErrorClass::InternalServer | ErrorClass::Overloaded => self.internal_server,
            ErrorClass::ApiConnection | ErrorClass::ClientDisconnected | ErrorClass::CutOff => None,
        }
    }
}

/// Retries a group gets after a failure of `class`: the policy's number when
/// set, else none for a request the provider refused as such (bad request,
/// context window, content policy: the same request fails the same way;
/// LiteLLM retries them and wastes the calls), else `num_retries`.
pub(crate) fn retries_for(policy: &PerClass, class: ErrorClass, num_retries: u32) -> u32 {
    policy.for_class(class).unwrap_or(match class {
        ErrorClass::BadRequest | ErrorClass::ContextWindow | ErrorClass::ContentPolicy => 0,
        _ => num_retries,
    })
}

/// The wait before retry `n` (1-based) on the deployment that just failed:
/// its `retry-after` when it sent one, else exponential backoff with jitter
/// (0.5 s doubling up to 8 s, less up to a quarter); never below `min`
/// (`router_settings.retry_after`).
pub(crate) fn backoff(
    n: u32,
    retry_after: Option<Duration>,
    min: Duration,
    rng: &mut fastrand::Rng,
) -> Duration {
    let wait = match retry_after {
        Some(ra) => ra,
        None => {
            let exp = INITIAL_BACKOFF_SECS * 2f64.powi(n.saturating_sub(1).min(16) as i32);
            let jitter = 1.0 - 0.25 * rng.f64();
            Duration::from_secs_f64(exp.min(MAX_BACKOFF_SECS) * jitter)
        }
    };
    wait.max(min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_then_class_default_then_num_retries() {
        let p = PerClass {
            timeout: Some(5),
            bad_request: Some(1),
            ..Default::default()
        };
        assert_eq!(retries_for(&p, ErrorClass::Timeout, 2), 5);
        assert_eq!(retries_for(&p, ErrorClass::BadRequest, 2), 1);
        assert_eq!(retries_for(&p, ErrorClass::ContextWindow, 2), 1);
        assert_eq!(retries_for(&p, ErrorClass::RateLimit, 2), 2);
        assert_eq!(retries_for(&p, ErrorClass::InternalServer, 3), 3);
        assert_eq!(retries_for(&p, ErrorClass::ApiConnection, 3), 3);
        assert_eq!(retries_for(&p, ErrorClass::Authentication, 3), 3);
        assert_eq!(retries_for(&p, ErrorClass::ContentPolicy, 3), 0);
        assert_eq!(
            retries_for(&PerClass::default(), ErrorClass::BadRequest, 3),
            0
        );
    }

    #[test]
    fn backoff_doubles_with_jitter_and_honours_retry_after() {
        let mut rng = fastrand::Rng::with_seed(1);
        for n in 1..=6 {
            let want = (0.5 * 2f64.powi(n - 1)).min(8.0);
            let got = backoff(n as u32, None, Duration::ZERO, &mut rng).as_secs_f64();
            assert!(got <= want && got >= want * 0.75, "{n}: {got}");
        }
        let ra = Some(Duration::from_secs(3));
        assert_eq!(
            backoff(1, ra, Duration::ZERO, &mut rng),
            Duration::from_secs(3)
        );
        assert_eq!(
            backoff(1, ra, Duration::from_secs(4), &mut rng),
            Duration::from_secs(4)
        );
        assert!(backoff(9, None, Duration::from_secs(20), &mut rng) == Duration::from_secs(20));
    }

    #[test]
    fn parses_policy_names() {
        let v: Value = serde_yaml::from_str("{TimeoutErrorRetries: 1, InternalServerErrorRetries: 2, RateLimitErrorRetries: 3, AuthenticationErrorRetries: 4, ContentPolicyViolationErrorRetries: 5}").unwrap();
        let p = PerClass::parse(&v, "Retries").unwrap();
        assert_eq!(
            [
                p.timeout,
                p.internal_server,
                p.rate_limit,
                p.authentication,
                p.content_policy
            ],
            [Some(1), Some(2), Some(3), Some(4), Some(5)]
        );
        let v: Value = serde_yaml::from_str("{BadRequestErrorAllowedFails: -2}").unwrap();
        assert!(PerClass::parse(&v, "AllowedFails")
            .unwrap_err()
            .starts_with("BadRequestErrorAllowedFails: expected a whole number"));
    }
}
