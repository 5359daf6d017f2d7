//! What a Redis round trip's outcome means, the same for the per-core
//! links ([`super::direct`]) and the control plane's runner
//! ([`super::remote`]): the breaker is told, the fallback is logged, each
//! admission gets its verdict, and admissions nobody waits for any more are
//! given back.

use super::call::Call;
use super::script;
use super::split::Answer;
use super::verdict::Verdict;
use crate::redis::{Breaker, RemoteError};
use std::time::{Duration, Instant};

/// The breaker and the log lines of one Redis path.
pub struct Reporter<'a> {
    /// The breaker every path shares.
    pub breaker: &'a Breaker,
    /// What the fallback does, for the log lines.
    pub fallback_note: &'a str,
    /// When this path last logged a failed call (at most one per 10 s).
    pub last_complaint: Option<Instant>,
}

impl Reporter<'_> {
    /// A round trip to a standalone Redis succeeded: closes the breaker if
    /// it was open, then hands each admission its verdict and each other
    /// module's script its numbers. Returns the settlements of admissions
    /// nobody waits for any more (the core gave up at its deadline and
    /// limited the request locally), for the next round trip, and what
    /// other modules' scripts hand back.
    pub fn succeeded(
        &self,
        batch: Vec<Call>,
        replies: impl Iterator<Item = Result<Vec<i64>, RemoteError>>,
    ) -> Vec<Call> {
        self.breaker_closes();
        let mut orphans = Vec::new();
        for (call, numbers) in batch.into_iter().zip(replies) {
            match call {
                Call::Script { done, .. } => orphans.extend((done.0)(numbers)),
                call => orphans.extend(hand_verdict(
                    call,
                    numbers.and_then(|n| script::verdict(&n)),
                )),
            }
        }
        orphans
    }

    /// A round trip over a Redis Cluster, where some nodes may have
    /// answered and others not: an unreachable node counts as a failure
    /// for the breaker (as a standalone Redis would), every admission gets
    /// its own verdict (merged over its slots), every other module's script
    /// its integers. Returns what [`succeeded`](Self::succeeded) does.
    pub fn concluded(
        &mut self,
        batch: Vec<Call>,
        answers: impl Iterator<Item = Result<Answer, RemoteError>>,
        unreachable: Option<&RemoteError>,
    ) -> Vec<Call> {
        match unreachable {
            Some(err) => self.complain(err, true),
            None => self.breaker_closes(),
        }
        let mut orphans = Vec::new();
        for (call, answer) in batch.into_iter().zip(answers) {
            match (call, answer) {
                (Call::Script { done, .. }, answer) => {
                    let numbers = answer.and_then(|a| match a {
                        Answer::Numbers(n) => Ok(n),
                        other => Err(RemoteError::Failed(format!(
                            "unexpected script reply {other:?}"
                        ))),
                    });
                    orphans.extend((done.0)(numbers));
                }
                (call, answer) => {
                    let verdict = answer.and_then(|a| match a {
                        Answer::Verdict(v) => Ok(v),
                        other => Err(RemoteError::Failed(format!(
                            "unexpected admission reply {other:?}"
                        ))),
                    });
                    orphans.extend(hand_verdict(call, verdict));
                }
            }
        }
        orphans
    }

    fn breaker_closes(&self) {
        if self.breaker.on_success() {
            tracing::warn!(
                "Redis limiter recovered: circuit breaker closed; limits are fleet-wide again"
            );
        }
    }

    /// A round trip failed: every admission of `batch` gets `err` (and is
    /// limited locally), every script its error. Returns whether the
    /// connection must be dropped (unreachable or timed out, a reply may
    /// still be in flight), which is also what the breaker counts.
    pub fn failed(&mut self, batch: Vec<Call>, err: &RemoteError) -> bool {
        let unreachable = matches!(err, RemoteError::Unreachable(_));
        self.complain(err, unreachable);
        for call in batch {
            match call {
                Call::Admit { reply, .. } => {
                    let _ = reply.send(Err(err.clone()));
                }
                Call::Script { done, .. } => {
                    let _ = (done.0)(Err(err.clone()));
                }
                Call::Finish { .. } => {}
            }
        }
        unreachable
    }

    /// Tells the breaker (when `unreachable`) and logs, at most once per 10 s.
    fn complain(&mut self, err: &RemoteError, unreachable: bool) {
        if unreachable && self.breaker.on_failure() {
            tracing::warn!(error = %err, fallback = %self.fallback_note, "Redis limiter: circuit breaker opened; limits are enforced per process until Redis answers a probe");
        }
        if self
            .last_complaint
            .is_none_or(|t| t.elapsed() > Duration::from_secs(10))
        {
            self.last_complaint = Some(Instant::now());
            tracing::warn!(error = %err, fallback = %self.fallback_note, "Redis limiter call failed; this request is limited per process");
        }
    }
}

/// Hands an admission its verdict; the settlement to send back when
/// nobody waits for it any more.
fn hand_verdict(call: Call, verdict: Result<Verdict, RemoteError>) -> Option<Call> {
    let Call::Admit {
        entries,
        request_id,
        reply,
        ..
    } = call
    else {
        return None;
    };
    match reply.send(verdict) {
        Err(Ok(Verdict::Admitted { tick, used, ticks })) => {
            Some(script::give_back(entries, request_id, tick, used, ticks))
        }
        _ => None,
    }
}
