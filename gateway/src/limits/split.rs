//! All-or-none admission on a Redis Cluster, where a request's counters
//! (`{server:global}`, `{team:..}`, `{api_key:..}`...) live on different
//! slots and no script may touch two of them.
//!
//! A call is split into one part per slot; every part is one `limiter.lua`
//! run (atomic on its slot) and all parts go out in the same round trip.
//! When every part admits, the request is admitted. When any part refuses
//! (or gets no answer), the parts that admitted are compensated: a
//! `limiter.lua`'s settlement run gives back all they charged (requests, tokens, slots,
//! leases) in the next round trip. So no counter is ever charged past its
//! limit (each part checks before it charges); a refused request holds
//! units on other slots for one round trip, which can refuse another
//! request in that moment (never admit one too many); a replica dying
//! between the two leaves them charged until they leave the window (rpm,
//! tpm) or their slot TTL ends (parallel). Settlements are split the same
//! way, each part in the bucket its slot charged.
//!
//! Other modules' scripts (budgets) name keys of one slot per call (their
//! caller groups its keys by slot, [`super::key_slot`]): such a call is
//! one part, sent to its slot's master, and its integers go back as they
//! came.

use super::call::Call;
use super::script;
use super::verdict::Verdict;
use crate::redis::{key_slot, RemoteError};

/// The entries of one call that live on one slot, as a call of their own.
#[derive(Debug)]
pub struct Part {
    /// The call's index in the batch.
    pub call: usize,
    /// The indices of the call's entries in this part.
    pub entries: Vec<usize>,
    /// Their slot.
    pub slot: u16,
    /// The part as a call (an admission's part has no one waiting on it).
    pub sub: Call,
}

/// Splits every call of `batch` into its parts, by slot.
pub fn split(batch: &[Call]) -> Vec<Part> {
    let mut parts = Vec::with_capacity(batch.len());
    for (call, c) in batch.iter().enumerate() {
        let entries = match c {
            Call::Admit { entries, .. } | Call::Finish { entries, .. } => entries,
            Call::Script { call: script, .. } => {
                // One slot per call (a call spanning slots gets Redis's
                // CROSSSLOT error, a failure of its own).
                let slot = script.keys.first().map_or(0, |k| key_slot(k.as_bytes()));
                if let Some(sub) = sub_call(c, &[]) {
                    parts.push(Part {
                        call,
                        entries: Vec::new(),
                        slot,
                        sub,
                    });
                }
                continue;
            }
        };
        let mut slots: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let slot = key_slot(e.key.as_bytes());
            match slots.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, idx)) => idx.push(i),
                None => slots.push((slot, vec![i])),
            }
        }
        for (slot, idx) in slots {
            let Some(sub) = sub_call(c, &idx) else {
                continue;
            };
            parts.push(Part {
                call,
                entries: idx,
                slot,
                sub,
            });
        }
    }
    parts
}

fn sub_call(call: &Call, idx: &[usize]) -> Option<Call> {
    Some(match call {
        Call::Admit {
            entries,
            request_id,
            deadline,
            ..
        } => Call::Admit {
            entries: idx.iter().map(|&i| entries[i].clone()).collect(),
            request_id: request_id.clone(),
            deadline: *deadline,
            reply: tokio::sync::oneshot::channel().0,
        },
        Call::Finish {
            entries,
            request_id,
            tick,
            ticks,
            tokens_used,
        } => Call::Finish {
            entries: idx.iter().map(|&i| entries[i].clone()).collect(),
            request_id: request_id.clone(),
            tick: idx
                .first()
                .and_then(|&i| ticks.get(i))
                .copied()
                .unwrap_or(*tick),
            ticks: Vec::new(),
            tokens_used: *tokens_used,
        },
        // Nobody waits on the part: the whole call's sender is told its
        // integers; the undo goes with it so a lost part is undone later.
        Call::Script {
            call,
            deadline,
            undo,
            ..
        } => Call::Script {
            call: call.clone(),
            deadline: *deadline,
            done: super::call::ScriptDone(Box::new(|_| None)),
            undo: undo.clone(),
        },
    })
}

/// What the parts' replies mean for the batch.
#[derive(Debug, Default)]
pub struct Merged {
    /// One per call of the batch: an admission's verdict, a script's
    /// integers (a settlement's entry is unused).
    pub answers: Vec<Result<Answer, RemoteError>>,
    /// The settlements giving back what the admitting parts of a refused
    /// (or unanswered) admission charged.
    pub compensations: Vec<Call>,
    /// The parts that got no answer (their parallel slots are released
    /// once Redis answers again).
    pub lost: Vec<Call>,
    /// A node could not be reached (the breaker counts it).
    pub unreachable: Option<RemoteError>,
}

/// What a part (or a whole call) got back from Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// An admission's verdict.
    Verdict(Verdict),
    /// Another module's script's integers.
    Numbers(Vec<i64>),
    /// A settlement ran.
    Settled,
}

/// A part's outcome.
pub type Outcome = Result<Answer, RemoteError>;

/// Combines each part's outcome into one outcome per call.
pub fn merge(batch: &[Call], parts: Vec<Part>, outcomes: Vec<Outcome>) -> Merged {
    let mut merged = Merged::default();
    let mut by_call: Vec<Vec<(Part, Outcome)>> = batch.iter().map(|_| Vec::new()).collect();
    for (part, outcome) in parts.into_iter().zip(outcomes) {
        if let Err(e @ RemoteError::Unreachable(_)) = &outcome {
            merged.unreachable.get_or_insert_with(|| e.clone());
        }
        by_call[part.call].push((part, outcome));
    }
    for (call, parts) in batch.iter().zip(by_call) {
        let verdict = match call {
            Call::Finish { .. } => {
                for (part, outcome) in parts {
                    if outcome.is_err() {
                        merged.lost.push(part.sub);
                    }
                }
                Err(RemoteError::Failed("a settlement has no verdict".into()))
            }
            Call::Admit { entries, .. } => {
                admission(entries.len(), parts, &mut merged).map(Answer::Verdict)
            }
            Call::Script { .. } => script(parts, &mut merged),
        };
        merged.answers.push(verdict);
    }
    merged
}

/// A script's integers from its one part; a lost part's undo is kept.
fn script(parts: Vec<(Part, Outcome)>, merged: &mut Merged) -> Result<Answer, RemoteError> {
    let mut answer = Err(RemoteError::Failed("no script reply".into()));
    for (part, outcome) in parts {
        if outcome.is_err() {
            merged.lost.push(part.sub);
        }
        answer = outcome;
    }
    answer
}

/// One admission's verdict from its parts.
fn admission(
    n: usize,
    parts: Vec<(Part, Outcome)>,
    merged: &mut Merged,
) -> Result<Verdict, RemoteError> {
    let mut used = vec![0; n];
    let mut ticks = vec![0; n];
    let mut denied: Option<Verdict> = None;
    let mut error: Option<RemoteError> = None;
    let mut admitted = Vec::new();
    for (part, outcome) in parts {
        match outcome {
            Ok(Answer::Verdict(Verdict::Admitted { tick, used: u, .. })) => {
                for (k, &i) in part.entries.iter().enumerate() {
                    used[i] = u.get(k).copied().unwrap_or(0);
                    ticks[i] = tick;
                }
                admitted.push((part, tick, u));
            }
            Ok(Answer::Verdict(Verdict::Denied {
                index,
                used,
                limit,
                reset_at,
            })) => {
                let index = part.entries.get(index).copied().unwrap_or(0);
                if denied
                    .as_ref()
                    .is_none_or(|d| matches!(d, Verdict::Denied { index: j, .. } if index < *j))
                {
                    denied = Some(Verdict::Denied {
                        index,
                        used,
                        limit,
                        reset_at,
                    });
                }
            }
            Ok(_) => {
                error.get_or_insert(RemoteError::Failed("no admission reply".into()));
            }
            Err(e) => {
                error.get_or_insert(e);
                merged.lost.push(part.sub);
            }
        }
    }
    if denied.is_none() && error.is_none() {
        let tick = ticks.first().copied().unwrap_or(0);
        let ticks = match ticks.iter().all(|&t| t == tick) {
            true => Vec::new(),
            false => ticks,
        };
        return Ok(Verdict::Admitted { tick, used, ticks });
    }
    for (part, tick, u) in admitted {
        if let Call::Admit {
            entries,
            request_id,
            ..
        } = part.sub
        {
            merged
                .compensations
                .push(script::compensate(entries, request_id, tick, u));
        }
    }
    match (denied, error) {
        (Some(d), _) => Ok(d),
        (None, Some(e)) => Err(e),
        (None, None) => Err(RemoteError::Failed("no parts".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::call::Entry;
    use crate::limits::descriptor::{Descriptor, Kind, Scope};
    use std::time::{Duration, Instant};

    fn admit(entries: Vec<Entry>) -> Call {
        Call::Admit {
            entries,
            request_id: "r1".into(),
            deadline: Instant::now() + Duration::from_millis(100),
            reply: tokio::sync::oneshot::channel().0,
        }
    }

    fn entry(scope: Scope, value: &str, kind: Kind, amount: u64) -> Entry {
        Entry::charge(&Descriptor::new(scope, value, kind, 100), 100, amount)
    }

    /// server rpm, key rpm + tpm (one slot), team parallel: three slots.
    fn request() -> Vec<Entry> {
        vec![
            entry(Scope::Server, "global", Kind::Requests, 1),
            entry(Scope::ApiKey, "k", Kind::Requests, 1),
            entry(Scope::ApiKey, "k", Kind::Tokens, 40),
            entry(Scope::Team, "t", Kind::Parallel, 1),
        ]
    }

    fn admitted(tick: u64, used: Vec<u64>) -> Outcome {
        Ok(Answer::Verdict(Verdict::Admitted {
            tick,
            used,
            ticks: Vec::new(),
        }))
    }

    #[test]
    fn a_call_is_split_by_slot_keeping_a_scopes_counters_together() {
        let batch = [admit(request())];
        let parts = split(&batch);
        let groups: Vec<Vec<usize>> = parts.iter().map(|p| p.entries.clone()).collect();
        assert_eq!(groups, [vec![0], vec![1, 2], vec![3]]);
        assert!(parts.iter().all(|p| p.call == 0));
        let Call::Admit { entries, .. } = &parts[1].sub else {
            panic!("an admission's part is an admission");
        };
        assert_eq!(entries[1].key, "{api_key:k}:tokens");
    }

    #[test]
    fn all_parts_admitting_admit_with_each_entrys_bucket() {
        let batch = [admit(request())];
        let parts = split(&batch);
        let m = merge(
            &batch,
            parts,
            vec![
                admitted(10, vec![5]),
                admitted(11, vec![2, 30]),
                admitted(10, vec![0]),
            ],
        );
        assert!(m.compensations.is_empty() && m.lost.is_empty() && m.unreachable.is_none());
        assert_eq!(
            m.answers[0].as_ref().ok(),
            Some(&Answer::Verdict(Verdict::Admitted {
                tick: 10,
                used: vec![5, 2, 30, 0],
                ticks: vec![10, 11, 11, 10],
            }))
        );
        // The same bucket everywhere: no per-entry buckets.
        let parts = split(&batch);
        let m = merge(
            &batch,
            parts,
            vec![
                admitted(10, vec![5]),
                admitted(10, vec![2, 30]),
                admitted(10, vec![0]),
            ],
        );
        assert!(
            matches!(&m.answers[0], Ok(Answer::Verdict(Verdict::Admitted { ticks, .. })) if ticks.is_empty())
        );
    }

    #[test]
    fn a_refusing_slot_compensates_every_slot_that_admitted() {
        let batch = [admit(request())];
        let parts = split(&batch);
        let m = merge(
            &batch,
            parts,
            vec![
                admitted(10, vec![5]),
                Ok(Answer::Verdict(Verdict::Denied {
                    index: 1,
                    used: 90,
                    limit: 0,
                    reset_at: 99,
                })),
                admitted(12, vec![0]),
            ],
        );
        assert_eq!(
            m.answers[0].as_ref().ok(),
            Some(&Answer::Verdict(Verdict::Denied {
                index: 2,
                used: 90,
                limit: 0,
                reset_at: 99
            })),
            "the index is the call's"
        );
        assert_eq!(m.compensations.len(), 2);
        let Call::Finish {
            entries,
            tick,
            tokens_used,
            ..
        } = &m.compensations[0]
        else {
            panic!("a compensation is a settlement");
        };
        // The server's request unit is given back too, in its bucket.
        assert_eq!(
            (entries.len(), entries[0].kind, *tick, *tokens_used),
            (1, Kind::Requests, 10, 0)
        );
        let Call::Finish { entries, tick, .. } = &m.compensations[1] else {
            panic!("a compensation is a settlement");
        };
        assert_eq!((entries[0].kind, *tick), (Kind::Parallel, 12));
    }

    #[test]
    fn an_unreachable_slot_gives_no_verdict_and_compensates_the_others() {
        let batch = [admit(request())];
        let parts = split(&batch);
        let down = RemoteError::Unreachable("connect: refused".into());
        let m = merge(
            &batch,
            parts,
            vec![admitted(10, vec![5]), admitted(10, vec![1, 2]), Err(down)],
        );
        assert!(matches!(m.answers[0], Err(RemoteError::Unreachable(_))));
        assert!(m.unreachable.is_some());
        assert_eq!(m.compensations.len(), 2);
        assert_eq!(m.lost.len(), 1, "the lost part's slot is released later");
    }

    #[test]
    fn a_settlement_is_split_with_each_slots_bucket() {
        let batch = [Call::Finish {
            entries: vec![
                entry(Scope::ApiKey, "k", Kind::Tokens, 40),
                entry(Scope::Team, "t", Kind::Parallel, 1),
            ],
            request_id: "r1".into(),
            tick: 10,
            ticks: vec![11, 10],
            tokens_used: 12,
        }];
        let parts = split(&batch);
        let ticks: Vec<u64> = parts
            .iter()
            .map(|p| match &p.sub {
                Call::Finish { tick, .. } => *tick,
                _ => panic!("a settlement's part is a settlement"),
            })
            .collect();
        assert_eq!(ticks, [11, 10]);
        let m = merge(
            &batch,
            parts,
            vec![
                Ok(Answer::Settled),
                Err(RemoteError::Unreachable("x".into())),
            ],
        );
        assert_eq!(m.lost.len(), 1);
        assert!(m.compensations.is_empty());
    }

    #[test]
    fn a_script_is_one_part_on_its_keys_slot_and_keeps_its_undo_when_lost() {
        static SCRIPT: crate::limits::LuaScript = crate::limits::LuaScript::new("return {1}");
        let call = crate::limits::ScriptCall {
            script: &SCRIPT,
            keys: vec!["{budget:key:k}".into(), "{budget:key:k}:holds".into()],
            args: vec!["r1".into()],
        };
        let script = || Call::Script {
            call: call.clone(),
            deadline: None,
            done: crate::limits::call::ScriptDone(Box::new(|_| None)),
            undo: Some(Box::new(call.clone())),
        };
        let batch = [script(), admit(request())];
        let parts = split(&batch);
        assert_eq!(parts.len(), 4);
        assert_eq!(
            (parts[0].call, parts[0].slot),
            (0, key_slot(b"budget:key:k"))
        );
        let outcomes = |first: Outcome| {
            let mut all = vec![first];
            all.extend([
                admitted(1, vec![0]),
                admitted(1, vec![0, 0]),
                admitted(1, vec![0]),
            ]);
            all
        };
        let m = merge(&batch, parts, outcomes(Ok(Answer::Numbers(vec![1]))));
        assert_eq!(m.answers[0].as_ref().ok(), Some(&Answer::Numbers(vec![1])));
        assert!(m.lost.is_empty());
        let down = RemoteError::Unreachable("connect: refused".into());
        let m = merge(&batch, split(&batch), outcomes(Err(down)));
        assert!(m.answers[0].is_err());
        assert!(
            matches!(&m.lost[..], [Call::Script { undo: Some(_), .. }]),
            "the lost part carries its undo"
        );
    }
}
