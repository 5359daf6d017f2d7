//! Leased parallel slots (lease mode): a replica holds some of a parallel
//! counter's slots in Redis and hands them to its requests with a local
//! compare-and-swap, so a request whose descriptors are all leased makes no
//! Redis call in steady state. See [`super::lease`] for the semantics.
//!
//! In Redis a lease is members `<lease id>:<n>` of the counter's sorted set
//! (the set `limiter.lua` puts requests' slots in), scored by their expiry
//! (now + the lease's life: `lease_ttl_ms`, longer while a slot stays free
//! through whole lives, up to `lease_max_ttl_ms`) and renewed by the
//! control plane before they lapse while in use: a crashed replica's slots
//! lapse within one life, at most `lease_max_ttl_ms`. `slot_lease.lua` renews
//! the members held, removes the ones returned and adds new ones while the
//! counter has room (refused when not one fits). Locally one word holds the
//! slots granted and the slots in use, so a take never goes past the grant.

use super::call::{LuaScript, ScriptCall};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tokio::sync::watch;

/// How a refill went, as the requests waiting on it learn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refill {
    /// A new lease is in the table.
    Granted,
    /// Redis has less than the request's amount left.
    Denied {
        /// Usage Redis reported.
        used: u64,
        /// Unix second when room frees up.
        reset_at: u64,
    },
    /// No answer from Redis: the local counters decide.
    Failed,
}

/// `slot_lease.lua`: renew, return and grant a lease's slots.
pub static SLOT_LEASE_LUA: LuaScript = LuaScript::batchable(include_str!("slot_lease.lua"));

/// Set in `state` once the lease is forgotten: no take or grant after it.
const ENDED: u64 = 1 << 63;
/// The slots in use: the low half of `state`.
const IN_USE: u64 = (1 << 32) - 1;
/// Most slots one lease holds (granted, the high half of `state` below
/// `ENDED`).
const MAX_GRANTED: u64 = (1 << 31) - 1;
/// Most slots one grant asks for: a grant doubles the lease up to its
/// share of the limit, and Redis adds one member per slot.
pub const MAX_GROW: u64 = 1024;
/// The argument `slot_lease.lua` reads the caller's deadline from.
pub const DEADLINE_ARG: usize = 2;

/// What a take from a slot lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotTake {
    /// Taken; slots in use before the take.
    Taken(u64),
    /// Every slot granted is in use, or the lease was not renewed in time:
    /// grant more (which renews).
    Full,
    /// The lease was forgotten: read the table again.
    Ended,
}

/// The members a lease holds in Redis: ranges of member numbers, and the
/// number of the next member to add (never reused, so a late or undone
/// grant never touches members granted after it).
#[derive(Debug, Default)]
struct Members {
    ranges: Vec<(u64, u64)>,
    next: u64,
}

/// One replica's slots of one parallel counter.
#[derive(Debug)]
pub struct SlotLease {
    /// The counter, `{scope:value}:parallel`.
    pub key: String,
    /// Names this lease's members in Redis.
    id: String,
    /// Slots granted (bits 32..63) and in use (bits 0..32); `ENDED` once
    /// forgotten.
    state: AtomicU64,
    /// Milliseconds (of the table's clock) until which Redis holds the
    /// members: takes stop at it until a renewal or grant answers.
    valid_until: AtomicU64,
    /// One more than when (table clock, ms) a slot was last taken, 0 for
    /// never: a lease idle only between two requests keeps its slots (see
    /// `LeaseTable::renew_slots`).
    last_take: AtomicU64,
    /// Until when (table clock, ms) a grant, renewal or return holds the
    /// lease: one at a time.
    busy_until: AtomicU64,
    /// The life (ms) its calls ask Redis to keep its members for.
    life_ms: AtomicU64,
    /// The latest (table clock, ms) a call sent may let it serve until: a
    /// later call's life reaches it, so a shorter life never drops a member
    /// in Redis while the replica still serves it.
    promised: AtomicU64,
    /// Only the holder of `busy_until` changes them (the mutex is never
    /// contended on the request path: takes do not touch it).
    members: Mutex<Members>,
    /// Bumped when a turn ends, with a grant's outcome (`None` for a
    /// renewal): what requests waiting for a grant read.
    pub done: watch::Sender<(u64, Option<Refill>)>,
    /// Return the slots as soon as none is in use (a lease of less than one
    /// slot's share), rather than at the next renewal.
    pub prompt: bool,
}

fn granted_of(state: u64) -> u64 {
    (state & !ENDED) >> 32
}

impl SlotLease {
    /// An empty lease of `key` named `id`, living `life_ms` at first.
    pub fn new(key: String, id: String, prompt: bool, life_ms: u64) -> SlotLease {
        SlotLease {
            key,
            id,
            state: AtomicU64::new(0),
            valid_until: AtomicU64::new(0),
            last_take: AtomicU64::new(0),
            busy_until: AtomicU64::new(0),
            life_ms: AtomicU64::new(life_ms),
            promised: AtomicU64::new(0),
            members: Mutex::new(Members::default()),
            done: watch::Sender::new((0, None)),
            prompt,
        }
    }

    /// Takes one slot while one granted is free and Redis holds them.
    pub fn take(&self, now_ms: u64) -> SlotTake {
        let state = self.state.load(Ordering::Acquire);
        if state & ENDED != 0 {
            return SlotTake::Ended;
        }
        if now_ms >= self.valid_until.load(Ordering::Acquire) {
            return SlotTake::Full;
        }
        match self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & ENDED == 0 && s & IN_USE < granted_of(s)).then_some(s + 1)
            }) {
            Ok(before) => {
                // Stored one later, so 0 stays "never".
                self.last_take
                    .fetch_max(now_ms.saturating_add(1), Ordering::Relaxed);
                SlotTake::Taken(before & IN_USE)
            }
            Err(s) if s & ENDED != 0 => SlotTake::Ended,
            Err(_) => SlotTake::Full,
        }
    }

    /// Why a take now would fail, without taking; `None` when it would
    /// succeed.
    pub fn short(&self, now_ms: u64) -> Option<SlotTake> {
        let state = self.state.load(Ordering::Acquire);
        if state & ENDED != 0 {
            Some(SlotTake::Ended)
        } else if now_ms >= self.valid_until.load(Ordering::Acquire)
            || state & IN_USE >= granted_of(state)
        {
            Some(SlotTake::Full)
        } else {
            None
        }
    }

    /// Frees a slot taken; `true` when none is in use any more.
    pub fn release(&self) -> bool {
        let before = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & IN_USE > 0).then(|| s - 1)
            });
        matches!(before, Ok(s) if s & IN_USE == 1)
    }

    /// (granted, in use).
    pub fn counts(&self) -> (u64, u64) {
        let s = self.state.load(Ordering::Acquire);
        (granted_of(s), s & IN_USE)
    }

    /// Whether a slot was taken within the last `ms` milliseconds.
    pub fn taken_within(&self, now_ms: u64, ms: u64) -> bool {
        match self.last_take.load(Ordering::Relaxed) {
            0 => false,
            after => now_ms.saturating_add(1).saturating_sub(after) < ms,
        }
    }

    /// Whether a slot was ever taken from it.
    pub fn served(&self) -> bool {
        self.last_take.load(Ordering::Relaxed) != 0
    }

    /// The life its calls ask for now, milliseconds.
    pub fn life(&self) -> u64 {
        self.life_ms.load(Ordering::Relaxed)
    }

    /// Until when (table clock, ms) it serves without a renewal.
    pub fn valid_until(&self) -> u64 {
        self.valid_until.load(Ordering::Acquire)
    }

    /// Sets the life of its next calls: twice the last (at most `max_ms`)
    /// when it lapsed with a slot free (its key used less than it held for
    /// a whole life), half (at least `ttl_ms`) when it grows. The caller
    /// holds the turn.
    pub fn next_life(&self, grow: bool, ttl_ms: u64, max_ms: u64) -> u64 {
        let life = self.life();
        let next = if grow {
            life / 2
        } else {
            life.saturating_mul(2)
        };
        let next = next.clamp(ttl_ms, max_ms.max(ttl_ms));
        self.life_ms.store(next, Ordering::Relaxed);
        next
    }

    /// The life a call sent at `now_ms` asks for: its life, lengthened to
    /// what earlier calls may let the lease serve until; records what this
    /// one may. The caller holds the turn.
    pub fn call_life(&self, now_ms: u64) -> u64 {
        let promised = self.promised.load(Ordering::Acquire);
        let life = self.life().max(promised.saturating_sub(now_ms));
        self.promised
            .fetch_max(now_ms.saturating_add(life), Ordering::AcqRel);
        life
    }

    /// Whether a take now would fail for want of a renewal only.
    pub fn lapsed(&self, now_ms: u64) -> bool {
        now_ms >= self.valid_until.load(Ordering::Acquire)
    }

    /// Takes the lease's grant/renewal turn until `until_ms`; `false` when
    /// another holds it.
    pub fn try_busy(&self, now_ms: u64, until_ms: u64) -> bool {
        self.busy_until
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b <= now_ms).then_some(until_ms)
            })
            .is_ok()
    }

    /// Whether a grant, renewal or return holds the lease.
    pub fn is_busy(&self, now_ms: u64) -> bool {
        self.busy_until.load(Ordering::Acquire) > now_ms
    }

    /// Gives the turn back, then tells the waiters (in that order: a
    /// request that finds the lease not busy after subscribing retries
    /// rather than waits).
    pub fn done_busy(&self, outcome: Option<Refill>) {
        self.busy_until.store(0, Ordering::Release);
        self.done.send_modify(|(turns, last)| {
            *turns = turns.wrapping_add(1);
            *last = outcome;
        });
    }

    /// Redis holds the members until `until_ms` (never moved back).
    pub fn renewed(&self, until_ms: u64) {
        self.valid_until.fetch_max(until_ms, Ordering::AcqRel);
    }

    /// Forgets an idle, empty lease; `false` when it holds or uses slots.
    pub fn end_if_idle(&self) -> bool {
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        members.ranges.is_empty()
            && self
                .state
                .compare_exchange(0, ENDED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Whether the lease was forgotten.
    pub fn is_ended(&self) -> bool {
        self.state.load(Ordering::Acquire) & ENDED != 0
    }

    /// The grant call asking for up to `want` new slots under `limit` (the
    /// descriptor's, which may have changed since the lease began),
    /// renewing those held, and the number of its first new member. The
    /// caller holds the turn.
    pub fn grant_call(&self, want: u64, limit: u64, life_ms: u64) -> (ScriptCall, u64) {
        let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let granted = granted_of(self.state.load(Ordering::Acquire));
        let want = want.min(MAX_GRANTED.saturating_sub(granted));
        let first = members.next;
        members.next = first.saturating_add(want);
        let call = self.call(life_ms, limit, want, first, &members.ranges, &[]);
        (call, first)
    }

    /// Adds the `granted` members from `first` that Redis added.
    pub fn add(&self, first: u64, granted: u64) {
        if granted == 0 {
            return;
        }
        let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        members.ranges.push((first, first.saturating_add(granted)));
        self.state.fetch_add(granted << 32, Ordering::AcqRel);
    }

    /// The call removing members `first..first + count` (a grant undone).
    pub fn undo_call(&self, first: u64, count: u64) -> ScriptCall {
        self.call(0, 0, 0, 0, &[], &[(first, first.saturating_add(count))])
    }

    /// Stops granting the slots not in use and returns the call renewing
    /// the rest and removing those; `None` when the lease holds nothing.
    /// The caller holds the turn.
    pub fn renew_call(&self, life_ms: u64) -> Option<ScriptCall> {
        let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let shrunk = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                let spare = granted_of(s).saturating_sub(s & IN_USE);
                (s & ENDED == 0 && spare > 0).then(|| s - (spare << 32))
            });
        let mut spare = match shrunk {
            Ok(s) => granted_of(s).saturating_sub(s & IN_USE),
            Err(_) => 0,
        };
        let mut dropped = Vec::new();
        while spare > 0 {
            let Some((lo, hi)) = members.ranges.pop() else {
                break;
            };
            let n = hi.saturating_sub(lo);
            if n > spare {
                members.ranges.push((lo, hi - spare));
                dropped.push((hi - spare, hi));
                spare = 0;
            } else {
                dropped.push((lo, hi));
                spare -= n;
            }
        }
        if members.ranges.is_empty() && dropped.is_empty() {
            return None;
        }
        Some(self.call(life_ms, 0, 0, 0, &members.ranges, &dropped))
    }

    fn call(
        &self,
        life_ms: u64,
        limit: u64,
        want: u64,
        first: u64,
        keep: &[(u64, u64)],
        drop: &[(u64, u64)],
    ) -> ScriptCall {
        let mut args = vec![
            self.id.clone(),
            life_ms.to_string(),
            "0".to_string(),
            limit.to_string(),
            want.to_string(),
            first.to_string(),
            keep.len().to_string(),
        ];
        for (lo, hi) in keep.iter().chain(drop) {
            args.push(lo.to_string());
            args.push(hi.to_string());
        }
        ScriptCall {
            script: &SLOT_LEASE_LUA,
            keys: vec![self.key.clone()],
            args,
        }
    }
}

/// What `slot_lease.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granted {
    /// `granted` new slots; `used` members were there before.
    Yes {
        /// New slots.
        granted: u64,
        /// Members before the grant.
        used: u64,
    },
    /// Not one new slot fits.
    No {
        /// Members in the counter.
        used: u64,
        /// Unix second when to try again.
        reset_at: u64,
    },
}

/// Reads `slot_lease.lua`'s reply; `None` when it did not run.
pub fn reply(numbers: &[i64]) -> Option<Granted> {
    let n = |v: i64| v.max(0) as u64;
    match numbers {
        [1, granted, used] => Some(Granted::Yes {
            granted: n(*granted),
            used: n(*used),
        }),
        [0, used, reset_at] => Some(Granted::No {
            used: n(*used),
            reset_at: n(*reset_at),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> SlotLease {
        SlotLease::new("{api_key:k}:parallel".into(), "L".into(), false, 1000)
    }

    #[test]
    fn a_lease_lapsing_with_a_slot_free_lives_longer_and_one_growing_shorter() {
        let l = lease();
        assert_eq!(l.next_life(false, 1000, 8000), 2000);
        assert_eq!(l.next_life(false, 1000, 8000), 4000);
        assert_eq!(l.next_life(false, 1000, 8000), 8000);
        assert_eq!(l.next_life(false, 1000, 8000), 8000, "at most the cap");
        assert_eq!(l.call_life(0), 8000);
        assert_eq!(l.next_life(true, 1000, 8000), 4000);
        // A shorter life still covers what the 8 s call may serve.
        assert_eq!(l.call_life(1000), 7000);
        assert_eq!(l.call_life(5000), 4000);
        assert_eq!(l.next_life(true, 1000, 8000), 2000);
        assert_eq!(l.next_life(true, 1000, 8000), 1000);
        assert_eq!(l.next_life(true, 1000, 8000), 1000, "at least the base");
        assert_eq!(l.call_life(9000), 1000);
    }

    #[test]
    fn takes_never_go_past_the_grant_or_the_renewal() {
        let l = lease();
        assert_eq!(l.take(0), SlotTake::Full, "nothing granted yet");
        let (call, first) = l.grant_call(2, 10, 1000);
        assert_eq!(first, 0);
        assert_eq!(call.args[4], "2");
        l.add(first, 2);
        l.renewed(500);
        assert_eq!(l.take(10), SlotTake::Taken(0));
        assert_eq!(l.take(10), SlotTake::Taken(1));
        assert_eq!(l.take(10), SlotTake::Full);
        assert!(!l.release());
        assert_eq!(l.take(500), SlotTake::Full, "not renewed in time");
        assert!(l.release(), "none in use");
        assert!(!l.release(), "nothing to free");
        assert_eq!(l.counts(), (2, 0));
    }

    #[test]
    fn a_renewal_returns_the_spare_slots_and_keeps_those_in_use() {
        let l = lease();
        let (_, first) = l.grant_call(2, 10, 1000);
        l.add(first, 2);
        let (call, first) = l.grant_call(4, 10, 1000);
        assert_eq!(first, 2);
        // Grants renew what is held.
        assert_eq!(&call.args[6..], ["1", "0", "2"]);
        l.add(first, 3);
        l.renewed(1000);
        for _ in 0..3 {
            assert!(matches!(l.take(0), SlotTake::Taken(_)));
        }
        let call = l.renew_call(1000).unwrap();
        // Keeps 0..2 and 2..3, returns 3..5.
        assert_eq!(&call.args[6..], ["2", "0", "2", "2", "3", "3", "5"]);
        assert_eq!(l.counts(), (3, 3));
        assert_eq!(l.take(0), SlotTake::Full);
        for _ in 0..3 {
            l.release();
        }
        let call = l.renew_call(1000).unwrap();
        assert_eq!(&call.args[6..], ["0", "2", "3", "0", "2"]);
        assert!(l.renew_call(1000).is_none(), "holds nothing");
        // A grant undone never reuses member numbers.
        let (_, first) = l.grant_call(1, 10, 1000);
        assert_eq!(first, 6, "5 was asked for but not granted");
        assert!(l.end_if_idle());
        assert_eq!(l.take(0), SlotTake::Ended);
    }

    #[test]
    fn a_lease_in_use_is_not_forgotten() {
        let l = lease();
        let (_, first) = l.grant_call(1, 10, 1000);
        l.add(first, 1);
        assert!(!l.end_if_idle());
        assert!(l.try_busy(0, 100));
        assert!(!l.try_busy(50, 150));
        assert!(l.try_busy(100, 200), "a turn lapses");
        let rx = l.done.subscribe();
        l.done_busy(Some(Refill::Granted));
        assert!(!l.is_busy(0));
        assert_eq!(*rx.borrow(), (1, Some(Refill::Granted)));
        assert_eq!(
            reply(&[1, 3, 4]),
            Some(Granted::Yes {
                granted: 3,
                used: 4
            })
        );
        assert_eq!(reply(&[2]), None);
    }
}
