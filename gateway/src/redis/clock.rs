//! Redis's clock as seen from this process: read once per connection
//! (`TIME`), so a call's deadline can be written in Redis time and
//! `limiter.lua` can refuse to run a call after it (see [`super::release`]).

use std::time::{Duration, Instant};

/// One reading of Redis's clock: `redis_ms` (Unix milliseconds on the Redis
/// server) was the time at `at` here.
#[derive(Debug, Clone, Copy)]
pub struct RedisClock {
    at: Instant,
    redis_ms: u64,
    /// How far the server's reading may be from `at`: half the round trip.
    uncertainty: Duration,
}

impl RedisClock {
    /// The reading of a `TIME` reply (`secs`, `micros`) to a command sent at
    /// `sent` and answered at `answered`; the server's time is placed at the
    /// middle of the round trip.
    pub fn from_time(secs: u64, micros: u64, sent: Instant, answered: Instant) -> RedisClock {
        let half = answered.saturating_duration_since(sent) / 2;
        RedisClock {
            at: sent + half,
            redis_ms: secs.saturating_mul(1000).saturating_add(micros / 1000),
            uncertainty: half,
        }
    }

    /// A deadline at `instant` in Redis time, never later than it: the
    /// reading's uncertainty (half its round trip) is taken off, so
    /// a script Redis runs before this deadline ran before the caller gave
    /// up at `instant` (a script that may have run is never also counted as
    /// not run).
    pub fn deadline_ms(&self, instant: Instant) -> u64 {
        let slack = u64::try_from(self.uncertainty.as_millis()).unwrap_or(u64::MAX);
        self.redis_ms(instant).saturating_sub(slack).max(1)
    }

    /// `instant` in Redis time, Unix milliseconds (at least 1: 0 means "no
    /// deadline" to the script).
    pub fn redis_ms(&self, instant: Instant) -> u64 {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let t = if instant >= self.at {
            self.redis_ms.saturating_add(ms(instant - self.at))
        } else {
            self.redis_ms.saturating_sub(ms(self.at - instant))
        };
        t.max(1)
    }
}

/// Reads a `TIME` reply's two numbers.
pub fn parse_time(parts: &[String]) -> Option<(u64, u64)> {
    match parts {
        [secs, micros] => Some((secs.parse().ok()?, micros.parse().ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_map_to_redis_time() {
        let sent = Instant::now();
        let clock = RedisClock::from_time(1_000, 500_000, sent, sent + Duration::from_millis(4));
        // Redis said 1000.5 s two milliseconds after `sent`.
        assert_eq!(clock.redis_ms(sent + Duration::from_millis(2)), 1_000_500);
        assert_eq!(clock.redis_ms(sent + Duration::from_millis(102)), 1_000_600);
        assert_eq!(clock.redis_ms(sent), 1_000_498);
        // As a deadline: the 2 ms of uncertainty earlier.
        assert_eq!(
            clock.deadline_ms(sent + Duration::from_millis(102)),
            1_000_598
        );
        assert_eq!(parse_time(&["17".into(), "250".into()]), Some((17, 250)));
        assert_eq!(parse_time(&["x".into()]), None);
    }
}
