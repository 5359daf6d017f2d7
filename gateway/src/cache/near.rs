//! A core's near copy of `type: redis` entries: a hit found here needs no
//! Redis round trip. It stays coherent through Redis's client-side caching
//! (`CLIENT TRACKING`, default mode, RESP2 with `REDIRECT`): the core's
//! data connection has tracking on, so Redis remembers every key it read
//! and tells the core's tracking connection ([`super::tracking`]) when one
//! is changed, deleted, expired or evicted, from any replica.
//!
//! It serves only while coherence is assured: the tracking connection is
//! subscribed, the data connection's tracking redirects to it, and the
//! data connection answered within [`FRESH`] (a frozen Redis or a cut
//! network stops it within that). Losing either connection empties it
//! (invalidations may have been missed). A copy is kept no longer than
//! Redis keeps the entry (its `PTTL`, read in the same round trip) nor
//! than `default_in_memory_ttl`, and a fill whose key may have been
//! invalidated while its read was out is not kept.
//!
//! Bounded in entries and bytes, least recently used out first (the
//! replica's `max_size_in_memory` and `max_memory_mb` shared out among its
//! cores, as `type: local`). A core owns it: no lock, no atomics.

use super::local::{CoreCache, Stored};
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long after the data connection's last answer the near copy serves.
pub const FRESH: Duration = Duration::from_secs(1);
/// Invalidation counters, by a key's hash: a fill compares its key's
/// counter before and after its read.
const BUCKETS: usize = 256;

/// The bounds of each core's near copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NearBounds {
    /// The replica's most entries (shared out among its cores).
    pub max_entries: u64,
    /// The replica's most bytes (shared out among its cores).
    pub max_bytes: u64,
    /// Longest a copy is kept (`default_in_memory_ttl`), `None`: as long
    /// as Redis keeps the entry.
    pub ttl: Option<Duration>,
}

/// One core's near copy of one Redis's entries.
pub struct Near {
    lru: CoreCache,
    /// The bounds it was fitted to.
    fitted: Cell<Option<(NearBounds, u64)>>,
    /// Client id of the subscribed tracking connection.
    tracker: Cell<Option<i64>>,
    /// The id the open data connection's tracking redirects to.
    tracked: Cell<Option<i64>>,
    /// Until when the data connection counts as answering.
    fresh_until: Cell<Option<Instant>>,
    /// Redis refused `CLIENT TRACKING`: never serves.
    refused: Cell<bool>,
    /// Whether a freshness probe is on its way.
    probing: Cell<bool>,
    /// Bumped at every flush.
    epoch: Cell<u64>,
    /// Bumped at every invalidation of a key of the bucket.
    buckets: [Cell<u32>; BUCKETS],
}

/// What a fill read before its lookup went out.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    epoch: u64,
    bucket: u32,
    sent: Instant,
}

impl Default for Near {
    fn default() -> Near {
        Near {
            lru: CoreCache::new(1, 0),
            fitted: Cell::new(None),
            tracker: Cell::new(None),
            tracked: Cell::new(None),
            fresh_until: Cell::new(None),
            refused: Cell::new(false),
            probing: Cell::new(false),
            epoch: Cell::new(0),
            buckets: std::array::from_fn(|_| Cell::new(0)),
        }
    }
}

impl Near {
    /// Whether it may serve and be filled at `now`.
    pub fn serving(&self, now: Instant) -> bool {
        let tracker = self.tracker.get();
        tracker.is_some()
            && !self.refused.get()
            && tracker == self.tracked.get()
            && self.fresh_until.get().is_some_and(|t| now < t)
    }

    /// Fits it to `bounds` on a core of `cores` (emptied when they change).
    pub fn fit(&self, bounds: NearBounds, cores: u64) {
        if self.fitted.get() == Some((bounds, cores)) {
            return;
        }
        let cores = cores.max(1);
        self.lru.refit(
            bounds.max_entries.div_ceil(cores),
            bounds.max_bytes / cores,
            0,
        );
        self.fitted.set(Some((bounds, cores)));
        self.flush();
    }

    /// The copy of `key` when it serves and has one.
    pub fn get(&self, key: &str, now: Instant) -> Option<Stored> {
        if !self.serving(now) {
            return None;
        }
        self.lru.get(key, now)
    }

    /// Whether the data connection should be asked something (a `PING`)
    /// to keep the near copy serving: half of [`FRESH`] went by since its
    /// last answer and no probe is out. Marks a probe out when so.
    pub fn wants_probe(&self, now: Instant) -> bool {
        let due = self
            .fresh_until
            .get()
            .is_some_and(|t| t.checked_sub(FRESH / 2).is_some_and(|half| now >= half));
        if !due || self.probing.get() {
            return false;
        }
        self.probing.set(true);
        true
    }

    /// What a lookup of `key` going out at `now` needs to fill its copy.
    pub fn ticket(&self, key: &str, now: Instant) -> Ticket {
        Ticket {
            epoch: self.epoch.get(),
            bucket: self.buckets[bucket(key.as_bytes())].get(),
            sent: now,
        }
    }

    /// Keeps `stored`, read under `key` with `ticket`, Redis keeping it
    /// `pttl_ms` more milliseconds (`-1`: no expiry): only when nothing
    /// may have invalidated it since the ticket and tracking still holds.
    pub fn fill(&self, key: &Arc<str>, ticket: Ticket, stored: &Stored, pttl_ms: i64) {
        let Some(bounds) = self.fitted.get().map(|(b, _)| b) else {
            return;
        };
        let now = Instant::now();
        if !self.serving(now)
            || ticket.epoch != self.epoch.get()
            || ticket.bucket != self.buckets[bucket(key.as_bytes())].get()
        {
            return;
        }
        let redis_left = match pttl_ms {
            -1 => None,
            ms if ms > 0 => Some(Duration::from_millis(ms as u64)),
            _ => return,
        };
        // From when the lookup went out: never past Redis's own expiry.
        let left = match (redis_left, bounds.ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let expires = left.and_then(|l| ticket.sent.checked_add(l));
        self.lru.put(key, stored.clone(), expires);
    }

    /// Redis said `key` changed: its copy goes, and fills of it out now
    /// are not kept.
    pub fn invalidate(&self, key: &[u8]) {
        let b = &self.buckets[bucket(key)];
        b.set(b.get().wrapping_add(1));
        self.lru.remove(key);
    }

    /// Forgets every copy; fills out now are not kept.
    pub fn flush(&self) {
        self.epoch.set(self.epoch.get().wrapping_add(1));
        self.lru.clear();
    }

    /// The tracking connection subscribed as client `id`.
    pub fn tracker_up(&self, id: i64) {
        self.flush();
        self.tracker.set(Some(id));
    }

    /// The tracking connection is gone: invalidations may be missed.
    pub fn tracker_down(&self) {
        self.tracker.set(None);
        self.flush();
    }

    /// The client id invalidations go to, while one is subscribed.
    pub fn tracker(&self) -> Option<i64> {
        self.tracker.get()
    }

    /// The id the data connection's tracking redirects to.
    pub fn tracked(&self) -> Option<i64> {
        self.tracked.get()
    }

    /// A data connection opened, its tracking redirected to `id` (`None`:
    /// without tracking).
    pub fn data_opened(&self, id: Option<i64>) {
        self.flush();
        self.tracked.set(id);
    }

    /// Redis refused to track reads: no copy is ever kept.
    pub fn refuse(&self) {
        self.refused.set(true);
        self.flush();
    }

    /// Whether Redis refused to track reads.
    pub fn refused(&self) -> bool {
        self.refused.get()
    }

    /// The data connection closed: what it read is no longer tracked.
    pub fn data_closed(&self) {
        self.tracked.set(None);
        self.fresh_until.set(None);
        self.probing.set(false);
        self.flush();
    }

    /// The data connection answered at `now`.
    pub fn answered(&self, now: Instant) {
        self.fresh_until.set(now.checked_add(FRESH));
        self.probing.set(false);
    }

    /// Entries and bytes held.
    #[cfg(test)]
    pub fn usage(&self) -> (u64, u64) {
        self.lru.usage()
    }
}

/// The invalidation counter of `key` (FNV-1a of its bytes).
fn bucket(key: &[u8]) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for &b in key {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (h as usize) % BUCKETS
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn stored(n: usize) -> Stored {
        Stored::new(Bytes::from(vec![b'x'; n]), 0)
    }

    fn bounds() -> NearBounds {
        NearBounds {
            max_entries: 100,
            max_bytes: 1 << 20,
            ttl: None,
        }
    }

    /// A near copy with tracking up and a fresh data connection.
    fn tracking() -> Near {
        let n = Near::default();
        n.fit(bounds(), 1);
        n.tracker_up(7);
        n.data_opened(Some(7));
        n.answered(Instant::now());
        n
    }

    #[test]
    fn a_fill_is_served_until_invalidated() {
        let n = tracking();
        let t = n.ticket("k", Instant::now());
        n.fill(&"k".into(), t, &stored(3), -1);
        assert!(n.get("k", Instant::now()).is_some());
        n.invalidate(b"k");
        assert!(n.get("k", Instant::now()).is_none());
    }

    #[test]
    fn a_fill_invalidated_while_out_is_not_kept() {
        let n = tracking();
        let t = n.ticket("k", Instant::now());
        n.invalidate(b"k");
        n.fill(&"k".into(), t, &stored(3), -1);
        assert!(n.get("k", Instant::now()).is_none());
        let t = n.ticket("k", Instant::now());
        n.flush();
        n.fill(&"k".into(), t, &stored(3), -1);
        assert!(n.get("k", Instant::now()).is_none());
        // A key Redis no longer has (-2) is not kept either.
        let t = n.ticket("k", Instant::now());
        n.fill(&"k".into(), t, &stored(3), -2);
        assert!(n.get("k", Instant::now()).is_none());
    }

    #[test]
    fn nothing_is_served_or_kept_while_tracking_is_down() {
        let n = tracking();
        let t = n.ticket("k", Instant::now());
        n.fill(&"k".into(), t, &stored(3), -1);
        n.tracker_down();
        assert!(n.get("k", Instant::now()).is_none());
        assert_eq!(n.usage().0, 0, "a lost tracking connection empties it");
        let t = n.ticket("k", Instant::now());
        n.fill(&"k".into(), t, &stored(3), -1);
        assert_eq!(n.usage().0, 0);
        // Tracking back on another id: the data connection still redirects
        // to the old one, so nothing serves until it is reopened.
        n.tracker_up(8);
        assert!(!n.serving(Instant::now()));
        n.data_opened(Some(8));
        n.answered(Instant::now());
        assert!(n.serving(Instant::now()));
        // A closed data connection: what it read is no longer tracked.
        let t = n.ticket("k", Instant::now());
        n.fill(&"k".into(), t, &stored(3), -1);
        n.data_closed();
        assert_eq!(n.usage().0, 0);
        assert!(!n.serving(Instant::now()));
    }

    #[test]
    fn a_silent_data_connection_stops_it_serving() {
        let n = tracking();
        let t = n.ticket("k", Instant::now());
        n.fill(&"k".into(), t, &stored(3), -1);
        let later = Instant::now() + FRESH + Duration::from_millis(1);
        assert!(n.get("k", later).is_none());
        // Half way, one probe is asked for, not two.
        let half = Instant::now() + FRESH / 2 + Duration::from_millis(1);
        assert!(n.wants_probe(half));
        assert!(!n.wants_probe(half));
        n.answered(half);
        assert!(n.get("k", later).is_some());
    }

    #[test]
    fn copies_expire_with_redis_and_the_memory_ttl() {
        let n = tracking();
        let now = Instant::now();
        let t = n.ticket("a", now);
        n.fill(&"a".into(), t, &stored(3), 1000);
        assert!(n.get("a", now + Duration::from_millis(500)).is_some());
        assert!(n.get("a", now + Duration::from_millis(1001)).is_none());
        n.fit(
            NearBounds {
                ttl: Some(Duration::from_millis(100)),
                ..bounds()
            },
            1,
        );
        n.answered(Instant::now());
        let now = Instant::now();
        let t = n.ticket("b", now);
        n.fill(&"b".into(), t, &stored(3), -1);
        assert!(n.get("b", now + Duration::from_millis(50)).is_some());
        assert!(n.get("b", now + Duration::from_millis(101)).is_none());
    }

    #[test]
    fn bounded_in_entries_and_bytes_per_core() {
        let n = Near::default();
        n.fit(
            NearBounds {
                max_entries: 8,
                max_bytes: 8 * 1024,
                ttl: None,
            },
            2,
        );
        n.tracker_up(1);
        n.data_opened(Some(1));
        n.answered(Instant::now());
        for i in 0..100 {
            let key = format!("k{i}");
            let t = n.ticket(&key, Instant::now());
            n.fill(&key.as_str().into(), t, &stored(500), -1);
            let (entries, bytes) = n.usage();
            assert!(entries <= 4 && bytes <= 4 * 1024, "{entries} {bytes}");
        }
        assert!(n.get("k99", Instant::now()).is_some());
        assert!(n.get("k0", Instant::now()).is_none());
    }
}
