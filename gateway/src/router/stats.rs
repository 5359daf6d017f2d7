//! Live numbers per deployment, per process: requests in flight, a moving
//! average of latency, and per-minute counters of requests, tokens,
//! successes and failures. Plain atomics, one cache line per deployment:
//! reading and updating them takes no lock.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds in a counting window (LiteLLM counts usage per minute).
const MINUTE_MS: u64 = 60_000;

/// Bits of a packed counter that hold the count; the rest hold the minute.
const COUNT_BITS: u32 = 40;

/// Weight of a new latency sample in the moving average.
const EWMA_NEW_PART: f64 = 0.25;

/// Milliseconds since the router started, offset so that minute boundaries
/// fall on wall-clock minutes (LiteLLM's `HH-MM` windows).
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    start: Instant,
    offset_ms: u64,
}

impl Clock {
    /// A clock starting now.
    pub(crate) fn new() -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Clock {
            start: Instant::now(),
            offset_ms: wall % MINUTE_MS,
        }
    }

    /// The current time in milliseconds.
    pub(crate) fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64 + self.offset_ms
    }

    /// `router_ms` of this clock as unix milliseconds, for other replicas.
    pub(crate) fn to_unix(&self, router_ms: u64) -> u64 {
        rebase(router_ms, self.now_ms(), super::fleet::unix_ms())
    }

    /// `unix_ms` (from another replica) on this clock.
    pub(crate) fn of_unix(&self, unix_ms: u64) -> u64 {
        rebase(unix_ms, super::fleet::unix_ms(), self.now_ms())
    }
}

/// The instant `ms` of a clock that reads `from_now` now, on a clock that
/// reads `to_now` now (saturating at both ends).
pub(crate) fn rebase(ms: u64, from_now: u64, to_now: u64) -> u64 {
    if ms >= from_now {
        to_now.saturating_add(ms - from_now)
    } else {
        to_now.saturating_sub(from_now - ms)
    }
}

/// The counting window `now_ms` falls in.
pub(crate) fn minute_of(now_ms: u64) -> u64 {
    now_ms / MINUTE_MS
}

/// A count that restarts every minute: the minute and the count packed in
/// one atomic, so a reader never mixes one minute's count with another's.
#[derive(Debug, Default)]
pub(crate) struct MinuteCounter(AtomicU64);

impl MinuteCounter {
    fn pack(minute: u64, count: u64) -> u64 {
        (minute << COUNT_BITS) | count.min((1 << COUNT_BITS) - 1)
    }

    fn tag(minute: u64) -> u64 {
        minute & ((1 << (64 - COUNT_BITS)) - 1)
    }

    /// Adds `n` in `minute` and returns the new count.
    pub(crate) fn add(&self, minute: u64, n: u64) -> u64 {
        let tag = Self::tag(minute);
        let mut new = 0;
        let _ = self.0.fetch_update(Relaxed, Relaxed, |cur| {
            let count = if cur >> COUNT_BITS == tag {
                cur & ((1 << COUNT_BITS) - 1)
            } else {
                0
            };
            new = count.saturating_add(n);
            Some(Self::pack(tag, new))
        });
        new
    }

    /// The count of `minute` (0 when the counter last moved in another).
    pub(crate) fn get(&self, minute: u64) -> u64 {
        let cur = self.0.load(Relaxed);
        if cur >> COUNT_BITS == Self::tag(minute) {
            cur & ((1 << COUNT_BITS) - 1)
        } else {
            0
        }
    }

    /// Starts `minute` again from zero.
    pub(crate) fn reset(&self, minute: u64) {
        self.0.store(Self::pack(Self::tag(minute), 0), Relaxed);
    }
}

/// The live numbers of one deployment, alone on its cache line so cores
/// updating different deployments do not contend.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct DeploymentStats {
    in_flight: AtomicU64,
    /// Moving average of latency in microseconds; 0 before the first sample.
    latency_us: AtomicU64,
    requests: MinuteCounter,
    tokens: MinuteCounter,
    successes: MinuteCounter,
    failures: MinuteCounter,
}

impl DeploymentStats {
    /// Requests sent and not yet finished.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Relaxed)
    }

    /// Moving average of recent latencies; `None` before the first sample.
    pub fn latency(&self) -> Option<Duration> {
        match self.latency_us.load(Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Requests started in `minute`.
    pub fn requests_in(&self, minute: u64) -> u64 {
        self.requests.get(minute)
    }

    /// Tokens used by requests that finished in `minute`.
    pub fn tokens_in(&self, minute: u64) -> u64 {
        self.tokens.get(minute)
    }

    /// Successes and failures counted in `minute`, for the failure-rate rule.
    pub(crate) fn health_in(&self, minute: u64) -> (u64, u64) {
        (self.successes.get(minute), self.failures.get(minute))
    }

    /// A request is sent.
    pub(crate) fn start(&self, minute: u64) {
        self.in_flight.fetch_add(1, Relaxed);
        self.requests.add(minute, 1);
    }

    /// A request finished well after `latency`, using `tokens`.
    pub(crate) fn succeed(&self, minute: u64, latency: Duration, tokens: u64) {
        self.finish();
        self.observe_latency(latency);
        self.tokens.add(minute, tokens);
        self.successes.add(minute, 1);
    }

    /// A request failed; `counts` says whether the failure is the
    /// deployment's (it then counts toward the failure rate), `slow` whether
    /// its latency should weigh on the average (a timeout).
    pub(crate) fn fail(&self, minute: u64, latency: Duration, counts: bool, slow: bool) {
        self.finish();
        if slow {
            self.observe_latency(latency);
        }
        if counts {
            self.failures.add(minute, 1);
        }
    }

    /// Forgets the minute's successes and failures (after a cooldown, the
    /// deployment is judged afresh).
    pub(crate) fn reset_health(&self, minute: u64) {
        self.successes.reset(minute);
        self.failures.reset(minute);
    }

    /// A request was dropped before it ended (neither a success nor a
    /// failure): it only leaves the in-flight count.
    pub(crate) fn abandon(&self) {
        self.finish();
    }

    fn finish(&self) {
        let _ = self
            .in_flight
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
    }

    fn observe_latency(&self, latency: Duration) {
        let sample = (latency.as_micros() as u64).max(1);
        let _ = self.latency_us.fetch_update(Relaxed, Relaxed, |old| {
            Some(if old == 0 {
                sample
            } else {
                ((old as f64) + EWMA_NEW_PART * (sample as f64 - old as f64)).max(1.0) as u64
            })
        });
    }
}

/// The live numbers of every deployment, by slot.
#[derive(Debug)]
pub(crate) struct Stats {
    slots: Box<[Arc<DeploymentStats>]>,
}

impl Stats {
    /// The numbers given for each slot (some carried over from an earlier
    /// snapshot).
    pub(crate) fn from_slots(slots: Vec<Arc<DeploymentStats>>) -> Self {
        Stats {
            slots: slots.into(),
        }
    }

    /// The numbers of the deployment in `slot`.
    pub(crate) fn get(&self, slot: usize) -> &DeploymentStats {
        &self.slots[slot]
    }

    /// The numbers of `slot`, shared, to carry into a new snapshot.
    pub(crate) fn shared(&self, slot: usize) -> Arc<DeploymentStats> {
        self.slots[slot].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minute_counter_restarts_each_minute() {
        let c = MinuteCounter::default();
        assert_eq!(c.add(7, 2), 2);
        assert_eq!(c.add(7, 3), 5);
        assert_eq!((c.get(7), c.get(8)), (5, 0));
        assert_eq!(c.add(8, 1), 1);
        assert_eq!(c.get(7), 0);
        c.reset(8);
        assert_eq!(c.get(8), 0);
    }

    #[test]
    fn start_and_finish_track_load_latency_and_usage() {
        let s = DeploymentStats::default();
        s.start(1);
        s.start(1);
        assert_eq!((s.in_flight(), s.requests_in(1)), (2, 2));
        s.succeed(1, Duration::from_millis(100), 40);
        assert_eq!(s.latency(), Some(Duration::from_millis(100)));
        s.fail(1, Duration::from_millis(500), true, true);
        assert_eq!(s.latency(), Some(Duration::from_millis(200)));
        assert_eq!(
            (s.in_flight(), s.tokens_in(1), s.health_in(1)),
            (0, 40, (1, 1))
        );
        s.fail(1, Duration::from_secs(9), false, false);
        assert_eq!(s.in_flight(), 0, "never below zero");
        assert_eq!(s.health_in(1), (1, 1), "a client error is not counted");
        s.reset_health(1);
        assert_eq!(s.health_in(1), (0, 0));
    }

    #[test]
    fn rebase_moves_an_instant_between_clocks() {
        assert_eq!(rebase(1_500, 1_000, 70_000), 70_500, "future");
        assert_eq!(rebase(400, 1_000, 70_000), 69_400, "past");
        assert_eq!(rebase(0, 1_000, 300), 0, "before the target clock began");
        assert_eq!(rebase(u64::MAX, 0, 10), u64::MAX, "far future saturates");
    }

    #[test]
    fn unix_and_router_milliseconds_round_trip() {
        let clock = Clock::new();
        let end = clock.now_ms() + 5_000;
        let unix = clock.to_unix(end);
        assert!(unix.abs_diff(crate::router::fleet::unix_ms() + 5_000) < 50);
        assert!(clock.of_unix(unix).abs_diff(end) < 50);
        let other = Clock {
            start: Instant::now(),
            offset_ms: 7,
        };
        assert!(other.of_unix(unix).abs_diff(other.now_ms() + 5_000) < 50);
    }

    #[test]
    fn clock_minutes_follow_the_wall_clock() {
        let clock = Clock::new();
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let ours = clock.now_ms() % MINUTE_MS;
        let theirs = wall.as_millis() as u64 % MINUTE_MS;
        assert!(ours.abs_diff(theirs) < 1000 || ours.abs_diff(theirs) > MINUTE_MS - 1000);
    }
}
