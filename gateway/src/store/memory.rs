//! The in-memory store: the same API on one machine without a database.
//! Nothing survives a restart (the start-up log says so).

mod daily;
mod end_users;

use super::ModelBudgets;
use super::{
    next_reset, BudgetRecord, Change, DailyBatch, DailyPage, DailyQuery, EndUserBudget,
    EndUserRecord, EndUserUpdate, KeyFilter, KeyRecord, LogCursor, LogPage, MemberOp,
    MemberOutcome, Membership, ModelRecord, OrgMembership, OrgRecord, OrgTable, RowKind,
    SpendChanges, SpendFilter, SpendLogRow, Store, StoreError, TeamMember, TeamRecord, UserRecord,
    PROXY_BUDGET_USER,
};
use super::{ManagedKind, ManagedObject, OrgFilter, TeamFilter, TeamOrder, UserFilter};
use crate::keyed_hash::KeyedHash;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet, VecDeque};

/// Spend-log rows kept in memory; older ones are dropped (their spend stays
/// in the key, user and team totals). Without a database this bounds memory
/// on a long-running gateway.
const MAX_SPEND_ROWS: usize = 10_000;
use std::sync::{Arc, Mutex};

/// Grows the spend log for one more row as a `VecDeque` grows (doubling),
/// but never past [`MAX_SPEND_ROWS`]: doubled from 8,192, its room was
/// 16,384 rows of 480 bytes, 3 MB more than the rows it may keep.
fn keep_room_for_one(log: &mut VecDeque<SpendLogRow>) {
    if log.len() < log.capacity() {
        return;
    }
    let grown = log
        .len()
        .max(4)
        .min(MAX_SPEND_ROWS.saturating_sub(log.len()));
    log.reserve_exact(grown.max(1));
}

#[derive(Default)]
struct Tables {
    keys: HashMap<String, KeyRecord>,
    teams: HashMap<String, TeamRecord>,
    users: HashMap<String, UserRecord>,
    models: HashMap<String, ModelRecord>,
    /// `members_with_roles` by team id.
    roles: HashMap<String, Vec<TeamMember>>,
    budgets: HashMap<String, BudgetRecord>,
    orgs: HashMap<String, OrgRecord>,
    /// Organization memberships by organization id, then user id.
    org_members: HashMap<String, std::collections::BTreeMap<String, OrgMembership>>,
    /// The most recent rows, oldest first, at most [`MAX_SPEND_ROWS`].
    spend_logs: VecDeque<SpendLogRow>,
    /// Ids of the rows kept, so a replayed row is not counted twice.
    request_ids: HashSet<Arc<str>, KeyedHash>,
    /// When the current budget period of a key, user or team began (its
    /// last reset), by `key:<token>`, `user:<id>`, `team:<id>`: rows settled
    /// before it do not count.
    periods: HashMap<String, DateTime<Utc>>,
    /// End users and their budget rows.
    end_users: end_users::EndUsers,
    /// LiteLLM's daily aggregates.
    daily: daily::DailyTables,
    /// Files and batches created through the gateway, by provider id.
    managed: HashMap<String, ManagedObject>,
    /// Batches already charged.
    charged_batches: HashSet<String>,
    /// Users' rows in teams (`LiteLLM_TeamMembership`), by (team id, user
    /// id).
    memberships: HashMap<(String, String), Membership>,
    /// When each open batch may next be polled (absent once final).
    batch_polls: HashMap<String, DateTime<Utc>>,
}

impl Tables {
    /// Zeroes the spend of the team memberships linked to budget rows whose
    /// reset is due and schedules each row's next; returns the teams.
    fn reset_member_budgets(&mut self, now: DateTime<Utc>) -> Vec<String> {
        let mut teams = Vec::new();
        for b in self.budgets.values_mut() {
            let due = b.budget_reset_at.is_some_and(|at| at <= now);
            let id = b.budget_id.clone();
            let linked = |m: &Membership| m.budget_id.as_deref() == Some(id.as_str());
            if !due || !self.memberships.values().any(linked) {
                continue;
            }
            b.budget_reset_at = next_reset(b.budget_duration.as_deref(), now);
            for ((team, _), m) in self.memberships.iter_mut() {
                if linked(m) {
                    m.spend = 0.0;
                    teams.push(team.clone());
                }
            }
        }
        teams.sort();
        teams.dedup();
        teams
    }

    /// Whether a row settled at `settled` counts in the current period of
    /// `scope` `id`.
    fn counts(&self, scope: &str, id: &str, settled: DateTime<Utc>) -> bool {
        self.periods.is_empty()
            || self
                .periods
                .get(&format!("{scope}:{id}"))
                .is_none_or(|start| settled >= *start)
    }

    /// Adds the spend of `rows` (those not written before, when `log`
    /// keeps them) to what they count for; with `log`, keeps the rows.
    fn record_spend(&mut self, rows: &[SpendLogRow], log: bool) -> SpendChanges {
        let t = self;
        let mut changes = SpendChanges::default();
        // What the other replicas re-read, and what this one does too.
        let mut changed = |change: Change, here_too: bool| {
            if here_too {
                changes.refresh.push(change.clone());
            }
            changes.announce.push(change);
        };
        let mut fresh = Vec::with_capacity(rows.len());
        for row in rows {
            if log {
                if !t.request_ids.insert(row.request_id.clone()) {
                    continue;
                }
                if t.spend_logs.len() >= MAX_SPEND_ROWS {
                    if let Some(old) = t.spend_logs.pop_front() {
                        t.request_ids.remove(&*old.request_id);
                    }
                }
                keep_room_for_one(&mut t.spend_logs);
                t.spend_logs.push_back(row.clone());
            }
            fresh.push(row);
            if row.spend == 0.0 {
                continue;
            }
            // A row of an earlier budget period is logged, not counted;
            // the key is still refreshed so its cache drops the row's
            // unflushed spend.
            let settled = row.end_time;
            let key_counts = t.counts("key", &row.api_key, settled);
            if let Some(k) = t.keys.get_mut(&*row.api_key) {
                if key_counts {
                    k.spend += row.spend;
                    let spent = k.model_spent(&row.model_group) + row.spend;
                    k.model_spend
                        .insert(row.model_group.to_string(), spent.into());
                }
                changed(Change::Key(k.token.clone()), !key_counts);
            }
            if let Some(id) = &row.user {
                if !t.counts("user", id, settled) {
                    changed(Change::User(id.clone()), true);
                } else if let Some(u) = t.users.get_mut(id) {
                    u.spend += row.spend;
                    let spent = u.model_spent(&row.model_group) + row.spend;
                    u.model_spend
                        .insert(row.model_group.to_string(), spent.into());
                }
            }
            if row.proxy_budget {
                let id = PROXY_BUDGET_USER;
                if !t.counts("user", id, settled) {
                    changed(Change::User(id.to_string()), true);
                } else if let Some(u) = t.users.get_mut(id) {
                    u.spend += row.spend;
                }
            }
            if let (Some(team), Some(user)) = (&row.team_id, &row.user) {
                let on_roster = t.teams.get(team).is_some_and(|t| t.members.contains(user));
                let key = (team.clone(), user.clone());
                if on_roster || t.memberships.contains_key(&key) {
                    t.memberships.entry(key).or_default().spend += row.spend;
                }
            }
            if let Some(id) = &row.team_id {
                if !t.counts("team", id, settled) {
                    changed(Change::Team(id.clone()), true);
                } else if let Some(team) = t.teams.get_mut(id) {
                    team.spend += row.spend;
                    let spent = team.model_spent(&row.model_group) + row.spend;
                    team.model_spend
                        .insert(row.model_group.to_string(), spent.into());
                    // An organization's spend is its teams' (LiteLLM's).
                    let org = team.organization_id.as_deref();
                    if let Some(o) = org.and_then(|o| t.orgs.get_mut(o)) {
                        o.spend += row.spend;
                    }
                }
            }
            if let Some(id) = &row.end_user {
                if t.end_users.add_spend(id, row.spend) {
                    changed(Change::EndUser(id.clone()), true);
                }
            }
        }
        for list in [&mut changes.announce, &mut changes.refresh] {
            let mut seen = HashSet::new();
            list.retain(|c| seen.insert(c.payload()));
        }
        let teams = &t.teams;
        let batch = DailyBatch::of(fresh, |team| {
            teams.get(team).and_then(|t| t.organization_id.clone())
        });
        t.daily.add(batch);
        changes
    }
}

/// Tables in process memory. Only the control-plane thread touches them, so
/// the mutex is never contended.
#[derive(Default)]
pub struct MemoryStore {
    tables: Mutex<Tables>,
    /// Run once right after the next key read (tests: something happening
    /// between a read and what the reader does with it).
    #[cfg(test)]
    after_key_read: Mutex<Option<ReadHook>>,
}

/// What a test runs between a read and what the reader does with it.
#[cfg(test)]
type ReadHook = Box<dyn FnOnce(&MemoryStore) + Send>;

impl MemoryStore {
    /// Runs `f` once, right after the next key is read.
    #[cfg(test)]
    pub fn after_next_key_read(&self, f: impl FnOnce(&MemoryStore) + Send + 'static) {
        *self.after_key_read.lock().unwrap() = Some(Box::new(f));
    }

    /// Adds `rows` as a spend write would (tests).
    #[cfg(test)]
    pub fn commit_spend(&self, rows: &[SpendLogRow]) {
        self.with(|t| t.record_spend(rows, true));
    }

    fn with<T>(&self, f: impl FnOnce(&mut Tables) -> T) -> T {
        let mut guard = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }
}

fn insert<V: Clone>(
    map: &mut HashMap<String, V>,
    id: &str,
    what: &str,
    v: &V,
) -> Result<(), StoreError> {
    if map.contains_key(id) {
        return Err(StoreError::Conflict(format!("{what} {id}")));
    }
    map.insert(id.to_string(), v.clone());
    Ok(())
}

/// Overwrites `fields` of row `id` of `map`; `false` when it is absent.
fn patch_in<V: Serialize + DeserializeOwned>(
    map: &mut HashMap<String, V>,
    id: &str,
    fields: &Map<String, Value>,
) -> Result<bool, StoreError> {
    let Some(row) = map.get_mut(id) else {
        return Ok(false);
    };
    let bad = |e: serde_json::Error| StoreError::Query(e.to_string());
    let mut value = serde_json::to_value(&*row).map_err(bad)?;
    for (k, v) in fields {
        value[k] = v.clone();
    }
    *row = serde_json::from_value(value).map_err(bad)?;
    Ok(true)
}

/// The rows of `map` with these ids (every one when `None`), by id.
/// The rows of `all` from `offset`, at most `limit`, and how many there were.
fn page_of<V>(all: Vec<V>, offset: u64, limit: u64) -> (Vec<V>, u64) {
    let total = all.len() as u64;
    let skip = usize::try_from(offset).unwrap_or(usize::MAX);
    let take = usize::try_from(limit).unwrap_or(usize::MAX);
    (all.into_iter().skip(skip).take(take).collect(), total)
}

fn select<V: Clone>(map: &HashMap<String, V>, ids: Option<&[String]>) -> Vec<V> {
    let mut found: Vec<(&String, &V)> = match ids {
        Some(ids) => map.iter().filter(|(k, _)| ids.contains(k)).collect(),
        None => map.iter().collect(),
    };
    found.sort_by(|a, b| a.0.cmp(b.0));
    found.into_iter().map(|(_, v)| v.clone()).collect()
}

fn delete<V>(map: &mut HashMap<String, V>, ids: &[String]) -> Vec<String> {
    ids.iter()
        .filter(|id| map.remove(id.as_str()).is_some())
        .cloned()
        .collect()
}

#[async_trait]
impl Store for MemoryStore {
    async fn get_key(&self, token: &str) -> Result<Option<KeyRecord>, StoreError> {
        let key = self.with(|t| t.keys.get(token).cloned());
        #[cfg(test)]
        {
            let hook = self.after_key_read.lock().unwrap().take();
            if let Some(f) = hook {
                f(self);
            }
        }
        Ok(key)
    }

    async fn insert_key(&self, key: &KeyRecord) -> Result<(), StoreError> {
        let mut key = key.clone();
        key.normalize_budget_link();
        self.with(|t| insert(&mut t.keys, &key.token, "key", &key))
    }

    async fn update_key(&self, key: &KeyRecord) -> Result<bool, StoreError> {
        Ok(self.with(|t| match t.keys.get_mut(&key.token) {
            Some(old) => {
                let (spend, model_spend) = (old.spend, std::mem::take(&mut old.model_spend));
                *old = key.clone();
                old.normalize_budget_link();
                old.spend = spend;
                old.model_spend = model_spend;
                true
            }
            None => false,
        }))
    }

    async fn set_key_spend(&self, token: &str, spend: f64) -> Result<bool, StoreError> {
        Ok(self.with(|t| {
            t.keys
                .get_mut(token)
                .map(|k| {
                    k.spend = spend;
                    k.model_spend.clear();
                })
                .is_some()
        }))
    }

    async fn rename_key(&self, old: &str, new: &KeyRecord) -> Result<bool, StoreError> {
        Ok(self.with(|t| match t.keys.remove(old) {
            Some(prev) => {
                let mut next = new.clone();
                next.normalize_budget_link();
                next.spend = prev.spend;
                next.model_spend = prev.model_spend;
                t.keys.insert(next.token.clone(), next);
                true
            }
            None => false,
        }))
    }

    async fn delete_keys(&self, tokens: &[String]) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|t| delete(&mut t.keys, tokens)))
    }

    async fn list_keys(
        &self,
        user_id: Option<&str>,
        team_id: Option<&str>,
    ) -> Result<Vec<KeyRecord>, StoreError> {
        Ok(self.with(|t| {
            let mut keys: Vec<KeyRecord> = t
                .keys
                .values()
                .filter(|k| user_id.is_none_or(|u| k.user_id.as_deref() == Some(u)))
                .filter(|k| team_id.is_none_or(|u| k.team_id.as_deref() == Some(u)))
                .cloned()
                .collect();
            keys.sort_by_key(|k| std::cmp::Reverse(k.created_at));
            keys
        }))
    }

    async fn list_keys_page(
        &self,
        filter: KeyFilter<'_>,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<KeyRecord>, u64), StoreError> {
        let keys = self.list_keys(filter.user_id, filter.team_id).await?;
        // The shared budget rows with a limit a key inherits.
        let limiting: HashSet<String> = self.with(|t| {
            t.budgets
                .values()
                .filter(|b| b.rpm_limit.is_some() || b.tpm_limit.is_some())
                .map(|b| b.budget_id.clone())
                .collect()
        });
        let limited = |k: &KeyRecord| {
            k.has_limits() || k.shared_budget().is_some_and(|b| limiting.contains(b))
        };
        let matching: Vec<KeyRecord> = keys
            .into_iter()
            .filter(|k| {
                filter
                    .key_alias
                    .is_none_or(|a| k.key_alias.as_deref() == Some(a))
                    && (!filter.has_limits || limited(k))
            })
            .collect();
        let total = matching.len() as u64;
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        let take = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok((matching.into_iter().skip(skip).take(take).collect(), total))
    }

    async fn key_tokens(
        &self,
        sink: &mut (dyn for<'t> FnMut(&'t str) + Send),
    ) -> Result<usize, StoreError> {
        let tokens: Vec<String> = self.with(|t| t.keys.keys().cloned().collect());
        for token in &tokens {
            sink(token);
        }
        Ok(tokens.len())
    }

    async fn get_team(&self, team_id: &str) -> Result<Option<TeamRecord>, StoreError> {
        Ok(self.with(|t| t.teams.get(team_id).cloned()))
    }

    async fn insert_team(&self, team: &TeamRecord) -> Result<(), StoreError> {
        self.with(|t| insert(&mut t.teams, &team.team_id, "team", team))
    }

    async fn update_team(&self, team: &TeamRecord) -> Result<bool, StoreError> {
        Ok(self.with(|t| match t.teams.get_mut(&team.team_id) {
            Some(old) => {
                let spend = old.spend;
                *old = team.clone();
                old.spend = spend;
                true
            }
            None => false,
        }))
    }

    async fn set_team_spend(&self, team_id: &str, spend: f64) -> Result<bool, StoreError> {
        Ok(self.with(|t| t.teams.get_mut(team_id).map(|k| k.spend = spend).is_some()))
    }

    async fn delete_teams(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|t| {
            ids.iter().for_each(|id| drop(t.roles.remove(id)));
            delete(&mut t.teams, ids)
        }))
    }

    async fn list_teams(&self) -> Result<Vec<TeamRecord>, StoreError> {
        Ok(self.with(|t| {
            let mut teams: Vec<TeamRecord> = t.teams.values().cloned().collect();
            teams.sort_by(|a, b| a.team_id.cmp(&b.team_id));
            teams
        }))
    }

    async fn list_teams_page(
        &self,
        filter: TeamFilter<'_>,
        order: TeamOrder,
        descending: bool,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<TeamRecord>, u64), StoreError> {
        let mut teams: Vec<TeamRecord> = self.with(|t| {
            t.teams
                .values()
                .filter(|team| filter.matches(team))
                .cloned()
                .collect()
        });
        order.sort(&mut teams, descending);
        Ok(page_of(teams, offset, limit))
    }

    async fn get_user(&self, user_id: &str) -> Result<Option<UserRecord>, StoreError> {
        Ok(self.with(|t| t.users.get(user_id).cloned()))
    }

    async fn users(&self, user_ids: &[String]) -> Result<Vec<UserRecord>, StoreError> {
        Ok(self.with(|t| {
            user_ids
                .iter()
                .filter_map(|id| t.users.get(id).cloned())
                .collect()
        }))
    }

    async fn insert_user(&self, user: &UserRecord) -> Result<(), StoreError> {
        self.with(|t| insert(&mut t.users, &user.user_id, "user", user))
    }

    async fn update_user(&self, user: &UserRecord) -> Result<bool, StoreError> {
        Ok(self.with(|t| match t.users.get_mut(&user.user_id) {
            Some(old) => {
                let spend = old.spend;
                *old = user.clone();
                old.spend = spend;
                true
            }
            None => false,
        }))
    }

    async fn set_user_spend(&self, user_id: &str, spend: f64) -> Result<bool, StoreError> {
        Ok(self.with(|t| t.users.get_mut(user_id).map(|k| k.spend = spend).is_some()))
    }

    async fn delete_users(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|t| delete(&mut t.users, ids)))
    }

    async fn patch(
        &self,
        kind: RowKind,
        id: &str,
        fields: &Map<String, Value>,
    ) -> Result<bool, StoreError> {
        if let Some(k) = fields
            .keys()
            .find(|k| !kind.columns().contains(&k.as_str()))
        {
            return Err(StoreError::Query(format!("{k} cannot be patched")));
        }
        self.with(|t| match kind {
            RowKind::Key => patch_in(&mut t.keys, id, fields),
            RowKind::Team => patch_in(&mut t.teams, id, fields),
            RowKind::User => patch_in(&mut t.users, id, fields),
        })
    }

    async fn start_model_window(
        &self,
        kind: RowKind,
        id: &str,
        model: &str,
        start: &str,
    ) -> Result<bool, StoreError> {
        Ok(self.with(|t| {
            let row = match kind {
                RowKind::Key => t
                    .keys
                    .get_mut(id)
                    .map(|k| (&mut k.metadata, &mut k.model_spend)),
                RowKind::Team => t
                    .teams
                    .get_mut(id)
                    .map(|k| (&mut k.metadata, &mut k.model_spend)),
                RowKind::User => t
                    .users
                    .get_mut(id)
                    .map(|k| (&mut k.metadata, &mut k.model_spend)),
            };
            let Some((metadata, model_spend)) = row else {
                return false;
            };
            let windows = metadata
                .entry(super::MODEL_WINDOWS)
                .or_insert_with(|| Value::Object(Map::new()));
            if !windows.is_object() {
                *windows = Value::Object(Map::new());
            }
            let recorded = windows
                .get(model)
                .and_then(Value::as_str)
                .map(str::to_string);
            if recorded.as_deref() >= Some(start) {
                return false;
            }
            windows[model] = Value::String(start.to_string());
            if recorded.is_some() {
                model_spend.remove(model);
            }
            true
        }))
    }

    async fn change_team_member(
        &self,
        team_id: &str,
        op: MemberOp,
        member: &TeamMember,
    ) -> Result<MemberOutcome, StoreError> {
        let id = &member.user_id;
        Ok(self.with(|t| {
            let Some(team) = t.teams.get_mut(team_id) else {
                return MemberOutcome::NoTeam;
            };
            let is_member = team.members.contains(id);
            if is_member == (op == MemberOp::Add) {
                return MemberOutcome::Unchanged;
            }
            let roles = t.roles.entry(team_id.to_string()).or_default();
            let old_email = roles
                .iter()
                .find(|m| &m.user_id == id)
                .and_then(|m| m.user_email.clone());
            roles.retain(|m| &m.user_id != id);
            match op {
                MemberOp::Remove => {
                    team.members.retain(|m| m != id);
                    t.memberships.remove(&(team_id.to_string(), id.clone()));
                }
                MemberOp::Add | MemberOp::Update => {
                    if op == MemberOp::Add {
                        team.members.push(id.clone());
                    }
                    let mut m = member.clone();
                    m.user_email = m.user_email.or(old_email);
                    roles.push(m);
                }
            }
            let user = t.users.entry(id.clone()).or_insert_with(|| UserRecord {
                user_id: id.clone(),
                user_email: member.user_email.clone(),
                user_role: Some("internal_user".into()),
                created_at: Some(Utc::now()),
                ..Default::default()
            });
            user.teams.retain(|x| x != team_id);
            if op != MemberOp::Remove {
                user.teams.push(team_id.to_string());
            }
            MemberOutcome::Changed
        }))
    }

    async fn membership(
        &self,
        team_id: &str,
        user_id: &str,
    ) -> Result<Option<Membership>, StoreError> {
        let key = (team_id.to_string(), user_id.to_string());
        Ok(self.with(|t| t.memberships.get(&key).cloned()))
    }

    async fn link_member_budget(
        &self,
        team_id: &str,
        user_id: &str,
        budget_id: Option<&str>,
    ) -> Result<(), StoreError> {
        let key = (team_id.to_string(), user_id.to_string());
        self.with(|t| {
            t.memberships.entry(key).or_default().budget_id = budget_id.map(str::to_string)
        });
        Ok(())
    }

    async fn link_unlinked_members(
        &self,
        team_id: &str,
        user_ids: &[String],
        budget_id: &str,
    ) -> Result<(), StoreError> {
        self.with(|t| {
            for user in user_ids {
                let key = (team_id.to_string(), user.clone());
                let m = t.memberships.entry(key).or_default();
                if m.budget_id.is_none() {
                    m.budget_id = Some(budget_id.to_string());
                }
            }
        });
        Ok(())
    }

    async fn teams_of_member_budget(&self, budget_id: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|t| {
            let mut teams: Vec<String> = t
                .memberships
                .iter()
                .filter(|(_, m)| m.budget_id.as_deref() == Some(budget_id))
                .map(|((team, _), _)| team.clone())
                .collect();
            teams.sort();
            teams.dedup();
            teams
        }))
    }

    async fn users_with_email(&self, email: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|t| {
            let mut ids: Vec<String> = t
                .users
                .values()
                .filter(|u| u.user_email.as_deref() == Some(email))
                .map(|u| u.user_id.clone())
                .collect();
            ids.sort();
            ids.truncate(2);
            ids
        }))
    }

    async fn team_members(&self, team_id: &str) -> Result<Vec<TeamMember>, StoreError> {
        Ok(self.with(|t| t.roles.get(team_id).cloned().unwrap_or_default()))
    }

    async fn members_of_teams(
        &self,
        team_ids: &[String],
    ) -> Result<HashMap<String, Vec<TeamMember>>, StoreError> {
        Ok(self.with(|t| {
            team_ids
                .iter()
                .filter_map(|id| Some((id.clone(), t.roles.get(id)?.clone())))
                .collect()
        }))
    }

    async fn list_users(
        &self,
        filter: UserFilter<'_>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<UserRecord>, i64), StoreError> {
        Ok(self.with(|t| {
            let mut users: Vec<&UserRecord> =
                t.users.values().filter(|u| filter.matches(u)).collect();
            users.sort_by(|a, b| (b.created_at, &a.user_id).cmp(&(a.created_at, &b.user_id)));
            let total = users.len() as i64;
            let page = users
                .into_iter()
                .skip(usize::try_from(offset).unwrap_or(usize::MAX))
                .take(usize::try_from(limit).unwrap_or(0))
                .cloned()
                .collect();
            (page, total)
        }))
    }

    async fn get_model(&self, model_id: &str) -> Result<Option<ModelRecord>, StoreError> {
        Ok(self.with(|t| t.models.get(model_id).cloned()))
    }

    async fn models_named(&self, model_name: &str) -> Result<Vec<ModelRecord>, StoreError> {
        let mut models = self.list_models().await?;
        models.retain(|m| m.model_name == model_name);
        Ok(models)
    }

    async fn list_models(&self) -> Result<Vec<ModelRecord>, StoreError> {
        Ok(self.with(|t| {
            let mut models: Vec<ModelRecord> = t.models.values().cloned().collect();
            models.sort_by(|a, b| a.model_id.cmp(&b.model_id));
            models
        }))
    }

    async fn insert_model(&self, model: &ModelRecord) -> Result<(), StoreError> {
        self.with(|t| insert(&mut t.models, &model.model_id, "model", model))
    }

    async fn update_model(&self, model: &ModelRecord) -> Result<bool, StoreError> {
        Ok(self.with(|t| match t.models.get_mut(&model.model_id) {
            Some(old) => {
                let (created_at, created_by) = (old.created_at, old.created_by.take());
                *old = model.clone();
                old.created_at = created_at;
                old.created_by = created_by;
                true
            }
            None => false,
        }))
    }

    async fn delete_model(&self, model_id: &str) -> Result<bool, StoreError> {
        Ok(self.with(|t| t.models.remove(model_id).is_some()))
    }

    async fn budgets(&self, ids: Option<&[String]>) -> Result<Vec<BudgetRecord>, StoreError> {
        Ok(self.with(|t| select(&t.budgets, ids)))
    }

    async fn insert_budget(&self, budget: &BudgetRecord) -> Result<(), StoreError> {
        self.with(|t| insert(&mut t.budgets, &budget.budget_id, "budget", budget))
    }

    async fn delete_budget(&self, budget_id: &str) -> Result<Option<BudgetRecord>, StoreError> {
        Ok(self.with(|t| t.budgets.remove(budget_id)))
    }

    async fn organizations(&self, ids: Option<&[String]>) -> Result<Vec<OrgRecord>, StoreError> {
        Ok(self.with(|t| select(&t.orgs, ids)))
    }

    async fn organizations_page(
        &self,
        filter: OrgFilter<'_>,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<OrgRecord>, u64), StoreError> {
        let mut orgs: Vec<OrgRecord> = self.with(|t| {
            t.orgs
                .values()
                .filter(|o| filter.matches(o))
                .cloned()
                .collect()
        });
        orgs.sort_by(|a, b| a.organization_id.cmp(&b.organization_id));
        Ok(page_of(orgs, offset, limit))
    }

    async fn insert_organization(
        &self,
        org: &OrgRecord,
        budget: Option<&BudgetRecord>,
    ) -> Result<(), StoreError> {
        self.with(|t| {
            if t.orgs.contains_key(&org.organization_id) {
                return Err(StoreError::Conflict(format!(
                    "organization {}",
                    org.organization_id
                )));
            }
            if let Some(b) = budget {
                insert(&mut t.budgets, &b.budget_id, "budget", b)?;
            }
            insert(&mut t.orgs, &org.organization_id, "organization", org)
        })
    }

    async fn patch_org_row(
        &self,
        table: OrgTable,
        id: &str,
        fields: &Map<String, Value>,
    ) -> Result<bool, StoreError> {
        if let Some(k) = fields
            .keys()
            .find(|k| !table.columns().contains(&k.as_str()))
        {
            return Err(StoreError::Query(format!("{k} cannot be patched")));
        }
        let mut fields = fields.clone();
        fields.insert(
            "updated_at".into(),
            serde_json::to_value(Utc::now()).unwrap_or_default(),
        );
        self.with(|t| match table {
            OrgTable::Budget => patch_in(&mut t.budgets, id, &fields),
            OrgTable::Organization => {
                if let (Some(Value::Object(new)), Some(org)) =
                    (fields.get_mut("metadata"), t.orgs.get(id))
                {
                    let mut merged = org.metadata.clone();
                    merged.extend(std::mem::take(new));
                    *new = merged;
                }
                patch_in(&mut t.orgs, id, &fields)
            }
        })
    }

    async fn delete_organization(&self, org_id: &str) -> Result<Option<OrgRecord>, StoreError> {
        Ok(self.with(|t| {
            t.org_members.remove(org_id);
            t.teams
                .values_mut()
                .filter(|team| team.organization_id.as_deref() == Some(org_id))
                .for_each(|team| team.organization_id = None);
            t.orgs.remove(org_id)
        }))
    }

    async fn org_members(&self, org_id: &str) -> Result<Vec<OrgMembership>, StoreError> {
        Ok(self.with(|t| {
            t.org_members
                .get(org_id)
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default()
        }))
    }

    async fn members_of_orgs(&self, org_ids: &[String]) -> Result<Vec<OrgMembership>, StoreError> {
        let mut ids: Vec<&String> = org_ids.iter().collect();
        ids.sort();
        ids.dedup();
        Ok(self.with(|t| {
            ids.iter()
                .filter_map(|id| t.org_members.get(*id))
                .flat_map(|m| m.values().cloned())
                .collect()
        }))
    }

    async fn teams_of_orgs(
        &self,
        org_ids: &[String],
        per_org: u64,
    ) -> Result<Vec<TeamRecord>, StoreError> {
        let mut teams: Vec<TeamRecord> = self.with(|t| {
            t.teams
                .values()
                .filter(|team| {
                    team.organization_id
                        .as_ref()
                        .is_some_and(|o| org_ids.contains(o))
                })
                .cloned()
                .collect()
        });
        teams.sort_by(|a, b| {
            (&a.organization_id, &a.team_id).cmp(&(&b.organization_id, &b.team_id))
        });
        let cap = usize::try_from(per_org).unwrap_or(usize::MAX);
        let mut shown: HashMap<Option<String>, usize> = HashMap::new();
        teams.retain(|team| {
            let n = shown.entry(team.organization_id.clone()).or_default();
            *n += 1;
            *n <= cap
        });
        Ok(teams)
    }

    async fn change_org_member(
        &self,
        op: MemberOp,
        member: &OrgMembership,
        user_email: Option<&str>,
    ) -> Result<MemberOutcome, StoreError> {
        let now = Utc::now();
        Ok(self.with(|t| {
            if !t.orgs.contains_key(&member.organization_id) {
                return MemberOutcome::NoTeam;
            }
            let members = t
                .org_members
                .entry(member.organization_id.clone())
                .or_default();
            let id = &member.user_id;
            let changed = match op {
                MemberOp::Add if members.contains_key(id) => false,
                MemberOp::Add => {
                    let m = OrgMembership {
                        spend: Some(0.0),
                        created_at: Some(now),
                        updated_at: Some(now),
                        ..member.clone()
                    };
                    members.insert(id.clone(), m);
                    t.users.entry(id.clone()).or_insert_with(|| UserRecord {
                        user_id: id.clone(),
                        user_email: user_email.map(str::to_string),
                        user_role: Some("internal_user".into()),
                        created_at: Some(now),
                        ..Default::default()
                    });
                    true
                }
                MemberOp::Update => match members.get_mut(id) {
                    Some(m) => {
                        m.user_role = member.user_role.clone().or(m.user_role.take());
                        m.budget_id = member.budget_id.clone().or(m.budget_id.take());
                        m.updated_at = Some(now);
                        true
                    }
                    None => false,
                },
                MemberOp::Remove => members.remove(id).is_some(),
            };
            if changed {
                MemberOutcome::Changed
            } else {
                MemberOutcome::Unchanged
            }
        }))
    }

    async fn get_end_user(&self, user_id: &str) -> Result<Option<EndUserRecord>, StoreError> {
        Ok(self.with(|t| t.end_users.get(user_id)))
    }

    async fn insert_end_user(
        &self,
        user: &EndUserRecord,
        budget: Option<&EndUserBudget>,
    ) -> Result<(), StoreError> {
        self.with(|t| t.end_users.insert(user, budget))
    }

    async fn update_end_user(
        &self,
        user_id: &str,
        update: &EndUserUpdate,
        new_budget_id: &str,
    ) -> Result<Option<Vec<String>>, StoreError> {
        Ok(self.with(|t| t.end_users.update(user_id, update, new_budget_id)))
    }

    async fn set_end_users_blocked(
        &self,
        ids: &[String],
        blocked: bool,
    ) -> Result<Vec<EndUserRecord>, StoreError> {
        Ok(self.with(|t| t.end_users.set_blocked(ids, blocked)))
    }

    async fn delete_end_users(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|t| t.end_users.delete(ids)))
    }

    async fn list_end_users(
        &self,
        offset: i64,
        limit: i64,
        search: Option<&str>,
    ) -> Result<Vec<EndUserRecord>, StoreError> {
        Ok(self.with(|t| t.end_users.list(offset, limit, search)))
    }

    async fn restricted_end_users(
        &self,
        sink: &mut (dyn for<'t> FnMut(&'t str, bool) + Send),
    ) -> Result<usize, StoreError> {
        Ok(self.with(|t| t.end_users.restricted(sink)))
    }

    async fn end_users_of_budget(&self, budget_id: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|t| t.end_users.of_budget(budget_id)))
    }

    async fn budget_exists(&self, budget_id: &str) -> Result<bool, StoreError> {
        Ok(
            self.with(|t| {
                t.budgets.contains_key(budget_id) || t.end_users.budget_exists(budget_id)
            }),
        )
    }

    async fn keys_of_budget(&self, budget_id: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|t| {
            t.keys
                .values()
                .filter(|k| k.budget_id.as_deref() == Some(budget_id))
                .map(|k| k.token.clone())
                .collect()
        }))
    }

    async fn insert_managed(&self, object: &ManagedObject) -> Result<(), StoreError> {
        self.with(|t| match t.managed.entry(object.id.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => Err(StoreError::Conflict(format!(
                "{} {}",
                object.kind.as_str(),
                object.id
            ))),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(object.clone());
                if object.kind == ManagedKind::Batch {
                    t.batch_polls.insert(object.id.clone(), object.created_at);
                }
                Ok(())
            }
        })
    }

    async fn get_managed(&self, id: &str) -> Result<Option<ManagedObject>, StoreError> {
        Ok(self.with(|t| t.managed.get(id).cloned()))
    }

    async fn managed_ids(
        &self,
        key: &str,
        kind: ManagedKind,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|t| {
            let mut mine: Vec<&ManagedObject> = t
                .managed
                .values()
                .filter(|o| o.kind == kind && o.key == key)
                .collect();
            mine.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
            mine.into_iter().take(limit).map(|o| o.id.clone()).collect()
        }))
    }

    async fn claim_batch_charge(&self, batch: &ManagedObject) -> Result<bool, StoreError> {
        Ok(self.with(|t| {
            let known = t
                .managed
                .entry(batch.id.clone())
                .or_insert_with(|| batch.clone());
            known.kind == ManagedKind::Batch && t.charged_batches.insert(batch.id.clone())
        }))
    }

    async fn due_batches(
        &self,
        now: DateTime<Utc>,
        next: DateTime<Utc>,
        oldest: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<ManagedObject>, StoreError> {
        Ok(self.with(|t| {
            let mut due: Vec<(DateTime<Utc>, String)> = t
                .batch_polls
                .iter()
                .filter(|(id, at)| **at <= now && !t.charged_batches.contains(*id))
                .filter(|(id, _)| t.managed.get(*id).is_some_and(|o| o.created_at >= oldest))
                .map(|(id, at)| (*at, id.clone()))
                .collect();
            due.sort();
            due.truncate(limit);
            due.into_iter()
                .filter_map(|(_, id)| {
                    t.batch_polls.insert(id.clone(), next);
                    t.managed.get(&id).cloned()
                })
                .collect()
        }))
    }

    async fn batch_polled(&self, id: &str, status: &str, last: bool) -> Result<(), StoreError> {
        self.with(|t| {
            if let Some(o) = t.managed.get_mut(id) {
                if let Some(object) = o.object.as_object_mut() {
                    object.insert("status".into(), status.into());
                }
            }
            if last {
                t.batch_polls.remove(id);
            }
        });
        Ok(())
    }

    async fn batch_holds(&self, key: &str) -> Result<Vec<(String, f64)>, StoreError> {
        Ok(self.with(|t| {
            t.batch_polls
                .keys()
                .filter(|id| !t.charged_batches.contains(*id))
                .filter_map(|id| t.managed.get(id))
                .filter(|o| o.key == key && o.hold > 0.0)
                .map(|o| (o.id.clone(), o.hold))
                .collect()
        }))
    }

    async fn record_spend(
        &self,
        rows: &[SpendLogRow],
        _spread: std::time::Duration,
    ) -> Result<SpendChanges, StoreError> {
        Ok(self.with(|t| t.record_spend(rows, true)))
    }

    async fn count_spend(&self, rows: &[SpendLogRow]) -> Result<SpendChanges, StoreError> {
        Ok(self.with(|t| t.record_spend(rows, false)))
    }

    async fn spend_logs(&self, f: &SpendFilter) -> Result<Vec<SpendLogRow>, StoreError> {
        Ok(self.with(|t| {
            let rows = t.spend_logs.iter().filter(|r| log_matches(f, r));
            let skip = usize::try_from(f.offset).unwrap_or(0);
            let take = f
                .limit
                .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(0));
            rows.skip(skip).take(take).cloned().collect()
        }))
    }

    async fn spend_log_page(
        &self,
        f: &SpendFilter,
        before: Option<&LogCursor>,
    ) -> Result<LogPage, StoreError> {
        let take = f
            .limit
            .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(0));
        Ok(self.with(|t| {
            let older = |r: &SpendLogRow| {
                before.is_none_or(|c| {
                    (r.start_time, &*r.request_id) < (c.start, c.request_id.as_str())
                })
            };
            let mut rows: Vec<&SpendLogRow> = t
                .spend_logs
                .iter()
                .filter(|r| log_matches(f, r) && older(r))
                .collect();
            rows.sort_unstable_by(|a, b| {
                (b.start_time, &b.request_id).cmp(&(a.start_time, &a.request_id))
            });
            let more = rows.len() > take;
            let rows: Vec<SpendLogRow> = rows.into_iter().take(take).cloned().collect();
            let next = more.then(|| rows.last().map(LogCursor::after)).flatten();
            LogPage {
                rows,
                next,
                partial: false,
            }
        }))
    }

    async fn daily_activity(&self, query: &DailyQuery) -> Result<DailyPage, StoreError> {
        Ok(self.with(|t| t.daily.page(query)))
    }

    async fn global_spend(&self, since: &str) -> Result<f64, StoreError> {
        Ok(self.with(|t| t.daily.spend_since(since)))
    }

    async fn reset_due_budgets(
        &self,
        now: DateTime<Utc>,
        end_user_default: Option<&str>,
    ) -> Result<Vec<Change>, StoreError> {
        Ok(self.with(|t| {
            let mut changes = Vec::new();
            for k in t.keys.values_mut() {
                if k.budget_reset_at.is_some_and(|at| at <= now) {
                    k.spend = 0.0;
                    k.model_spend.clear();
                    k.budget_reset_at = next_reset(k.budget_duration.as_deref(), now);
                    changes.push(Change::Key(k.token.clone()));
                }
            }
            for team in t.teams.values_mut() {
                if team.budget_reset_at.is_some_and(|at| at <= now) {
                    team.spend = 0.0;
                    team.budget_reset_at = next_reset(team.budget_duration.as_deref(), now);
                    changes.push(Change::Team(team.team_id.clone()));
                }
            }
            for u in t.users.values_mut() {
                if u.budget_reset_at.is_some_and(|at| at <= now) {
                    u.spend = 0.0;
                    u.budget_reset_at = next_reset(u.budget_duration.as_deref(), now);
                    changes.push(Change::User(u.user_id.clone()));
                }
            }
            for change in &changes {
                let scoped = match change {
                    Change::Key(id) => format!("key:{id}"),
                    Change::User(id) => format!("user:{id}"),
                    Change::Team(id) => format!("team:{id}"),
                    Change::Model(_) | Change::EndUser(_) | Change::Budget(_) => continue,
                };
                t.periods.insert(scoped, now);
            }
            let default_due = end_user_default
                .and_then(|d| t.budgets.get(d))
                .is_some_and(|b| b.budget_reset_at.is_some_and(|at| at <= now));
            changes.extend(t.end_users.reset_due(now).into_iter().map(Change::EndUser));
            changes.extend(t.reset_member_budgets(now).into_iter().map(Change::Team));
            // The proxy-wide default row: the end users riding it are reset
            // with it, and its cached copy learns its next reset.
            if let (true, Some(d)) = (default_due, end_user_default) {
                if let Some(b) = t.budgets.get_mut(d) {
                    b.budget_reset_at = next_reset(b.budget_duration.as_deref(), now);
                }
                changes.extend(t.end_users.reset_riders().into_iter().map(Change::EndUser));
                changes.push(Change::Budget(d.to_string()));
            }
            changes
        }))
    }

    async fn announce(&self, _changes: &[Change]) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Whether spend-log row `r` matches `f` (its paging aside).
fn log_matches(f: &SpendFilter, r: &SpendLogRow) -> bool {
    f.api_key.as_ref().is_none_or(|k| *r.api_key == **k)
        && f.user_id
            .as_ref()
            .is_none_or(|u| r.user.as_ref() == Some(u))
        && f.team_id
            .as_ref()
            .is_none_or(|u| r.team_id.as_ref() == Some(u))
        && f.request_id.as_ref().is_none_or(|id| {
            *r.call_id == **id
                || *r.request_id == **id
                || r.response_id.as_deref() == Some(id.as_str())
        })
        && f.start.is_none_or(|s| r.start_time >= s)
        && f.end.is_none_or(|e| r.start_time < e)
        && f.model
            .as_deref()
            .is_none_or(|m| *r.model_group == *m || *r.model == *m)
        && f.status.as_deref().is_none_or(|s| r.status == s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: usize) -> SpendLogRow {
        SpendLogRow {
            request_id: format!("req-{id}").into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_spend_log_keeps_its_last_rows_in_no_more_room_than_they_need() {
        let mut tables = Tables::default();
        let rows: Vec<SpendLogRow> = (0..MAX_SPEND_ROWS + 500).map(row).collect();
        for chunk in rows.chunks(997) {
            tables.record_spend(chunk, true);
        }
        assert_eq!(tables.spend_logs.len(), MAX_SPEND_ROWS);
        assert_eq!(tables.request_ids.len(), MAX_SPEND_ROWS);
        assert_eq!(&*tables.spend_logs[0].request_id, "req-500");
        // Grown by doubling, the log had room for 16,384 rows.
        assert_eq!(tables.spend_logs.capacity(), MAX_SPEND_ROWS);
        // A replayed row is not logged twice.
        tables.record_spend(&rows[MAX_SPEND_ROWS..], true);
        assert_eq!(&*tables.spend_logs[0].request_id, "req-500");
    }
}
