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
    /// limited the request locally), for the next round trip.
    pub fn succeeded(
        &self,
        batch: Vec<Call>,
        verdicts: impl Iterator<Item = Result<Verdict, RemoteError>>,
    ) -> Vec<Call> {
        if self.breaker.on_success() {
            tracing::warn!(
                "Redis limiter recovered: circuit breaker closed; limits are fleet-wide again"
            );
        }
        hand_out(batch, verdicts)
    }

    /// A round trip over a Redis Cluster, where some nodes may have
    /// answered and others not: an unreachable node counts as a failure
    /// for the breaker (as a standalone Redis would), every admission gets
    /// its own verdict. Returns what [`succeeded`](Self::succeeded) does.
    pub fn concluded(
        &mut self,
        batch: Vec<Call>,
        verdicts: impl Iterator<Item = Result<Verdict, RemoteError>>,
        unreachable: Option<&RemoteError>,
    ) -> Vec<Call> {
        match unreachable {
            Some(err) => {
                self.complain(err, true);
                hand_out(batch, verdicts)
            }
            None => self.succeeded(batch, verdicts),
        }
    }

    /// A round trip failed: every admission of `batch` gets `err` (and is
    /// limited locally). Returns whether the connection must be dropped
    /// (unreachable or timed out, a reply may still be in flight), which is
    /// also what the breaker counts.
    pub fn failed(&mut self, batch: Vec<Call>, err: &RemoteError) -> bool {
        let unreachable = matches!(err, RemoteError::Unreachable(_));
        self.complain(err, unreachable);
        for call in batch {
            if let Call::Admit { reply, .. } = call {
                let _ = reply.send(Err(err.clone()));
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

/// Hands each admission of `batch` its verdict; the settlements of those
/// nobody waits for any more.
fn hand_out(
    batch: Vec<Call>,
    verdicts: impl Iterator<Item = Result<Verdict, RemoteError>>,
) -> Vec<Call> {
    let mut orphans = Vec::new();
    for (call, verdict) in batch.into_iter().zip(verdicts) {
        let Call::Admit {
            entries,
            request_id,
            reply,
            ..
        } = call
        else {
            continue;
        };
        if let Err(Ok(Verdict::Admitted { tick, used, ticks })) = reply.send(verdict) {
            orphans.push(script::give_back(entries, request_id, tick, used, ticks));
        }
    }
    orphans
}

/// The error of a round trip that did not finish within `deadline`.
pub fn timed_out(deadline: Duration) -> RemoteError {
    RemoteError::Unreachable(format!("no answer within {} ms", deadline.as_millis()))
}
