//! Counters in this process: the limiter when no Redis is configured, and
//! the fallback while Redis is unreachable or the breaker is open.
//!
//! Lock-free: each counter is a ring of atomic buckets (the sliding
//! [`Window`]) or one atomic in-flight count, found in a papaya map. A check
//! adds first and then sums, undoing its add when the sum is over the
//! limit, so two racing requests can both be refused near the limit (a
//! false rejection) but never both admitted past it.

use super::descriptor::{Descriptor, Kind};
use super::verdict::Verdict;
use super::window::Window;
use crate::keyed_hash::KeyedHash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bits of a bucket holding its tick; the rest hold the amount.
const TICK_SHIFT: u32 = 32;
const AMOUNT_MASK: u64 = (1 << TICK_SHIFT) - 1;

/// One sliding-window counter: `window.buckets` packed `(tick, amount)`
/// slots and their running total, so a check reads two words instead of
/// summing every slot. `total` is the sum of every slot's amount, live or
/// expired but not yet swept: never less than the live sum, so a stale
/// remainder can only refuse, never admit too much. Every change to a slot
/// moves `total` by exactly the slot's change.
struct WindowCounter {
    total: AtomicU64,
    /// Ticks below this have been swept (their amounts left `total`).
    swept_below: AtomicU64,
    slots: Box<[AtomicU64]>,
}

impl WindowCounter {
    fn new(window: &Window) -> Self {
        WindowCounter {
            total: AtomicU64::new(0),
            swept_below: AtomicU64::new(0),
            slots: (0..window.buckets).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slot(&self, tick: u64) -> &AtomicU64 {
        &self.slots[(tick % self.slots.len() as u64) as usize]
    }

    /// Moves `total` by `delta` and returns the total after it.
    fn shift_total(&self, delta: i64) -> u64 {
        if delta >= 0 {
            self.total.fetch_add(delta as u64, Ordering::AcqRel) + delta as u64
        } else {
            let d = delta.unsigned_abs();
            self.total.fetch_sub(d, Ordering::AcqRel).saturating_sub(d)
        }
    }

    /// Adds `amount` (may be negative) to bucket `tick` and returns the
    /// running total after it; a bucket holding an older tick is restarted
    /// (its remainder leaves the total), one holding a newer tick is left
    /// alone (the unit has aged out). A bucket never goes below zero.
    ///
    /// Returns the total after it and the change actually applied to the
    /// bucket (less than `amount` when the bucket was clamped or had aged
    /// out), so an undo can remove exactly what was added.
    fn add(&self, tick: u64, amount: i64) -> (u64, i64) {
        let slot = self.slot(tick);
        let tick = tick & AMOUNT_MASK;
        let mut current = slot.load(Ordering::Acquire);
        loop {
            let (slot_tick, value) = (current >> TICK_SHIFT, (current & AMOUNT_MASK) as i64);
            let (base, gone) = match slot_tick.cmp(&tick) {
                std::cmp::Ordering::Equal => (value, 0),
                std::cmp::Ordering::Less if amount > 0 => (0, value),
                _ => return (self.total.load(Ordering::Acquire), 0),
            };
            let next = base.saturating_add(amount).clamp(0, AMOUNT_MASK as i64);
            let packed = (tick << TICK_SHIFT) | next as u64;
            match slot.compare_exchange_weak(current, packed, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return (self.shift_total(next - base - gone), next - base),
                Err(seen) => current = seen,
            }
        }
    }

    /// Removes the amounts of buckets that aged out by `now_tick` from the
    /// total: usually one bucket per new tick, at most every bucket once.
    fn sweep(&self, window: &Window, now_tick: u64) {
        let dead_below = (now_tick + 1).saturating_sub(window.buckets) & AMOUNT_MASK;
        let from = self.swept_below.load(Ordering::Acquire);
        if from >= dead_below {
            return;
        }
        let n = self.slots.len() as u64;
        for t in from.max(dead_below.saturating_sub(n))..dead_below {
            let slot = self.slot(t);
            let mut current = slot.load(Ordering::Acquire);
            loop {
                let (slot_tick, value) = (current >> TICK_SHIFT, current & AMOUNT_MASK);
                if slot_tick >= dead_below || value == 0 {
                    break;
                }
                let emptied = slot_tick << TICK_SHIFT;
                match slot.compare_exchange_weak(
                    current,
                    emptied,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        self.shift_total(-(value as i64));
                        break;
                    }
                    Err(seen) => current = seen,
                }
            }
        }
        self.swept_below.fetch_max(dead_below, Ordering::AcqRel);
    }

    /// Live usage at `now_tick`.
    fn usage(&self, window: &Window, now_tick: u64) -> u64 {
        self.sweep(window, now_tick);
        self.total.load(Ordering::Acquire)
    }

    /// The oldest live tick holding anything (when the usage starts to fall).
    fn oldest(&self, window: &Window, now_tick: u64) -> Option<u64> {
        let now = now_tick & AMOUNT_MASK;
        self.slots
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .filter(|v| v & AMOUNT_MASK > 0 && window.is_live(v >> TICK_SHIFT, now))
            .map(|v| v >> TICK_SHIFT)
            .min()
    }

    fn is_idle(&self, window: &Window, now_tick: u64) -> bool {
        self.usage(window, now_tick) == 0
    }
}

enum Counter {
    Window(WindowCounter),
    Parallel(AtomicU64),
}

/// Every counter of this process.
pub struct LocalLimiter {
    window: Window,
    counters: papaya::HashMap<String, Arc<Counter>, KeyedHash>,
}

impl LocalLimiter {
    /// Counters over `window`.
    pub fn new(window: Window) -> LocalLimiter {
        LocalLimiter {
            window,
            counters: papaya::HashMap::default(),
        }
    }

    fn counter(&self, d: &Descriptor) -> Arc<Counter> {
        let map = self.counters.pin();
        if let Some(c) = map.get(&*d.key) {
            return c.clone();
        }
        let fresh = Arc::new(match d.kind {
            Kind::Parallel => Counter::Parallel(AtomicU64::new(0)),
            Kind::Requests | Kind::Tokens => Counter::Window(WindowCounter::new(&self.window)),
        });
        map.get_or_insert(d.key.to_string(), fresh).clone()
    }

    /// Checks and charges every descriptor at once: all admitted, or none
    /// charged. `amounts[i]` is charged to `descs[i]`; a descriptor is full
    /// when its usage plus `max(amount, 1)` would pass `limit(descs[i])`.
    pub fn admit(
        &self,
        descs: &[Descriptor],
        amounts: &[u64],
        limit: impl Fn(&Descriptor) -> u64,
        unix_secs: u64,
    ) -> Verdict {
        let tick = self.window.tick(unix_secs);
        let counters: Vec<Arc<Counter>> = descs.iter().map(|d| self.counter(d)).collect();
        let mut used = Vec::with_capacity(descs.len());
        // What each add really applied, so a refusal undoes exactly that.
        let mut applied: Vec<i64> = Vec::with_capacity(descs.len());
        for (i, (d, c)) in descs.iter().zip(&counters).enumerate() {
            let amount = amounts[i];
            let need = amount.max(1);
            let limit = limit(d);
            let (before, reset_at, whole) = match &**c {
                Counter::Parallel(n) => {
                    let before = n.fetch_add(amount, Ordering::AcqRel);
                    applied.push(i64::try_from(amount).unwrap_or(i64::MAX));
                    (before, unix_secs + 1, true)
                }
                Counter::Window(w) => {
                    w.sweep(&self.window, tick);
                    let delta = i64::try_from(amount).unwrap_or(i64::MAX);
                    let (after, added) = w.add(tick, delta);
                    applied.push(added);
                    let before = after.saturating_sub(added.unsigned_abs());
                    let reset = if before.saturating_add(need) > limit {
                        self.window
                            .expiry_of(w.oldest(&self.window, tick).unwrap_or(tick))
                    } else {
                        0
                    };
                    (before, reset, added == delta)
                }
            };
            if !whole || before.saturating_add(need) > limit {
                for (c, &added) in counters.iter().zip(&applied) {
                    undo(c, tick, added);
                }
                return Verdict::Denied {
                    index: i,
                    used: before,
                    limit,
                    reset_at,
                };
            }
            used.push(before);
        }
        Verdict::Admitted {
            tick,
            used,
            ticks: Vec::new(),
        }
    }

    /// Settles an admission: tokens move from the reservation to the real
    /// usage, parallel slots are freed.
    pub fn finish(
        &self,
        descs: &[Descriptor],
        amounts: &[u64],
        admitted_tick: u64,
        tokens_used: u64,
        unix_secs: u64,
    ) {
        let now_tick = self.window.tick(unix_secs);
        for (d, &reserved) in descs.iter().zip(amounts) {
            match d.kind {
                Kind::Requests => {}
                Kind::Parallel => {
                    if let Some(Counter::Parallel(n)) =
                        self.counters.pin().get(&*d.key).map(|c| &**c)
                    {
                        let _ = n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                            Some(v.saturating_sub(1))
                        });
                    }
                }
                Kind::Tokens => {
                    let map = self.counters.pin();
                    let Some(Counter::Window(w)) = map.get(&*d.key).map(|c| &**c) else {
                        continue;
                    };
                    let delta = |d: u64| i64::try_from(d).unwrap_or(i64::MAX);
                    if tokens_used >= reserved {
                        w.sweep(&self.window, now_tick);
                        w.add(now_tick, delta(tokens_used - reserved));
                    } else {
                        w.add(admitted_tick, -delta(reserved - tokens_used));
                    }
                }
            }
        }
    }

    /// Drops counters with nothing counted and nothing in flight, so a
    /// million keys seen once do not stay in memory.
    pub fn sweep(&self, unix_secs: u64) {
        let tick = self.window.tick(unix_secs);
        let map = self.counters.pin();
        map.retain(|_, c| match &**c {
            Counter::Parallel(n) => n.load(Ordering::Acquire) > 0,
            Counter::Window(w) => !w.is_idle(&self.window, tick),
        });
    }

    /// Counters held, for tests and metrics.
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// Whether no counter is held.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    /// Current usage of the counter named `key`.
    pub fn usage(&self, key: &str, unix_secs: u64) -> u64 {
        match self.counters.pin().get(key).map(|c| &**c) {
            Some(Counter::Parallel(n)) => n.load(Ordering::Acquire),
            Some(Counter::Window(w)) => w.usage(&self.window, self.window.tick(unix_secs)),
            None => 0,
        }
    }
}

/// Takes back exactly what an admission's add applied to `c`.
fn undo(c: &Counter, tick: u64, applied: i64) {
    match c {
        Counter::Parallel(n) => {
            n.fetch_sub(applied.unsigned_abs(), Ordering::AcqRel);
        }
        Counter::Window(w) => {
            w.add(tick, -applied);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::descriptor::Scope;
    use std::sync::Arc;

    fn desc(kind: Kind, limit: u64) -> Descriptor {
        Descriptor::new(Scope::ApiKey, "k", kind, limit)
    }

    fn admit(l: &LocalLimiter, d: &[Descriptor], amounts: &[u64], t: u64) -> bool {
        matches!(
            l.admit(d, amounts, |d| d.limit, t),
            Verdict::Admitted { .. }
        )
    }

    const T0: u64 = 1_800_000_000;

    #[test]
    fn a_reservation_too_large_to_count_is_refused_and_leaves_nothing_behind() {
        let l = LocalLimiter::new(Window::new(60));
        let d = [desc(Kind::Requests, 100), desc(Kind::Tokens, 1000)];
        let tokens = d[1].key.clone();
        // 2^64 - 2^31 used to wrap through `as i64`: the add was clamped away
        // and the undo added the amount back, refusing the key for a window.
        for huge in [18_446_744_071_562_067_968u64, u64::MAX, 1 << 40] {
            assert!(!admit(&l, &d, &[1, huge], T0));
            assert_eq!(l.usage(&tokens, T0), 0, "{huge}");
            assert_eq!(l.usage(&d[0].key, T0), 0, "{huge}");
        }
        assert!(admit(&l, &d, &[1, 10], T0));
        assert_eq!(l.usage(&tokens, T0), 10);
        // Settling with a wild usage report saturates instead of wrapping.
        l.finish(&d, &[1, 10], Window::new(60).tick(T0), u64::MAX, T0);
        assert!(l.usage(&tokens, T0) >= 1000);
    }

    #[test]
    fn rpm_admits_up_to_the_limit_then_refuses_until_the_window_slides() {
        let l = LocalLimiter::new(Window::new(60));
        let d = [desc(Kind::Requests, 3)];
        for _ in 0..3 {
            assert!(admit(&l, &d, &[1], T0));
        }
        match l.admit(&d, &[1], |d| d.limit, T0 + 30) {
            Verdict::Denied {
                used,
                limit,
                reset_at,
                ..
            } => {
                assert_eq!((used, limit), (3, 3));
                assert_eq!(reset_at, T0 + 61);
            }
            Verdict::Admitted { .. } => panic!("admitted past the limit"),
        }
        assert!(!admit(&l, &d, &[1], T0 + 60), "still inside the window");
        assert!(admit(&l, &d, &[1], T0 + 61));
    }

    #[test]
    fn no_double_burst_across_a_window_boundary() {
        // LiteLLM's fixed window would take 3 at 59.9 s and 3 more at 60.1 s.
        let l = LocalLimiter::new(Window::new(60));
        let d = [desc(Kind::Requests, 3)];
        let end_of_first = T0 - T0 % 60 + 59;
        for _ in 0..3 {
            assert!(admit(&l, &d, &[1], end_of_first));
        }
        for s in 1..60 {
            assert!(!admit(&l, &d, &[1], end_of_first + s), "second {s}");
        }
    }

    #[test]
    fn all_or_none_across_descriptors() {
        let l = LocalLimiter::new(Window::new(60));
        let rpm = desc(Kind::Requests, 10);
        let tpm = Descriptor::new(Scope::Team, "t", Kind::Tokens, 100);
        assert!(admit(&l, &[rpm.clone(), tpm.clone()], &[1, 80], T0));
        assert!(!admit(&l, &[rpm.clone(), tpm.clone()], &[1, 30], T0));
        // The refused request left no trace on the rpm counter.
        assert_eq!(l.usage(&rpm.key, T0), 1);
        assert_eq!(l.usage(&tpm.key, T0), 80);
    }

    #[test]
    fn reservation_is_reconciled_to_real_usage() {
        let l = LocalLimiter::new(Window::new(60));
        let d = [desc(Kind::Tokens, 200)];
        let Verdict::Admitted { tick, .. } = l.admit(&d, &[124], |d| d.limit, T0) else {
            panic!()
        };
        assert!(!admit(&l, &d, &[124], T0), "two reservations do not fit");
        l.finish(&d, &[124], tick, 15, T0 + 1);
        assert_eq!(l.usage(&d[0].key, T0 + 1), 15);
        // Using more than reserved charges the difference now.
        l.finish(&d, &[0], tick, 40, T0 + 2);
        assert_eq!(l.usage(&d[0].key, T0 + 2), 55);
    }

    #[test]
    fn without_reservation_tpm_refuses_only_once_usage_reached_the_limit() {
        let l = LocalLimiter::new(Window::new(60));
        let d = [desc(Kind::Tokens, 50)];
        let mut admitted = 0;
        while admit(&l, &d, &[0], T0) {
            admitted += 1;
            l.finish(&d, &[0], l.window.tick(T0), 16, T0);
        }
        assert_eq!(admitted, 4, "16, 32, 48 < 50 admit; 64 refuses");
    }

    #[test]
    fn parallel_slots_are_freed_by_finish() {
        let l = LocalLimiter::new(Window::new(60));
        let d = [desc(Kind::Parallel, 2)];
        assert!(admit(&l, &d, &[1], T0));
        assert!(admit(&l, &d, &[1], T0));
        assert!(!admit(&l, &d, &[1], T0));
        l.finish(&d, &[1], 0, 0, T0);
        assert!(admit(&l, &d, &[1], T0));
    }

    #[test]
    fn concurrent_admissions_never_pass_the_limit() {
        let l = Arc::new(LocalLimiter::new(Window::new(60)));
        let d = Arc::new([desc(Kind::Requests, 1000)]);
        let admitted = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (l, d, admitted) = (l.clone(), d.clone(), admitted.clone());
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        if admit(&l, &d[..], &[1], T0) {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(admitted.load(Ordering::Relaxed), 1000);
        assert_eq!(l.usage(&d[0].key, T0), 1000);
    }

    #[test]
    fn running_total_matches_the_live_sum_as_buckets_age_out() {
        let window = Window::new(10);
        let w = WindowCounter::new(&window);
        let mut rng = fastrand::Rng::with_seed(7);
        let mut tick = 1_000_000u64;
        // What each live tick holds, as a plain model.
        let mut model: std::collections::BTreeMap<u64, i64> = Default::default();
        for _ in 0..20_000 {
            tick += rng.u64(0..3);
            let at = tick - rng.u64(0..4);
            let amount = rng.i64(-5..20);
            w.sweep(&window, tick);
            w.add(at, amount);
            // The model: a bucket restarts when a newer tick of its slot is
            // written with a positive amount; writes to older ticks are lost.
            let slot_holder = model
                .keys()
                .copied()
                .filter(|t| t % window.buckets == at % window.buckets)
                .max();
            match slot_holder {
                Some(t) if t > at => {}
                Some(t) if t < at && amount > 0 => {
                    model.remove(&t);
                    model.insert(at, amount);
                }
                Some(t) if t == at => {
                    let v = model.get_mut(&t).unwrap();
                    *v = (*v + amount).max(0);
                }
                None if amount > 0 => {
                    model.insert(at, amount);
                }
                _ => {}
            }
            let live: i64 = model
                .iter()
                .filter(|(t, _)| window.is_live(**t, tick))
                .map(|(_, v)| *v)
                .sum();
            assert_eq!(w.usage(&window, tick) as i64, live, "tick {tick}");
        }
    }

    #[test]
    fn sweep_drops_idle_counters_only() {
        let l = LocalLimiter::new(Window::new(60));
        let busy = [desc(Kind::Parallel, 5)];
        let old = [Descriptor::new(Scope::User, "u", Kind::Requests, 5)];
        assert!(admit(&l, &busy, &[1], T0));
        assert!(admit(&l, &old, &[1], T0));
        l.sweep(T0 + 30);
        assert_eq!(l.len(), 2);
        l.sweep(T0 + 61);
        assert_eq!(l.len(), 1, "the rpm counter aged out; the slot is held");
    }
}
