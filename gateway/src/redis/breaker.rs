//! The Redis circuit breaker, as LiteLLM's env vars switch it.
//!
//! Closed: every limiter call goes to Redis. After `threshold` consecutive
//! connection errors or timeouts it opens: no Redis call is attempted and
//! limits are enforced on this process's counters. After `recovery` one
//! probe is let through (half-open); its success closes the breaker, its
//! failure opens it for another `recovery`. Disabled, it never opens.
//! All state is atomics, read by every core without a lock.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// `REDIS_CIRCUIT_BREAKER_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// `REDIS_CIRCUIT_BREAKER_ENABLED` (default true).
    pub enabled: bool,
    /// `REDIS_CIRCUIT_BREAKER_FAILURE_THRESHOLD` (default 5).
    pub threshold: u32,
    /// `REDIS_CIRCUIT_BREAKER_RECOVERY_TIMEOUT` (default 60 s).
    pub recovery: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            enabled: true,
            threshold: 5,
            recovery: Duration::from_secs(60),
        }
    }
}

/// The breaker's state as `/health` and logs report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go to Redis.
    Closed,
    /// No call goes to Redis.
    Open,
    /// One probe is on its way.
    HalfOpen,
}

/// A circuit breaker shared by every core.
#[derive(Debug)]
pub struct Breaker {
    settings: BreakerSettings,
    epoch: Instant,
    failures: AtomicU32,
    /// Milliseconds since `epoch` when it opened, plus one; 0 when closed.
    opened_at: AtomicU64,
    probing: AtomicBool,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(settings: BreakerSettings) -> Breaker {
        Breaker {
            settings,
            epoch: Instant::now(),
            failures: AtomicU32::new(0),
            opened_at: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Whether a call may go to Redis now. In half-open state exactly one
    /// caller gets `true` (the probe) and must report its outcome.
    pub fn allow(&self) -> bool {
        let opened = self.opened_at.load(Ordering::Acquire);
        if opened == 0 {
            return true;
        }
        if self.now_ms().saturating_sub(opened) < self.settings.recovery.as_millis() as u64 {
            return false;
        }
        self.probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        if self.opened_at.load(Ordering::Acquire) == 0 {
            BreakerState::Closed
        } else if self.probing.load(Ordering::Acquire) {
            BreakerState::HalfOpen
        } else {
            BreakerState::Open
        }
    }

    /// A Redis call succeeded. Returns true when this closed an open breaker.
    pub fn on_success(&self) -> bool {
        self.failures.store(0, Ordering::Release);
        let was_open = self.opened_at.swap(0, Ordering::AcqRel) != 0;
        self.probing.store(false, Ordering::Release);
        was_open
    }

    /// A Redis call failed with a connection error or a timeout (other
    /// errors must not be reported). Returns true when this opened the
    /// breaker.
    pub fn on_failure(&self) -> bool {
        if !self.settings.enabled {
            return false;
        }
        if self.probing.swap(false, Ordering::AcqRel) {
            self.opened_at.store(self.now_ms(), Ordering::Release);
            return false;
        }
        let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        failures >= self.settings.threshold
            && self
                .opened_at
                .compare_exchange(0, self.now_ms(), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// The probe never reached Redis (the queue was full): let another try.
    pub fn abandon_probe(&self) {
        self.probing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(enabled: bool, recovery_ms: u64) -> Breaker {
        Breaker::new(BreakerSettings {
            enabled,
            threshold: 3,
            recovery: Duration::from_millis(recovery_ms),
        })
    }

    #[test]
    fn opens_after_the_threshold_of_consecutive_failures() {
        let b = breaker(true, 60_000);
        assert!(!b.on_failure());
        assert!(!b.on_failure());
        b.on_success();
        assert!(!b.on_failure());
        assert!(!b.on_failure());
        assert!(b.on_failure(), "third consecutive failure opens it");
        assert_eq!(b.state(), BreakerState::Open);
        assert!(!b.allow());
    }

    #[test]
    fn half_open_lets_one_probe_through_and_closes_on_its_success() {
        let b = breaker(true, 0);
        for _ in 0..3 {
            b.on_failure();
        }
        assert!(b.allow(), "recovery elapsed: the probe");
        assert!(!b.allow(), "only one probe at a time");
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(b.on_success());
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.allow() && b.allow());
    }

    #[test]
    fn a_failed_probe_reopens() {
        let b = breaker(true, 50);
        for _ in 0..3 {
            b.on_failure();
        }
        std::thread::sleep(Duration::from_millis(60));
        assert!(b.allow());
        b.on_failure();
        assert_eq!(b.state(), BreakerState::Open);
        assert!(!b.allow(), "open again for another recovery period");
    }

    #[test]
    fn disabled_never_opens() {
        let b = breaker(false, 60_000);
        for _ in 0..100 {
            assert!(!b.on_failure());
        }
        assert!(b.allow());
        assert_eq!(b.state(), BreakerState::Closed);
    }
}
