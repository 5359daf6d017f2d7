//! The open-loop send schedule (wrk2-style): request `i` is due at
//! `start + i / rate` whatever happened to earlier requests. When the sender
//! falls behind (every connection still busy when a request is due), that
//! request's latency is charged from its due time, not from when a
//! connection got round to it, so a stalled server cannot hide its stall
//! (no coordinated omission).
//!
//! A request a connection took up in time but that the timer woke a little
//! late (monoio's timer wheel has millisecond resolution) is charged from
//! its actual send: that delay is the load generator's, not the server's.
//!
//! Times here are offsets from the start of the run, so the arithmetic is
//! pure and testable without a clock.

use std::time::Duration;

/// A constant-rate schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    rate: f64,
}

impl Schedule {
    /// A schedule of `rate` requests per second (must be positive).
    pub fn new(rate: f64) -> Self {
        assert!(rate > 0.0, "rate must be positive");
        Schedule { rate }
    }

    /// When request `slot` is due: `slot / rate` after the start.
    pub fn due(&self, slot: u64) -> Duration {
        Duration::from_secs_f64(slot as f64 / self.rate)
    }

    /// Number of requests due within `window` after the start.
    pub fn slots_within(&self, window: Duration) -> u64 {
        (window.as_secs_f64() * self.rate).ceil() as u64
    }
}

/// The instant a request's latency counts from, given when it was `due`,
/// when a free connection `claimed` it and when it was actually `sent`.
pub fn charged_from(due: Duration, claimed: Duration, sent: Duration) -> Duration {
    if is_late(due, claimed) {
        due
    } else {
        sent
    }
}

/// Whether the sender fell behind: no connection was free to take the
/// request before it was due.
pub fn is_late(due: Duration, claimed: Duration) -> bool {
    claimed > due
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn due_times_are_start_plus_i_over_rate() {
        let s = Schedule::new(200.0);
        assert_eq!(s.due(0), Duration::ZERO);
        assert_eq!(s.due(1), 5 * MS);
        assert_eq!(s.due(1000), Duration::from_secs(5));
        assert_eq!(s.slots_within(Duration::from_secs(10)), 2000);
        assert_eq!(Schedule::new(3.0).slots_within(Duration::from_secs(1)), 3);
        assert_eq!(Schedule::new(0.5).slots_within(Duration::from_secs(3)), 2);
    }

    #[test]
    fn a_late_timer_is_not_charged() {
        let (claimed, due) = (2 * MS, 10 * MS);
        let sent = due + Duration::from_micros(1400);
        assert!(!is_late(due, claimed));
        assert_eq!(charged_from(due, claimed, sent), sent);
    }

    /// One connection, a server that takes 10 ms per request, requests due
    /// every 5 ms: the sender falls further behind each time, and the
    /// latency it reports grows with the backlog instead of staying at the
    /// 10 ms a closed-loop client would see.
    #[test]
    fn backlog_is_charged_when_the_sender_falls_behind() {
        let schedule = Schedule::new(200.0);
        let service = 10 * MS;
        let mut free_at = Duration::ZERO;
        let mut latencies = Vec::new();
        for slot in 0..5 {
            let due = schedule.due(slot);
            let claimed = free_at;
            let sent = due.max(claimed);
            let done = sent + service;
            free_at = done;
            latencies.push(done - charged_from(due, claimed, sent));
            assert_eq!(is_late(due, claimed), slot > 0);
        }
        // Slot i is sent 5·i ms after it was due; all of it is charged.
        let expected: Vec<Duration> = [10, 15, 20, 25, 30].iter().map(|&m| m * MS).collect();
        assert_eq!(latencies, expected);
    }
}
