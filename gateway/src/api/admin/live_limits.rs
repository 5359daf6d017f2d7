//! `GET /gateway/limits[?api_key=|team_id=][&model=]` (this gateway's, for
//! the console's Limits page): the limiter's mode, breaker and reservation
//! switch, and for a key or a team each rpm/tpm/parallel limit beside its
//! current use. A key's limits are the ones its requests are checked
//! against, built by the limiter from the rows the request path reads
//! ([`Limiter::descriptors`], [`Principal::extra_limits`]): the server's,
//! its team's organization's, team's, user's and its own (a shared budget
//! row's rpm/tpm filling what the key leaves unset), its per-model limits
//! and its team's and organization's (for `model`, else for every model
//! one of them names), its per-tag ones and its team member ones. A team's
//! are its own and its per-model ones. Use is read through a
//! [`UsageSource`] that says where the count lives (`counted_in`):
//! - `"replica"`: this process's counters, read without waiting; they hold
//!   the count in local mode and while Redis is unusable (breaker open);
//! - `"fleet"`: Redis, as every replica sees it ([`Limiter::fleet_usage`],
//!   read-only; in `lease` mode it counts the units granted to leases);
//!   `current` is null when Redis does not answer in time.

use super::body::bad_field;
use super::db::{run, shown, store_err, team, token_of};
use super::query::Query;
use crate::auth::{KeyEntry, Principal};
use crate::error::GatewayError;
use crate::limits::{AdmitInput, Descriptor, Kind, Limiter, Mode, Scope, ScopeLimits};
use crate::redis::BreakerState;
use crate::spend::PromptEstimate;
use crate::state::Worker;
use crate::store::TeamRecord;
use serde_json::{json, Map, Value};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

/// At most this many model groups are shown for one key or team (each
/// named in a per-model limit); a `model` asked for is always shown.
const MAX_MODELS: usize = 50;

/// The longest `model` taken.
const MAX_MODEL_LEN: usize = 256;

/// Whose limits: a key (plain or hashed), a team, or no one (the
/// limiter's state alone).
#[derive(Debug, PartialEq)]
enum Subject {
    Key(String),
    Team(String),
    Nobody,
}

/// The subject asked about and the model group, if one is named.
fn subject(mut q: Query) -> Result<(Subject, Option<String>), GatewayError> {
    let subject = match (q.take("api_key"), q.take("team_id")) {
        (Some(k), None) => Subject::Key(k),
        (None, Some(t)) => Subject::Team(t),
        (Some(_), Some(_)) => {
            return Err(bad_field("team_id", "give api_key or team_id, not both"))
        }
        (None, None) => Subject::Nobody,
    };
    let model = q.take("model").filter(|m| !m.is_empty());
    q.finish()?;
    match &model {
        Some(_) if subject == Subject::Nobody => {
            Err(bad_field("model", "give api_key or team_id with model"))
        }
        Some(m) if m.len() > MAX_MODEL_LEN => {
            Err(bad_field("model", format!("at most {MAX_MODEL_LEN} bytes")))
        }
        _ => Ok((subject, model)),
    }
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

/// One limit and the model group or tag it is for, when it is for one.
struct Limit {
    desc: Descriptor,
    model: Option<String>,
    tag: Option<String>,
}

impl Limit {
    fn of(desc: Descriptor) -> Limit {
        Limit {
            desc,
            model: None,
            tag: None,
        }
    }
}

/// Each limit's line: its scope, type, limit and current use (null when
/// `source` cannot read it).
async fn lines(source: &impl UsageSource, limits: &[Limit]) -> Vec<Value> {
    let descs: Vec<Descriptor> = limits.iter().map(|l| l.desc.clone()).collect();
    let used = source.usage(&descs).await;
    limits
        .iter()
        .enumerate()
        .map(|(i, l)| line(l, used.as_ref().and_then(|u| u.get(i).copied())))
        .collect()
}

/// One limit's line.
fn line(l: &Limit, current: Option<u64>) -> Value {
    let d = &l.desc;
    let kind = match d.kind {
        Kind::Requests => "rpm",
        Kind::Tokens => "tpm",
        Kind::Parallel => "parallel",
    };
    json!({
        "scope": d.scope.as_str(),
        "id": d.value(),
        "model": l.model,
        "tag": l.tag,
        "type": kind,
        "limit": d.limit,
        "current": current,
        "remaining": current.map(|c| d.limit.saturating_sub(c)),
    })
}

/// The names of an object-valued field of `metadata` (or of `map`).
fn names<'a>(map: Option<&'a Map<String, Value>>, into: &mut BTreeSet<&'a str>) {
    into.extend(map.into_iter().flat_map(|m| m.keys().map(String::as_str)));
}

/// The model groups a key's per-model limits name (its own, its team's,
/// its team's organization's), the first [`MAX_MODELS`] by name.
fn limited_models(entry: &KeyEntry) -> Vec<String> {
    let mut out = BTreeSet::new();
    let rec = &entry.record;
    names(Some(&rec.model_rpm_limit), &mut out);
    names(Some(&rec.model_tpm_limit), &mut out);
    for field in ["model_rpm_limit", "model_tpm_limit"] {
        names(rec.metadata.get(field).and_then(Value::as_object), &mut out);
        if let Some(t) = &entry.team {
            names(
                t.record.metadata.get(field).and_then(Value::as_object),
                &mut out,
            );
            let org = t.org_model_limits.as_ref().map(|(_, m)| m);
            names(
                org.and_then(|m| m.get(field)).and_then(Value::as_object),
                &mut out,
            );
        }
    }
    out.into_iter()
        .take(MAX_MODELS)
        .map(str::to_string)
        .collect()
}

/// Every limit a request of `entry`'s for `model` (else for each model
/// group one of its per-model limits names), carrying every tag its
/// per-tag limits name, is checked against, each once.
fn key_limits(limiter: &Limiter, entry: Arc<KeyEntry>, model: Option<String>) -> Vec<Limit> {
    let models = match model {
        Some(m) => vec![m],
        None => limited_models(&entry),
    };
    let tags: Vec<String> = entry
        .record
        .metadata
        .get("tag_rpm_limit")
        .and_then(Value::as_object)
        .map(|m| m.keys().take(MAX_MODELS).cloned().collect())
        .unwrap_or_default();
    let token = entry.record.token.clone();
    let principal = Principal::Key(entry);
    let prompt = PromptEstimate::new(bytes::Bytes::new());
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    // The scope-wide limits (no model: none of a model's), then each
    // model's own.
    for (i, model) in std::iter::once("")
        .chain(models.iter().map(String::as_str))
        .enumerate()
    {
        let input = AdmitInput {
            key: principal.key_rows(),
            model,
            end_user: None,
            end_user_limits: None,
            prompt: &prompt,
            max_tokens: None,
            estimated_output: None,
            embeddings: false,
            request_id: "",
            extra: principal.extra_limits(model, if i == 0 { &tags } else { &[] }),
        };
        for desc in limiter.descriptors(&input) {
            if !seen.insert(desc.key.clone()) {
                continue;
            }
            let per_model = matches!(
                desc.scope,
                Scope::ModelPerKey | Scope::ModelPerTeam | Scope::ModelPerOrganization
            );
            let tag = (desc.scope == Scope::TagPerKey)
                .then(|| {
                    desc.value()
                        .strip_prefix(&format!("{token}:"))
                        .map(str::to_string)
                })
                .flatten();
            out.push(Limit {
                model: per_model.then(|| model.to_string()),
                tag,
                desc,
            });
        }
    }
    out
}

/// A team's limits: its own, and its per-model ones for `model` (else for
/// each model group they name).
fn team_limits(t: &TeamRecord, model: Option<String>) -> Vec<Limit> {
    let mut descs = Vec::new();
    ScopeLimits::from_fields(t.rpm_limit, t.tpm_limit, t.max_parallel_requests).push_into(
        Scope::Team,
        &t.team_id,
        &mut descs,
    );
    let mut out: Vec<Limit> = descs.into_iter().map(Limit::of).collect();
    let models = match model {
        Some(m) => vec![m],
        None => {
            let mut named = BTreeSet::new();
            for field in ["model_rpm_limit", "model_tpm_limit"] {
                names(t.metadata.get(field).and_then(Value::as_object), &mut named);
            }
            named
                .into_iter()
                .take(MAX_MODELS)
                .map(str::to_string)
                .collect()
        }
    };
    for m in models {
        let limits = ScopeLimits::from_fields(
            t.model_limit("model_rpm_limit", &m),
            t.model_limit("model_tpm_limit", &m),
            None,
        );
        let mut descs = Vec::new();
        limits.push_into(
            Scope::ModelPerTeam,
            &format!("{}:{m}", t.team_id),
            &mut descs,
        );
        out.extend(descs.into_iter().map(|desc| Limit {
            desc,
            model: Some(m.clone()),
            tag: None,
        }));
    }
    out
}

/// `GET /gateway/limits`.
pub async fn live(worker: &Worker, q: Query) -> Result<Value, GatewayError> {
    let (subject, model) = subject(q)?;
    let limiter = &worker.shared.limiter;
    let limits = match subject {
        Subject::Key(given) => {
            // Read through the key cache, as a request's authentication
            // does: the key with its budget row, team, organization and
            // user.
            let entry = run(worker, move |ctx| async move {
                ctx.keys
                    .load(ctx.store(), &token_of(&given))
                    .await
                    .map_err(store_err)?
                    .ok_or_else(|| GatewayError::NotFound(format!("Key {}", shown(&given))))
            })
            .await?;
            key_limits(limiter, entry, model)
        }
        Subject::Team(id) => {
            let t = run(worker, move |ctx| async move { team(&ctx, &id).await }).await?;
            team_limits(&t, model)
        }
        Subject::Nobody => Vec::new(),
    };
    let mut state = limiter_state(limiter);
    state["limits"] = Value::Array(lines(limiter, &limits).await);
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::LimitSettings;

    #[test]
    fn names_its_subject() {
        let parse = |q: &str| Query::parse(q).and_then(subject);
        assert_eq!(
            parse("api_key=sk-1").unwrap(),
            (Subject::Key("sk-1".into()), None)
        );
        assert_eq!(
            parse("team_id=t&model=m").unwrap(),
            (Subject::Team("t".into()), Some("m".into()))
        );
        assert_eq!(parse("").unwrap(), (Subject::Nobody, None));
        let long = format!("api_key=k&model={}", "m".repeat(MAX_MODEL_LEN + 1));
        for (q, param) in [
            ("api_key=a&team_id=t", "team_id"),
            ("team_id=t&x=1", "x"),
            ("model=m", "model"),
            (long.as_str(), "model"),
        ] {
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
        let fresh = &lines(&limiter, &[Limit::of(d)]).await[0];
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
            Limit::of(Descriptor::new(Scope::Team, "t", Kind::Requests, 10)),
            Limit::of(Descriptor::new(Scope::ApiKey, "k", Kind::Parallel, 2)),
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
