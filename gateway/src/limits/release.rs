//! Parallel slots must not outlive a Redis outage. A slot is held in Redis
//! for `parallel_slot_ttl_secs` (600 s by default) unless its settlement
//! frees it; a settlement lost in a failed round trip, or an admission whose
//! round trip failed after Redis may have run it, would hold the slot that
//! long. Such slots are released again (`ZREM` of the request's id, which
//! is idempotent and harmless for a slot never taken) once Redis answers:
//! right after the outage for a lost settlement, and for an admission only
//! once its deadline has passed, after which Redis refuses to run it
//! (`limiter.lua` checks the deadline), so the release cannot come first.
//!
//! Token reservations and rpm units of such calls are not retried: giving
//! one back twice would under-count, and each lapses with the window.
//! Other modules' scripts may name an idempotent undo (a budget hold's
//! release), kept and sent the same way.

use super::call::{Call, ScriptCall};
use super::descriptor::Kind;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Releases one path keeps; more are dropped (their slots lapse with their
/// TTL), so a long outage cannot grow memory.
const MAX_PENDING: usize = 16_384;
/// Pause before a release is sent again after a failed round trip.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Margin after an admission's deadline before its release is sent.
const AFTER_DEADLINE: Duration = Duration::from_secs(1);

/// Slot releases waiting for Redis, each with the instant it may go.
#[derive(Debug, Default)]
pub struct Releases {
    pending: VecDeque<(Instant, Call)>,
    dropped: u64,
}

impl Releases {
    /// Keeps the releases a failed round trip of `batch` calls for.
    pub fn after_failure(&mut self, batch: &[Call]) {
        let now = Instant::now();
        for call in batch {
            // A lost admission's reply told nobody which form its slots
            // took (both are removed); a settlement's entries say.
            let (entries, request_id, not_before, form_known) = match call {
                Call::Admit {
                    entries,
                    request_id,
                    deadline,
                    ..
                } => (
                    entries,
                    request_id,
                    (*deadline).max(now) + AFTER_DEADLINE,
                    false,
                ),
                Call::Finish {
                    entries,
                    request_id,
                    ..
                } => (entries, request_id, now + RETRY_AFTER, true),
                Call::Script {
                    undo: Some(undo),
                    deadline,
                    ..
                } => {
                    let not_before =
                        deadline.map_or(now + RETRY_AFTER, |(_, d)| d.max(now) + AFTER_DEADLINE);
                    self.keep(not_before, Call::undo(ScriptCall::clone(undo)));
                    continue;
                }
                Call::Script { undo: None, .. } => continue,
            };
            let slots: Vec<_> = entries
                .iter()
                .filter(|e| e.kind == Kind::Parallel && !e.lease)
                .cloned()
                .map(|e| match form_known {
                    true => e,
                    false => e.settling(None),
                })
                .collect();
            if slots.is_empty() {
                continue;
            }
            let release = Call::Finish {
                entries: slots,
                request_id: request_id.clone(),
                tick: 0,
                ticks: Vec::new(),
                tokens_used: 0,
            };
            self.keep(not_before, release);
        }
    }

    /// Keeps `release` until `not_before`, unless too many wait already.
    fn keep(&mut self, not_before: Instant, release: Call) {
        if self.pending.len() >= MAX_PENDING {
            self.dropped += 1;
            if self.dropped.is_power_of_two() {
                tracing::warn!(
                    dropped = self.dropped,
                    "too many releases waiting for Redis; the dropped ones lapse with parallel_slot_ttl_secs"
                );
            }
            return;
        }
        self.pending.push_back((not_before, release));
    }

    /// The releases that may go now.
    pub fn due(&mut self, now: Instant) -> Vec<Call> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].0 <= now {
                if let Some((_, call)) = self.pending.remove(i) {
                    out.push(call);
                }
            } else {
                i += 1;
            }
        }
        out
    }

    /// When the next release may go.
    pub fn next_due(&self) -> Option<Instant> {
        self.pending.iter().map(|(at, _)| *at).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::call::{Entry, LuaScript, ScriptDone};
    use crate::limits::descriptor::{Descriptor, Scope};

    fn entries() -> Vec<Entry> {
        let p = Descriptor::new(Scope::ApiKey, "k", Kind::Parallel, 2);
        let t = Descriptor::new(Scope::ApiKey, "k", Kind::Tokens, 100);
        vec![Entry::charge(&p, 2, 1), Entry::charge(&t, 100, 40)]
    }

    /// A release's slots, bucket, tokens used and its first slot's number
    /// (the form the slot took, 0 when not known).
    fn slots_of(call: &Call) -> (usize, u64, u64, u64) {
        match call {
            Call::Finish {
                entries,
                tick,
                tokens_used,
                ..
            } => {
                assert!(entries.iter().all(|e| e.kind == Kind::Parallel));
                (entries.len(), *tick, *tokens_used, entries[0].amount)
            }
            _ => panic!("a release is a settlement"),
        }
    }

    #[test]
    fn a_failed_admission_releases_its_slot_only_after_its_deadline() {
        let mut r = Releases::default();
        let (reply, _rx) = tokio::sync::oneshot::channel();
        let deadline = Instant::now() + Duration::from_millis(100);
        r.after_failure(&[Call::Admit {
            entries: entries(),
            request_id: "r1".into(),
            deadline,
            reply,
        }]);
        assert!(r.due(Instant::now()).is_empty(), "not before the deadline");
        let at = r.next_due().expect("a release");
        assert!(at >= deadline + AFTER_DEADLINE);
        let due = r.due(at);
        assert_eq!(due.len(), 1);
        assert_eq!(
            slots_of(&due[0]),
            (1, 0, 0, 0),
            "only the slot, nothing else; its form not known (the reply was lost)"
        );
        assert!(r.next_due().is_none());
    }

    #[test]
    fn a_lost_settlement_is_retried_for_its_slots_only() {
        let mut r = Releases::default();
        // The settlement names the slot's form: taken with 40 held.
        let mut named = entries();
        named[0] = named[0].clone().settling(Some(40));
        let finish = Call::Finish {
            entries: named,
            request_id: "r2".into(),
            tick: 7,
            ticks: Vec::new(),
            tokens_used: 12,
        };
        let rpm_only = Call::Finish {
            entries: vec![Entry::charge(
                &Descriptor::new(Scope::ApiKey, "k", Kind::Tokens, 100),
                100,
                5,
            )],
            request_id: "r3".into(),
            tick: 7,
            ticks: Vec::new(),
            tokens_used: 3,
        };
        r.after_failure(&[finish, rpm_only]);
        let due = r.due(Instant::now() + RETRY_AFTER);
        assert_eq!(due.len(), 1, "token refunds are not retried");
        assert_eq!(slots_of(&due[0]), (1, 0, 0, 41), "the form as named");
        // A release whose own round trip failed is kept again.
        r.after_failure(&due);
        assert_eq!(r.due(Instant::now() + RETRY_AFTER * 2).len(), 1);
    }

    #[test]
    fn a_failed_script_sends_its_undo_after_its_deadline_until_redis_answers() {
        static SCRIPT: LuaScript = LuaScript::new("return {1}");
        let call = |arg: &str| ScriptCall {
            script: &SCRIPT,
            keys: vec!["{k}".into()],
            args: vec![arg.into()],
        };
        let script = |undo: Option<ScriptCall>| Call::Script {
            call: call("do"),
            deadline: Some((0, Instant::now() + Duration::from_millis(100))),
            done: ScriptDone(Box::new(|_| None)),
            undo: undo.map(Box::new),
        };
        let mut r = Releases::default();
        r.after_failure(&[script(Some(call("undo"))), script(None)]);
        assert!(r.due(Instant::now()).is_empty(), "not before the deadline");
        let due = r.due(Instant::now() + Duration::from_millis(100) + AFTER_DEADLINE);
        assert_eq!(due.len(), 1, "only the call with an undo");
        let Call::Script { call: sent, .. } = &due[0] else {
            panic!("an undo is a script call");
        };
        assert_eq!(sent.args, ["undo"]);
        r.after_failure(&due);
        assert_eq!(
            r.due(Instant::now() + RETRY_AFTER * 2).len(),
            1,
            "kept while it fails"
        );
    }
}
