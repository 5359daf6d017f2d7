//! Live counters of a run, readable from other threads while it runs.

use std::sync::atomic::{AtomicU64, Ordering};

/// Requests in flight and finished so far, over all workers.
#[derive(Debug, Default)]
pub struct Progress {
    started: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
}

/// A point-in-time copy of [`Progress`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgressSnapshot {
    /// Requests sent and not yet finished.
    pub in_flight: u64,
    /// Requests answered with a complete response (any status).
    pub completed: u64,
    /// Requests that failed without a complete response.
    pub failed: u64,
}

impl Progress {
    /// Notes a request being sent.
    pub fn start(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes a request finishing, successfully or not.
    pub fn finish(&self, ok: bool) {
        let counter = if ok { &self.completed } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads the counters.
    pub fn snapshot(&self) -> ProgressSnapshot {
        let completed = self.completed.load(Ordering::Relaxed);
        let failed = self.failed.load(Ordering::Relaxed);
        let started = self.started.load(Ordering::Relaxed);
        ProgressSnapshot {
            in_flight: started.saturating_sub(completed + failed),
            completed,
            failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_in_flight() {
        let p = Progress::default();
        p.start();
        p.start();
        p.start();
        p.finish(true);
        p.finish(false);
        assert_eq!(
            p.snapshot(),
            ProgressSnapshot {
                in_flight: 1,
                completed: 1,
                failed: 1
            }
        );
    }
}
