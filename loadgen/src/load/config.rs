//! What one load run does: target, requests, pacing and when it stops.

use std::time::Duration;

use crate::client::{RequestSpec, Target};
use crate::schedule::Schedule;

/// How sends are paced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// A fixed schedule of `rate` requests per second over all workers;
    /// latency counts from each request's due time.
    Open {
        /// Requests per second.
        rate: f64,
    },
    /// Each connection sends its next request when the previous one ends;
    /// latency counts from the actual send.
    Closed,
}

/// One load run.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadConfig {
    /// Where requests go.
    pub target: Target,
    /// What they look like.
    pub spec: RequestSpec,
    /// Pacing.
    pub mode: Mode,
    /// Keep-alive connections over all workers.
    pub connections: usize,
    /// Worker threads, each with its own runtime.
    pub workers: usize,
    /// Sending stops after this long (in-flight requests still finish).
    pub duration: Option<Duration>,
    /// Sending stops after this many requests.
    pub requests: Option<u64>,
    /// A request without a complete response after this long fails.
    pub timeout: Duration,
    /// Closed loop: connections start one by one over this period.
    pub ramp: Duration,
}

impl LoadConfig {
    /// Checks that the run is well-formed and ends by itself.
    pub fn validate(&self) -> Result<(), String> {
        if self.duration.is_none() && self.requests.is_none() {
            return Err("a run needs --duration or --requests to end".into());
        }
        if self.workers == 0 || self.connections < self.workers {
            return Err("need at least one worker and one connection per worker".into());
        }
        if let Mode::Open { rate } = self.mode {
            if !(rate > 0.0 && rate.is_finite()) {
                return Err("--rate must be a positive number".into());
            }
            if !self.ramp.is_zero() {
                return Err("a ramp applies to closed-loop runs only".into());
            }
        }
        if self.spec.models.is_empty() {
            return Err("--model needs at least one name".into());
        }
        Ok(())
    }

    /// Open loop: how many requests the schedule holds.
    pub fn open_slots(&self, rate: f64) -> u64 {
        let schedule = Schedule::new(rate);
        let by_time = self.duration.map_or(u64::MAX, |d| schedule.slots_within(d));
        by_time.min(self.requests.unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: Mode) -> LoadConfig {
        LoadConfig {
            target: Target::parse("http://127.0.0.1:1").unwrap(),
            spec: RequestSpec {
                models: vec!["m".into()],
                keys: vec![],
                body_size: 1024,
                stream: false,
                max_tokens: 16,
                extra: None,
            },
            mode,
            connections: 4,
            workers: 1,
            duration: Some(Duration::from_secs(10)),
            requests: None,
            timeout: Duration::from_secs(5),
            ramp: Duration::ZERO,
        }
    }

    #[test]
    fn open_slots_take_the_tighter_limit() {
        let mut c = config(Mode::Open { rate: 100.0 });
        assert_eq!(c.open_slots(100.0), 1000);
        c.requests = Some(10);
        assert_eq!(c.open_slots(100.0), 10);
        c.duration = None;
        assert_eq!(c.open_slots(100.0), 10);
    }

    #[test]
    fn rejects_runs_that_never_end_or_cannot_run() {
        let mut c = config(Mode::Closed);
        assert!(c.validate().is_ok());
        c.duration = None;
        assert!(c.validate().is_err());
        let mut c = config(Mode::Open { rate: 0.0 });
        assert!(c.validate().is_err());
        c.mode = Mode::Open { rate: 5.0 };
        c.workers = 5;
        assert!(c.validate().is_err());
    }
}
