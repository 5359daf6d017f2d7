//! The key cache every core reads without locks (papaya), filled by one
//! read-through per uncached key, refreshed in place when a key, team or user
//! changes. Beside it, the set of every key the store holds
//! ([`KnownKeys`]): a key inside it is always read through; a key outside it
//! only within a small shared budget, so a flood of random keys costs the
//! database a few reads per second and never delays a real key. A negative
//! cache stops a key the store just did not have from being asked for again
//! at once.

use super::end_users::EndUserCache;
use super::known::{prefix, KnownKeys};
use crate::budget::fleet::Place;
use crate::budget::{to_nanos, Budget, Flushes};
use crate::keyed_hash::KeyedHash;
use crate::limits::ScopeLimits;
use crate::read_through::ReadThroughGuard;
use crate::store::{
    next_reset, BudgetRecord, BudgetWindow, Change, KeyRecord, ModelBudgets, RowKind, SpendLogRow,
    Store, StoreError, TeamRecord, UserRecord, PROXY_BUDGET_USER,
};
use serde_json::{Map, Value};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A key's sha256: uniformly random already, so the map hashes its first
/// eight bytes instead of running SipHash over 32.
pub type TokenHash = [u8; 32];

/// Hasher for [`TokenHash`] keys.
#[derive(Default)]
pub struct PrefixHasher(u64);

impl Hasher for PrefixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(b);
        }
    }
}

type TokenMap<V> = papaya::HashMap<TokenHash, V, BuildHasherDefault<PrefixHasher>>;

/// A team as the request path needs it.
#[derive(Debug)]
pub struct TeamEntry {
    /// The team's row.
    pub record: TeamRecord,
    /// Its budget counter, shared by all its keys.
    pub budget: Arc<Budget>,
    /// Its budgets per model group (`model_max_budget`), shared by all its
    /// keys.
    pub model_budgets: Vec<(String, Arc<Budget>)>,
    /// Its organization's budget (the `max_budget` of the organization's
    /// budget row, against the organization's spend), when it has one.
    pub org_budget: Option<Arc<Budget>>,
    /// Its organization's rpm and tpm limits (its budget row's, LiteLLM's
    /// `organization` rate-limit descriptor), with the organization's id.
    pub org_limits: Option<(String, ScopeLimits)>,
    /// Its organization's per-model limits (`model_rpm_limit` and
    /// `model_tpm_limit` of the organization's `metadata`, LiteLLM's
    /// `model_per_organization`), with the organization's id.
    pub org_model_limits: Option<(String, Map<String, Value>)>,
    /// Its members' default budget row (`metadata.team_member_budget_id`:
    /// `team_member_budget`, `team_member_rpm_limit`, ...), when it has one.
    pub member_defaults: Option<BudgetRecord>,
}

/// What a team's entry holds of its organization: budget, limits and
/// per-model limits (see [`TeamEntry`]).
type OrgParts = (
    Option<Arc<Budget>>,
    Option<(String, ScopeLimits)>,
    Option<(String, Map<String, Value>)>,
);

impl TeamEntry {
    /// The team's budget for `group`, if it set one.
    pub fn model_budget(&self, group: &str) -> Option<&Arc<Budget>> {
        find_model_budget(&self.model_budgets, group)
    }
}

/// A user as the request path needs it.
#[derive(Debug)]
pub struct UserEntry {
    /// The user's row.
    pub record: UserRecord,
    /// Its budget counter.
    pub budget: Arc<Budget>,
    /// Its budgets per model group (`model_max_budget`), over all its keys.
    pub model_budgets: Vec<(String, Arc<Budget>)>,
}

impl UserEntry {
    /// The user's budget for `group`, if it set one.
    pub fn model_budget(&self, group: &str) -> Option<&Arc<Budget>> {
        find_model_budget(&self.model_budgets, group)
    }
}

fn find_model_budget<'a>(
    budgets: &'a [(String, Arc<Budget>)],
    group: &str,
) -> Option<&'a Arc<Budget>> {
    budgets.iter().find(|(g, _)| g == group).map(|(_, b)| b)
}

/// A key with what it belongs to.
#[derive(Debug)]
pub struct KeyEntry {
    /// The key's row.
    pub record: KeyRecord,
    /// Its budget counter; survives refreshes.
    pub budget: Arc<Budget>,
    /// The share of its rpm/tpm limits it keeps once its own spend
    /// reaches its budget, instead of being refused
    /// ([`super::budget_throttle`]).
    pub budget_throttle: Option<f64>,
    /// Its team, if any.
    pub team: Option<Arc<TeamEntry>>,
    /// Its user, if any.
    pub user: Option<Arc<UserEntry>>,
    /// Budgets per model group (`model_max_budget`), by group name.
    pub model_budgets: Vec<(String, Arc<Budget>)>,
    /// Its user's budget in its team (the member's own budget row's
    /// `max_budget`, else the team's `team_member_budget`, against the
    /// user's `LiteLLM_TeamMembership.spend`), when set.
    pub member_budget: Option<Arc<Budget>>,
    /// Its user's budgets per model group in its team (LiteLLM's
    /// `team_member_model_max_budget`), each a window of its `time_period`.
    pub member_model_budgets: Vec<(String, BudgetWindow)>,
    /// The budget row its user's membership in its team links to (its own,
    /// or the team's default it is linked to): LiteLLM's
    /// `team_membership.litellm_budget_table`, whose `rpm_limit`,
    /// `tpm_limit`, `allowed_models` and `temp_budget_increase` apply.
    pub member_row: Option<BudgetRecord>,
    /// The names of the key's own rate-limit counters, made by its first
    /// request with a limit and shared by the rest.
    pub counter_names: std::sync::OnceLock<crate::limits::CounterNames>,
}

impl KeyEntry {
    /// The key's budget for `group`, if it set one.
    pub fn model_budget(&self, group: &str) -> Option<&Arc<Budget>> {
        find_model_budget(&self.model_budgets, group)
    }

    /// The share of its limits it is held to now: its
    /// [`budget_throttle`](Self::budget_throttle) once its own budget is
    /// spent.
    pub fn throttled(&self) -> Option<f64> {
        self.budget_throttle.filter(|_| self.budget.exhausted())
    }

    /// The member budget row whose rate limits apply to its user in its
    /// team: the row the membership links to, else the team's default
    /// member row.
    pub fn member_limits_row(&self) -> Option<&BudgetRecord> {
        self.member_row
            .as_ref()
            .or_else(|| self.team.as_ref()?.member_defaults.as_ref())
    }

    /// Its user's budget in its team as of `now` (USD): see
    /// [`member_max_budget`]; `None` without a team or a cap.
    pub fn member_max_budget(&self, now: chrono::DateTime<chrono::Utc>) -> Option<f64> {
        let defaults = self.team.as_ref()?.member_defaults.as_ref();
        member_max_budget(self.member_row.as_ref(), defaults, now)
    }

    /// Its user's budget window for `group` in its team, if one is set.
    pub fn member_model_budget(&self, group: &str) -> Option<&BudgetWindow> {
        self.member_model_budgets
            .iter()
            .find(|(g, _)| g == group)
            .map(|(_, w)| w)
    }
}

/// The process-wide cache of keys, teams, users and their budgets.
pub struct KeyCache {
    keys: TokenMap<Arc<KeyEntry>>,
    /// Cached keys with per-model budgets, so the per-second look for due
    /// budget windows skips a cache of a million keys that have none.
    with_model_budgets: AtomicUsize,
    known: KnownKeys,
    misses: ReadThroughGuard<TokenHash, BuildHasherDefault<PrefixHasher>>,
    teams: papaya::HashMap<String, Arc<TeamEntry>, KeyedHash>,
    users: papaya::HashMap<String, Arc<UserEntry>, KeyedHash>,
    budgets: papaya::HashMap<String, Arc<Budget>, KeyedHash>,
    end_users: EndUserCache,
    /// Spend writes marked flushed, watched by reads of spend.
    flushes: Arc<Flushes>,
    /// Keys' and teams' budget windows (`budget_limits`).
    windows: super::windows::BudgetWindows,
    /// The proxy-wide budget (`litellm_settings.max_budget`), once set up.
    proxy_budget: std::sync::OnceLock<Arc<Budget>>,
    /// `litellm_settings.budget_exceeded_throttle_percentage`, once set.
    budget_throttle: std::sync::OnceLock<f64>,
}

impl Default for KeyCache {
    fn default() -> Self {
        let flushes = Arc::new(Flushes::default());
        KeyCache {
            keys: TokenMap::default(),
            with_model_budgets: AtomicUsize::new(0),
            known: KnownKeys::default(),
            misses: ReadThroughGuard::default(),
            teams: papaya::HashMap::default(),
            users: papaya::HashMap::default(),
            budgets: papaya::HashMap::default(),
            end_users: EndUserCache::watching(flushes.clone()),
            flushes,
            windows: super::windows::BudgetWindows::default(),
            proxy_budget: std::sync::OnceLock::new(),
            budget_throttle: std::sync::OnceLock::new(),
        }
    }
}

/// The sha256 of a plain key.
pub fn hash_key(key: &str) -> TokenHash {
    use sha2::{Digest, Sha256};
    Sha256::digest(key.as_bytes()).into()
}

/// LiteLLM's `token` column: the sha256 in lowercase hex.
pub fn token_hex(hash: &TokenHash) -> String {
    hex::encode(hash)
}

/// The cached copies of some keys and end users at one moment
/// ([`KeyCache::copies_of`]).
pub struct KeyCopies {
    keys: Vec<(TokenHash, Option<Arc<KeyEntry>>)>,
    /// Each end user's counter (a restricted entry's or a rider's) with
    /// its installs then.
    end_users: Vec<(String, Option<Installed>)>,
    /// The proxy budget's counter with its installs, when a row counts
    /// against it.
    proxy_budget: Option<Installed>,
}

/// A budget counter and how many figures it had installed from the
/// database ([`Budget::installs`]) at one moment.
type Installed = (Arc<Budget>, u64);

/// Whether `now` holds a figure installed since `then`: another counter,
/// or the same one having installed more.
fn installed_since(then: Option<&Installed>, now: Option<&Arc<Budget>>) -> bool {
    match (then, now) {
        (Some((old, count)), Some(now)) => !Arc::ptr_eq(old, now) || now.installs() != *count,
        (None, Some(_)) => true,
        (_, None) => false,
    }
}

fn installed(budget: Arc<Budget>) -> Installed {
    let count = budget.installs();
    (budget, count)
}

fn parse_token(token: &str) -> Option<TokenHash> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(token, &mut out).ok()?;
    Some(out)
}

impl KeyCache {
    /// The cached key, if any.
    pub fn get(&self, hash: &TokenHash) -> Option<Arc<KeyEntry>> {
        self.keys.pin().get(hash).cloned()
    }

    /// The cached key whose `token` (sha256 in hex) is `token`, if any.
    pub fn by_token(&self, token: &str) -> Option<Arc<KeyEntry>> {
        self.get(&parse_token(token)?)
    }

    /// The per-model budget windows of cached keys, teams and users that
    /// are due as of `now` ([`ModelBudgets::due_model_windows`]), as (kind,
    /// token or id, model, start).
    pub fn due_model_windows(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Vec<(RowKind, String, String, String)> {
        let mut due = Vec::new();
        if self.with_model_budgets.load(Ordering::Relaxed) > 0 {
            let keys = self.keys.pin();
            for (_, entry) in keys.iter() {
                if entry.model_budgets.is_empty() {
                    continue;
                }
                for (model, start) in entry.record.due_model_windows(now) {
                    due.push((RowKind::Key, entry.record.token.clone(), model, start));
                }
            }
        }
        for (_, team) in self.teams.pin().iter() {
            if !team.model_budgets.is_empty() {
                for (model, start) in team.record.due_model_windows(now) {
                    due.push((RowKind::Team, team.record.team_id.clone(), model, start));
                }
            }
        }
        for (_, user) in self.users.pin().iter() {
            if !user.model_budgets.is_empty() {
                for (model, start) in user.record.due_model_windows(now) {
                    due.push((RowKind::User, user.record.user_id.clone(), model, start));
                }
            }
        }
        due
    }

    /// Sets `litellm_settings.budget_exceeded_throttle_percentage` (at
    /// start-up, before any key is read).
    pub fn set_budget_throttle(&self, percentage: f64) {
        let _ = self.budget_throttle.set(percentage);
    }

    /// The end users (the body's `user`) whose rows restrict them.
    pub fn end_users(&self) -> &EndUserCache {
        &self.end_users
    }

    /// The counters of keys' and teams' budget windows.
    pub fn budget_windows(&self) -> &super::windows::BudgetWindows {
        &self.windows
    }

    /// Number of cached keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is cached.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether `hash` was unknown to the database moments ago.
    pub fn recently_missed(&self, hash: &TokenHash) -> bool {
        self.misses.recently_missed(hash)
    }

    /// Remembers that `hash` is unknown.
    pub fn note_miss(&self, hash: &TokenHash) {
        self.misses.note_miss(*hash);
    }

    /// Takes one read-through of a key outside the known set from the
    /// shared budget; `false` when spent (the key is then refused).
    pub fn try_resync(&self) -> bool {
        self.misses.try_resync()
    }

    /// Whether the store may hold the key of `hash`; when not, a
    /// read-through needs the shared budget.
    pub fn is_known(&self, hash: &TokenHash) -> bool {
        self.known.contains(hash)
    }

    /// Number of keys the store holds, as last loaded (an upper bound).
    pub fn known_len(&self) -> usize {
        self.known.count()
    }

    /// Reads the token of every key in `store` into the known set, and the
    /// id of every restricted end user into theirs (start-up, periodically,
    /// and after the change listener reconnects); returns how many keys the
    /// store holds.
    pub async fn reload_known(&self, store: &dyn Store) -> Result<usize, StoreError> {
        self.end_users.reload(store).await?;
        let reload = self.known.begin_reload();
        let mut prefixes = Vec::new();
        let count = store
            .key_tokens(&mut |token| {
                if let Some(hash) = parse_token(token) {
                    prefixes.push(prefix(&hash));
                }
            })
            .await?;
        self.known.finish_reload(reload, prefixes);
        Ok(count)
    }

    /// The budget counter `id` (kept across refreshes), brought up to
    /// date with its row: limits, spend and budget period.
    fn budget(
        &self,
        id: String,
        place: Place,
        period: Option<chrono::DateTime<chrono::Utc>>,
        (max, soft): (Option<f64>, Option<f64>),
        spend: f64,
    ) -> Arc<Budget> {
        // One counter per budget in the process, even when two cores
        // install the same row at once: a second counter would hold its own
        // share of the budget in Redis under the same name (its slice).
        let budgets = self.budgets.pin();
        let mut created = false;
        let b = budgets
            .get_or_insert_with(id, || {
                created = true;
                Budget::at(Some(place), max, soft, spend)
            })
            .clone();
        if !created {
            b.set_limits(max, soft);
            b.set_durable(spend);
        }
        b.set_period(period);
        b
    }

    /// The counters of a team's or user's `model_max_budget` (`scope` is
    /// `team` or `user`), one per group, kept across refreshes as the
    /// row's own.
    fn model_budgets(
        &self,
        scope: &str,
        id: &str,
        row: &dyn ModelBudgets,
        period: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Vec<(String, Arc<Budget>)> {
        row.model_max_budget()
            .keys()
            .filter_map(|group| {
                let max = row.model_budget(group)?;
                let place = Place::principal(&format!("{scope}model"), &format!("{id}:{group}"));
                Some((
                    group.clone(),
                    self.budget(
                        format!("{scope}model:{id}:{group}"),
                        place,
                        period,
                        (Some(max), None),
                        row.model_spent(group),
                    ),
                ))
            })
            .collect()
    }

    /// Organization `org_id`'s budget (its budget row's `max_budget`
    /// against its spend, LiteLLM's `organization_max_budget_check`) and
    /// rpm/tpm limits (the same row's), each when set.
    async fn org(&self, store: &dyn Store, org_id: &str) -> Result<OrgParts, StoreError> {
        let Some(org) = store
            .organizations(Some(&[org_id.to_string()]))
            .await?
            .into_iter()
            .next()
        else {
            return Ok((None, None, None));
        };
        let model_limits: Map<String, Value> = ["model_rpm_limit", "model_tpm_limit"]
            .iter()
            .filter_map(|f| Some((f.to_string(), org.metadata.get(*f)?.clone())))
            .filter(|(_, v)| v.as_object().is_some_and(|m| !m.is_empty()))
            .collect();
        let model_limits = (!model_limits.is_empty()).then(|| (org_id.to_string(), model_limits));
        let Some(row) = store
            .budgets(Some(std::slice::from_ref(&org.budget_id)))
            .await?
            .into_iter()
            .next()
        else {
            return Ok((None, None, model_limits));
        };
        let limits = ScopeLimits::from_fields(row.rpm_limit, row.tpm_limit, None);
        let limits = (!limits.is_empty()).then(|| (org_id.to_string(), limits));
        let budget = row.max_budget.map(|max| {
            self.budget(
                format!("org:{org_id}"),
                Place::principal("org", org_id),
                row.budget_reset_at,
                (Some(max), None),
                org.spend,
            )
        });
        Ok((budget, limits, model_limits))
    }

    fn install_team(
        &self,
        t: TeamRecord,
        (org_budget, org_limits, org_model_limits): OrgParts,
        member_defaults: Option<BudgetRecord>,
    ) -> Arc<TeamEntry> {
        let budget = self.budget(
            format!("team:{}", t.team_id),
            Place::principal("team", &t.team_id),
            t.budget_reset_at,
            (t.max_budget, None),
            t.spend,
        );
        let model_budgets = self.model_budgets("team", &t.team_id, &t, t.budget_reset_at);
        let entry = Arc::new(TeamEntry {
            record: t,
            budget,
            model_budgets,
            org_budget,
            org_limits,
            org_model_limits,
            member_defaults,
        });
        self.teams
            .pin()
            .insert(entry.record.team_id.clone(), entry.clone());
        entry
    }

    /// `user`'s budgets in `team`: its budget as LiteLLM's
    /// `_check_team_member_budget` resolves it (the `max_budget` of the
    /// member's own budget row, its `LiteLLM_TeamMembership.budget_id`, when
    /// set, else the team's default member budget when above 0) against what
    /// the user spent in the team, the spend zeroed when its row's period
    /// ends (the counter's period is that row's `budget_reset_at`); and its
    /// per-model budgets ([`member_model_budgets`]).
    async fn member_budgets(
        &self,
        store: &dyn Store,
        team: &TeamEntry,
        user: &str,
    ) -> Result<MemberBudgets, StoreError> {
        let team_id = &team.record.team_id;
        let membership = store.membership(team_id, user).await?;
        let own = match membership.as_ref().and_then(|m| m.budget_id.clone()) {
            Some(id) => store.budgets(Some(&[id])).await?.into_iter().next(),
            None => None,
        };
        let defaults = team.member_defaults.as_ref();
        let models = member_model_budgets(own.as_ref(), defaults);
        let now = chrono::Utc::now();
        let Some(max) = member_max_budget(own.as_ref(), defaults, now) else {
            return Ok((None, models, own));
        };
        let spend = membership.map_or(0.0, |m| m.spend);
        let id = format!("{team_id}:{user}");
        let budget = self.budget(
            format!("member:{id}"),
            Place::principal("member", &id),
            own.as_ref().and_then(|b| b.budget_reset_at),
            (Some(max), None),
            spend,
        );
        Ok((Some(budget), models, own))
    }

    fn install_user(&self, u: UserRecord) -> Arc<UserEntry> {
        let budget = self.budget(
            format!("user:{}", u.user_id),
            Place::principal("user", &u.user_id),
            u.budget_reset_at,
            (u.max_budget, None),
            u.spend,
        );
        let model_budgets = self.model_budgets("user", &u.user_id, &u, u.budget_reset_at);
        let entry = Arc::new(UserEntry {
            record: u,
            budget,
            model_budgets,
        });
        self.users
            .pin()
            .insert(entry.record.user_id.clone(), entry.clone());
        entry
    }

    /// Sets up the proxy-wide budget (`litellm_settings.max_budget` USD,
    /// reset every `duration`) on the user row [`PROXY_BUDGET_USER`], as
    /// LiteLLM keeps it: made when missing, its budget and period set from
    /// the config (its spend kept), then counted against by every request.
    pub async fn set_up_proxy_budget(
        &self,
        store: &dyn Store,
        max_usd: f64,
        duration: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = chrono::Utc::now();
        let row = match store.get_user(PROXY_BUDGET_USER).await? {
            Some(mut row) => {
                let period_changed = row.budget_duration.as_deref() != duration;
                row.max_budget = Some(max_usd);
                row.budget_duration = duration.map(str::to_string);
                if duration.is_none() {
                    row.budget_reset_at = None;
                } else if period_changed || row.budget_reset_at.is_none() {
                    row.budget_reset_at = next_reset(duration, now);
                }
                store.update_user(&row).await?;
                row
            }
            None => {
                let row = UserRecord {
                    user_id: PROXY_BUDGET_USER.to_string(),
                    max_budget: Some(max_usd),
                    budget_duration: duration.map(str::to_string),
                    budget_reset_at: next_reset(duration, now),
                    created_at: Some(now),
                    ..UserRecord::default()
                };
                store.insert_user(&row).await?;
                row
            }
        };
        let entry = self.install_user(row);
        let _ = self.proxy_budget.set(entry.budget.clone());
        Ok(())
    }

    /// The proxy-wide budget, when `litellm_settings.max_budget` sets one.
    pub fn proxy_budget(&self) -> Option<&Arc<Budget>> {
        self.proxy_budget.get()
    }

    /// Reads a key with its team and user from `store` and caches them;
    /// read again when a spend write was marked flushed meanwhile (a
    /// figure read before that write committed would drop its spend,
    /// [`Flushes`]).
    pub async fn load(
        &self,
        store: &dyn Store,
        token: &str,
    ) -> Result<Option<Arc<KeyEntry>>, StoreError> {
        self.flushes
            .read_settled(|| self.load_once(store, token))
            .await
    }

    async fn load_once(
        &self,
        store: &dyn Store,
        token: &str,
    ) -> Result<Option<Arc<KeyEntry>>, StoreError> {
        let Some(hash) = parse_token(token) else {
            return Ok(None);
        };
        let Some(mut record) = store.get_key(token).await? else {
            let keys = self.keys.pin();
            let removed = keys.remove(&hash);
            self.count_model_budgets(None, removed.map(|e| &**e));
            return Ok(None);
        };
        if let Some(id) = record.shared_budget() {
            let ids = [id.to_string()];
            if let Some(row) = store.budgets(Some(&ids)).await?.first() {
                record.fill_from_budget(row);
            }
        }
        let team = match &record.team_id {
            Some(id) => match store.get_team(id).await? {
                Some(t) => {
                    let org = match &t.organization_id {
                        Some(org) => self.org(store, org).await?,
                        None => (None, None, None),
                    };
                    let defaults = member_defaults(store, &t).await?;
                    Some(self.install_team(t, org, defaults))
                }
                None => None,
            },
            None => None,
        };
        let user = match &record.user_id {
            Some(id) => store.get_user(id).await?.map(|u| self.install_user(u)),
            None => None,
        };
        let budget = self.budget(
            format!("key:{token}"),
            Place::principal("key", token),
            record.budget_reset_at,
            (
                super::checks::raised_max_budget(&record, chrono::Utc::now()),
                record.soft_budget,
            ),
            record.spend,
        );
        let model_budgets = record
            .model_max_budget
            .keys()
            .filter_map(|group| {
                let max = record.model_budget(group)?;
                let id = format!("keymodel:{token}:{group}");
                Some((
                    group.clone(),
                    self.budget(
                        id,
                        Place::key_model(token, group),
                        record.budget_reset_at,
                        (Some(max), None),
                        record.model_spent(group),
                    ),
                ))
            })
            .collect();
        let (member_budget, member_model_budgets, member_row) = match (&team, &record.user_id) {
            (Some(t), Some(user)) => self.member_budgets(store, t, user).await?,
            _ => (None, Vec::new(), None),
        };
        let throttle = self.budget_throttle.get().copied();
        let entry = Arc::new(KeyEntry {
            budget_throttle: super::budget_throttle::share(&record, throttle),
            record,
            budget,
            team,
            user,
            model_budgets,
            member_budget,
            member_model_budgets,
            member_row,
            counter_names: std::sync::OnceLock::new(),
        });
        self.misses.forget(&hash);
        self.known.insert(&hash);
        let keys = self.keys.pin();
        let replaced = keys.insert(hash, entry.clone());
        self.count_model_budgets(Some(&entry), replaced.map(|e| &**e));
        Ok(Some(entry))
    }

    /// Keeps [`KeyCache::with_model_budgets`] right when `added` takes the
    /// place of `removed` (either may be absent).
    fn count_model_budgets(&self, added: Option<&KeyEntry>, removed: Option<&KeyEntry>) {
        let has = |e: Option<&KeyEntry>| e.is_some_and(|e| !e.model_budgets.is_empty());
        match (has(added), has(removed)) {
            (true, false) => {
                self.with_model_budgets.fetch_add(1, Ordering::Relaxed);
            }
            (false, true) => {
                self.with_model_budgets.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// Brings what `change` touched up to date: cached keys are re-read in
    /// place (the request path keeps serving the old copy meanwhile), deleted
    /// ones removed. When the database cannot be read, the cached copies stay
    /// (availability over freshness) and the error tells the caller to retry.
    pub async fn refresh(&self, store: &dyn Store, change: &Change) -> Result<(), StoreError> {
        let stale: Vec<String> = match change {
            Change::Key(token) => {
                let Some(hash) = parse_token(token) else {
                    return Ok(());
                };
                // A key created elsewhere becomes known here; a deleted one
                // stays known (a read-through that misses) until the next
                // reload.
                self.known.insert(&hash);
                self.misses.forget(&hash);
                if self.keys.pin().contains_key(&hash) {
                    vec![token.clone()]
                } else {
                    Vec::new()
                }
            }
            Change::Team(id) => self.tokens_where(|e| e.record.team_id.as_deref() == Some(id)),
            Change::User(id) if id == PROXY_BUDGET_USER && self.proxy_budget.get().is_some() => {
                self.flushes
                    .read_settled(|| async {
                        if let Some(row) = store.get_user(id).await? {
                            self.install_user(row);
                        }
                        Ok::<_, StoreError>(())
                    })
                    .await?;
                self.tokens_where(|e| e.record.user_id.as_deref() == Some(id))
            }
            Change::User(id) => self.tokens_where(|e| e.record.user_id.as_deref() == Some(id)),
            Change::Model(_) => Vec::new(),
            Change::EndUser(id) => return self.end_users.refresh(store, id).await,
            Change::Budget(id) => return self.end_users.defaults().refresh(store, id).await,
        };
        for token in stale {
            self.load(store, &token).await?;
        }
        Ok(())
    }

    fn tokens_where(&self, pred: impl Fn(&KeyEntry) -> bool) -> Vec<String> {
        self.keys
            .pin()
            .iter()
            .filter(|(_, e)| pred(e))
            .map(|(h, _)| token_hex(h))
            .collect()
    }

    /// The cached copies of the keys and restricted end users `rows` are
    /// charged to, taken before a spend write so
    /// [`KeyCache::read_again_since`] can tell which were read again while
    /// it ran.
    pub fn copies_of(&self, rows: &[SpendLogRow]) -> KeyCopies {
        // Rows of one key tend to come in runs (a core's batch): each run's
        // token is decoded once.
        let mut last: Option<&str> = None;
        let mut hashes: Vec<TokenHash> = rows
            .iter()
            .filter(|row| last.replace(&*row.api_key) != Some(&*row.api_key))
            .filter_map(|row| parse_token(&row.api_key))
            .collect();
        hashes.sort_unstable();
        hashes.dedup();
        let keys = self.keys.pin();
        let copies = hashes
            .into_iter()
            .map(|hash| {
                let copy = keys.get(&hash).cloned();
                (hash, copy)
            })
            .collect();
        let mut ids: Vec<&str> = rows.iter().filter_map(|r| r.end_user.as_deref()).collect();
        ids.sort_unstable();
        ids.dedup();
        let end_users = ids
            .into_iter()
            .map(|id| (id.to_string(), self.end_users.counter(id).map(installed)))
            .collect();
        let proxy_budget = rows
            .iter()
            .any(|r| r.proxy_budget)
            .then(|| self.proxy_budget.get().cloned().map(installed))
            .flatten();
        KeyCopies {
            keys: copies,
            end_users,
            proxy_budget,
        }
    }

    /// The keys of `before` whose cached copy was replaced since it was
    /// taken, and the end users (restricted or riding a default budget)
    /// and proxy budget whose counter installed a figure from the database
    /// since. A copy read while a spend write ran may already hold that
    /// write's spend in its durable figure, which `mark_flushed` then adds
    /// a second time: such keys (with their team and user), end users and
    /// the proxy budget must be read once more after it.
    pub fn read_again_since(&self, before: KeyCopies) -> Vec<Change> {
        let keys = self.keys.pin();
        let mut again: Vec<Change> = before
            .keys
            .into_iter()
            .filter(|(hash, old)| match (old, keys.get(hash)) {
                (Some(old), Some(now)) => !Arc::ptr_eq(old, now),
                (None, Some(_)) => true,
                (_, None) => false,
            })
            .map(|(hash, _)| Change::Key(token_hex(&hash)))
            .collect();
        again.extend(
            before
                .end_users
                .into_iter()
                .filter(|(id, old)| {
                    installed_since(old.as_ref(), self.end_users.counter(id).as_ref())
                })
                .map(|(id, _)| Change::EndUser(id)),
        );
        let proxy = before.proxy_budget.as_ref();
        if proxy.is_some() && installed_since(proxy, self.proxy_budget.get()) {
            again.push(Change::User(PROXY_BUDGET_USER.to_string()));
        }
        again
    }

    /// Moves written rows' spend from "unflushed" to "durable" on every
    /// budget each counted against: one lookup per run of consecutive rows
    /// that count against the same budgets (a batch is mostly such runs),
    /// their amounts summed in nanodollars as each was charged.
    pub fn mark_flushed(&self, rows: &[SpendLogRow]) {
        self.flushes.begin();
        let mut rest = rows;
        while let Some(first) = rest.first() {
            let run = rest.iter().take_while(|r| same_budgets(first, r)).count();
            let nanos = rest[..run]
                .iter()
                .fold(0i64, |sum, r| sum.saturating_add(to_nanos(r.spend)));
            if nanos > 0 {
                self.flush_budgets_of(first, nanos);
            }
            rest = &rest[run..];
        }
    }

    /// Moves `nanos` to "durable" on every budget `row` counted against.
    fn flush_budgets_of(&self, row: &SpendLogRow, nanos: i64) {
        let budgets = self.budgets.pin();
        let mut id = String::with_capacity(96);
        let mut flush = |parts: &[&str]| {
            id.clear();
            for part in parts {
                id.push_str(part);
            }
            if let Some(b) = budgets.get(id.as_str()) {
                b.flushed(nanos);
            }
        };
        flush(&["key:", &row.api_key]);
        flush(&["keymodel:", &row.api_key, ":", &row.model_group]);
        if let Some(u) = &row.user {
            flush(&["user:", u]);
            flush(&["usermodel:", u, ":", &row.model_group]);
        }
        if let (Some(t), Some(u)) = (&row.team_id, &row.user) {
            flush(&["member:", t, ":", u]);
        }
        if let Some(t) = &row.team_id {
            flush(&["team:", t]);
            flush(&["teammodel:", t, ":", &row.model_group]);
            let teams = self.teams.pin();
            let org = teams
                .get(t.as_str())
                .and_then(|t| t.record.organization_id.as_deref());
            if let Some(org) = org {
                flush(&["org:", org]);
            }
        }
        if row.proxy_budget {
            flush(&["user:", PROXY_BUDGET_USER]);
        }
        if let Some(e) = &row.end_user {
            self.end_users.flushed(e, nanos);
        }
    }
}

/// A member's budget in its team, its budgets per model group and the
/// budget row its membership links to.
type MemberBudgets = (
    Option<Arc<Budget>>,
    Vec<(String, BudgetWindow)>,
    Option<BudgetRecord>,
);

/// A member's budgets per model group in its team, as LiteLLM resolves
/// `team_member_model_max_budget`: its own row's `model_max_budget` when
/// the row is not the team's default and sets any, else the default row's.
/// Each entry with a `time_period` is a window of that length (LiteLLM
/// counts no entry without one).
fn member_model_budgets(
    own: Option<&BudgetRecord>,
    defaults: Option<&BudgetRecord>,
) -> Vec<(String, BudgetWindow)> {
    let is_default = own.is_some_and(|o| defaults.is_some_and(|d| d.budget_id == o.budget_id));
    let own_models = own
        .filter(|_| !is_default)
        .and_then(|o| o.model_max_budget.as_ref())
        .filter(|m| !m.is_empty());
    let Some(models) = own_models.or_else(|| defaults.and_then(|d| d.model_max_budget.as_ref()))
    else {
        return Vec::new();
    };
    models
        .iter()
        .filter_map(|(group, entry)| {
            let max = entry
                .get("budget_limit")
                .or_else(|| entry.get("max_budget"))
                .and_then(crate::store::usd_value)?;
            let duration = entry
                .get("time_period")
                .or_else(|| entry.get("budget_duration"))
                .and_then(Value::as_str)?;
            let window = BudgetWindow {
                budget_duration: duration.to_string(),
                max_budget: max,
                reset_at: None,
            };
            Some((group.clone(), window))
        })
        .collect()
}

/// A member's budget in its team (USD) at `now`, as LiteLLM's
/// `resolve_effective_team_member_budget`: its own row's `max_budget`
/// when set, else the team default's when above 0; either raised by its
/// own row's `temp_budget_increase` while `temp_budget_expiry` is ahead.
fn member_max_budget(
    own: Option<&BudgetRecord>,
    defaults: Option<&BudgetRecord>,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<f64> {
    let max = match own.and_then(|b| b.max_budget) {
        Some(max) => max,
        None => defaults.and_then(|b| b.max_budget).filter(|m| *m > 0.0)?,
    };
    let increase = own
        .filter(|b| b.temp_budget_expiry.is_some_and(|at| at > now))
        .and_then(|b| b.temp_budget_increase)
        .filter(|i| i.is_finite() && *i > 0.0)
        .unwrap_or(0.0);
    let max = max + increase;
    max.is_finite().then_some(max)
}

/// The default member budget row `team` names in its
/// `metadata.team_member_budget_id`, when it exists.
async fn member_defaults(
    store: &dyn Store,
    team: &TeamRecord,
) -> Result<Option<BudgetRecord>, StoreError> {
    let Some(id) = team
        .metadata
        .get("team_member_budget_id")
        .and_then(Value::as_str)
    else {
        return Ok(None);
    };
    Ok(store
        .budgets(Some(&[id.to_string()]))
        .await?
        .into_iter()
        .next())
}

/// Whether rows `a` and `b` count against the same budgets (key, the key's
/// model group, user, team, end user).
fn same_budgets(a: &SpendLogRow, b: &SpendLogRow) -> bool {
    a.api_key == b.api_key
        && a.model_group == b.model_group
        && a.user == b.user
        && a.team_id == b.team_id
        && a.end_user == b.end_user
        && a.proxy_budget == b.proxy_budget
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Reservation;
    use crate::store::MemoryStore;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn cores_installing_one_row_at_once_share_one_budget_counter() {
        // Two counters for one budget would each admit up to the budget
        // (and, with slices, share one hold name in Redis).
        const THREADS: usize = 8;
        const ROWS: usize = 300;
        let cache = KeyCache::default();
        let start = std::sync::Barrier::new(THREADS);
        let seen: Vec<Vec<Arc<Budget>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        (0..ROWS)
                            .map(|i| {
                                cache.budget(
                                    format!("key:k{i}"),
                                    Place::principal("key", &format!("k{i}")),
                                    None,
                                    (Some(1.0), None),
                                    0.0,
                                )
                            })
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for row in 0..ROWS {
            for other in &seen[1..] {
                assert!(
                    Arc::ptr_eq(&seen[0][row], &other[row]),
                    "row {row} got two budget counters"
                );
            }
        }
    }

    #[test]
    fn loads_refreshes_and_forgets_keys() {
        let store = MemoryStore::default();
        let cache = KeyCache::default();
        let hash = hash_key("sk-abc");
        let token = token_hex(&hash);
        block_on(async {
            assert!(cache.load(&store, &token).await.unwrap().is_none());
            let team = TeamRecord {
                team_id: "t1".into(),
                max_budget: Some(5.0),
                ..Default::default()
            };
            store.insert_team(&team).await.unwrap();
            let key = KeyRecord {
                token: token.clone(),
                team_id: Some("t1".into()),
                max_budget: Some(1.0),
                ..Default::default()
            };
            store.insert_key(&key).await.unwrap();
            let entry = cache.load(&store, &token).await.unwrap().unwrap();
            assert_eq!(entry.team.as_ref().unwrap().record.max_budget, Some(5.0));
            let budget = entry.budget.clone();

            let mut blocked = key.clone();
            blocked.blocked = true;
            store.update_key(&blocked).await.unwrap();
            cache
                .refresh(&store, &Change::Key(token.clone()))
                .await
                .unwrap();
            let fresh = cache.get(&hash).unwrap();
            assert!(fresh.record.blocked);
            assert!(
                Arc::ptr_eq(&fresh.budget, &budget),
                "budget counters survive a refresh"
            );

            store
                .delete_keys(std::slice::from_ref(&token))
                .await
                .unwrap();
            cache
                .refresh(&store, &Change::Key(token.clone()))
                .await
                .unwrap();
            assert!(cache.get(&hash).is_none());
        });
    }

    /// A key read again between the copies and the check is named (its
    /// copy may count a spend write twice); one left alone, or not cached
    /// at all, is not.
    #[test]
    fn keys_read_again_during_a_spend_write_are_named() {
        let store = MemoryStore::default();
        let cache = KeyCache::default();
        let token_of = |k: &str| token_hex(&hash_key(k));
        let row = |token: &str| SpendLogRow {
            api_key: token.into(),
            ..Default::default()
        };
        block_on(async {
            let (busy, quiet, absent) = (
                token_of("sk-busy"),
                token_of("sk-quiet"),
                token_of("sk-absent"),
            );
            for token in [&busy, &quiet] {
                let key = KeyRecord {
                    token: token.clone(),
                    ..Default::default()
                };
                store.insert_key(&key).await.unwrap();
                cache.load(&store, token).await.unwrap().unwrap();
            }
            // Runs of one key, as a core's batch has them: each is named.
            let rows = [
                row(&quiet),
                row(&quiet),
                row(&busy),
                row(&busy),
                row(&quiet),
                row(&absent),
                row("not hex"),
                row("not hex"),
            ];
            let copies = cache.copies_of(&rows);
            assert!(cache.read_again_since(cache.copies_of(&rows)).is_empty());
            cache
                .refresh(&store, &Change::Key(busy.clone()))
                .await
                .unwrap();
            assert_eq!(
                cache.read_again_since(copies),
                vec![Change::Key(busy.clone())]
            );
        });
    }

    /// A refresh that read a key before a spend write committed, and
    /// would install what it read after the write was marked flushed,
    /// would drop the write's spend: it reads again instead.
    #[test]
    fn a_refresh_racing_a_spend_write_keeps_the_written_spend() {
        let store = MemoryStore::default();
        let cache = Arc::new(KeyCache::default());
        let token = token_hex(&hash_key("sk-race"));
        block_on(async {
            let key = KeyRecord {
                token: token.clone(),
                max_budget: Some(10.0),
                ..Default::default()
            };
            store.insert_key(&key).await.unwrap();
            let entry = cache.load(&store, &token).await.unwrap().unwrap();
            Reservation::acquire(&[("key", entry.budget.clone())], 1.0)
                .unwrap()
                .settle(0.5);
            let rows = vec![SpendLogRow {
                api_key: token.clone().into(),
                spend: 0.5,
                ..Default::default()
            }];
            let writer = cache.clone();
            store.after_next_key_read(move |store| {
                store.commit_spend(&rows);
                writer.mark_flushed(&rows);
            });
            cache
                .refresh(&store, &Change::Key(token.clone()))
                .await
                .unwrap();
            assert_eq!(store.get_key(&token).await.unwrap().unwrap().spend, 0.5);
            assert_eq!(entry.budget.spent_usd(), 0.5);
        });
    }

    /// A restricted end user read while a spend write ran may count the
    /// write's spend already: the writer reads it once more afterwards.
    #[test]
    fn end_users_read_again_during_a_spend_write_are_named() {
        use crate::store::{EndUserBudget, EndUserRecord};
        let store = MemoryStore::default();
        let cache = KeyCache::default();
        let row = |end_user: &str| SpendLogRow {
            end_user: Some(end_user.into()),
            ..Default::default()
        };
        block_on(async {
            let budget = EndUserBudget {
                budget_id: "b1".into(),
                max_budget: Some(2.0),
                ..Default::default()
            };
            for id in ["busy", "quiet", "late"] {
                let record = EndUserRecord {
                    user_id: id.into(),
                    ..Default::default()
                };
                store.insert_end_user(&record, Some(&budget)).await.unwrap();
            }
            let plain = EndUserRecord {
                user_id: "plain".into(),
                ..Default::default()
            };
            store.insert_end_user(&plain, None).await.unwrap();
            for id in ["busy", "quiet"] {
                cache.end_users().load(&store, id).await.unwrap().unwrap();
            }
            let rows = [
                row("quiet"),
                row("busy"),
                row("quiet"),
                row("late"),
                row("plain"),
            ];
            let copies = cache.copies_of(&rows);
            assert!(cache.read_again_since(cache.copies_of(&rows)).is_empty());
            for id in ["busy", "late", "plain"] {
                cache
                    .refresh(&store, &Change::EndUser(id.into()))
                    .await
                    .unwrap();
            }
            assert_eq!(
                cache.read_again_since(copies),
                vec![
                    Change::EndUser("busy".into()),
                    Change::EndUser("late".into())
                ]
            );
        });
    }

    /// An end user riding a default budget row and the proxy budget keep
    /// their counters when read again (no entry is replaced), so a read
    /// during a spend write is told by the counter's installs: both are
    /// named to be read once more, and nothing else is.
    #[test]
    fn riders_and_the_proxy_budget_read_again_during_a_spend_write_are_named() {
        use crate::store::{EndUserBudget, EndUserRecord};
        let store = MemoryStore::default();
        let cache = KeyCache::default();
        block_on(async {
            cache.set_up_proxy_budget(&store, 10.0, None).await.unwrap();
            let default_row = Arc::new(EndUserBudget {
                budget_id: "default".into(),
                max_budget: Some(1.0),
                ..Default::default()
            });
            for id in ["rider", "idle"] {
                let record = EndUserRecord {
                    user_id: id.into(),
                    ..Default::default()
                };
                store.insert_end_user(&record, None).await.unwrap();
                cache
                    .end_users()
                    .defaults()
                    .ride(record, &default_row, None);
            }
            let rows = [
                SpendLogRow {
                    end_user: Some("rider".into()),
                    proxy_budget: true,
                    ..Default::default()
                },
                SpendLogRow {
                    end_user: Some("idle".into()),
                    ..Default::default()
                },
            ];
            assert!(cache.read_again_since(cache.copies_of(&rows)).is_empty());
            let copies = cache.copies_of(&rows);
            for change in [
                Change::EndUser("rider".into()),
                Change::User(PROXY_BUDGET_USER.into()),
            ] {
                cache.refresh(&store, &change).await.unwrap();
            }
            assert_eq!(
                cache.read_again_since(copies),
                vec![
                    Change::EndUser("rider".into()),
                    Change::User(PROXY_BUDGET_USER.into())
                ]
            );
        });
    }

    /// Runs of rows of one key are flushed together and interleaved keys
    /// each get their own rows' amounts, to the nanodollar: once the
    /// database's figure replaces the durable one, nothing flushed is left
    /// counted twice and nothing unflushed is lost.
    #[test]
    fn written_rows_move_exactly_their_spend_to_durable() {
        let store = MemoryStore::default();
        let cache = KeyCache::default();
        let token_of = |k: &str| token_hex(&hash_key(k));
        let row = |token: &str, team: &str, spend: f64| SpendLogRow {
            api_key: token.into(),
            team_id: Some(team.into()),
            spend,
            ..Default::default()
        };
        block_on(async {
            let team = TeamRecord {
                team_id: "t1".into(),
                max_budget: Some(100.0),
                ..Default::default()
            };
            store.insert_team(&team).await.unwrap();
            let (a, b) = (token_of("sk-a"), token_of("sk-b"));
            let mut entries = Vec::new();
            for token in [&a, &b] {
                let key = KeyRecord {
                    token: token.clone(),
                    team_id: Some("t1".into()),
                    max_budget: Some(10.0),
                    ..Default::default()
                };
                store.insert_key(&key).await.unwrap();
                entries.push(cache.load(&store, token).await.unwrap().unwrap());
            }
            let team_budget = entries[0].team.as_ref().unwrap().budget.clone();
            let spends = [(0, 0.25), (0, 0.5), (1, 0.125), (0, 0.0625), (1, 0.03125)];
            for (i, usd) in spends {
                let e = &entries[i];
                let held = [("key", e.budget.clone()), ("team", team_budget.clone())];
                Reservation::acquire(&held, 1.0).unwrap().settle(usd);
            }
            let rows: Vec<SpendLogRow> = spends
                .iter()
                .map(|&(i, usd)| row([&a, &b][i], "t1", usd))
                .collect();
            // All but the last row written: it stays counted.
            cache.mark_flushed(&rows[..4]);
            for budget in [&entries[0].budget, &entries[1].budget, &team_budget] {
                budget.set_durable(0.0);
            }
            assert_eq!(entries[0].budget.spent_usd(), 0.0);
            assert_eq!(entries[1].budget.spent_usd(), 0.03125);
            assert_eq!(team_budget.spent_usd(), 0.03125);
        });
    }

    #[test]
    fn due_model_windows_are_found_while_keys_with_model_budgets_are_cached() {
        let store = MemoryStore::default();
        let cache = KeyCache::default();
        let token_of = |k: &str| token_hex(&hash_key(k));
        block_on(async {
            let plain = KeyRecord {
                token: token_of("sk-plain"),
                ..Default::default()
            };
            let mut budgets = serde_json::Map::new();
            budgets.insert(
                "gpt-4o".into(),
                serde_json::json!({"budget_limit": 1.0, "time_period": "1d"}),
            );
            let modeled = KeyRecord {
                token: token_of("sk-modeled"),
                model_max_budget: budgets,
                ..Default::default()
            };
            for k in [&plain, &modeled] {
                store.insert_key(k).await.unwrap();
            }
            let now = chrono::Utc::now();
            cache.load(&store, &plain.token).await.unwrap().unwrap();
            assert!(cache.due_model_windows(now).is_empty());
            cache.load(&store, &modeled.token).await.unwrap().unwrap();
            // Loaded again (a refresh): still counted once.
            cache.load(&store, &modeled.token).await.unwrap().unwrap();
            let due = cache.due_model_windows(now);
            assert_eq!(due.len(), 1, "{due:?}");
            assert_eq!(
                (due[0].0, due[0].1.as_str(), due[0].2.as_str()),
                (RowKind::Key, modeled.token.as_str(), "gpt-4o")
            );
            store
                .delete_keys(std::slice::from_ref(&modeled.token))
                .await
                .unwrap();
            assert!(cache.load(&store, &modeled.token).await.unwrap().is_none());
            assert_eq!(cache.with_model_budgets.load(Ordering::Relaxed), 0);
            assert!(cache.due_model_windows(now).is_empty());
        });
    }

    #[test]
    fn knows_stored_keys_and_those_announced_or_loaded_later() {
        let store = MemoryStore::default();
        let cache = KeyCache::default();
        let token_of = |k: &str| token_hex(&hash_key(k));
        block_on(async {
            for k in ["sk-one", "sk-two"] {
                let rec = KeyRecord {
                    token: token_of(k),
                    ..Default::default()
                };
                store.insert_key(&rec).await.unwrap();
            }
            assert!(!cache.is_known(&hash_key("sk-one")));
            assert_eq!(cache.reload_known(&store).await.unwrap(), 2);
            assert!(cache.is_known(&hash_key("sk-one")) && cache.is_known(&hash_key("sk-two")));
            assert!(!cache.is_known(&hash_key("sk-random")));
            cache
                .refresh(&store, &Change::Key(token_of("sk-three")))
                .await
                .unwrap();
            assert!(cache.is_known(&hash_key("sk-three")), "announced");
            assert!(cache.get(&hash_key("sk-three")).is_none(), "not cached");
            let four = KeyRecord {
                token: token_of("sk-four"),
                ..Default::default()
            };
            store.insert_key(&four).await.unwrap();
            cache.load(&store, &four.token).await.unwrap().unwrap();
            assert!(cache.is_known(&hash_key("sk-four")), "loaded");
            // A reload drops the announced key the store does not hold.
            cache.reload_known(&store).await.unwrap();
            assert!(!cache.is_known(&hash_key("sk-three")));
            assert_eq!(cache.known_len(), 3);
            let h = hash_key("sk-one");
            cache.note_miss(&h);
            assert!(cache.recently_missed(&h));
        });
    }

    #[test]
    fn a_members_own_row_takes_the_place_of_the_teams_default() {
        let row = |id: &str, max: Option<f64>, models: Value| BudgetRecord {
            budget_id: id.into(),
            max_budget: max,
            model_max_budget: models.as_object().cloned(),
            ..Default::default()
        };
        let models = serde_json::json!({"m": {"budget_limit": 2.0, "time_period": "1d"},
            "no-window": {"budget_limit": 1.0}});
        let now = chrono::Utc::now();
        let default = row("d", Some(10.0), models);
        let own = row("own", Some(3.0), serde_json::json!({}));
        assert_eq!(
            member_max_budget(Some(&own), Some(&default), now),
            Some(3.0)
        );
        assert_eq!(member_max_budget(None, Some(&default), now), Some(10.0));
        let no_max = row("own", None, serde_json::json!({}));
        assert_eq!(
            member_max_budget(Some(&no_max), Some(&default), now),
            Some(10.0)
        );
        let zero = row("d", Some(0.0), serde_json::json!({}));
        assert_eq!(
            member_max_budget(None, Some(&zero), now),
            None,
            "a default of 0 is none"
        );
        // A temporary increase on the member's row raises its own cap or
        // the default's until its expiry.
        let later = now + chrono::Duration::hours(1);
        let raised = |max| BudgetRecord {
            temp_budget_increase: Some(2.0),
            temp_budget_expiry: Some(later),
            ..row("own", max, serde_json::json!({}))
        };
        assert_eq!(
            member_max_budget(Some(&raised(Some(3.0))), Some(&default), now),
            Some(5.0)
        );
        assert_eq!(
            member_max_budget(Some(&raised(None)), Some(&default), now),
            Some(12.0)
        );
        assert_eq!(
            member_max_budget(Some(&raised(Some(3.0))), Some(&default), later),
            Some(3.0),
            "over at its expiry"
        );
        // Per model: an own row without entries falls back to the default's;
        // entries without a window are not counted.
        let windows = member_model_budgets(Some(&own), Some(&default));
        assert_eq!(windows.len(), 1, "{windows:?}");
        assert_eq!((windows[0].0.as_str(), windows[0].1.max_budget), ("m", 2.0));
        let own_models = row(
            "own",
            None,
            serde_json::json!({"m": {"budget_limit": 0.5, "time_period": "1h"}}),
        );
        let windows = member_model_budgets(Some(&own_models), Some(&default));
        assert_eq!(windows[0].1.budget_duration, "1h");
        // Linked to the default row itself: the default's entries.
        let windows = member_model_budgets(Some(&default), Some(&default));
        assert_eq!(windows[0].1.max_budget, 2.0);
    }

    #[test]
    fn resync_budget_is_bounded_per_window() {
        let cache = KeyCache::default();
        let granted = (0..100).filter(|_| cache.try_resync()).count();
        assert_eq!(granted as u64, crate::read_through::RESYNC_PER_WINDOW);
    }
}
