//! The slot leases of a [`LeaseTable`]: taking a descriptor's, growing it
//! through `slot_lease.lua` on the request path, and the control plane's
//! renewal pass (see [`crate::limits::slot_lease`] and the lease module's
//! doc for the semantics).

use super::{millis, LeaseRedis, LeaseTable};
use crate::limits::call::{Call, ScriptCall, ScriptDone};
use crate::limits::descriptor::Descriptor;
use crate::limits::slot_lease::{self, Granted, Refill, SlotLease, DEADLINE_ARG, MAX_GROW};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

impl LeaseTable {
    /// The slot lease of parallel descriptor `d`, an empty one when there
    /// is none.
    pub(super) fn slot_lease(&self, d: &Descriptor) -> Arc<SlotLease> {
        let map = self.slots.pin();
        if let Some(l) = map.get(&*d.key) {
            return l.clone();
        }
        let n = self.slot_leases.fetch_add(1, Ordering::Relaxed);
        let id = format!("lease:{}:{n}", self.prefix);
        // Less than one slot's share: lease one at a time, back when idle.
        let prompt = (d.limit as f64 * self.settings.fraction) < 1.0;
        let fresh = SlotLease::new(d.key.to_string(), id, prompt, self.ttl_ms());
        map.get_or_insert(d.key.to_string(), Arc::new(fresh))
            .clone()
    }

    /// Until when (table clock) a slot lease serves after a renewal or
    /// grant sent at `sent_ms` asking Redis to keep its members `life_ms`:
    /// nine tenths of the life, before Redis's own expiry, which counts
    /// from when the script ran.
    fn valid_after(sent_ms: u64, life_ms: u64) -> u64 {
        sent_ms.saturating_add(life_ms / 10 * 9)
    }

    /// How long a slot lease's turn lasts at most (a call that never
    /// answers must not hold it forever).
    fn turn_ms(&self) -> u64 {
        let ms = millis(self.redis_timeout);
        ms.saturating_mul(2).saturating_add(50)
    }

    /// Grants more slots to `lease` of `d` (or renews it when it only
    /// lapsed), or waits for the turn in flight; `None` when another turn
    /// ended (take again).
    pub(super) async fn grant_slots(
        &self,
        redis: &impl LeaseRedis,
        d: &Descriptor,
        lease: &Arc<SlotLease>,
    ) -> Option<Refill> {
        let now = self.now_ms();
        let mut rx = lease.done.subscribe();
        if !lease.try_busy(now, now.saturating_add(self.turn_ms())) {
            if !lease.is_busy(now) {
                return None;
            }
            let deadline = self.redis_timeout * 2;
            return match monoio::time::timeout(deadline, rx.changed()).await {
                Ok(Ok(())) => rx.borrow().1,
                _ => Some(Refill::Failed),
            };
        }
        if lease.is_ended() {
            // Forgotten by a renewal pass: the table has a new one.
            lease.done_busy(None);
            return None;
        }
        let (granted, in_use) = lease.counts();
        // Double the lease up to its share of the limit, and halve its
        // life; nothing new when it only lapsed with slots free, and twice
        // the life: its key used less than it held for a whole life. A
        // lease a renewal pass emptied (its key idle for half a life) and
        // taken from again also lives twice as long: its key comes back
        // less often than its life, and a longer life keeps its slot
        // between two requests (not one grant and one return a request).
        // A prompt lease gives its slot back when idle anyway: its life
        // only bounds a crashed replica's slot, and stays short.
        let lapsed_free = lease.lapsed(now) && granted > in_use;
        let came_back = granted == 0 && lease.served() && !lease.prompt;
        let grow = !lapsed_free;
        let want = if grow {
            granted.max(1).min(self.size(d, 1)).min(MAX_GROW)
        } else {
            0
        };
        lease.next_life(grow && !came_back, self.ttl_ms(), self.max_ttl_ms());
        let life = lease.call_life(now);
        let (call, first) = lease.grant_call(want, d.limit, life);
        let undo = (want > 0).then(|| lease.undo_call(first, want));
        let late_lease = lease.clone();
        let late = move |numbers: &[i64]| match slot_lease::reply(numbers) {
            Some(Granted::Yes { granted, .. }) if granted > 0 => {
                Some(late_lease.undo_call(first, granted))
            }
            _ => None,
        };
        let answer = redis.eval(call, Some(DEADLINE_ARG), late, undo).await;
        let outcome = match answer.as_deref().and_then(slot_lease::reply) {
            Some(Granted::Yes { granted, .. }) => {
                // Never more than asked for, whatever Redis answered.
                lease.add(first, granted.min(want));
                lease.renewed(Self::valid_after(now, life));
                Refill::Granted
            }
            Some(Granted::No { used, reset_at }) => {
                lease.renewed(Self::valid_after(now, life));
                Refill::Denied { used, reset_at }
            }
            None => Refill::Failed,
        };
        lease.done_busy(Some(outcome));
        Some(outcome)
    }

    /// The control plane's call for `lease` (its turn held): renew the
    /// slots in use for `life_ms` (asked at `now`), return the others.
    fn renewal(&self, lease: Arc<SlotLease>, call: ScriptCall, now: u64, life_ms: u64) -> Call {
        let valid = Self::valid_after(now, life_ms);
        let done = ScriptDone(Box::new(move |result| {
            if result.as_deref().ok().and_then(slot_lease::reply).is_some() {
                lease.renewed(valid);
            }
            lease.done_busy(None);
            None
        }));
        Call::Script {
            call,
            deadline: Some((DEADLINE_ARG, Instant::now() + self.redis_timeout)),
            done,
            undo: None,
        }
    }

    /// Renews every slot lease held and returns its slots not in use;
    /// forgets empty ones no slot was taken from for `lease_max_ttl_ms`
    /// (kept until then for their life, which the next grant doubles, as
    /// an ended rpm/tpm lease is kept to size the next). Run every half
    /// `lease_ttl_ms` by the
    /// control plane: a lease's members live one of its lives in Redis. A
    /// lease with no slot in use but one taken within the last half of its
    /// life (or the last pass: idle between two requests, not idle) is left
    /// as it is: it serves until its members would lapse and the next
    /// request then renews it (for twice the life), so a key used a few
    /// times a second costs Redis about one call a lease life instead of a
    /// return and a new grant every pass. A lease with every slot in use is
    /// renewed only when it would lapse within two passes and a turn.
    pub fn renew_slots(&self) -> Vec<Call> {
        let now = self.now_ms();
        let until = now.saturating_add(self.turn_ms());
        let pass = self.ttl_ms() / 2;
        let mut calls = Vec::new();
        self.slots.pin().retain(|_, l| {
            // Ended and renewed only with the turn: never under a grant.
            if !l.try_busy(now, until) {
                return true;
            }
            let (granted, in_use) = l.counts();
            if granted == 0 && l.taken_within(now, self.max_ttl_ms()) {
                // Empty, its life kept for the key's next request.
                l.done_busy(None);
                return true;
            }
            if l.end_if_idle() {
                l.done_busy(None);
                return false;
            }
            let recent = pass.max(l.life() / 2);
            let between = in_use == 0 && granted > 0 && l.taken_within(now, recent);
            // Valid past the next pass and one more (a pass late still
            // renews it in time, with a turn to spare).
            let full_and_valid = in_use > 0
                && in_use == granted
                && l.valid_until() > until.saturating_add(pass.saturating_mul(2));
            if !l.prompt && (between || full_and_valid) {
                l.done_busy(None);
                return true;
            }
            let life = l.call_life(now);
            match l.renew_call(life) {
                Some(call) => calls.push(self.renewal(l.clone(), call, now, life)),
                None => l.done_busy(None),
            }
            true
        });
        calls
    }

    /// Frees a request's slot of `lease`; a lease of less than one slot's
    /// share returns its slots as soon as none is in use: the call doing
    /// it.
    pub fn release_slot(&self, lease: &Arc<SlotLease>) -> Option<Call> {
        if !lease.release() || !lease.prompt {
            return None;
        }
        let now = self.now_ms();
        if !lease.try_busy(now, now.saturating_add(self.turn_ms())) {
            return None;
        }
        let life = lease.call_life(now);
        match lease.renew_call(life) {
            Some(call) => Some(self.renewal(lease.clone(), call, now, life)),
            None => {
                lease.done_busy(None);
                None
            }
        }
    }
}
