//! The sliding window every rpm/tpm counter uses, locally and in Redis.
//!
//! LiteLLM counts in fixed windows, so a burst at the end of one window and
//! another at the start of the next let twice the limit through within a
//! few seconds. Here a window of `W` seconds is split into buckets of
//! `g = ceil(W / 60)` seconds (one second for the default 60 s window), and a
//! counter is the sum of the last `W / g + 1` buckets, the current partial
//! one included. A unit admitted at time `t` therefore stays counted until
//! the end of its bucket's last live tick, which is at least `t + W`: in
//! *every* span of `W` seconds at most `limit` units are admitted, boundary or
//! not. The price is that a unit may linger up to `g` seconds past `W`
//! (1/60 of the window), and each check sums at most 61 small counters.

/// Shape of the sliding window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// `LITELLM_RATE_LIMIT_WINDOW_SIZE`, seconds.
    pub secs: u64,
    /// Seconds per bucket.
    pub bucket_secs: u64,
    /// Buckets summed per check (the current one included).
    pub buckets: u64,
}

impl Window {
    /// The window of `secs` seconds (at least one).
    pub fn new(secs: u64) -> Window {
        let secs = secs.max(1);
        let bucket_secs = secs.div_ceil(60);
        Window {
            secs,
            bucket_secs,
            buckets: secs.div_ceil(bucket_secs) + 1,
        }
    }

    /// The bucket (tick) a unix time in seconds falls in.
    pub fn tick(&self, unix_secs: u64) -> u64 {
        unix_secs / self.bucket_secs
    }

    /// Whether a bucket is still counted at `now_tick`.
    pub fn is_live(&self, tick: u64, now_tick: u64) -> bool {
        tick <= now_tick && now_tick - tick < self.buckets
    }

    /// Unix second at which units counted in bucket `tick` stop counting.
    pub fn expiry_of(&self, tick: u64) -> u64 {
        (tick + self.buckets) * self.bucket_secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_window_is_sixty_one_second_buckets() {
        let w = Window::new(60);
        assert_eq!((w.bucket_secs, w.buckets), (1, 61));
        let w = Window::new(3600);
        assert_eq!((w.bucket_secs, w.buckets), (60, 61));
        assert_eq!(Window::new(0).secs, 1);
    }

    #[test]
    fn a_unit_counts_for_at_least_the_window_and_at_most_one_bucket_more() {
        for secs in [1, 2, 59, 60, 61, 600, 3600] {
            let w = Window::new(secs);
            for t in [1_000_000u64, 1_000_000 + w.bucket_secs - 1] {
                let expiry = w.expiry_of(w.tick(t));
                assert!(expiry >= t + secs, "window {secs}s, t {t}: expiry {expiry}");
                assert!(expiry <= t + secs + 2 * w.bucket_secs);
                // Live right up to the expiry, dead from it.
                assert!(w.is_live(w.tick(t), w.tick(expiry - 1)));
                assert!(!w.is_live(w.tick(t), w.tick(expiry)));
            }
        }
    }
}
