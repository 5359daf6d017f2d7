//! Lease mode: this process takes rpm/tpm quota from Redis in leases and
//! spends it locally with atomics, so most requests make no Redis call.
//!
//! A lease is granted by `limiter.lua` (kind `l`): it charges its size
//! (at least the request's own amount; what is left in Redis when the
//! whole lease does not fit; refused only when not even the request's
//! amount fits) at the Redis tick `T0`. Size and life follow the key's use
//! on this replica ([`plan`]): a key that would spend its share
//! (`lease_fraction` of the limit) within `lease_ttl_ms` gets the share for
//! `lease_ttl_ms`; a slower one gets twice what its last lease's rate of
//! use spends in the new lease's life, living as long as that fits the
//! share, up to `lease_max_ttl_ms`. Requests take from it with
//! a compare-and-swap on `spent` (exact: no transient over-add), all-or-none
//! across a request's descriptors (a later descriptor's failure gives the
//! earlier ones back). A lease ends when it expires (its life, ended by
//! the control plane's next pass, at most half `lease_ttl_ms` later) or is
//! replaced by a refill: `limiter.lua`'s settlement (kind
//! `l`) removes its grant from `T0` and charges what was spent at the
//! current tick. Every spent unit is therefore counted from `T0` (before it
//! was spent) until at least a full window after the lease ended (after it
//! was spent): the fleet never admits more than the limit in any window.
//! Both lives are kept under half the window so `T0` is still live when
//! the lease ends. An ended lease stays in the table (serving nothing) for
//! `lease_max_ttl_ms`, so the next one is sized by its use.
//!
//! A request naming an rpm or tpm descriptor this process has not seen
//! within `lease_max_ttl_ms` (no lease, ended lease or marker in the table)
//! takes no lease: it is admitted and settled in Redis alone, as in `redis`
//! mode, on the same counters, and leaves a marker (an empty lease expiring
//! at once, forgotten `lease_max_ttl_ms` later) so the key's next request
//! within that time leases. A key used less often than that would otherwise
//! take a lease for one request and end it after (and so pay a lease's
//! calls for every request).
//!
//! One refill per descriptor is in flight per process: the request that
//! wins the lease's `refilling` flag asks Redis; the others wait for its
//! outcome and then take from the new lease (or get its 429). A request
//! that finds several of its leases short (rpm, tpm and parallel slots of
//! a key used a few times a second all end within a lease life) refills
//! them together, so their calls share a flush and a round trip. A lease is
//! refilled once: whatever the outcome, a new lease (an empty one when Redis
//! refused or did not answer) replaces it, so no waiter reads a stale outcome.
//! Quota parked in another replica's lease can refuse a request that would
//! fit the fleet's limit (a false rejection): at most the share, and at
//! most twice what that replica spent at its last rate over the lease's
//! life; it is returned when the lease ends, within its life
//! (`lease_ttl_ms` for a busy key's, at most `lease_max_ttl_ms`) and a
//! control-plane pass.
//!
//! Parallel limits are leased as slots ([`super::slot_lease`]): a replica's
//! slot lease is members `lease:<process>:<n>:<slot>` of the counter's
//! sorted set (where `limiter.lua` puts requests' slots), scored by their
//! expiry, now + the slot lease's life: `lease_ttl_ms` at first, twice the
//! last (up to `lease_max_ttl_ms`) each time the lease lapsed with a slot
//! free (its key used less than it held for a whole life), half (down to
//! `lease_ttl_ms`) each time it grows (every slot in use); a call never
//! asks for less than what an earlier call may still let it serve. Requests take a slot with a CAS on the
//! lease's (granted, in use) word and free it when they end, all-or-none
//! with their other descriptors. When every slot granted is in use, one
//! request (the others wait for it) asks `slot_lease.lua` for more: twice
//! the lease, up to `lease_fraction` of the limit (at least one slot, at
//! most 1,024 per grant), and what is left when that does not fit; refused
//! with the usual 429 when not one slot is free. Every half `lease_ttl_ms`
//! the control plane renews the slots in use and returns (`ZREM`) the
//! others, except from a lease none of whose slots is in use but one was
//! taken within the last pass or half its life (a key between two
//! requests): that one is left to serve until it lapses, and the request
//! after renews it (for twice the life), so a key used a few times a
//! second costs about one call a `lease_max_ttl_ms`; a lease emptied by a
//! pass (its key idle longer than that) and taken from again lives twice
//! as long too (an empty lease is kept `lease_max_ttl_ms` after its last
//! take for that), so a key used every few seconds soon keeps its slot
//! between requests instead of a grant and a return each; and a lease with every
//! slot in use is renewed only when it would lapse before the next pass
//! ends; a limit whose share is under one slot (`limit x lease_fraction < 1`)
//! leases one slot at a time and returns it as soon as none is in use.
//! So Redis always holds at least the slots a replica uses (exact: the
//! fleet never has more than the limit in flight), a crashed replica's
//! slots lapse within their lease's life (`lease_ttl_ms` for a lease that
//! keeps growing, at most `lease_max_ttl_ms`), and a request makes no Redis call
//! while its replica's lease has a free slot. A lease not renewed in time
//! (Redis slow or out) stops serving nine tenths of a life after its last
//! renewal was sent, before Redis's members expire; the next grant renews
//! it (adding again members that lapsed). False rejections: slots free in
//! another replica's lease, at most its last growth, for at most its life
//! after they were last used (up to `lease_max_ttl_ms` for a lease that
//! never had all its slots in use over its lives; none for small limits).

use super::call::{Call, Entry, ScriptCall};
use super::descriptor::{Descriptor, Kind};
use super::settings::LeaseSettings;
use super::slot_lease::{Refill, SlotLease, SlotTake};
use super::verdict::Verdict;
use crate::keyed_hash::KeyedHash;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

mod plan;
mod slots;

use plan::{plan, Use};

/// Set in `spent` once a lease has ended: no take succeeds after it.
const ENDED: u64 = 1 << 63;
/// Rounds a request tries to take from a fresh lease before it asks Redis
/// for itself alone.
const MAX_ROUNDS: usize = 16;

/// `d` in whole milliseconds, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What the lease table asks of the limiter that owns it: its Redis calls.
/// The limiter implements it, so leases need not know the limiter.
pub(super) trait LeaseRedis {
    /// One admission through Redis (a lease asked for, `what` naming it);
    /// `None` when Redis gave no verdict in time.
    async fn ask(&self, entries: Vec<Entry>, what: &str) -> Option<Verdict>;
    /// Queues `call` for the control plane; nobody waits for it.
    fn send(&self, call: Call);
    /// Runs `call` and waits for its integers up to the Redis deadline, as
    /// the limiter's `eval` does (the deadline at `deadline_arg`, a late
    /// reply to `late`, `undo` after a failed round trip).
    async fn eval(
        &self,
        call: ScriptCall,
        deadline_arg: Option<usize>,
        late: impl FnOnce(&[i64]) -> Option<ScriptCall> + Send + Sync + 'static,
        undo: Option<ScriptCall>,
    ) -> Option<Vec<i64>>;
}

/// What a take from a lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// Taken; `spent` before the take.
    Taken(u64),
    /// Not enough left, or the lease expired: refill.
    Full,
    /// The lease has ended (replaced or expired): read the table again.
    Ended,
}

/// Quota of one descriptor charged in Redis and spent here.
#[derive(Debug)]
pub struct Lease {
    key: String,
    kind: Kind,
    limit: u64,
    /// Units charged in Redis.
    granted: u64,
    /// The Redis tick they were charged at.
    tick: u64,
    /// Usage in Redis before the grant (for the `x-ratelimit-*` headers).
    base: u64,
    /// Milliseconds since the table's epoch when the lease stops serving.
    expires_ms: u64,
    /// When (table clock, ms) it was granted.
    since_ms: u64,
    /// What the lease before it used (an empty lease standing in for a
    /// refused or unanswered refill passes it on).
    last: Option<Use>,
    /// Units taken (reconciled to real token usage); `ENDED` once ended.
    spent: AtomicU64,
    /// What was spent when it ended.
    spent_at_end: AtomicU64,
    refilling: AtomicBool,
    done: watch::Sender<Option<Refill>>,
}

impl Lease {
    fn new(d: &Descriptor, granted: u64, tick: u64, base: u64, expires_ms: u64) -> Lease {
        Lease {
            key: d.key.to_string(),
            kind: d.kind,
            limit: d.limit,
            granted,
            tick,
            base,
            expires_ms,
            since_ms: 0,
            last: None,
            spent: AtomicU64::new(0),
            spent_at_end: AtomicU64::new(0),
            refilling: AtomicBool::new(false),
            done: watch::Sender::new(None),
        }
    }

    /// The lease granted at `since_ms` (table clock).
    fn since(mut self, since_ms: u64) -> Lease {
        self.since_ms = since_ms;
        self
    }

    /// The lease following one that used `last`.
    fn after(mut self, last: Option<Use>) -> Lease {
        self.last = last;
        self
    }

    /// What this replica used of the lease by `now_ms`, over its life (or
    /// until now, when it is replaced early); for an empty lease, what the
    /// lease before it used.
    fn used(&self, now_ms: u64) -> Option<Use> {
        if self.granted == 0 {
            return self.last;
        }
        let spent = match self.spent.load(Ordering::Acquire) {
            s if s >= ENDED => self.spent_at_end.load(Ordering::Acquire),
            s => s,
        };
        let life = self.expires_ms.saturating_sub(self.since_ms);
        Some(Use {
            units: spent,
            ms: now_ms.saturating_sub(self.since_ms).min(life),
        })
    }

    /// Takes `amount` when `max(amount, 1)` fits in what is left.
    fn take(&self, amount: u64, now_ms: u64) -> Take {
        if self.spent.load(Ordering::Acquire) >= ENDED {
            return Take::Ended;
        }
        if now_ms >= self.expires_ms {
            return Take::Full;
        }
        let need = amount.max(1);
        match self
            .spent
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s < ENDED && s.saturating_add(need) <= self.granted).then_some(s + amount)
            }) {
            Ok(before) => Take::Taken(before),
            Err(s) if s >= ENDED => Take::Ended,
            Err(_) => Take::Full,
        }
    }

    /// Why a take of `amount` now would fail (ended, or too little left
    /// or expired), without taking; `None` when [`Lease::take`] would
    /// succeed.
    fn short(&self, amount: u64, now_ms: u64) -> Option<Take> {
        let spent = self.spent.load(Ordering::Acquire);
        if spent >= ENDED {
            Some(Take::Ended)
        } else if now_ms >= self.expires_ms || spent.saturating_add(amount.max(1)) > self.granted {
            Some(Take::Full)
        } else {
            None
        }
    }

    /// Gives back a take (all-or-none across descriptors). After the end,
    /// the unit stays charged: more than was spent, never less.
    fn give_back(&self, amount: u64) {
        let _ = self
            .spent
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s < ENDED).then(|| s.saturating_sub(amount))
            });
    }

    /// Moves a request's reservation to its real usage; `false` when the
    /// lease has ended and Redis must be settled instead.
    fn reconcile(&self, reserved: u64, used: u64) -> bool {
        self.spent
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s < ENDED).then(|| {
                    let s = s.saturating_sub(reserved).saturating_add(used);
                    s.min(ENDED - 1)
                })
            })
            .is_ok()
    }

    /// Ends the lease; the settlement returning it, unless it had
    /// already ended or holds nothing.
    fn end(&self) -> Option<Call> {
        let spent = self.spent.swap(ENDED, Ordering::AcqRel);
        if spent >= ENDED {
            return None;
        }
        self.spent_at_end.store(spent, Ordering::Release);
        if self.granted == 0 && spent == 0 {
            return None;
        }
        Some(Call::Finish {
            entries: vec![Entry {
                key: self.key.clone(),
                kind: self.kind,
                limit: self.limit,
                amount: self.granted,
                need: 0,
                lease: true,
            }],
            request_id: String::new(),
            tick: self.tick,
            ticks: Vec::new(),
            tokens_used: spent,
        })
    }

    fn is_ended(&self) -> bool {
        self.spent.load(Ordering::Acquire) >= ENDED
    }

    /// The settlement settling a request's tokens after the lease
    /// ended (`None` while it lives: settled locally). A refund comes out of
    /// the lease's own bucket, older than the one its spent units were
    /// charged again in: it stays counted longer, never shorter.
    pub fn settle(&self, reserved: u64, used: u64) -> Option<Call> {
        if self.reconcile(reserved, used) {
            return None;
        }
        Some(Call::Finish {
            entries: vec![Entry {
                key: self.key.clone(),
                kind: self.kind,
                limit: self.limit,
                amount: reserved,
                need: 0,
                lease: false,
            }],
            request_id: String::new(),
            tick: self.tick,
            ticks: Vec::new(),
            tokens_used: used,
        })
    }
}

/// What a request took for one descriptor.
#[derive(Debug, Clone)]
pub enum Hold {
    /// rpm/tpm units of a lease.
    Units(Arc<Lease>),
    /// One slot of a parallel lease.
    Slots(Arc<SlotLease>),
}

/// A request's takes: one per descriptor, and each descriptor's
/// approximate usage before the request.
type Taken = (Vec<Hold>, Vec<u64>);

/// Why a descriptor had no room, with its lease.
#[derive(Debug)]
enum Short {
    Units(Arc<Lease>, Take),
    Slots(Arc<SlotLease>, SlotTake),
}

/// Every lease of this process, by descriptor key.
pub struct LeaseTable {
    epoch: Instant,
    settings: LeaseSettings,
    leases: papaya::HashMap<String, Arc<Lease>, KeyedHash>,
    /// Parallel slot leases ([`slot_lease`]).
    slots: papaya::HashMap<String, Arc<SlotLease>, KeyedHash>,
    /// Names this process's slot leases in Redis: unique per start.
    prefix: String,
    /// Slot leases created, numbering the next one.
    slot_leases: AtomicU64,
    /// The Redis deadline: how long a slot lease's turn lasts at most.
    redis_timeout: Duration,
}

/// How a leased admission went.
pub(super) enum Leased {
    /// Taken from every descriptor's lease.
    Admitted {
        /// The takes, one per descriptor.
        holds: Vec<Hold>,
        /// Approximate usage of each descriptor before this request.
        used: Vec<u64>,
    },
    /// Redis has no room left for a descriptor: the 429.
    Denied(Verdict),
    /// Redis could not grant a lease: the local counters decide.
    Unavailable,
    /// Other requests kept taking the fresh leases first: ask Redis for
    /// this request alone.
    Contended,
    /// A descriptor this process has not seen within `lease_max_ttl_ms`:
    /// ask Redis for this request alone (a lease would be taken and ended
    /// for one request); the key's next request within that time leases.
    Unseen,
}

impl LeaseTable {
    /// An empty table; `redis_timeout` bounds a slot lease's Redis calls.
    pub fn new(settings: LeaseSettings, redis_timeout: Duration) -> LeaseTable {
        LeaseTable {
            epoch: Instant::now(),
            settings,
            leases: papaya::HashMap::default(),
            slots: papaya::HashMap::default(),
            prefix: uuid::Uuid::new_v4().simple().to_string(),
            slot_leases: AtomicU64::new(0),
            redis_timeout,
        }
    }

    /// The life of a busy key's lease (the renewal pass runs every half).
    pub fn ttl(&self) -> Duration {
        self.settings.ttl
    }

    /// The life of a busy key's lease, milliseconds.
    fn ttl_ms(&self) -> u64 {
        millis(self.settings.ttl)
    }

    /// The longest life of a slow key's lease, milliseconds.
    fn max_ttl_ms(&self) -> u64 {
        millis(self.settings.max_ttl)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Units a lease of `d` asks for: its share of the limit, at least one
    /// unit and at least `need`.
    fn size(&self, d: &Descriptor, need: u64) -> u64 {
        let share = (d.limit as f64 * self.settings.fraction).ceil() as u64;
        share.max(1).max(need)
    }

    /// Whether `descs` name an rpm or tpm descriptor with no entry in the
    /// table (not seen by this process within `lease_max_ttl_ms`: ended
    /// leases and markers are forgotten that long after they expire). Each
    /// such descriptor gets a marker, an empty lease expiring now, so only
    /// the first of concurrent requests finds it unseen and the next one
    /// within `lease_max_ttl_ms` takes a lease (sized as a new key's).
    fn unseen(&self, descs: &[Descriptor]) -> bool {
        let map = self.leases.pin();
        let now = self.now_ms();
        let mut unseen = false;
        for d in descs.iter().filter(|d| d.kind != Kind::Parallel) {
            if map.get(&*d.key).is_none() {
                let marker = Lease::new(d, 0, 0, 0, now).since(now);
                unseen |= map.try_insert(d.key.to_string(), Arc::new(marker)).is_ok();
            }
        }
        unseen
    }

    /// The lease of `d`, an empty expired one when there is none.
    fn current(&self, d: &Descriptor) -> Arc<Lease> {
        let map = self.leases.pin();
        if let Some(l) = map.get(&*d.key) {
            return l.clone();
        }
        map.get_or_insert(d.key.to_string(), Arc::new(Lease::new(d, 0, 0, 0, 0)))
            .clone()
    }

    /// Takes `amounts[i]` from every descriptor's lease (one slot for a
    /// parallel one), or nothing: `Err` names the first descriptor that had
    /// no room, its lease and why.
    fn take_all(&self, descs: &[Descriptor], amounts: &[u64]) -> Result<Taken, (usize, Short)> {
        let now = self.now_ms();
        let mut taken: Vec<Hold> = Vec::with_capacity(descs.len());
        let mut used = Vec::with_capacity(descs.len());
        for (i, d) in descs.iter().enumerate() {
            let failed = if d.kind == Kind::Parallel {
                let lease = self.slot_lease(d);
                match lease.take(now) {
                    SlotTake::Taken(before) => {
                        used.push(before);
                        taken.push(Hold::Slots(lease));
                        continue;
                    }
                    why => Short::Slots(lease, why),
                }
            } else {
                let lease = self.current(d);
                match lease.take(amounts[i], now) {
                    Take::Taken(before) => {
                        used.push(lease.base.saturating_add(before));
                        taken.push(Hold::Units(lease));
                        continue;
                    }
                    why => Short::Units(lease, why),
                }
            };
            for (j, hold) in taken.iter().enumerate() {
                match hold {
                    Hold::Units(l) => l.give_back(amounts[j]),
                    // Returned at the next renewal if it was the last.
                    Hold::Slots(l) => {
                        l.release();
                    }
                }
            }
            return Err((i, failed));
        }
        Ok((taken, used))
    }

    /// Puts a fresh lease of `d` in the table; the calls returning the
    /// lease it replaces and `old` (the one the refill was for).
    fn install(&self, d: &Descriptor, fresh: Lease, old: &Lease) -> Vec<Call> {
        let map = self.leases.pin();
        let replaced = map.insert(d.key.to_string(), Arc::new(fresh));
        let mut calls: Vec<Call> = old.end().into_iter().collect();
        calls.extend(replaced.and_then(|r| r.end()));
        calls
    }

    /// Ends every expired lease and forgets ended ones a longest life after
    /// they expired (kept until then for what they used, which sizes the
    /// next lease); the calls returning them to Redis.
    pub fn end_expired(&self) -> Vec<Call> {
        let now = self.now_ms();
        let map = self.leases.pin();
        let calls = map
            .iter()
            .filter(|(_, l)| now >= l.expires_ms)
            .filter_map(|(_, l)| l.end())
            .collect();
        let keep = self.max_ttl_ms();
        map.retain(|_, l| {
            !l.is_ended()
                || l.refilling.load(Ordering::Acquire)
                || now < l.expires_ms.saturating_add(keep)
        });
        calls
    }

    /// Why the lease of descriptor `d` could not serve `amount` now, without
    /// taking from it; `None` when it could.
    fn short_of(&self, d: &Descriptor, amount: u64, now_ms: u64) -> Option<Short> {
        if d.kind == Kind::Parallel {
            let lease = self.slot_lease(d);
            let why = lease.short(now_ms)?;
            return Some(Short::Slots(lease, why));
        }
        let lease = self.current(d);
        let why = lease.short(amount, now_ms)?;
        Some(Short::Units(lease, why))
    }

    /// Admits a request from the leases of its descriptors, refilling
    /// them through Redis as needed. The leases a request finds short are
    /// refilled together (the first one it could not take from and every
    /// later one that could not serve it either), so their calls leave in
    /// the same flush: one round trip a key visit, the rpm and tpm grants
    /// in one `limiter.lua` call, rather than one round trip each, one
    /// after another.
    pub(super) async fn admit(
        &self,
        redis: &impl LeaseRedis,
        descs: &[Descriptor],
        amounts: &[u64],
    ) -> Leased {
        if self.unseen(descs) {
            return Leased::Unseen;
        }
        for _ in 0..MAX_ROUNDS {
            let (i, short) = match self.take_all(descs, amounts) {
                Ok((holds, used)) => return Leased::Admitted { holds, used },
                Err(failed) => failed,
            };
            let now = self.now_ms();
            let mut shorts = vec![(i, short)];
            for (j, d) in descs.iter().enumerate().skip(i + 1) {
                shorts.extend(self.short_of(d, amounts[j], now).map(|s| (j, s)));
            }
            let refills = shorts.into_iter().map(|(j, short)| async move {
                (j, self.refill_short(redis, descs, amounts, j, short).await)
            });
            let mut outcomes = futures_util::future::join_all(refills).await;
            outcomes.sort_by_key(|(j, _)| *j);
            // As one refill after another would have ended: at the first
            // descriptor (in order) Redis refused or did not answer.
            for (j, outcome) in outcomes {
                match outcome {
                    None | Some(Refill::Granted) => {}
                    Some(Refill::Denied { used, reset_at }) => {
                        return Leased::Denied(Verdict::Denied {
                            index: j,
                            used,
                            limit: descs[j].limit,
                            reset_at,
                        })
                    }
                    Some(Refill::Failed) => return Leased::Unavailable,
                }
            }
        }
        Leased::Contended
    }

    /// Refills the lease of descriptor `i` that `short` found short;
    /// `None` when the table has another lease to take from (take again).
    async fn refill_short(
        &self,
        redis: &impl LeaseRedis,
        descs: &[Descriptor],
        amounts: &[u64],
        i: usize,
        short: Short,
    ) -> Option<Refill> {
        match short {
            Short::Units(lease, why) => {
                if why == Take::Ended && !Arc::ptr_eq(&lease, &self.current(&descs[i])) {
                    return None;
                }
                Some(
                    self.refill_units(redis, &descs[i], amounts[i], &lease)
                        .await,
                )
            }
            Short::Slots(_, SlotTake::Ended) => None,
            // `None`: another turn ended: take again.
            Short::Slots(lease, _) => self.grant_slots(redis, &descs[i], &lease).await,
        }
    }

    /// Refills the rpm/tpm lease `lease` of `d`, or waits for the refill in
    /// flight.
    async fn refill_units(
        &self,
        redis: &impl LeaseRedis,
        d: &Descriptor,
        amount: u64,
        lease: &Arc<Lease>,
    ) -> Refill {
        if lease
            .refilling
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return wait(lease, self.redis_timeout * 2).await;
        }
        let outcome = self.refill(redis, d, amount, lease).await;
        if outcome != Refill::Granted {
            // Refused or unanswered: an empty lease takes this one's
            // place, so each lease has one refill and one outcome.
            let empty = Lease::new(d, 0, 0, 0, 0).after(lease.used(self.now_ms()));
            for call in self.install(d, empty, lease) {
                redis.send(call);
            }
        }
        lease.done.send_replace(Some(outcome));
        outcome
    }

    /// Asks Redis for a new lease of `d` replacing `old`.
    async fn refill(
        &self,
        redis: &impl LeaseRedis,
        d: &Descriptor,
        amount: u64,
        old: &Lease,
    ) -> Refill {
        let need = amount.max(1);
        let last = old.used(self.now_ms());
        let plan = plan(
            self.size(d, need),
            need,
            last,
            self.ttl_ms(),
            self.max_ttl_ms(),
        );
        let entry = Entry {
            key: d.key.to_string(),
            kind: d.kind,
            limit: d.limit,
            amount: plan.size,
            need,
            lease: true,
        };
        let granted = |used: u64| entry.granted(used);
        let asked = redis.ask(vec![entry.clone()], "lease").await;
        match asked {
            Some(Verdict::Admitted { tick, used, .. }) => {
                let base = used.first().copied().unwrap_or(0);
                let now = self.now_ms();
                let expires = now.saturating_add(plan.life_ms);
                let fresh = Lease::new(d, granted(base), tick, base, expires).since(now);
                for call in self.install(d, fresh, old) {
                    redis.send(call);
                }
                Refill::Granted
            }
            Some(Verdict::Denied { used, reset_at, .. }) => Refill::Denied { used, reset_at },
            None => Refill::Failed,
        }
    }
}

/// Waits for the refill in flight on `lease`.
async fn wait(lease: &Lease, deadline: Duration) -> Refill {
    let mut rx = lease.done.subscribe();
    let outcome = match monoio::time::timeout(deadline, rx.wait_for(Option::is_some)).await {
        Ok(Ok(outcome)) => outcome.unwrap_or(Refill::Failed),
        _ => Refill::Failed,
    };
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::descriptor::Scope;

    fn desc(value: &str, kind: Kind, limit: u64) -> Descriptor {
        Descriptor::new(Scope::ApiKey, value, kind, limit)
    }

    fn table() -> LeaseTable {
        LeaseTable::new(
            LeaseSettings {
                fraction: 0.1,
                ttl: Duration::from_secs(60),
                max_ttl: Duration::from_secs(60),
            },
            Duration::from_millis(100),
        )
    }

    /// Installs a lease of `granted` units of `d` charged at tick 7.
    fn grant(t: &LeaseTable, d: &Descriptor, granted: u64) {
        let old = t.current(d);
        let fresh = Lease::new(d, granted, 7, 0, t.now_ms() + 60_000);
        t.install(d, fresh, &old);
    }

    fn finish_of(call: Call) -> (u64, u64, u64, bool) {
        match call {
            Call::Finish {
                entries,
                tick,
                tokens_used,
                ..
            } => (entries[0].amount, tick, tokens_used, entries[0].lease),
            _ => panic!("not a settlement"),
        }
    }

    #[test]
    fn a_lease_serves_exactly_its_grant() {
        let t = table();
        let d = desc("k", Kind::Requests, 100);
        assert_eq!(t.size(&d, 1), 10);
        // No lease yet: an empty, expired one asks for a refill.
        assert!(matches!(
            t.take_all(std::slice::from_ref(&d), &[1]),
            Err((0, Short::Units(_, Take::Full)))
        ));
        grant(&t, &d, 3);
        for before in 0..3 {
            let (_, used) = t.take_all(std::slice::from_ref(&d), &[1]).unwrap();
            assert_eq!(used, vec![before]);
        }
        assert!(matches!(
            t.take_all(std::slice::from_ref(&d), &[1]),
            Err((0, Short::Units(_, Take::Full)))
        ));
    }

    #[test]
    fn a_take_is_all_or_none_across_descriptors() {
        let t = table();
        let rpm = desc("k", Kind::Requests, 100);
        let tpm = desc("k", Kind::Tokens, 1000);
        grant(&t, &rpm, 5);
        grant(&t, &tpm, 100);
        let both = [rpm.clone(), tpm.clone()];
        t.take_all(&both, &[1, 60]).unwrap();
        // 60 more tokens do not fit: the request unit is given back.
        assert!(matches!(
            t.take_all(&both, &[1, 60]),
            Err((1, Short::Units(_, Take::Full)))
        ));
        assert_eq!(t.current(&rpm).spent.load(Ordering::Acquire), 1);
        // A zero reservation (reservation off) still needs one unit of room.
        t.take_all(&both, &[1, 0]).unwrap();
        assert_eq!(t.current(&tpm).spent.load(Ordering::Acquire), 60);
    }

    #[test]
    fn a_parallel_slot_is_taken_with_the_other_descriptors_or_not_at_all() {
        let t = table();
        let rpm = desc("k", Kind::Requests, 100);
        let parallel = desc("k", Kind::Parallel, 4);
        grant(&t, &rpm, 1);
        let slots = t.slot_lease(&parallel);
        assert!(slots.prompt, "a tenth of 4 is less than one slot");
        assert!(!t.slot_lease(&desc("j", Kind::Parallel, 10)).prompt);
        let (_, first) = slots.grant_call(1, 4, 60_000);
        slots.add(first, 1);
        slots.renewed(t.now_ms() + 60_000);
        let both = [parallel.clone(), rpm.clone()];
        let (holds, _) = t.take_all(&both, &[1, 1]).unwrap();
        assert!(matches!(
            t.take_all(&both, &[1, 1]),
            Err((0, Short::Slots(_, SlotTake::Full)))
        ));
        let Hold::Slots(held) = &holds[0] else {
            panic!("a slot taken")
        };
        // The last slot in use of a small lease goes back to Redis at once.
        assert!(t.release_slot(held).is_some());
        assert_eq!(slots.counts(), (0, 0));
        slots.done_busy(None);
        let (_, first) = slots.grant_call(1, 4, 60_000);
        slots.add(first, 1);
        // The rpm lease is spent: the slot taken first is given back.
        assert!(matches!(
            t.take_all(&both, &[1, 1]),
            Err((1, Short::Units(_, Take::Full)))
        ));
        assert_eq!(slots.counts(), (1, 0));
    }

    #[test]
    fn a_renewal_pass_renews_held_slot_leases_and_forgets_idle_ones() {
        let t = table();
        let idle = t.slot_lease(&desc("idle", Kind::Parallel, 100));
        let held = t.slot_lease(&desc("held", Kind::Parallel, 100));
        let (_, first) = held.grant_call(2, 100, 60_000);
        held.add(first, 2);
        held.renewed(t.now_ms() + 60_000);
        assert!(matches!(held.take(t.now_ms()), SlotTake::Taken(0)));
        let calls = t.renew_slots();
        assert_eq!(calls.len(), 1, "one renewal, for the lease holding slots");
        assert!(idle.is_ended());
        assert_eq!(t.slots.len(), 1);
        // The slot not in use was returned with the renewal.
        assert_eq!(held.counts(), (1, 1));
        // Its turn is held until the renewal answers.
        assert!(t.renew_slots().is_empty());
        let Some(Call::Script { done, .. }) = calls.into_iter().next() else {
            panic!("a script call")
        };
        assert!((done.0)(Ok(vec![1, 0, 1])).is_none());
        assert_eq!(t.renew_slots().len(), 1);
    }

    #[test]
    fn a_renewal_pass_keeps_the_slots_of_a_lease_idle_only_between_two_requests() {
        let t = table();
        let between = t.slot_lease(&desc("between", Kind::Parallel, 100));
        let unused = t.slot_lease(&desc("unused", Kind::Parallel, 100));
        for l in [&between, &unused] {
            let (_, first) = l.grant_call(2, 100, 60_000);
            l.add(first, 2);
            l.renewed(t.now_ms() + 60_000);
        }
        assert!(matches!(between.take(t.now_ms()), SlotTake::Taken(0)));
        assert!(between.release());
        let calls = t.renew_slots();
        assert_eq!(calls.len(), 1, "a return, for the lease never taken from");
        assert_eq!(unused.counts(), (0, 0));
        // The one used since the last pass keeps its slots, with no call,
        // and its turn is free for the next grant.
        assert_eq!(between.counts(), (2, 0));
        assert!(!between.is_busy(t.now_ms()));
        assert!(matches!(between.take(t.now_ms()), SlotTake::Taken(0)));
    }

    /// A Redis that grants every lease and slot asked for, one
    /// millisecond later, counting the calls out at once.
    #[derive(Default)]
    struct Granting {
        out: std::cell::Cell<usize>,
        most_out: std::cell::Cell<usize>,
        calls: std::cell::Cell<usize>,
        /// The units each lease asked for.
        sizes: std::cell::RefCell<Vec<u64>>,
        /// The life each slot call asked for.
        lives: std::cell::RefCell<Vec<String>>,
    }

    impl Granting {
        async fn answer(&self) {
            self.calls.set(self.calls.get() + 1);
            self.out.set(self.out.get() + 1);
            self.most_out.set(self.most_out.get().max(self.out.get()));
            monoio::time::sleep(Duration::from_millis(1)).await;
            self.out.set(self.out.get() - 1);
        }
    }

    impl LeaseRedis for Granting {
        async fn ask(&self, entries: Vec<Entry>, _what: &str) -> Option<Verdict> {
            self.sizes
                .borrow_mut()
                .extend(entries.iter().map(|e| e.amount));
            self.answer().await;
            Some(Verdict::Admitted {
                tick: 1,
                used: vec![0; entries.len()],
                ticks: Vec::new(),
            })
        }

        fn send(&self, _call: Call) {}

        async fn eval(
            &self,
            call: ScriptCall,
            _deadline_arg: Option<usize>,
            _late: impl FnOnce(&[i64]) -> Option<ScriptCall> + Send + Sync + 'static,
            _undo: Option<ScriptCall>,
        ) -> Option<Vec<i64>> {
            self.lives.borrow_mut().push(call.args[1].clone());
            self.answer().await;
            Some(vec![1, 1024, 0])
        }
    }

    /// A key visit that finds its rpm, tpm and parallel leases all spent
    /// or lapsed refills them together (their calls in the same flush,
    /// one round trip), not one after another.
    #[test]
    fn a_request_refills_every_short_lease_of_its_key_at_once() {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .expect("runtime")
            .block_on(async {
                let t = table();
                let redis = Granting::default();
                let descs = [
                    desc("k", Kind::Requests, 100),
                    desc("k", Kind::Tokens, 1000),
                    desc("k", Kind::Parallel, 100),
                ];
                // Seen before (its first request went to Redis alone).
                t.unseen(&descs);
                let Leased::Admitted { holds, .. } = t.admit(&redis, &descs, &[1, 10, 1]).await
                else {
                    panic!("admitted")
                };
                assert_eq!(redis.calls.get(), 3, "one grant per lease");
                assert_eq!(redis.most_out.get(), 3, "the three asked together");
                let Hold::Slots(slot) = &holds[2] else {
                    panic!("a slot taken")
                };
                slot.release();
                // Served from the leases now: no call.
                assert!(matches!(
                    t.admit(&redis, &descs, &[1, 10, 1]).await,
                    Leased::Admitted { .. }
                ));
                assert_eq!(redis.calls.get(), 3);
            });
    }

    /// A key this process has not seen within the longest lease life goes
    /// to Redis alone (no lease taken for one request and ended after it);
    /// the next request within that time leases; once the key's lease and
    /// marker are forgotten, it goes alone again.
    #[test]
    fn a_key_not_seen_within_the_longest_lease_life_is_admitted_alone() {
        run(async {
            let mut t = lives_table();
            let redis = Granting::default();
            let descs = [
                desc("k", Kind::Requests, 100),
                desc("k", Kind::Tokens, 1000),
            ];
            assert!(matches!(
                t.admit(&redis, &descs, &[1, 10]).await,
                Leased::Unseen
            ));
            assert_eq!(redis.calls.get(), 0, "no lease asked for");
            let Leased::Admitted { used, .. } = t.admit(&redis, &descs, &[1, 10]).await else {
                panic!("admitted from leases")
            };
            assert_eq!(used, vec![0, 0]);
            assert_eq!(*redis.sizes.borrow(), vec![10, 100], "a new key's shares");
            // Still leasing while its lease lives...
            assert!(matches!(
                t.admit(&redis, &descs, &[1, 10]).await,
                Leased::Admitted { .. }
            ));
            // ...and forgotten the longest life after it expired.
            t.epoch -= Duration::from_secs(20);
            assert_eq!(t.end_expired().len(), 2, "both leases returned");
            assert!(t.leases.pin().is_empty());
            assert!(matches!(
                t.admit(&redis, &descs, &[1, 10]).await,
                Leased::Unseen
            ));
            assert_eq!(redis.calls.get(), 2);
        });
    }

    /// A parallel limit alone leases its slots from the first request (a
    /// slot lease of one request returns at the next renewal pass).
    #[test]
    fn a_parallel_limit_alone_is_never_unseen() {
        let t = lives_table();
        assert!(!t.unseen(&[desc("k", Kind::Parallel, 10)]));
        assert!(t.leases.pin().is_empty());
    }

    #[test]
    fn a_refill_asks_for_a_share_but_at_least_the_request() {
        let t = table();
        assert_eq!(t.size(&desc("k", Kind::Requests, 5), 1), 1);
        assert_eq!(t.size(&desc("k", Kind::Tokens, 1000), 300), 300);
        assert_eq!(t.size(&desc("k", Kind::Tokens, 1000), 20), 100);
        let e = Entry {
            key: "k".into(),
            kind: Kind::Requests,
            limit: 10,
            amount: 4,
            need: 1,
            lease: true,
        };
        // The whole lease when it fits, what is left otherwise.
        assert_eq!((e.granted(2), e.granted(8), e.granted(12)), (4, 2, 0));
    }

    #[test]
    fn an_ended_lease_returns_its_unused_units_and_serves_no_more() {
        let t = table();
        let d = desc("k", Kind::Tokens, 1000);
        grant(&t, &d, 100);
        let (leases, _) = t.take_all(std::slice::from_ref(&d), &[30]).unwrap();
        let Hold::Units(lease) = leases[0].clone() else {
            panic!("units taken")
        };
        // The real usage was 12: reconciled locally while the lease lives.
        assert!(lease.settle(30, 12).is_none());
        // Replaced by a refill: the grant leaves its tick, 12 are charged now.
        let old = t.current(&d);
        let calls = t.install(&d, Lease::new(&d, 50, 8, 0, t.now_ms() + 60_000), &old);
        assert_eq!(calls.len(), 1);
        let call = calls.into_iter().next().unwrap();
        assert_eq!(finish_of(call), (100, 7, 12, true));
        assert_eq!(lease.take(1, t.now_ms()), Take::Ended);
        assert!(lease.end().is_none(), "ended once");
        // A request settling after the end settles in Redis at the lease's tick.
        let call = lease.settle(30, 40).expect("settled in Redis");
        assert_eq!(finish_of(call), (30, 7, 40, false));
    }

    #[test]
    fn expired_leases_are_ended_and_forgotten_a_longest_life_later() {
        let mut t = table();
        let d = desc("k", Kind::Requests, 100);
        let old = t.current(&d);
        t.install(&d, Lease::new(&d, 10, 3, 0, 0), &old);
        let lease = t.current(&d);
        assert_eq!(lease.take(1, t.now_ms()), Take::Full, "expired");
        let calls: Vec<_> = t.end_expired().into_iter().map(finish_of).collect();
        assert_eq!(calls, vec![(10, 3, 0, true)]);
        // Kept (ended) for what it used, which sizes the next lease.
        assert!(lease.is_ended() && Arc::ptr_eq(&lease, &t.current(&d)));
        assert!(t.end_expired().is_empty());
        t.epoch -= Duration::from_secs(60);
        assert!(t.end_expired().is_empty());
        assert!(t.leases.is_empty());
    }

    /// A table with a 1 s base life and an 8 s cap, its clock 10 s on.
    fn lives_table() -> LeaseTable {
        let mut t = LeaseTable::new(
            LeaseSettings {
                fraction: 0.1,
                ttl: Duration::from_secs(1),
                max_ttl: Duration::from_secs(8),
            },
            Duration::from_millis(100),
        );
        t.epoch -= Duration::from_secs(10);
        t
    }

    fn run(f: impl std::future::Future<Output = ()>) {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    /// The lease of `d` after one that served `spent` units over the last
    /// second and expired (ended by the control plane): what its refill
    /// asked for and how long the new one lives.
    async fn refill_after(t: &LeaseTable, d: &Descriptor, spent: u64) -> (Vec<u64>, u64) {
        let now = t.now_ms();
        let old = t.current(d);
        t.install(d, Lease::new(d, 100, 7, 0, now).since(now - 1000), &old);
        let expired = t.current(d);
        expired.spent.store(spent, Ordering::Release);
        assert_eq!(t.end_expired().len(), 1);
        assert!(Arc::ptr_eq(&expired, &t.current(d)), "kept for its use");
        let redis = Granting::default();
        assert_eq!(t.refill(&redis, d, 1, &expired).await, Refill::Granted);
        let fresh = t.current(d);
        let sizes = redis.sizes.borrow().clone();
        (sizes, fresh.expires_ms - fresh.since_ms)
    }

    #[test]
    fn a_slow_keys_lease_is_sized_to_its_use_and_lives_longer() {
        run(async {
            let t = lives_table();
            // 4 a second of a 1,000 rpm limit (a share of 100): twice 4 a
            // second for the longest life.
            let d = desc("slow", Kind::Requests, 1000);
            assert_eq!(refill_after(&t, &d, 4).await, (vec![64], 8000));
            // 60 a second would spend the share within a life: as before.
            let d = desc("busy", Kind::Requests, 1000);
            assert_eq!(refill_after(&t, &d, 60).await, (vec![100], 1000));
        });
    }

    async fn admit_slot(t: &LeaseTable, redis: &Granting, d: &[Descriptor]) -> Arc<SlotLease> {
        let Leased::Admitted { holds, .. } = t.admit(redis, d, &[1]).await else {
            panic!("admitted")
        };
        let Hold::Slots(slot) = holds[0].clone() else {
            panic!("a slot")
        };
        slot
    }

    /// Runs the renewal pass of `t` and answers each of its calls as
    /// `slot_lease.lua` would (nothing granted); how many calls it made.
    fn pass(t: &LeaseTable) -> usize {
        let calls = t.renew_slots();
        let n = calls.len();
        for call in calls {
            let Call::Script { done, .. } = call else {
                panic!("a script call")
            };
            assert!((done.0)(Ok(vec![1, 0, 0])).is_none());
        }
        n
    }

    #[test]
    fn a_slot_lease_emptied_while_its_key_was_idle_lives_longer_when_taken_again() {
        run(async {
            let mut t = lives_table();
            let redis = Granting::default();
            let d = [desc("k", Kind::Parallel, 100)];
            admit_slot(&t, &redis, &d).await.release();
            // A key used every 3 s: each time, a pass a life after its
            // request returns the free slot, and the next pass keeps the
            // empty lease (its life remembered), so the next request's
            // grant asks for twice the life.
            for idle_before_pass in [1, 2, 4] {
                t.epoch -= Duration::from_secs(idle_before_pass);
                assert_eq!(pass(&t), 1, "the free slot returned");
                assert_eq!(pass(&t), 0, "the empty lease kept, no call");
                assert_eq!(t.slots.pin().len(), 1);
                t.epoch -= Duration::from_secs(2);
                admit_slot(&t, &redis, &d).await.release();
            }
            assert_eq!(*redis.lives.borrow(), ["1000", "2000", "4000", "8000"]);
            // Kept between two requests now: the next one takes locally.
            t.epoch -= Duration::from_secs(3);
            assert_eq!(pass(&t), 0);
            admit_slot(&t, &redis, &d).await.release();
            assert_eq!(redis.lives.borrow().len(), 4, "no grant");
            // Idle past its life: returned, then forgotten once no slot was
            // taken for lease_max_ttl_ms.
            t.epoch -= Duration::from_secs(8);
            assert_eq!(pass(&t), 1);
            t.epoch -= Duration::from_millis(100);
            assert_eq!(pass(&t), 0);
            assert_eq!(t.slots.pin().len(), 0, "forgotten");
        });
    }

    #[test]
    fn a_small_limits_slot_lease_taken_again_keeps_its_short_life() {
        run(async {
            let mut t = lives_table();
            let redis = Granting::default();
            let d = [desc("k", Kind::Parallel, 4)];
            for _ in 0..3 {
                let slot = admit_slot(&t, &redis, &d).await;
                assert!(slot.prompt);
                // Given back as soon as it is idle.
                let Some(Call::Script { done, .. }) = t.release_slot(&slot) else {
                    panic!("the slot returned at once")
                };
                assert!((done.0)(Ok(vec![1, 0, 0])).is_none());
                t.epoch -= Duration::from_secs(2);
            }
            // Its life bounds only a crashed replica's slot: not doubled.
            assert_eq!(*redis.lives.borrow(), ["1000", "1000", "1000"]);
        });
    }

    #[test]
    fn a_slot_lease_lapsing_with_a_slot_free_is_renewed_for_longer() {
        run(async {
            let mut t = lives_table();
            let redis = Granting::default();
            let d = [desc("k", Kind::Parallel, 100)];
            let slot = admit_slot(&t, &redis, &d).await;
            // Every slot in use, lapsing within two passes: renewed.
            let renewal = t.renew_slots();
            assert_eq!(renewal.len(), 1);
            let Some(Call::Script { done, .. }) = renewal.into_iter().next() else {
                panic!("a script call")
            };
            assert!((done.0)(Ok(vec![1, 0, 1])).is_none());
            slot.release();
            // Lapsed with its slot free: renewed for twice the life, then
            // twice again.
            t.epoch -= Duration::from_secs(1);
            admit_slot(&t, &redis, &d).await.release();
            t.epoch -= Duration::from_secs(2);
            let slot = admit_slot(&t, &redis, &d).await;
            assert_eq!(*redis.lives.borrow(), ["1000", "2000", "4000"]);
            // Every slot in use, valid past two passes and a turn: left.
            assert!(t.renew_slots().is_empty());
            slot.release();
            // Short of slots (both in use): it grows, for half the life.
            let one = admit_slot(&t, &redis, &d).await;
            let two = admit_slot(&t, &redis, &d).await;
            assert_eq!(one.life(), 2000);
            // Asked for no less than the last call may serve until.
            let asked: u64 = redis.lives.borrow().last().unwrap().parse().unwrap();
            assert!((3900..=4000).contains(&asked), "{asked}");
            one.release();
            two.release();
        });
    }
}
