//! `GET /gateway/limits[?api_key=|team_id=]` (this gateway's, for the
//! console's Limits page): the limiter's mode, breaker and reservation
//! switch, and for a key (with its team's and user's limits) or a team,
//! each rpm/tpm/parallel limit beside its current use. The use is read
//! from this process's counters, without waiting on anything; they hold
//! the count in local mode and while Redis is unusable (breaker open).
//! Otherwise the fleet's count lives in Redis (or its leases) and `current`
//! is null, rather than a figure that is not the one enforced.

use super::body::bad_field;
use super::db::{key, run, team, user};
use super::query::Query;
use crate::error::GatewayError;
use crate::limits::{BreakerState, Descriptor, Kind, Limiter, Mode, Scope, ScopeLimits};
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

/// The limiter's state, shared by every answer.
fn limiter_state(limiter: &Limiter) -> (Value, bool) {
    let breaker = limiter.breaker_state();
    let counted_here =
        limiter.mode() == Mode::Local || breaker.is_none() || breaker == Some(BreakerState::Open);
    let state = json!({
        "mode": limiter.mode().as_str(),
        "breaker": breaker.map(|b| match b {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }),
        "reservation": limiter.settings().reservation,
        "window_secs": limiter.settings().window.secs,
        "counted_here": counted_here,
    });
    (state, counted_here)
}

/// One limit's line: its scope, type, limit and current use.
fn line(limiter: &Limiter, d: &Descriptor, counted_here: bool) -> Value {
    let kind = match d.kind {
        Kind::Requests => "rpm",
        Kind::Tokens => "tpm",
        Kind::Parallel => "parallel",
    };
    let current = counted_here.then(|| limiter.local_usage(&d.key));
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
    let (mut state, counted_here) = limiter_state(limiter);
    state["limits"] = descriptors
        .iter()
        .map(|d| line(limiter, d, counted_here))
        .collect();
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
    /// left); where the count is not here, none is shown.
    #[test]
    fn a_local_limit_shows_its_counters_use() {
        let (limiter, _) = Limiter::new(LimitSettings::default());
        let (state, here) = limiter_state(&limiter);
        assert!(here);
        assert_eq!(state["mode"], "local");
        assert_eq!(state["reservation"], true);
        let d = Descriptor::new(Scope::ApiKey, "hash", Kind::Requests, 10);
        let fresh = line(&limiter, &d, here);
        assert_eq!(
            (fresh["current"].clone(), fresh["remaining"].clone()),
            (json!(0), json!(10))
        );
        let shown = line(&limiter, &d, false);
        assert_eq!(shown["current"], Value::Null);
        assert_eq!(
            (shown["type"].clone(), shown["id"].clone()),
            (json!("rpm"), json!("hash"))
        );
    }
}
