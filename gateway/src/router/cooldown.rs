//! Cooldowns: a deployment that fails is set aside for a while. Per
//! deployment one atomic, the end of its cooldown in the router clock's
//! milliseconds; setting and reading it take no lock.
//!
//! The rules are LiteLLM's. With `allowed_fails` or `allowed_fails_policy`
//! set, a deployment cools when its failures this minute exceed the allowed
//! number (per error class with the policy). Otherwise it cools on a 429
//! when its group has other deployments, on a 401, 403 or 404 (a
//! deployment that cannot serve), or when more than half of at least five
//! requests this minute failed. Only the deployment's own faults count:
//! a bad request or a content-policy refusal says nothing of its health.
//!
//! A group is never cooled to nothing: selection falls back to the
//! deployment whose cooldown ends first (see `select`).

use super::settings::RouterSettings;
use crate::error::ErrorClass;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// LiteLLM's default `allowed_fails` when only the policy is set.
const DEFAULT_ALLOWED_FAILS: u32 = 3;
/// Requests in a minute before the failure rate is judged.
const MIN_REQUESTS_FOR_RATE: u64 = 5;
/// Longest cooldown an upstream `retry-after` can ask for.
const MAX_COOLDOWN: Duration = Duration::from_secs(3600);

/// When each deployment's cooldown ends, by slot.
#[derive(Debug)]
pub(crate) struct Cooldowns {
    until: Box<[Arc<AtomicU64>]>,
}

impl Cooldowns {
    /// No deployment cooling, for `n` deployments.
    #[cfg(test)]
    pub(crate) fn new(n: usize) -> Self {
        Self::from_slots((0..n).map(|_| Arc::default()).collect())
    }

    /// The cooldown ends given for each slot (some carried over from an
    /// earlier snapshot).
    pub(crate) fn from_slots(until: Vec<Arc<AtomicU64>>) -> Self {
        Cooldowns {
            until: until.into(),
        }
    }

    /// The cooldown end of `slot`, shared, to carry into a new snapshot.
    pub(crate) fn shared(&self, slot: usize) -> Arc<AtomicU64> {
        self.until[slot].clone()
    }

    /// Whether the deployment in `slot` is cooling at `now_ms`.
    pub(crate) fn is_cooling(&self, slot: usize, now_ms: u64) -> bool {
        self.until(slot) > now_ms
    }

    /// When the cooldown of `slot` ends (0 if it never cooled).
    pub(crate) fn until(&self, slot: usize) -> u64 {
        self.until[slot].load(Relaxed)
    }

    /// Cools `slot` from `now_ms` for `time` (a longer cooldown already
    /// running is kept); returns the end in force.
    pub(crate) fn start(&self, slot: usize, now_ms: u64, time: Duration) -> u64 {
        self.extend_to(slot, now_ms.saturating_add(time.as_millis() as u64))
    }

    /// Cools `slot` until `end_ms` unless it already cools longer; returns
    /// the end in force.
    pub(crate) fn extend_to(&self, slot: usize, end_ms: u64) -> u64 {
        self.until[slot].fetch_max(end_ms, Relaxed).max(end_ms)
    }
}

/// Whether a failure is the deployment's fault (and counts toward its
/// failure rate and allowed fails).
pub(crate) fn is_deployment_fault(class: ErrorClass, status: u16) -> bool {
    matches!(
        class,
        ErrorClass::Timeout
            | ErrorClass::RateLimit
            | ErrorClass::Overloaded
            | ErrorClass::Authentication
            | ErrorClass::InternalServer
            | ErrorClass::ApiConnection
    ) || status == 404
}

/// Whether a deployment that just failed with `class`/`status` cools, given
/// the size of its group and its successes and failures this minute (this
/// failure included).
pub(crate) fn should_cool(
    settings: &RouterSettings,
    class: ErrorClass,
    status: u16,
    group_len: usize,
    (successes, failures): (u64, u64),
) -> bool {
    if settings.disable_cooldowns || !is_deployment_fault(class, status) {
        return false;
    }
    if let Some(allowed) = allowed_fails(settings, class) {
        return failures > u64::from(allowed);
    }
    // An overloaded provider (Anthropic's 529) is at capacity like a 429.
    if (status == 429 || class == ErrorClass::Overloaded) && group_len > 1 {
        return true;
    }
    if matches!(status, 401 | 403 | 404) {
        return true;
    }
    let total = successes + failures;
    total >= MIN_REQUESTS_FOR_RATE && failures * 2 > total
}

/// The failures of `class` allowed in a minute before a cooldown, when
/// `allowed_fails` or `allowed_fails_policy` is set (`None`: the default
/// rules apply).
pub(crate) fn allowed_fails(settings: &RouterSettings, class: ErrorClass) -> Option<u32> {
    if settings.allowed_fails.is_none() && settings.allowed_fails_policy.is_none() {
        return None;
    }
    let allowed = settings
        .allowed_fails_policy
        .as_ref()
        .and_then(|p| p.for_class(class))
        .or(settings.allowed_fails)
        .unwrap_or(DEFAULT_ALLOWED_FAILS);
    Some(allowed)
}

/// How long a cooldown lasts: the upstream's `retry-after` when it sent
/// one (at most an hour), else `cooldown_time`.
pub(crate) fn cooldown_time(settings: &RouterSettings, retry_after: Option<Duration>) -> Duration {
    retry_after.map_or(settings.cooldown_time, |ra| ra.min(MAX_COOLDOWN))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::retry::PerClass;

    #[test]
    fn entry_and_expiry() {
        let c = Cooldowns::new(2);
        assert!(!c.is_cooling(0, 0));
        c.start(0, 1_000, Duration::from_secs(5));
        assert!(c.is_cooling(0, 1_000) && c.is_cooling(0, 5_999));
        assert!(!c.is_cooling(0, 6_000), "expired");
        c.start(0, 2_000, Duration::from_secs(1));
        assert_eq!(c.until(0), 6_000, "a running longer cooldown is kept");
        assert!(!c.is_cooling(1, 1_000));
    }

    #[test]
    fn default_rules() {
        let s = RouterSettings::default();
        assert!(should_cool(&s, ErrorClass::RateLimit, 429, 2, (0, 1)));
        assert!(
            !should_cool(&s, ErrorClass::RateLimit, 429, 1, (0, 1)),
            "single deployment"
        );
        assert!(should_cool(&s, ErrorClass::Authentication, 401, 1, (0, 1)));
        assert!(should_cool(&s, ErrorClass::BadRequest, 404, 3, (9, 1)));
        assert!(
            !should_cool(&s, ErrorClass::BadRequest, 400, 3, (0, 9)),
            "client's fault"
        );
        assert!(!should_cool(&s, ErrorClass::ContentPolicy, 400, 3, (0, 9)));
        assert!(
            !should_cool(&s, ErrorClass::InternalServer, 500, 3, (1, 3)),
            "only 4 requests"
        );
        assert!(
            should_cool(&s, ErrorClass::InternalServer, 500, 3, (2, 3)),
            "3 of 5 failed"
        );
        assert!(
            !should_cool(&s, ErrorClass::Timeout, 408, 3, (3, 3)),
            "half is not more than half"
        );
        let off = RouterSettings {
            disable_cooldowns: true,
            ..RouterSettings::default()
        };
        assert!(!should_cool(&off, ErrorClass::RateLimit, 429, 2, (0, 9)));
    }

    #[test]
    fn allowed_fails_replace_the_default_rules() {
        let s = RouterSettings {
            allowed_fails: Some(2),
            ..RouterSettings::default()
        };
        assert!(!should_cool(&s, ErrorClass::RateLimit, 429, 3, (0, 2)));
        assert!(should_cool(&s, ErrorClass::RateLimit, 429, 3, (0, 3)));
        assert!(!should_cool(&s, ErrorClass::Authentication, 401, 3, (0, 1)));
        let policy = RouterSettings {
            allowed_fails_policy: Some(PerClass {
                timeout: Some(0),
                ..PerClass::default()
            }),
            ..RouterSettings::default()
        };
        assert!(should_cool(&policy, ErrorClass::Timeout, 408, 3, (0, 1)));
        assert!(
            !should_cool(&policy, ErrorClass::InternalServer, 500, 3, (0, 3)),
            "default 3"
        );
        assert!(should_cool(
            &policy,
            ErrorClass::InternalServer,
            500,
            3,
            (0, 4)
        ));
    }

    #[test]
    fn cooldown_time_honours_retry_after() {
        let s = RouterSettings::default();
        assert_eq!(cooldown_time(&s, None), Duration::from_secs(5));
        assert_eq!(
            cooldown_time(&s, Some(Duration::from_secs(20))),
            Duration::from_secs(20)
        );
        assert_eq!(
            cooldown_time(&s, Some(Duration::from_secs(1 << 20))),
            MAX_COOLDOWN
        );
    }
}
