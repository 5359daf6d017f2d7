//! What a Redis round trip's outcome means, the same for the per-core
//! links ([`super::direct`]) and the control plane's runner
//! ([`super::remote`]): the breaker is told, the fallback is logged, each
//! admission gets its verdict, and admissions nobody waits for any more are
//! given back.

use super::breaker::Breaker;
use super::remote::{Call, RemoteError};
use super::script;
use super::Verdict;
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
    /// A round trip succeeded: closes the breaker if it was open, then hands
    /// each admission its verdict. Returns the settlements of admissions
    /// nobody waits for any more (the core gave up at its deadline and
    /// limited the request locally), for the next round trip, and what
    /// other modules' scripts hand back.
    pub fn succeeded(
        &self,
        batch: Vec<Call>,
        replies: impl Iterator<Item = Result<Vec<i64>, RemoteError>>,
    ) -> Vec<Call> {
        if self.breaker.on_success() {
            tracing::warn!(
                "Redis limiter recovered: circuit breaker closed; limits are fleet-wide again"
            );
        }
        let mut orphans = Vec::new();
        for (call, numbers) in batch.into_iter().zip(replies) {
            let (entries, request_id, reply) = match call {
                Call::Admit {
                    entries,
                    request_id,
                    reply,
                    ..
                } => (entries, request_id, reply),
                Call::Script { done, .. } => {
                    orphans.extend((done.0)(numbers));
                    continue;
                }
                Call::Finish { .. } => continue,
            };
            let verdict = numbers.and_then(|n| script::verdict(&n));
            if let Err(Ok(Verdict::Admitted { tick, used })) = reply.send(verdict) {
                orphans.push(script::give_back(entries, request_id, tick, used));
            }
        }
        orphans
    }

    /// A round trip failed: every admission of `batch` gets `err` (and is
    /// limited locally). Returns whether the connection must be dropped
    /// (unreachable or timed out, a reply may still be in flight), which is
    /// also what the breaker counts.
    pub fn failed(&mut self, batch: Vec<Call>, err: &RemoteError) -> bool {
        let unreachable = matches!(err, RemoteError::Unreachable(_));
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
}

/// The error of a round trip that did not finish within `deadline`.
pub fn timed_out(deadline: Duration) -> RemoteError {
    RemoteError::Unreachable(format!("no answer within {} ms", deadline.as_millis()))
}
