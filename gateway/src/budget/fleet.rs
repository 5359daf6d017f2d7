//! Budgets exact across the fleet: with Redis, every replica reserves and
//! settles against one counter per budget in Redis, by the same rule as in
//! one process (reserve the worst case before the call, settle the real
//! cost after), so N replicas together overshoot a budget by at most what
//! one process does: one request's reconciliation.
//!
//! Layout: one Redis hash per principal, hash-tagged so all of it (the
//! principal's budget, a key's per-model budgets, the holds of requests in
//! flight) lives in one Cluster slot: `{budget:key:<token>}`,
//! `{budget:user:<id>}`, `{budget:team:<id>}`, each with a sorted set
//! `<hash>:holds` (request id → expiry) so a crashed replica's holds lapse
//! after `parallel_slot_ttl_secs`. On one Redis, one `reserve.lua` call
//! touches the principals of one request together (key, its user, its
//! team).
//!
//! On a Redis Cluster the principals' hashes live on different slots and
//! no script may span them: a request reserves slot by slot, in ascending
//! slot order, one `reserve.lua` call per slot (each atomic on its slot);
//! when a slot refuses, the slots already reserved are released (a
//! `settle.lua` run with no cost), and the request is refused. Each
//! counter is still checked before it is charged, so the fleet's overshoot
//! stays one request's reconciliation; settlements go to every slot at
//! once. A replica dying between the slots leaves its holds until they
//! lapse (`parallel_slot_ttl_secs`): room refused meanwhile, never spent.
//!
//! Postgres stays the record; Redis is the running total. A counter Redis
//! does not have is seeded by the first reservation that needs it, from
//! that replica's figure (Postgres's total as last read plus what it
//! settled but has not written). The spend writer never touches Redis, so
//! Postgres totals catching up never count twice. A budget period's end
//! reaches Redis with the first reservation by a replica that read the new
//! period (its `budget_reset_at` is still ahead while the counter's has
//! passed; an admin's change of the period's length resets nothing): the
//! counter starts over from that replica's figure. An admin's spend change is
//! written to Redis by the replica that made it ([`set_spend`]).
//!
//! While Redis cannot be used (breaker open, no answer within the limiter's
//! deadline) a reservation falls back to this process's counters, and what
//! it settles is owed to Redis: added to the counter by the next
//! reservation that reaches it.

use super::{Budget, Refusal};
use crate::limits::{Limiter, LuaScript, ScriptCall};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `reserve.lua`: check and hold the worst case, all or none.
static RESERVE: LuaScript = LuaScript::new(include_str!("reserve.lua"));
/// `settle.lua`: release the hold, add the real cost.
static SETTLE: LuaScript = LuaScript::new(include_str!("settle.lua"));
/// `set.lua`: an admin's new spend.
static SET: LuaScript = LuaScript::new(include_str!("set.lua"));

/// Index of the deadline among `reserve.lua`'s arguments.
const DEADLINE_ARG: usize = 3;
/// Index of the deadline among `settle.lua`'s arguments.
const SETTLE_DEADLINE_ARG: usize = 2;

/// Where a budget's counter lives: its principal's hash and the counter's
/// field prefix within it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub(super) hash: String,
    pub(super) prefix: String,
}

impl Place {
    /// The budget of a key (`token` is its sha256), user or team
    /// (`scope` `key`, `user`, `team`).
    pub fn principal(scope: &str, id: &str) -> Place {
        Place {
            hash: format!("{{budget:{scope}:{id}}}"),
            prefix: String::new(),
        }
    }

    /// A key's budget for one model group: in the key's hash.
    pub fn key_model(token: &str, group: &str) -> Place {
        Place {
            hash: Place::principal("key", token).hash,
            prefix: format!("model:{group}:"),
        }
    }

    pub(super) fn holds(&self) -> String {
        format!("{}:holds", self.hash)
    }
}

/// A hold's id in Redis: the request's id and a number unique in this
/// process.
pub(super) fn hold_id(request_id: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{request_id}#{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The budgets of one request grouped by principal (hash), in order.
fn principals<'a>(budgets: &'a [(&'static str, Arc<Budget>)]) -> Option<Vec<Group<'a>>> {
    let mut out: Vec<Group> = Vec::with_capacity(budgets.len());
    for (i, (_, b)) in budgets.iter().enumerate() {
        let place = b.place.as_ref()?;
        match out.iter_mut().find(|(p, _)| p.hash == place.hash) {
            Some((_, members)) => members.push(i),
            None => out.push((place, vec![i])),
        }
    }
    Some(out)
}

/// One principal's place and the indices of its budgets in the request's.
type Group<'a> = (&'a Place, Vec<usize>);

/// The principals one script call touches together: all of them on one
/// Redis; on a Cluster those of one hash slot, the slots in ascending
/// order (every replica reserves in the same order, so two requests racing
/// for the last room of two budgets cannot each take one and both be
/// refused).
fn shards(groups: Vec<Group<'_>>, cluster: bool) -> Vec<Vec<Group<'_>>> {
    if !cluster {
        return vec![groups];
    }
    let mut by_slot: std::collections::BTreeMap<u16, Vec<Group>> = Default::default();
    for group in groups {
        let slot = crate::redis::key_slot(group.0.hash.as_bytes());
        by_slot.entry(slot).or_default().push(group);
    }
    by_slot.into_values().collect()
}

/// Reserves `nanos` against every budget in Redis, all or none. `None` when
/// Redis gave no verdict (the caller reserves in the process) or a budget
/// has no place in Redis.
///
/// On a Cluster, one `reserve.lua` call per slot, one slot after the
/// other in slot order; when a slot refuses (or gives no verdict) the
/// slots already reserved are released again (compensation, without
/// waiting) and the refusal (or the fallback) is the request's.
pub(super) async fn reserve(
    limiter: &Limiter,
    budgets: &[(&'static str, Arc<Budget>)],
    nanos: i64,
    request_id: &str,
) -> Option<Result<(), Refusal>> {
    let shards = shards(principals(budgets)?, limiter.cluster());
    for (n, shard) in shards.iter().enumerate() {
        let verdict = reserve_shard(limiter, shard, budgets, nanos, request_id).await;
        if !matches!(verdict, Some(Ok(()))) {
            for held in &shards[..n] {
                release(limiter, held, budgets, request_id);
            }
            return verdict;
        }
    }
    Some(Ok(()))
}

/// One `reserve.lua` call for the principals of `shard`.
async fn reserve_shard(
    limiter: &Limiter,
    shard: &[Group<'_>],
    budgets: &[(&'static str, Arc<Budget>)],
    nanos: i64,
    request_id: &str,
) -> Option<Result<(), Refusal>> {
    let mut keys = Vec::with_capacity(shard.len() * 2);
    let mut args = vec![
        limiter.hold_ttl().as_millis().to_string(),
        request_id.to_string(),
        nanos.to_string(),
        "0".to_string(),
    ];
    let mut owed = vec![0i64; budgets.len()];
    for (place, members) in shard {
        keys.push(place.hash.clone());
        keys.push(place.holds());
        let period = budgets[members[0]].1.period.load(Ordering::Acquire);
        args.push(period.to_string());
        args.push(members.len().to_string());
        for &i in members {
            let b = &budgets[i].1;
            let max = b.max.load(Ordering::Acquire);
            // Taken, so concurrent reservations do not pay it twice.
            owed[i] = b.owed.swap(0, Ordering::AcqRel);
            args.push(b.place.as_ref().map_or("", |p| &p.prefix).to_string());
            args.push(if max == super::NO_LIMIT { -1 } else { max }.to_string());
            args.push(b.spent_nanos().to_string());
            args.push(owed[i].to_string());
        }
    }
    let call = ScriptCall {
        script: &RESERVE,
        keys,
        args,
    };
    let release = SettleCall::new(shard, budgets, request_id, 0).into_call();
    let late_release = release.clone();
    let reply = limiter
        .eval(
            call,
            Some(DEADLINE_ARG),
            move |late| (late.first() == Some(&1)).then_some(late_release),
            Some(release),
        )
        .await;
    match reply.as_deref() {
        Some([1]) => Some(Ok(())),
        Some([0, principal, counter, spent, reserved]) => {
            let (_, members) = shard.get(usize::try_from(*principal).ok()?.checked_sub(1)?)?;
            let i = *members.get(usize::try_from(*counter).ok()?.checked_sub(1)?)?;
            let (scope, b) = &budgets[i];
            b.saw_fleet_spend(*spent);
            Some(Err(Refusal {
                scope,
                spend: super::to_usd(*spent),
                max: b.max_usd().unwrap_or(0.0),
                in_flight: *reserved > 0,
            }))
        }
        _ => {
            // Not counted (as far as this replica knows): still owed. A
            // reply lost after Redis ran the call counts it twice, which
            // errs towards refusing.
            for ((_, b), o) in budgets.iter().zip(owed) {
                if o != 0 {
                    b.owed.fetch_add(o, Ordering::AcqRel);
                }
            }
            None
        }
    }
}

/// Releases the holds `shard` took for a request another slot refused (or
/// gave no verdict for), without waiting; kept and sent again while Redis
/// does not answer.
fn release(
    limiter: &Limiter,
    shard: &[Group<'_>],
    budgets: &[(&'static str, Arc<Budget>)],
    request_id: &str,
) {
    let call = SettleCall::new(shard, budgets, request_id, 0).into_call();
    let again = call.clone();
    limiter.send_script(call, SETTLE_DEADLINE_ARG, again, || {});
}

/// The arguments of one `settle.lua` call.
struct SettleCall {
    keys: Vec<String>,
    args: Vec<String>,
}

impl SettleCall {
    fn new(
        groups: &[Group<'_>],
        budgets: &[(&'static str, Arc<Budget>)],
        request_id: &str,
        cost: i64,
    ) -> SettleCall {
        let mut keys = Vec::with_capacity(groups.len() * 2);
        let mut args = vec![request_id.to_string(), cost.to_string(), "0".to_string()];
        for (place, members) in groups {
            keys.push(place.hash.clone());
            keys.push(place.holds());
            args.push(members.len().to_string());
            for &i in members {
                let prefix = budgets[i].1.place.as_ref().map_or("", |p| &p.prefix);
                args.push(prefix.to_string());
            }
        }
        SettleCall { keys, args }
    }

    fn into_call(self) -> ScriptCall {
        ScriptCall {
            script: &SETTLE,
            keys: self.keys,
            args: self.args,
        }
    }
}

/// Releases a request's holds in Redis and adds its real cost, without
/// waiting (on a Cluster one call per slot, all at once); a settlement
/// Redis may not have counted is owed by each budget it names.
pub(super) fn settle(
    limiter: &Limiter,
    budgets: &[(&'static str, Arc<Budget>)],
    request_id: &str,
    cost: i64,
) {
    let Some(groups) = principals(budgets) else {
        return;
    };
    for shard in shards(groups, limiter.cluster()) {
        let call = SettleCall::new(&shard, budgets, request_id, cost).into_call();
        let release = SettleCall::new(&shard, budgets, request_id, 0).into_call();
        let owing: Vec<Arc<Budget>> = shard
            .iter()
            .flat_map(|(_, members)| members.iter().map(|&i| budgets[i].1.clone()))
            .collect();
        limiter.send_script(call, SETTLE_DEADLINE_ARG, release, move || {
            if cost > 0 {
                for b in owing {
                    b.owed.fetch_add(cost, Ordering::AcqRel);
                }
            }
        });
    }
}

/// An admin set the spend of a key, user or team (`scope`, `id`) to `usd`
/// in Postgres: the fleet's counter says so too (its per-model spend starts
/// over, as in Postgres) before the admin's answer. Without Redis, nothing
/// to do.
pub async fn set_spend(limiter: &Limiter, scope: &str, id: &str, usd: f64) {
    if !limiter.shared() {
        return;
    }
    let place = Place::principal(scope, id);
    let call = ScriptCall {
        script: &SET,
        keys: vec![place.hash],
        args: vec![super::to_nanos(usd).to_string()],
    };
    if limiter.eval(call, None, |_| None, None).await.is_none() {
        tracing::warn!(scope, "Redis did not confirm an admin's spend change; the fleet's budget counter may keep its old figure until the next budget period or spend change");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_and_its_model_budgets_share_one_slot() {
        let key = Place::principal("key", "abc");
        let model = Place::key_model("abc", "gpt-4o");
        assert_eq!(key.hash, "{budget:key:abc}");
        assert_eq!(model.hash, key.hash);
        assert_eq!(model.prefix, "model:gpt-4o:");
        assert_eq!(key.holds(), "{budget:key:abc}:holds");
        let budgets = vec![
            ("key", Budget::at(Some(key), Some(1.0), None, 0.0)),
            (
                "user",
                Budget::at(Some(Place::principal("user", "u")), None, None, 0.0),
            ),
            ("model", Budget::at(Some(model), Some(0.5), None, 0.0)),
        ];
        let groups = principals(&budgets).unwrap();
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].1, vec![0, 2]);
        let settle = SettleCall::new(&groups, &budgets, "r1", 7);
        assert_eq!(
            settle.keys,
            [
                "{budget:key:abc}",
                "{budget:key:abc}:holds",
                "{budget:user:u}",
                "{budget:user:u}:holds"
            ]
        );
        assert_eq!(
            settle.args,
            ["r1", "7", "0", "2", "", "model:gpt-4o:", "1", ""]
        );
        let one_redis = shards(principals(&budgets).unwrap(), false);
        assert_eq!(one_redis.len(), 1, "one call on one Redis");
        let slot = |p: &Place| crate::redis::key_slot(p.hash.as_bytes());
        let cluster = shards(principals(&budgets).unwrap(), true);
        assert_eq!(cluster.len(), 2, "one call per slot on a Cluster");
        assert!(slot(cluster[0][0].0) < slot(cluster[1][0].0), "slot order");
        let unplaced = vec![("key", Budget::new(Some(1.0), None, 0.0))];
        assert!(principals(&unplaced).is_none(), "no place: per process");
    }
}
