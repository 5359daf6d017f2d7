//! `GET /gateway/limits[?api_key=|team_id=]` (this gateway's, for the
//! console's Limits page): the limiter's mode, breaker and reservation
//! switch, and for a key (with its team's and user's limits) or a team,
//! each rpm/tpm/parallel limit beside its current use, read through a
//! [`UsageSource`] that says where the count lives (`counted_in`):
//! - `"replica"`: this process's counters, read without waiting; they hold
//!   the count in local mode and while Redis is unusable (breaker open);
//! - `"fleet"`: Redis, as every replica sees it ([`Limiter::fleet_usage`],
//!   read-only; in `lease` mode it counts the units granted to leases);
//!   `current` is null when Redis does not answer in time.

use super::body::bad_field;
use super::db::{key, run, team, user};
use super::query::Query;
use crate::error::GatewayError;
use crate::limits::{Descriptor, Kind, Limiter, Mode, Scope, ScopeLimits};
use crate::redis::BreakerState;
use crate::state::Worker;
use serde_json::{json, Value};

/// Whose limits: a key (plain or hashed), a team, or no one (the
/// limiter's state alone).
#[derive(Debug, PartialEq)]
enum Subject {
    Key(String),
    Team(String),
    Nobody,
}

fn subject(mut q: Query) -> Result<Subject, GatewayError> {
    let subject = match (q.take("api_key"), q.take("team_id")) {
        (Some(k), None) => Subject::Key(k),
        (None, Some(t)) => Subject::Team(t),
        (Some(_), Some(_)) => {
            return Err(bad_field("team_id", "give api_key or team_id, not both"))
        }
        (None, None) => Subject::Nobody,
    };
    q.finish()?;
    Ok(subject)
}

/// Where the count of a limit lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// This process's counters.
    Replica,
    /// Redis, for the whole fleet.
    Fleet,
}

/// Where the current use of limits is read from.
trait UsageSource {
    /// Where the count lives now.
    fn counted_in(&self) -> Counted;
    /// The current use of each of `descs`, in order; `None` when it cannot
    /// be read.
    async fn usage(&self, descs: &[Descriptor]) -> Option<Vec<u64>>;
}

impl UsageSource for Limiter {
    fn counted_in(&self) -> Counted {
        let breaker = self.breaker_state();
        match self.mode() == Mode::Local || breaker.is_none() || breaker == Some(BreakerState::Open)
        {
            true => Counted::Replica,
            false => Counted::Fleet,
        }
    }

    /// This process's counters where they hold the count, else the
    /// fleet's counters in Redis.
    async fn usage(&self, descs: &[Descriptor]) -> Option<Vec<u64>> {
        match self.counted_in() {
            Counted::Replica => Some(descs.iter().map(|d| self.local_usage(&d.key)).collect()),
            Counted::Fleet => self.fleet_usage(descs).await,
        }
    }
}

/// The limiter's state, shared by every answer.
fn limiter_state(limiter: &Limiter) -> Value {
    let breaker = limiter.breaker_state();
    let counted_in = limiter.counted_in();
    json!({
        "mode": limiter.mode().as_str(),
        "breaker": breaker.map(|b| match b {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }),
        "reservation": limiter.settings().reservation,
        "window_secs": limiter.settings().window.secs,
        "counted_here": counted_in == Counted::Replica,
        "counted_in": match counted_in {
            Counted::Replica => "replica",
            Counted::Fleet => "fleet",
        },
    })
}

/// Each limit's line: its scope, type, limit and current use (null when
/// `source` cannot read it).
async fn lines(source: &impl UsageSource, descs: &[Descriptor]) -> Vec<Value> {
    let used = source.usage(descs).await;
    descs
        .iter()
        .enumerate()
        .map(|(i, d)| line(d, used.as_ref().and_then(|u| u.get(i).copied())))
        .collect()
}

/// One limit's line.
fn line(d: &Descriptor, current: Option<u64>) -> Value {
    let kind = match d.kind {
        Kind::Requests => "rpm",
        Kind::Tokens => "tpm",
        Kind::Parallel => "parallel",
    };
    json!({
        "scope": d.scope.as_str(),
        "id": d.value(),
        "type": kind,
        "limit": d.limit,
        "current": current,
        "remaining": current.map(|c| d.limit.saturating_sub(c)),
    })
}

/// `GET /gateway/limits`.
pub async fn live(worker: &Worker, q: Query) -> Result<Value, GatewayError> {
    let subject = subject(q)?;
    let descriptors = run(worker, move |ctx| async move {
        let mut out = Vec::new();
        match subject {
            Subject::Key(given) => {
                let k = key(&ctx, &given).await?;
                if let Some(t) = k.team_id.as_deref() {
                    let t = team(&ctx, t).await?;
                    ScopeLimits::from_fields(t.rpm_limit, t.tpm_limit, t.max_parallel_requests)
                        .push_into(Scope::Team, &t.team_id, &mut out);
                }
                if let Some(u) = k.user_id.as_deref() {
                    if let Ok(u) = user(&ctx, u).await {
                        ScopeLimits::from_fields(u.rpm_limit, u.tpm_limit, u.max_parallel_requests)
                            .push_into(Scope::User, &u.user_id, &mut out);
                    }
                }
                ScopeLimits::from_fields(k.rpm_limit, k.tpm_limit, k.max_parallel_requests)
                    .push_into(Scope::ApiKey, &k.token, &mut out);
            }
            Subject::Team(id) => {
                let t = team(&ctx, &id).await?;
                ScopeLimits::from_fields(t.rpm_limit, t.tpm_limit, t.max_parallel_requests)
                    .push_into(Scope::Team, &t.team_id, &mut out);
            }
            Subject::Nobody => {}
        }
        Ok(out)
    })
    .await?;
    let limiter = &worker.shared.limiter;
    let mut state = limiter_state(limiter);
    state["limits"] = Value::Array(lines(limiter, &descriptors).await);
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::LimitSettings;

    #[test]
    fn names_its_subject() {
        let parse = |q: &str| Query::parse(q).and_then(subject);
        assert_eq!(parse("api_key=sk-1").unwrap(), Subject::Key("sk-1".into()));
        assert_eq!(parse("team_id=t").unwrap(), Subject::Team("t".into()));
        assert_eq!(parse("").unwrap(), Subject::Nobody);
        for (q, param) in [("api_key=a&team_id=t", "team_id"), ("team_id=t&x=1", "x")] {
            assert_eq!(parse(q).unwrap_err().param(), Some(param), "{q}");
        }
    }

    /// In local mode a limit shows the counter's use (none yet: all is
    /// left), labelled as this replica's count.
    #[tokio::test(flavor = "current_thread")]
    async fn a_local_limit_shows_its_counters_use() {
        let (limiter, _) = Limiter::new(LimitSettings::default());
        let state = limiter_state(&limiter);
        assert_eq!(
            (state["mode"].clone(), state["counted_in"].clone()),
            (json!("local"), json!("replica"))
        );
        assert_eq!(state["reservation"], true);
        let d = Descriptor::new(Scope::ApiKey, "hash", Kind::Requests, 10);
        let fresh = &lines(&limiter, std::slice::from_ref(&d)).await[0];
        assert_eq!(
            (fresh["current"].clone(), fresh["remaining"].clone()),
            (json!(0), json!(10))
        );
        assert_eq!(
            (fresh["type"].clone(), fresh["id"].clone()),
            (json!("rpm"), json!("hash"))
        );
    }

    /// A source of the fleet's counts (what `Limiter::usage` is to give).
    struct Fleet(Option<Vec<u64>>);

    impl UsageSource for Fleet {
        fn counted_in(&self) -> Counted {
            Counted::Fleet
        }
        async fn usage(&self, _: &[Descriptor]) -> Option<Vec<u64>> {
            self.0.clone()
        }
    }

    /// The fleet's count, when its source gives one, is each line's use;
    /// when it cannot be read, no use is shown.
    #[tokio::test(flavor = "current_thread")]
    async fn the_fleets_count_is_shown_when_its_source_gives_it() {
        let descs = [
            Descriptor::new(Scope::Team, "t", Kind::Requests, 10),
            Descriptor::new(Scope::ApiKey, "k", Kind::Parallel, 2),
        ];
        let shown = lines(&Fleet(Some(vec![7, 3])), &descs).await;
        assert_eq!(
            (shown[0]["current"].clone(), shown[0]["remaining"].clone()),
            (json!(7), json!(3))
        );
        assert_eq!(
            (shown[1]["current"].clone(), shown[1]["remaining"].clone()),
            (json!(3), json!(0))
        );
        let unread = lines(&Fleet(None), &descs).await;
        assert!(unread
            .iter()
            .all(|l| l["current"].is_null() && l["remaining"].is_null()));
    }
}
