//! Budget slices (lease mode, or `rate_limits.budget_slices`): a replica
//! takes a slice of a budget's room from Redis in one call (`slice.lua`)
//! and reserves and settles its requests against it with atomics, so a
//! request whose budgets all have a slice makes no Redis call.
//!
//! A slice is a hold in the budget's hash like a request's (`hold:slice:
//! <process>:<prefix>`, in the holds set with its expiry), so the sum of
//! every replica's slices and holds never passes what the budget has left:
//! the fleet overshoots by at most one request's reconciliation, as with a
//! hold per request. A grant is the room left divided by
//! `1 / lease_fraction` (at least the request's worst case): slices shrink
//! as the budget nears its end, and once less than four requests' worst
//! case is left (a small budget from the start) requests hold room one by
//! one as in `redis` mode ([`super::fleet`]), so the last room is never
//! parked in another replica's slice. The sweep ([`sweep`], every 250 ms
//! at most) reports the spend settled against a slice every `lease_ttl_ms`
//! while that is a quarter of its grant or more (one call a report
//! interval for a busy key, however many requests it serves), else every
//! `lease_max_ttl_ms` (a slow key's slice), and each report starts its
//! life again; a slice ends when left unused for twice its last gap
//! between takes (twice `lease_ttl_ms` to `lease_max_ttl_ms`, see
//! `Due::of`) or twice `lease_max_ttl_ms` after its last call, and the
//! sweep then hands back its unused room (the hold shrinks to what
//! requests in flight still hold); a request that finds its slice short
//! reports, hands back and asks for more in one call. At shutdown every
//! slice is handed back ([`return_all`]). A replica killed with a slice
//! leaves its hold until it lapses (`parallel_slot_ttl_secs`, as a
//! request's hold): room refused meanwhile, never spent; the spend it
//! settled since its last report (at most a quarter of the slice or a
//! report interval's, whichever is more, and a sweep's) is lost to Redis
//! (not to Postgres).
//!
//! Local accounting: `free` (room granted, not reserved), `in_flight`
//! (reserved by requests here), `unreported` (settled here, not yet told
//! to Redis); their sum is what the hold in Redis covers. Every call moves
//! value out of `free` and `unreported` with a swap and tells Redis to
//! shrink the hold by exactly that (a delta), so concurrent takes and
//! settlements need no lock; one call per slice is out at a time (`busy`).
//! A lost reply leaves the hold bigger than needed (room parked, never
//! spent twice) until the slice's next call with nothing in flight, which
//! sets it exactly.

use super::{Budget, Refusal, NO_LIMIT};
use crate::limits::{Limiter, LuaScript, ScriptCall};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

/// `slice.lua`: take, resize or return a slice and report its spend.
static SLICE: LuaScript = LuaScript::batchable(include_str!("slice.lua"));
/// Index of the deadline among `slice.lua`'s arguments.
const DEADLINE_ARG: usize = 2;
/// Slices handed out at most per grant divisor (a fraction under 1/1000
/// still grants a thousandth of the room).
const MAX_DIVISOR: f64 = 1000.0;
/// Slices a sweep calls Redis about at once (the limiter's link drains at
/// most 512 calls into one pipeline).
const SWEEP_TOGETHER: usize = 512;
/// A slice reports once a `lease_ttl_ms` only when at least this fraction
/// (1 / `REPORT_SHARE`) of its grant was settled since its last call (a
/// busy key); a slower one reports once a slow report interval.
const REPORT_SHARE: i64 = 4;

impl Slice {
    /// Settled against the slice, not yet reported to Redis.
    pub(super) fn unreported(&self) -> i64 {
        self.unreported.load(SeqCst)
    }
}

/// This process's slice of one budget counter.
#[derive(Debug)]
pub(super) struct Slice {
    /// Its number in the [`Book`].
    id: u64,
    /// Room granted and not reserved here (nano-USD); below zero after
    /// requests cost more than they reserved.
    free: AtomicI64,
    /// Reserved by requests in flight against the slice.
    in_flight: AtomicI64,
    /// Settled against the slice, not yet reported to Redis.
    unreported: AtomicI64,
    /// Milliseconds since the book's epoch until which the slice serves.
    serves_until: AtomicU64,
    /// Milliseconds since the book's epoch of its last call.
    last_call: AtomicU64,
    /// Milliseconds since the book's epoch of its last take.
    last_take: AtomicU64,
    /// Milliseconds between its last two takes (in different
    /// milliseconds): how long it waits unused before it ends.
    gap: AtomicU64,
    /// Its last grant (nano-USD): a report is due early once a share of it
    /// was settled ([`REPORT_SHARE`]).
    size: AtomicI64,
    /// Successful takes so far: a call sees by it whether a request took
    /// room while it read the slice.
    takes: AtomicU64,
    /// Whether Redis may have a hold for it.
    held: AtomicBool,
    /// A call about this slice is out.
    busy: AtomicBool,
}

impl Slice {
    /// An empty slice.
    pub(super) fn new() -> Slice {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Slice {
            id: NEXT.fetch_add(1, SeqCst),
            free: AtomicI64::new(0),
            in_flight: AtomicI64::new(0),
            unreported: AtomicI64::new(0),
            serves_until: AtomicU64::new(0),
            last_call: AtomicU64::new(0),
            last_take: AtomicU64::new(0),
            gap: AtomicU64::new(0),
            size: AtomicI64::new(0),
            takes: AtomicU64::new(0),
            held: AtomicBool::new(false),
            busy: AtomicBool::new(false),
        }
    }

    /// Takes `nanos` from the room granted, if the slice serves and has it.
    /// `in_flight` grows before `free` shrinks: a call in between counts
    /// the amount twice (keeps it held), never not at all.
    fn take(&self, nanos: i64, now: u64) -> bool {
        if now >= self.serves_until.load(SeqCst) {
            return false;
        }
        self.in_flight.fetch_add(nanos, SeqCst);
        let taken = self
            .free
            .fetch_update(SeqCst, SeqCst, |f| {
                (f >= nanos).then(|| f.saturating_sub(nanos))
            })
            .is_ok();
        if !taken {
            self.in_flight.fetch_sub(nanos, SeqCst);
            return false;
        }
        self.takes.fetch_add(1, SeqCst);
        let last = self.last_take.load(SeqCst);
        if last != now {
            self.last_take.store(now, SeqCst);
            if last != 0 {
                self.gap.store(now.saturating_sub(last), SeqCst);
            }
        }
        true
    }

    /// Whether the slice serves and has `nanos` free (a hint: a take may
    /// still lose the race for it).
    fn serves(&self, nanos: i64, now: u64) -> bool {
        now < self.serves_until.load(SeqCst) && self.free.load(SeqCst) >= nanos
    }

    /// A request that reserved `nanos` cost `actual`: the difference goes
    /// back to `free`, the cost waits to be reported.
    fn settle(&self, nanos: i64, actual: i64) {
        self.unreported.fetch_add(actual, SeqCst);
        self.free.fetch_add(nanos.saturating_sub(actual), SeqCst);
        self.in_flight.fetch_sub(nanos, SeqCst);
    }
}

/// Every slice of this process, for the sweep and the shutdown.
struct Book {
    epoch: Instant,
    /// Names this process's slices in Redis: unique per start.
    process: String,
    live: papaya::HashMap<u64, Weak<Budget>>,
}

static BOOK: LazyLock<Book> = LazyLock::new(|| Book {
    epoch: Instant::now(),
    process: uuid::Uuid::new_v4().simple().to_string(),
    live: papaya::HashMap::new(),
});

impl Book {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// How a reservation against slices went.
pub(super) enum Sliced {
    /// Taken from every budget's slice.
    Taken,
    /// A budget has not even the request's worst case left.
    Refused(Refusal),
    /// Another request is refilling a slice, a fresh grant was taken by
    /// others first, or the budget's end is near: ask Redis for this
    /// request alone.
    Contended,
    /// Redis gave no answer: the process's counters decide.
    Unavailable,
}

/// The one call about a slice that may be out: its `busy` flag, given
/// back when the call ends or its caller is dropped mid-call (the call still
/// runs in Redis; a grant it brings is then parked until an idle call).
struct Turn<'a>(&'a Slice);

impl<'a> Turn<'a> {
    fn take(slice: &'a Slice) -> Option<Turn<'a>> {
        // Not `then_some(Turn(slice))`: its argument is built either way,
        // and a Turn dropped on the failing path would clear the busy flag
        // of the call that holds it.
        if slice.busy.swap(true, SeqCst) {
            None
        } else {
            Some(Turn(slice))
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.busy.store(false, SeqCst);
    }
}

/// The outcome of one `slice.lua` call.
enum Grant {
    Granted,
    /// Little is left: hold room per request.
    PerRequest,
    Refused {
        spent: i64,
        reserved: i64,
    },
    Failed,
}

/// Reserves `nanos` against the slice of every budget, all or none,
/// refilling the slices that lack room (one call each, one at a time).
pub(super) async fn reserve(
    limiter: &Limiter,
    budgets: &[(&'static str, Arc<Budget>)],
    nanos: i64,
) -> Sliced {
    if take_all(budgets, nanos) {
        return Sliced::Taken;
    }
    for (scope, b) in budgets {
        if b.slice.serves(nanos, BOOK.now_ms()) {
            continue;
        }
        let Some(_turn) = Turn::take(&b.slice) else {
            return Sliced::Contended;
        };
        let grant = call(limiter, b, nanos, true, false).await;
        match grant {
            Grant::Granted => {}
            Grant::Refused { spent, reserved } => {
                return Sliced::Refused(Refusal {
                    scope,
                    spend: super::to_usd(spent),
                    max: b.max_usd().unwrap_or(0.0),
                    in_flight: reserved > 0 || b.slice.in_flight.load(SeqCst) > 0,
                })
            }
            Grant::PerRequest => return Sliced::Contended,
            Grant::Failed => return Sliced::Unavailable,
        }
    }
    if take_all(budgets, nanos) {
        Sliced::Taken
    } else {
        Sliced::Contended
    }
}

/// Takes `nanos` from every budget's slice, or from none.
fn take_all(budgets: &[(&'static str, Arc<Budget>)], nanos: i64) -> bool {
    let now = BOOK.now_ms();
    for (i, (_, b)) in budgets.iter().enumerate() {
        if !b.slice.take(nanos, now) {
            for (_, taken) in &budgets[..i] {
                taken.slice.settle(nanos, 0);
            }
            return false;
        }
    }
    true
}

/// Settles a request that took `nanos` from every budget's slice.
pub(super) fn settle(budgets: &[(&'static str, Arc<Budget>)], nanos: i64, actual: i64) {
    for (_, b) in budgets {
        b.slice.settle(nanos, actual);
    }
}

/// One `slice.lua` call for `b` (the caller holds its `busy` flag):
/// reports what was settled, hands back the free room (`give_back`), with
/// `need` above zero asks for a grant of at least `need`, and with a grant
/// or `extend` starts the slice's life again (the longest, [`Lives`]: the
/// sweep ends a slice left unused sooner).
async fn call(
    limiter: &Limiter,
    b: &Arc<Budget>,
    need: i64,
    give_back: bool,
    extend: bool,
) -> Grant {
    let Some(place) = b.place.as_ref() else {
        return Grant::Failed;
    };
    let slice = &b.slice;
    // Idle (nothing in flight, the free room handed back, nothing settled
    // since): the hold may then be set exactly. A request that settles
    // between the reads below puts its leftover back into `free` and its
    // cost into `unreported` before it leaves `in_flight`, so idle needs
    // nothing in flight before the reads, nothing in flight after them and
    // no take in between; otherwise the hold only shrinks by what was read.
    let takes_before = slice.takes.load(SeqCst);
    let none_in_flight = give_back && slice.in_flight.load(SeqCst) == 0;
    let back = if give_back {
        slice
            .free
            .fetch_update(SeqCst, SeqCst, |f| (f > 0).then_some(0))
            .unwrap_or(0)
    } else {
        0
    };
    let unreported = slice.unreported.swap(0, SeqCst);
    let owed = b.owed.swap(0, SeqCst);
    let idle = none_in_flight
        && slice.in_flight.load(SeqCst) == 0
        && slice.takes.load(SeqCst) == takes_before;
    let max = b.max.load(SeqCst);
    let fraction = limiter.settings().lease.fraction;
    let divisor = (1.0 / fraction).round().clamp(1.0, MAX_DIVISOR) as i64;
    let ttl = limiter.hold_ttl();
    let call = ScriptCall {
        script: &SLICE,
        keys: vec![place.hash.clone(), place.holds()],
        args: vec![
            ttl.as_millis().to_string(),
            format!("slice:{}:{}", BOOK.process, place.prefix),
            "0".to_string(),
            b.period.load(SeqCst).to_string(),
            place.prefix.clone(),
            if max == NO_LIMIT { -1 } else { max }.to_string(),
            b.spent_nanos().to_string(),
            unreported.saturating_add(owed).to_string(),
            unreported.saturating_add(back).to_string(),
            need.to_string(),
            divisor.to_string(),
            if idle { "1" } else { "0" }.to_string(),
        ],
    };
    slice.held.store(true, SeqCst);
    BOOK.live.pin().insert(slice.id, Arc::downgrade(b));
    let started = BOOK.now_ms();
    slice.last_call.store(started, SeqCst);
    // A grant whose reply comes late stays in Redis's hold unused (parked,
    // never spent) until the slice's next idle call sets the hold exactly.
    match limiter
        .eval(call, Some(DEADLINE_ARG), |_| None, None)
        .await
        .as_deref()
    {
        Some([verdict @ (0 | 1 | 3), grant, spent, reserved]) => {
            b.saw_fleet_spend(*spent);
            if idle && *grant == 0 {
                slice.held.store(false, SeqCst);
            }
            if idle {
                // The hold is now exactly the grant: a debt left by a
                // request that cost more than it reserved is settled.
                let _ = slice.free.fetch_update(SeqCst, SeqCst, |f| Some(f.max(0)));
            }
            if *verdict == 3 {
                Grant::PerRequest
            } else if *verdict == 1 {
                if need > 0 {
                    slice.free.fetch_add(*grant, SeqCst);
                    slice.size.store(*grant, SeqCst);
                }
                if need > 0 || extend {
                    slice
                        .serves_until
                        .store(started.saturating_add(Lives::of(limiter).most), SeqCst);
                }
                Grant::Granted
            } else {
                Grant::Refused {
                    spent: *spent,
                    reserved: *reserved,
                }
            }
        }
        _ => {
            // Not counted as far as this replica knows: reported again
            // next time (a reply lost after Redis ran it counts the spend
            // twice and shrinks the hold twice: the room stays the same).
            // The room handed back is not taken again: Redis may have it.
            slice.unreported.fetch_add(unreported, SeqCst);
            b.owed.fetch_add(owed, SeqCst);
            Grant::Failed
        }
    }
}

/// Hands back the room of every slice whose life ended, reports the spend
/// settled against every slice (one call per slice, none for a slice with
/// nothing to tell) and forgets slices with nothing left. Run every
/// [`sweep_every`]. What each slice is due is decided first, without a
/// future per slice (a replica with a thousand busy keys has a thousand
/// slices, and one sweep in four finds each with a call due); the calls
/// are then made together, up to [`SWEEP_TOGETHER`] at a time, so the
/// limiter's link sends them in one pipeline: a sweep of many budgets
/// costs Redis one read and one write of its socket, not a round trip per
/// budget.
pub async fn sweep(limiter: &Limiter) {
    let now = BOOK.now_ms();
    let timing = Timing::of(limiter);
    let mut due: Vec<(Arc<Budget>, bool, bool)> = Vec::new();
    {
        let live = BOOK.live.pin();
        let mut gone: Vec<u64> = Vec::new();
        for (id, weak) in live.iter() {
            let Some(b) = weak.upgrade() else {
                gone.push(*id);
                continue;
            };
            let d = Due::of(&b.slice, b.owed.load(SeqCst) != 0, now, &timing);
            if d.ended {
                // Left unused: it serves no more (a take racing this gets
                // its room before the call hands the rest back).
                b.slice.serves_until.fetch_min(now, SeqCst);
            }
            match d.call {
                Some(extend) => due.push((b, extend, d.ended)),
                None if d.forget => gone.push(*id),
                None => {}
            }
        }
        for id in gone {
            live.remove(&id);
        }
    }
    for group in due.chunks(SWEEP_TOGETHER) {
        let turns = group.iter().map(|(b, extend, ended)| async move {
            let Some(_turn) = Turn::take(&b.slice) else {
                return;
            };
            let _ = call(limiter, b, 0, *ended, *extend).await;
        });
        futures_util::future::join_all(turns).await;
    }
}

/// Hands back every slice's room and reports its spend: at shutdown, once
/// the requests are done. Waits at most `within`.
pub async fn return_all(limiter: &Limiter, within: Duration) {
    let until = Instant::now() + within;
    let all: Vec<(u64, Weak<Budget>)> = BOOK
        .live
        .pin()
        .iter()
        .map(|(id, b)| (*id, b.clone()))
        .collect();
    for (id, weak) in all {
        if Instant::now() >= until {
            tracing::warn!("budget slices not all handed back before shutdown; theirs lapse with parallel_slot_ttl_secs");
            return;
        }
        if let Some(b) = weak.upgrade() {
            b.slice.serves_until.store(0, SeqCst);
            hand_back(limiter, &b, id, BOOK.now_ms()).await;
        }
    }
}

/// One slice's turn at shutdown, if it has anything to tell Redis and no
/// other call about it is out (see [`Due::of`]).
async fn hand_back(limiter: &Limiter, b: &Arc<Budget>, id: u64, now: u64) {
    let slice = &b.slice;
    let due = Due::of(slice, b.owed.load(SeqCst) != 0, now, &Timing::of(limiter));
    let Some(extend) = due.call else {
        if due.forget {
            BOOK.live.pin().remove(&id);
        }
        return;
    };
    let Some(_turn) = Turn::take(slice) else {
        return;
    };
    let _ = call(limiter, b, 0, due.ended, extend).await;
}

/// How long a slice serves, in milliseconds. `busy`: twice `lease_ttl_ms`,
/// how long a slice waits unused before it ends when requests took from it
/// closer together (a slower key's waits twice its last gap between takes,
/// up to `lease_max_ttl_ms`). `most`: a grant's or report's life at most,
/// twice `lease_max_ttl_ms` (a slow slice reports every half of it),
/// never under `busy`. Both at most half the hold's life in Redis, which
/// every call starts again, so a slice never serves after Redis let its
/// hold lapse.
#[derive(Debug, Clone, Copy)]
struct Lives {
    busy: u64,
    slow: u64,
    most: u64,
}

impl Lives {
    fn of(limiter: &Limiter) -> Lives {
        let half_hold = limiter.hold_ttl() / 2;
        let lease = &limiter.settings().lease;
        let busy = ms((lease.ttl * 2).min(half_hold));
        let slow = ms(lease.max_ttl.min(half_hold)).max(busy);
        let most = ms((lease.max_ttl * 2).min(half_hold)).max(busy);
        Lives { busy, slow, most }
    }
}

/// `d` in whole milliseconds, saturating.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A slice's clocks, in milliseconds: how often a busy slice reports, how
/// often any slice in use reports at least, how long a slice waits unused
/// at least and at most, how often a hold with requests in flight is
/// renewed.
#[derive(Debug, Clone, Copy)]
struct Timing {
    report_every: u64,
    slow_every: u64,
    unused_least: u64,
    unused_most: u64,
    renew: u64,
}

impl Timing {
    fn of(limiter: &Limiter) -> Timing {
        let lives = Lives::of(limiter);
        Timing {
            report_every: lives.busy / 2,
            slow_every: lives.most / 2,
            unused_least: lives.busy,
            unused_most: lives.slow,
            renew: ms(limiter.hold_ttl() / 2),
        }
    }
}

/// What a sweep does about one slice.
#[derive(Debug, PartialEq, Eq)]
struct Due {
    /// A call to make; `Some(true)` also starts the slice's life again.
    call: Option<bool>,
    /// The slice's life has ended (its free room goes back).
    ended: bool,
    /// Nothing left to tell or hold: forget the slice.
    forget: bool,
}

impl Due {
    /// A slice ends when its life ran out or it was left unused for twice
    /// its last gap between takes (between `unused_least`, today's busy
    /// life, and `unused_most`, `lease_max_ttl_ms`); one that ended hands
    /// its room back and reports its spend at once, as does one owing a
    /// fallback's spend. One still serving reports the spend settled
    /// against it once every `report_every` when that is at least a share
    /// of its grant ([`REPORT_SHARE`]: a busy key costs Redis one call a
    /// report interval, not one a sweep) or it has no room left, else once every `slow_every` (a
    /// slow key's slice: one call per `lease_max_ttl_ms` whatever its
    /// rate); so a replica that dies loses Redis at most a report
    /// interval's spend or a share of the slice, whichever is more. That
    /// report starts its life again if requests took from it since its last
    /// call; its hold is renewed while requests are in flight.
    fn of(slice: &Slice, owed: bool, now: u64, t: &Timing) -> Due {
        let last_call = slice.last_call.load(SeqCst);
        let last_take = slice.last_take.load(SeqCst);
        let unused_for = (slice.gap.load(SeqCst).saturating_mul(2))
            .clamp(t.unused_least, t.unused_most.max(t.unused_least));
        let ended =
            now >= slice.serves_until.load(SeqCst) || now.saturating_sub(last_take) >= unused_for;
        let idle = slice.in_flight.load(SeqCst) == 0;
        let held = slice.held.load(SeqCst);
        let since_call = now.saturating_sub(last_call);
        let unreported = slice.unreported.load(SeqCst);
        let share = slice.size.load(SeqCst).max(0) / REPORT_SHARE;
        // A slice with no room left (used up or handed back to a budget's
        // last requests) has nothing to wait for either.
        let spent_out = slice.free.load(SeqCst) <= 0;
        let busy =
            since_call >= t.report_every && unreported != 0 && (unreported >= share || spent_out);
        let report = busy || since_call >= t.slow_every;
        let extend = !ended && report && last_take >= last_call;
        let news = (report && unreported != 0)
            || owed
            || (ended && (slice.free.load(SeqCst) > 0 || (idle && held)))
            || (!idle && since_call >= t.renew)
            || extend;
        Due {
            call: news.then_some(extend),
            ended,
            forget: !news && ended && idle && !held,
        }
    }
}

/// How often the sweep runs: every half busy report interval, at most
/// 250 ms apart (an ended slice's room handed back promptly).
pub fn sweep_every(limiter: &Limiter) -> Duration {
    Duration::from_millis(Timing::of(limiter).report_every / 2)
        .clamp(Duration::from_millis(5), Duration::from_millis(250))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_turn_leaves_the_holders_turn_in_place() {
        let slice = Slice::new();
        let held = Turn::take(&slice).expect("the first turn");
        assert!(Turn::take(&slice).is_none(), "one call at a time");
        assert!(
            Turn::take(&slice).is_none(),
            "a refused turn must not clear the holder's flag"
        );
        drop(held);
        assert!(
            Turn::take(&slice).is_some(),
            "free again once the holder is done"
        );
    }

    /// A slice at `now` = 10 s whose life runs to `until`, last called
    /// `since_call` ms ago and last taken from `since_take` ms ago.
    fn slice_at(until: u64, since_call: u64, since_take: u64, unreported: i64) -> Slice {
        let slice = Slice::new();
        slice.serves_until.store(until, SeqCst);
        slice.last_call.store(10_000 - since_call, SeqCst);
        slice.last_take.store(10_000 - since_take, SeqCst);
        slice.unreported.store(unreported, SeqCst);
        slice.held.store(true, SeqCst);
        slice
    }

    const TIMING: Timing = Timing {
        report_every: 1_000,
        slow_every: 4_000,
        unused_least: 2_000,
        unused_most: 4_000,
        renew: 300_000,
    };

    fn due(slice: &Slice, owed: bool) -> Due {
        Due::of(slice, owed, 10_000, &TIMING)
    }

    #[test]
    fn a_busy_slice_reports_once_a_report_interval_not_every_sweep() {
        // Called 250 ms ago (the previous sweep), spend settled since.
        let busy = slice_at(11_750, 250, 5, 700);
        assert_eq!(due(&busy, false).call, None, "nothing due yet");
        // A report interval after its last call: one call reports the
        // spend and starts its life again.
        let busy = slice_at(11_000, 1_000, 5, 700);
        assert_eq!(due(&busy, false).call, Some(true));
        // Spend a fallback owes is told at once.
        let owing = slice_at(11_750, 250, 5, 0);
        assert_eq!(due(&owing, true).call, Some(false));
    }

    #[test]
    fn a_slow_slice_reports_once_a_slow_interval_and_lives_on() {
        // A grant of 100,000 with 700 settled since the last call, its
        // requests 2 s apart, the last 500 ms ago: under a quarter of the
        // grant, so no report at a busy report interval...
        let slow = |since_call, since_take, unreported| {
            let s = slice_at(30_000, since_call, since_take, unreported);
            s.size.store(100_000, SeqCst);
            s.gap.store(2_000, SeqCst);
            s.free.store(50_000, SeqCst);
            s
        };
        assert_eq!(due(&slow(1_000, 500, 700), false).call, None);
        // ...nor before the slow interval, though a busy slice would have
        // ended 2 s after its last take (it waits twice its gap)...
        assert_eq!(due(&slow(3_900, 2_500, 700), false).call, None);
        // ...then one call reports it and starts its life again.
        assert_eq!(due(&slow(4_000, 2_500, 700), false).call, Some(true));
        // A quarter of the grant settled: reported at once.
        assert_eq!(due(&slow(1_000, 5, 25_000), false).call, Some(true));
        // No room left: nothing to wait for, reported at once.
        let out = slow(1_000, 5, 700);
        out.free.store(0, SeqCst);
        assert_eq!(due(&out, false).call, Some(true));
        // Unused for twice its gap: it ends and hands its room back.
        let d = due(&slow(4_000, 4_000, 700), false);
        assert_eq!((d.call, d.ended), (Some(false), true));
        // A busy slice (takes a millisecond apart) ends after 2 s unused.
        let busy = slow(1_000, 2_000, 0);
        busy.gap.store(1, SeqCst);
        assert!(due(&busy, false).ended);
    }

    #[test]
    fn a_slice_no_longer_taken_from_reports_without_a_new_life_and_ends() {
        let quiet = slice_at(11_000, 1_000, 1_500, 700);
        assert_eq!(
            due(&quiet, false).call,
            Some(false),
            "reported, not extended"
        );
        let ended = slice_at(9_000, 1_000, 1_500, 0);
        ended.free.store(10, SeqCst);
        let d = due(&ended, false);
        assert_eq!((d.call, d.ended), (Some(false), true), "its room goes back");
        let gone = slice_at(9_000, 1_000, 1_500, 0);
        gone.held.store(false, SeqCst);
        assert_eq!(
            due(&gone, false),
            Due {
                call: None,
                ended: true,
                forget: true
            }
        );
    }

    #[test]
    fn takes_are_all_or_none_and_settle_back_into_free() {
        let a = Budget::new(Some(1.0), None, 0.0);
        let b = Budget::new(Some(1.0), None, 0.0);
        let life = BOOK.now_ms() + 60_000;
        for x in [&a, &b] {
            x.slice.serves_until.store(life, SeqCst);
        }
        a.slice.free.store(100, SeqCst);
        b.slice.free.store(50, SeqCst);
        let both = [("key", a.clone()), ("team", b.clone())];
        assert!(take_all(&both, 40));
        assert!(!take_all(&both, 40), "team has 10 left");
        assert_eq!(a.slice.free.load(SeqCst), 60, "the key's take went back");
        assert_eq!(a.slice.in_flight.load(SeqCst), 40);
        settle(&both, 40, 25);
        assert_eq!(a.slice.free.load(SeqCst), 75);
        assert_eq!(b.slice.free.load(SeqCst), 25);
        assert_eq!(a.slice.unreported.load(SeqCst), 25);
        assert_eq!(a.slice.in_flight.load(SeqCst), 0);
        a.slice.serves_until.store(0, SeqCst);
        assert!(
            !a.slice.take(1, BOOK.now_ms()),
            "an ended slice serves nothing"
        );
    }
}
