//! Budget counters for admission: exact under concurrency. A request reserves
//! its worst-case cost before the call and settles the real cost after, so N
//! concurrent requests can never all pass against the same remaining budget.
//! Amounts are kept in nano-dollars in atomics: no lock on the request path.
//!
//! With Redis (the limiter's links), the same rule holds for the fleet
//! ([`fleet`]): reservations and settlements go to one counter per budget in
//! Redis, and these counters here are the fallback while Redis cannot be
//! used, exactly as without Redis.

pub mod fleet;
pub mod slice;

use crate::limits::Limiter;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

const NANOS_PER_USD: f64 = 1e9;
const NO_LIMIT: i64 = i64::MAX;

/// Converts USD to the counters' unit, rounding up so a cost is never
/// under-counted.
pub fn to_nanos(usd: f64) -> i64 {
    if !usd.is_finite() || usd <= 0.0 {
        return 0;
    }
    (usd * NANOS_PER_USD).ceil().min(i64::MAX as f64 / 2.0) as i64
}

fn to_usd(nanos: i64) -> f64 {
    nanos as f64 / NANOS_PER_USD
}

/// The spend of one key, user or team as this process knows it.
#[derive(Debug)]
pub struct Budget {
    max: AtomicI64,
    soft: AtomicI64,
    /// Spend as last read from (or written to) the database.
    durable: AtomicI64,
    /// Spend settled here but not yet written.
    unflushed: AtomicI64,
    /// Worst-case cost of requests in flight.
    reserved: AtomicI64,
    soft_alerted: AtomicBool,
    /// Set by the first refusal; cleared when the budget gains room again.
    refusal_alerted: AtomicBool,
    /// Where its fleet-wide counter lives in Redis, if it has one.
    place: Option<fleet::Place>,
    /// Its budget period (`budget_reset_at`, Unix ms; 0 without one).
    period: AtomicI64,
    /// Spend settled here that Redis has not counted yet (settled while
    /// Redis could not be used), added to its counter by the next
    /// reservation that reaches it.
    owed: AtomicI64,
    /// This process's slice of its counter in Redis (lease mode).
    slice: slice::Slice,
    /// The fleet's settled spend as Redis last reported it (0 until it
    /// did, and again after a reset): while Redis cannot answer, a
    /// reservation in this process counts at least this plus what was
    /// settled here since ([`Budget::fleet_floor`]), so other replicas'
    /// spend is not forgotten for the outage.
    fleet_seen: AtomicI64,
    /// How many times a figure read from the database replaced `durable`
    /// ([`Budget::set_durable`]): a spend write compares it before and
    /// after to learn that a copy read meanwhile may count it twice.
    installs: AtomicU64,
}

impl Budget {
    /// A counter with limits in USD and the spend already recorded.
    pub fn new(max_usd: Option<f64>, soft_usd: Option<f64>, spend_usd: f64) -> Arc<Budget> {
        Budget::at(None, max_usd, soft_usd, spend_usd)
    }

    /// [`Budget::new`] with its place in Redis.
    pub fn at(
        place: Option<fleet::Place>,
        max_usd: Option<f64>,
        soft_usd: Option<f64>,
        spend_usd: f64,
    ) -> Arc<Budget> {
        let b = Budget {
            max: AtomicI64::new(NO_LIMIT),
            soft: AtomicI64::new(NO_LIMIT),
            durable: AtomicI64::new(to_nanos(spend_usd)),
            unflushed: AtomicI64::new(0),
            reserved: AtomicI64::new(0),
            soft_alerted: AtomicBool::new(false),
            refusal_alerted: AtomicBool::new(false),
            place,
            period: AtomicI64::new(0),
            owed: AtomicI64::new(0),
            slice: slice::Slice::new(),
            fleet_seen: AtomicI64::new(0),
            installs: AtomicU64::new(0),
        };
        b.set_limits(max_usd, soft_usd);
        Arc::new(b)
    }

    /// Updates the limits (after an admin change). A raised hard limit
    /// re-arms the refusal alert.
    pub fn set_limits(&self, max_usd: Option<f64>, soft_usd: Option<f64>) {
        let nanos = |v: Option<f64>| {
            v.filter(|v| v.is_finite() && *v >= 0.0)
                .map_or(NO_LIMIT, |v| (v * NANOS_PER_USD) as i64)
        };
        let max = nanos(max_usd);
        if self.max.swap(max, Ordering::AcqRel) < max {
            self.refusal_alerted.store(false, Ordering::Release);
        }
        self.soft.store(nanos(soft_usd), Ordering::Release);
    }

    /// Replaces the durable spend with the database's figure (after a reset
    /// or a change announced by another replica). Spend going back down
    /// re-arms the refusal alert, and the soft alert once under the soft limit.
    pub fn set_durable(&self, spend_usd: f64) {
        let nanos = to_nanos(spend_usd);
        // Counted before the swap: a flush whose add lands after this swap
        // synchronizes with it, so its writer then sees the count moved.
        self.installs.fetch_add(1, Ordering::SeqCst);
        if self.durable.swap(nanos, Ordering::AcqRel) > nanos {
            self.refusal_alerted.store(false, Ordering::Release);
            self.fleet_seen.store(0, Ordering::Release);
        }
        if self.spent_nanos() < self.soft.load(Ordering::Acquire) {
            self.soft_alerted.store(false, Ordering::Release);
        }
    }

    /// How many figures read from the database it has installed
    /// ([`Budget::set_durable`]) so far.
    pub fn installs(&self) -> u64 {
        self.installs.load(Ordering::SeqCst)
    }

    /// Sets its budget period (the `budget_reset_at` it was read with), so
    /// the fleet's counter in Redis learns when a period ended (see
    /// `reserve.lua`).
    pub fn set_period(&self, reset_at: Option<chrono::DateTime<chrono::Utc>>) {
        let ms = reset_at.map_or(0, |t| t.timestamp_millis().max(0));
        if self.period.swap(ms, Ordering::AcqRel) != ms {
            self.fleet_seen.store(0, Ordering::Release);
        }
    }

    /// Records the fleet's settled spend Redis reported (nanos).
    fn saw_fleet_spend(&self, nanos: i64) {
        self.fleet_seen.fetch_max(nanos.max(0), Ordering::AcqRel);
    }

    /// The least the fleet has spent as far as this process knows: what
    /// Redis last reported plus what was settled here and has not reached
    /// Redis since (owed, and settled against a slice but not reported).
    fn fleet_floor(&self) -> i64 {
        self.fleet_seen
            .load(Ordering::Acquire)
            .saturating_add(self.owed.load(Ordering::Acquire).max(0))
            .saturating_add(self.slice.unreported().max(0))
    }

    /// Whether a refusal by this budget is the first since it last gained
    /// room (spend reset or lowered, limit raised): the budget-crossed alert
    /// goes out once per crossing, not once per refused request.
    pub fn first_refusal(&self) -> bool {
        !self.refusal_alerted.swap(true, Ordering::AcqRel)
    }

    fn spent_nanos(&self) -> i64 {
        let durable = self.durable.load(Ordering::Acquire);
        durable.saturating_add(self.unflushed.load(Ordering::Acquire))
    }

    /// Spend known here, USD (durable plus settled-but-unwritten).
    pub fn spent_usd(&self) -> f64 {
        to_usd(self.spent_nanos())
    }

    /// The hard limit, USD.
    pub fn max_usd(&self) -> Option<f64> {
        let m = self.max.load(Ordering::Acquire);
        (m != NO_LIMIT).then(|| to_usd(m))
    }

    /// The soft (alert-only) limit, USD.
    pub fn soft_usd(&self) -> Option<f64> {
        let s = self.soft.load(Ordering::Acquire);
        (s != NO_LIMIT).then(|| to_usd(s))
    }

    /// Whether nothing of it lives only here: no request holds room in
    /// it and everything settled is written (and counted by Redis), so
    /// it may be dropped and read again.
    pub fn idle(&self) -> bool {
        self.reserved.load(Ordering::Acquire) == 0
            && self.unflushed.load(Ordering::Acquire) == 0
            && self.owed.load(Ordering::Acquire) == 0
            && self.slice.unreported() == 0
    }

    /// Whether the spend already reached the hard limit.
    pub fn exhausted(&self) -> bool {
        let max = self.max.load(Ordering::Acquire);
        max != NO_LIMIT && self.spent_nanos() >= max
    }

    /// Reserves `nanos` if spend + reservations stay within the limit; the
    /// spend is the larger of this process's figure and the fleet's floor
    /// (the same without Redis, where the floor is never above it).
    fn try_reserve(&self, nanos: i64) -> bool {
        let max = self.max.load(Ordering::Acquire);
        if max == NO_LIMIT {
            self.reserved.fetch_add(nanos, Ordering::AcqRel);
            return true;
        }
        self.reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                let after = r.checked_add(nanos)?;
                let spent = self.spent_nanos().max(self.fleet_floor());
                (spent.saturating_add(after) <= max).then_some(after)
            })
            .is_ok()
    }

    /// Turns a reservation into settled spend. Spend is added before the
    /// reservation is released, so a concurrent check errs towards refusing.
    /// Returns true when this settlement crossed the soft budget.
    fn settle(&self, reserved: i64, actual: i64) -> bool {
        let _ = self
            .unflushed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_add(actual))
            });
        self.reserved.fetch_sub(reserved, Ordering::AcqRel);
        let soft = self.soft.load(Ordering::Acquire);
        soft != NO_LIMIT
            && self.spent_nanos() >= soft
            && !self.soft_alerted.swap(true, Ordering::AcqRel)
    }

    /// Adds `actual` of settled spend held nowhere (see
    /// [`Reservation::counting`]); `owe`: Redis must count it too.
    fn count(&self, actual: i64, owe: bool) {
        if actual <= 0 {
            return;
        }
        let _ = self
            .unflushed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_add(actual))
            });
        if owe {
            self.owed.fetch_add(actual, Ordering::AcqRel);
        }
    }

    /// Records that `nanos` ([`to_nanos`] of each settled amount, summed)
    /// of settled spend is now in the database.
    pub fn flushed(&self, nanos: i64) {
        let _ = self
            .durable
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                Some(d.saturating_add(nanos))
            });
        let _ = self
            .unflushed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(nanos).max(0))
            });
    }
}

/// How many times a reader of spend reads again when spend writes keep
/// being marked flushed while it reads; the last read stands.
const SETTLED_READ_ATTEMPTS: usize = 4;

/// Counts spend writes as they are marked flushed, so a reader of spend
/// from the database can tell whether one landed while it read. A figure
/// read before a write committed, installed ([`Budget::set_durable`]) after
/// that write was marked flushed ([`Budget::flushed`]), would drop the
/// write's spend until the next read: [`Flushes::read_settled`] reads
/// again instead.
#[derive(Debug, Default)]
pub struct Flushes(AtomicU64);

impl Flushes {
    /// Announces a write's flush: called before its first
    /// [`Budget::flushed`], so a reader that installs a figure after one
    /// of them sees the count moved.
    pub fn begin(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// Runs `read` (read spend from the database and install it) again
    /// while a write was marked flushed during it, at most
    /// [`SETTLED_READ_ATTEMPTS`] times.
    pub async fn read_settled<T, E, F>(&self, mut read: impl FnMut() -> F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        let mut attempts = 1;
        loop {
            let before = self.0.load(Ordering::SeqCst);
            let value = read().await?;
            if self.0.load(Ordering::SeqCst) == before || attempts == SETTLED_READ_ATTEMPTS {
                return Ok(value);
            }
            attempts += 1;
        }
    }
}

/// A scope whose budget refused a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// `key`, `user` or `team`.
    pub scope: &'static str,
    /// Spend so far, USD.
    pub spend: f64,
    /// The hard limit, USD.
    pub max: f64,
    /// Whether requests still hold reservations on that budget: once they
    /// settle (usually for less than they reserved) this one may fit.
    pub in_flight: bool,
}

/// Worst-case cost held against every budget a request belongs to; settled
/// with the real cost after the response, or released if dropped unsettled.
pub struct Reservation<'l> {
    held: Vec<(&'static str, Arc<Budget>)>,
    nanos: i64,
    place: Held<'l>,
    /// Budgets the real cost is added to without room held in them: they
    /// count the spend and never refuse ([`Reservation::counting`]).
    counted: Vec<Arc<Budget>>,
}

/// Where a reservation is held.
enum Held<'l> {
    /// In this process's counters; `owe`: Redis is configured, so the
    /// spend must reach its counters later.
    Local { owe: bool },
    /// In this process's slices of the budgets' counters in Redis (lease
    /// mode, [`slice`]).
    Slice,
    /// In Redis, under the hold's id (see [`fleet::hold_id`]).
    Fleet {
        limiter: &'l Limiter,
        request_id: String,
    },
}

impl std::fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field(
                "scopes",
                &self.held.iter().map(|(s, _)| s).collect::<Vec<_>>(),
            )
            .field("nanos", &self.nanos)
            .field("fleet", &!matches!(self.place, Held::Local { .. }))
            .finish()
    }
}

impl<'l> Reservation<'l> {
    /// Reserves `usd` against every `(scope, budget)`, all or none: in Redis
    /// when the limiter has it and a budget has a limit (see [`fleet`]),
    /// else (and while Redis cannot answer) in this process.
    pub async fn acquire_shared(
        limiter: &'l Limiter,
        budgets: &[(&'static str, Arc<Budget>)],
        usd: f64,
        request_id: &str,
    ) -> Result<Reservation<'l>, Refusal> {
        let shared = limiter.shared();
        if shared && budgets.iter().any(|(_, b)| b.max_usd().is_some()) {
            let nanos = to_nanos(usd);
            let placed = budgets.iter().all(|(_, b)| b.place.is_some());
            if placed && limiter.settings().budget_slices {
                match slice::reserve(limiter, budgets, nanos).await {
                    slice::Sliced::Taken => {
                        return Ok(Reservation {
                            held: budgets.to_vec(),
                            nanos,
                            place: Held::Slice,
                            counted: Vec::new(),
                        })
                    }
                    slice::Sliced::Refused(refusal) => return Err(refusal),
                    slice::Sliced::Contended => {}
                    slice::Sliced::Unavailable => {
                        let mut local = Reservation::acquire(budgets, usd)?;
                        local.place = Held::Local { owe: true };
                        return Ok(local);
                    }
                }
            }
            // One hold per attempt: an undo of an earlier, failed attempt
            // of this request can never release a later one.
            let hold = fleet::hold_id(request_id);
            match fleet::reserve(limiter, budgets, nanos, &hold).await {
                Some(Ok(())) => {
                    return Ok(Reservation {
                        held: budgets.to_vec(),
                        nanos,
                        place: Held::Fleet {
                            limiter,
                            request_id: hold,
                        },
                        counted: Vec::new(),
                    })
                }
                Some(Err(refusal)) => return Err(refusal),
                None => {}
            }
        }
        let mut local = Reservation::acquire(budgets, usd)?;
        local.place = Held::Local { owe: shared };
        Ok(local)
    }

    /// Reserves `usd` against every `(scope, budget)` in this process, all
    /// or none.
    pub fn acquire(
        budgets: &[(&'static str, Arc<Budget>)],
        usd: f64,
    ) -> Result<Reservation<'l>, Refusal> {
        let nanos = to_nanos(usd);
        let mut held = Vec::with_capacity(budgets.len());
        for (scope, budget) in budgets {
            if !budget.try_reserve(nanos) {
                for (_, b) in &held {
                    let b: &Arc<Budget> = b;
                    b.settle(nanos, 0);
                }
                return Err(Refusal {
                    scope,
                    spend: budget.spent_usd(),
                    max: budget.max_usd().unwrap_or(0.0),
                    in_flight: budget.reserved.load(Ordering::Acquire) > 0,
                });
            }
            held.push((*scope, budget.clone()));
        }
        Ok(Reservation {
            held,
            nanos,
            place: Held::Local { owe: false },
            counted: Vec::new(),
        })
    }

    /// A reservation holding nothing that counts the real cost on
    /// `budgets` ([`Reservation::counting`]); `shared`: Redis is
    /// configured, so their counters there learn it later.
    pub fn nothing_held(budgets: Vec<Arc<Budget>>, shared: bool) -> Reservation<'l> {
        Reservation {
            held: Vec::new(),
            nanos: 0,
            place: Held::Local { owe: shared },
            counted: budgets,
        }
    }

    /// Adds `budget` to those the real cost is counted on without room
    /// held in it: its spend grows (and is owed to its counter in Redis,
    /// when there is one), it never refuses this request.
    pub fn counting(mut self, budget: Arc<Budget>) -> Reservation<'l> {
        self.counted.push(budget);
        self
    }

    /// Settles the real cost; returns the scopes whose soft budget this
    /// request crossed, with their budgets for the alert.
    pub fn settle(mut self, actual_usd: f64) -> Vec<(&'static str, Arc<Budget>)> {
        let actual = to_nanos(actual_usd);
        let held = std::mem::take(&mut self.held);
        self.finish(&held, actual);
        let owe = !matches!(self.place, Held::Local { owe: false });
        for b in std::mem::take(&mut self.counted) {
            b.count(actual, owe);
        }
        let local_reserve = match self.place {
            Held::Local { .. } => self.nanos,
            Held::Slice | Held::Fleet { .. } => 0,
        };
        held.into_iter()
            .filter(|(_, b)| b.settle(local_reserve, actual))
            .collect()
    }

    /// Tells Redis (or, when it cannot take it, each budget's debt to it).
    fn finish(&self, held: &[(&'static str, Arc<Budget>)], actual: i64) {
        match &self.place {
            Held::Local { owe: true } if actual > 0 => {
                for (_, b) in held {
                    b.owed.fetch_add(actual, Ordering::AcqRel);
                }
            }
            Held::Local { .. } => {}
            Held::Slice => slice::settle(held, self.nanos, actual),
            Held::Fleet {
                limiter,
                request_id,
            } => fleet::settle(limiter, held, request_id, actual),
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            return;
        }
        self.finish(&held, 0);
        if let Held::Local { .. } = self.place {
            for (_, b) in &held {
                b.settle(self.nanos, 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_reservations_never_exceed_the_limit() {
        let budget = Budget::new(Some(0.01), None, 0.0);
        let admitted = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..100 {
                        if let Ok(r) = Reservation::acquire(&[("key", budget.clone())], 0.001) {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            std::mem::forget(r.settle(0.001));
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), 10);
        assert!((budget.spent_usd() - 0.01).abs() < 1e-12);
        assert!(budget.exhausted());
    }

    #[test]
    fn all_or_nothing_and_release_on_drop() {
        let key = Budget::new(Some(1.0), None, 0.0);
        let team = Budget::new(Some(0.5), None, 0.4);
        let refused =
            Reservation::acquire(&[("key", key.clone()), ("team", team.clone())], 0.2).unwrap_err();
        assert_eq!(refused.scope, "team");
        let r =
            Reservation::acquire(&[("key", key.clone()), ("team", team.clone())], 0.05).unwrap();
        drop(r);
        assert_eq!(key.reserved.load(Ordering::Relaxed), 0);
        assert_eq!(team.reserved.load(Ordering::Relaxed), 0);
    }

    /// While Redis cannot answer, a reservation in the process counts the
    /// fleet's spend Redis last reported plus what was settled here since,
    /// not only this replica's own figure: before, a replica whose calls
    /// missed their deadline spent the whole budget again on its own.
    #[test]
    fn a_reservation_in_the_process_counts_the_fleets_last_reported_spend() {
        let b = Budget::new(Some(1.0), None, 0.1);
        // Another replica spent 0.8 in all, as Redis reported.
        b.saw_fleet_spend(to_nanos(0.8));
        assert!(Reservation::acquire(&[("key", b.clone())], 0.25).is_err());
        let mut r = Reservation::acquire(&[("key", b.clone())], 0.15).unwrap();
        // Settled while Redis could not be used: owed, and counted on top
        // of the fleet's figure.
        r.place = Held::Local { owe: true };
        r.settle(0.15);
        assert!(Reservation::acquire(&[("key", b.clone())], 0.1).is_err());
        assert!(Reservation::acquire(&[("key", b.clone())], 0.05).is_ok());
        // A lower spend announced (an admin's reset) forgets the figure.
        b.set_durable(0.0);
        assert!(Reservation::acquire(&[("key", b.clone())], 0.5).is_ok());
    }

    /// Written spend beyond any real figure saturates instead of wrapping
    /// to a negative spend that would admit everything.
    #[test]
    fn a_read_during_a_flush_is_read_again_a_bounded_number_of_times() {
        let run = |flushing_reads: usize| {
            let flushes = Flushes::default();
            let reads = std::cell::Cell::new(0);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let result = runtime.block_on(flushes.read_settled(|| {
                let n = reads.get() + 1;
                reads.set(n);
                if n <= flushing_reads {
                    flushes.begin();
                }
                async move { Ok::<_, ()>(n) }
            }));
            (result.unwrap(), reads.get())
        };
        assert_eq!(run(0), (1, 1));
        assert_eq!(run(1), (2, 2));
        assert_eq!(run(3), (4, 4));
        assert_eq!(run(10), (SETTLED_READ_ATTEMPTS, SETTLED_READ_ATTEMPTS));
    }

    #[test]
    fn flushed_spend_saturates() {
        let key = Budget::new(Some(1.0), None, 0.0);
        let r = Reservation::acquire(&[("key", key.clone())], 0.5).unwrap();
        r.settle(0.5);
        key.flushed(i64::MAX);
        key.flushed(i64::MAX);
        assert!(key.spent_usd() > 1.0e9, "{}", key.spent_usd());
        assert!(key.exhausted());
        assert!(
            Reservation::acquire(&[("key", key.clone())], 0.01).is_err(),
            "a saturated spend refuses, without overflowing the check"
        );
    }

    #[test]
    fn soft_budget_alerts_once_and_resets() {
        let key = Budget::new(Some(1.0), Some(0.1), 0.0);
        let r = Reservation::acquire(&[("key", key.clone())], 0.2).unwrap();
        assert_eq!(r.settle(0.15).len(), 1);
        let r = Reservation::acquire(&[("key", key.clone())], 0.2).unwrap();
        assert!(r.settle(0.01).is_empty(), "alerts once per crossing");
        key.flushed(to_nanos(0.16));
        key.set_durable(0.0);
        assert_eq!(key.spent_usd(), 0.0, "a reset restores the whole budget");
        let r = Reservation::acquire(&[("key", key.clone())], 0.2).unwrap();
        assert_eq!(
            r.settle(0.12).len(),
            1,
            "crossing again after a reset alerts again"
        );
    }

    #[test]
    fn refusal_alerts_once_until_the_budget_gains_room() {
        let key = Budget::new(Some(1.0), None, 0.5);
        assert!(key.first_refusal());
        assert!(!key.first_refusal(), "once per crossing");
        key.set_limits(Some(1.0), None);
        key.set_durable(0.5);
        assert!(!key.first_refusal(), "an unrelated refresh does not re-arm");
        key.set_durable(0.0);
        assert!(key.first_refusal(), "a spend reset re-arms");
        key.set_limits(Some(2.0), None);
        assert!(key.first_refusal(), "a raised limit re-arms");
    }
}
