//! Persistence of keys, teams, users, models, budgets, organizations and
//! spend: one trait, two backends
//! (Postgres when `DATABASE_URL` is set, in-memory otherwise). Only the
//! control-plane thread calls it; the request path reads caches.

mod budget_windows;
pub mod cipher;
mod daily;
mod end_users;
mod lists;
mod managed;
mod memory;
pub mod orgs;
pub mod postgres;
mod records;
pub mod settings;

pub use budget_windows::{read_windows, windows_json};
pub use daily::{
    endpoint_of, DailyBatch, DailyCounts, DailyDelta, DailyKey, DailyPage, DailyQuery, DailyRow,
    DailyScope,
};
pub use end_users::{BudgetFields, EndUserBudget, EndUserRecord, EndUserUpdate};
pub use lists::{OrgFilter, TeamFilter, TeamOrder, UserFilter};
pub use managed::{ManagedKind, ManagedObject};
pub use memory::MemoryStore;
pub use orgs::{BudgetRecord, OrgMembership, OrgRecord, OrgTable};
pub use records::{
    next_reset, parse_duration, usd_value, BudgetWindow, DurationError, JsonText, KeyRecord,
    LogCursor, LogPage, ModelBudgets, ModelRecord, SpendFilter, SpendLogRow, TeamRecord,
    UserRecord, MAX_DURATION, MODEL_WINDOWS, OWN_BUDGET_PREFIX, PROXY_BUDGET_USER,
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// A persistence failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or failed.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// An insert collided with an existing row.
    #[error("{0} already exists")]
    Conflict(String),
    /// A query failed for another reason.
    #[error("database error: {0}")]
    Query(String),
}

/// One entry of a team's `members_with_roles` (LiteLLM's `Member`).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct TeamMember {
    /// The member's user id.
    pub user_id: String,
    /// The member's email, when known.
    pub user_email: Option<String>,
    /// `admin` or `user`.
    pub role: String,
}

/// A user's row in a team (`LiteLLM_TeamMembership`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Membership {
    /// What the user spent in the team since its budget row's last reset.
    pub spend: f64,
    /// The member's own budget row (`max_budget_in_team`, ...), or the
    /// team's default member budget row it was linked to.
    pub budget_id: Option<String>,
}

/// A change of one team membership, applied atomically by the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberOp {
    /// Joins the team (the user row is created when missing).
    Add,
    /// Changes the role (and email, when given) of a member.
    Update,
    /// Leaves the team.
    Remove,
}

/// What a [`MemberOp`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberOutcome {
    /// The team (or organization) does not exist.
    NoTeam,
    /// Nothing to do: already a member (add) or not one (update, remove).
    Unchanged,
    /// Applied.
    Changed,
}

/// A row of LiteLLM's account tables that [`Store::patch`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// `LiteLLM_VerificationToken`, by token.
    Key,
    /// `LiteLLM_TeamTable`, by team id.
    Team,
    /// `LiteLLM_UserTable`, by user id.
    User,
}

impl RowKind {
    /// The fields [`Store::patch`] writes: the record's fields that are
    /// columns of the table under the same name (not spend, which is only
    /// added to, nor creation times).
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            RowKind::Key => &[
                "key_alias",
                "max_budget",
                "budget_duration",
                "budget_reset_at",
                "expires",
                "models",
                "aliases",
                "user_id",
                "team_id",
                "max_parallel_requests",
                "tpm_limit",
                "rpm_limit",
                "model_max_budget",
                "model_rpm_limit",
                "model_tpm_limit",
                "blocked",
                "allowed_model_region",
                "allowed_cache_controls",
                "metadata",
            ],
            RowKind::Team => &[
                "team_alias",
                "organization_id",
                "models",
                "members",
                "max_budget",
                "budget_duration",
                "budget_reset_at",
                "tpm_limit",
                "rpm_limit",
                "max_parallel_requests",
                "blocked",
                "allowed_model_region",
                "metadata",
                "model_max_budget",
            ],
            RowKind::User => &[
                "user_email",
                "user_alias",
                "user_role",
                "teams",
                "models",
                "max_budget",
                "budget_duration",
                "budget_reset_at",
                "tpm_limit",
                "rpm_limit",
                "max_parallel_requests",
                "metadata",
                "model_max_budget",
            ],
        }
    }

    /// What a patch of row `id` makes stale.
    pub fn change(self, id: &str) -> Change {
        let id = id.to_string();
        match self {
            RowKind::Key => Change::Key(id),
            RowKind::Team => Change::Team(id),
            RowKind::User => Change::User(id),
        }
    }
}

/// What a spend write changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SpendChanges {
    /// Every key, user, team and end user whose stored figures changed: the
    /// other replicas' copies are stale.
    pub announce: Vec<Change>,
    /// Those whose copy in the writing replica is stale too. The writer's
    /// cache already counts the spend it wrote to keys, users and teams
    /// (`KeyCache::mark_flushed` moves it from unflushed to durable), so
    /// these are the owners of rows of an earlier budget period (logged
    /// but not counted: they must read the figure that leaves them out) and
    /// end users with a budget row.
    pub refresh: Vec<Change>,
}

/// Something whose cached copy is stale after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A key, by its hashed token.
    Key(String),
    /// A team, by id: every key of the team is stale too.
    Team(String),
    /// A user, by id: every key of the user is stale too.
    User(String),
    /// A model deployment added through the API, by id.
    Model(String),
    /// An end user (`LiteLLM_EndUserTable`), by id.
    EndUser(String),
    /// A budget row (`LiteLLM_BudgetTable`), by id: the end users riding
    /// it as their default budget read it again.
    Budget(String),
}

impl Change {
    /// The NOTIFY payload, e.g. `key:<token>`.
    pub fn payload(&self) -> String {
        match self {
            Change::Key(t) => format!("key:{t}"),
            Change::Team(t) => format!("team:{t}"),
            Change::User(t) => format!("user:{t}"),
            Change::Model(t) => format!("model:{t}"),
            Change::EndUser(t) => format!("end_user:{t}"),
            Change::Budget(t) => format!("budget:{t}"),
        }
    }

    /// Parses a NOTIFY payload.
    pub fn parse(payload: &str) -> Option<Change> {
        let (kind, id) = payload.split_once(':')?;
        let id = id.to_string();
        match kind {
            "key" => Some(Change::Key(id)),
            "team" => Some(Change::Team(id)),
            "user" => Some(Change::User(id)),
            "model" => Some(Change::Model(id)),
            "end_user" => Some(Change::EndUser(id)),
            "budget" => Some(Change::Budget(id)),
            _ => None,
        }
    }
}

/// Which keys a page of `/key/list` shows: each field given must match.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyFilter<'a> {
    /// The key's user.
    pub user_id: Option<&'a str>,
    /// The key's team.
    pub team_id: Option<&'a str>,
    /// The key's alias.
    pub key_alias: Option<&'a str>,
    /// Only keys with a rate limit: their own ([`KeyRecord::has_limits`])
    /// or an rpm or tpm limit of the shared budget row they link
    /// (`LiteLLM_BudgetTable`, which fills what the key leaves unset).
    pub has_limits: bool,
}

/// Keys, teams, users and spend, as the management API and the control plane
/// need them. Every mutation reports what it changed so caches everywhere can
/// be invalidated.
#[async_trait]
pub trait Store: Send + Sync {
    /// A key by hashed token.
    async fn get_key(&self, token: &str) -> Result<Option<KeyRecord>, StoreError>;
    /// Inserts a new key.
    async fn insert_key(&self, key: &KeyRecord) -> Result<(), StoreError>;
    /// Replaces a key's fields (not its spend); `false` if it does not exist.
    async fn update_key(&self, key: &KeyRecord) -> Result<bool, StoreError>;
    /// Sets a key's spend (reset or correction).
    async fn set_key_spend(&self, token: &str, spend: f64) -> Result<bool, StoreError>;
    /// Replaces a key's token (regeneration), keeping everything else.
    async fn rename_key(&self, old: &str, new: &KeyRecord) -> Result<bool, StoreError>;
    /// Deletes keys; returns the tokens that existed.
    async fn delete_keys(&self, tokens: &[String]) -> Result<Vec<String>, StoreError>;
    /// Keys, optionally of one user or team, newest first.
    async fn list_keys(
        &self,
        user_id: Option<&str>,
        team_id: Option<&str>,
    ) -> Result<Vec<KeyRecord>, StoreError>;
    /// One page of the keys `filter` selects, newest first (`offset` rows
    /// skipped, at most `limit`), and how many it selects in all.
    async fn list_keys_page(
        &self,
        filter: KeyFilter<'_>,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<KeyRecord>, u64), StoreError>;
    /// Calls `sink` with the hashed token of every key; returns how many.
    async fn key_tokens(
        &self,
        sink: &mut (dyn for<'t> FnMut(&'t str) + Send),
    ) -> Result<usize, StoreError>;

    /// A team by id.
    async fn get_team(&self, team_id: &str) -> Result<Option<TeamRecord>, StoreError>;
    /// Inserts a team.
    async fn insert_team(&self, team: &TeamRecord) -> Result<(), StoreError>;
    /// Replaces a team's fields (not its spend).
    async fn update_team(&self, team: &TeamRecord) -> Result<bool, StoreError>;
    /// Sets a team's spend.
    async fn set_team_spend(&self, team_id: &str, spend: f64) -> Result<bool, StoreError>;
    /// Deletes teams; returns the ids that existed.
    async fn delete_teams(&self, ids: &[String]) -> Result<Vec<String>, StoreError>;
    /// Every team.
    async fn list_teams(&self) -> Result<Vec<TeamRecord>, StoreError>;
    /// One page of the teams `filter` selects in `order` (`descending`
    /// reverses it; ties by id), `offset` rows skipped, at most `limit`,
    /// and how many it selects in all.
    async fn list_teams_page(
        &self,
        filter: TeamFilter<'_>,
        order: TeamOrder,
        descending: bool,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<TeamRecord>, u64), StoreError>;

    /// A user by id.
    async fn get_user(&self, user_id: &str) -> Result<Option<UserRecord>, StoreError>;
    /// The users with these ids that exist, in one query (in no set order).
    async fn users(&self, user_ids: &[String]) -> Result<Vec<UserRecord>, StoreError>;
    /// Inserts a user.
    async fn insert_user(&self, user: &UserRecord) -> Result<(), StoreError>;
    /// Replaces a user's fields (not spend).
    async fn update_user(&self, user: &UserRecord) -> Result<bool, StoreError>;
    /// Sets a user's spend.
    async fn set_user_spend(&self, user_id: &str, spend: f64) -> Result<bool, StoreError>;
    /// Deletes users; returns the ids that existed.
    async fn delete_users(&self, ids: &[String]) -> Result<Vec<String>, StoreError>;

    /// Writes only `fields` (names from [`RowKind::columns`], values as the
    /// record serializes them) of row `id`, in one statement: concurrent
    /// patches of different fields of one row never lose one another.
    /// `false` if the row does not exist; a field outside the columns is
    /// an error.
    async fn patch(
        &self,
        kind: RowKind,
        id: &str,
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, StoreError>;
    /// Starts the budget window `start` (RFC 3339, from
    /// [`ModelBudgets::due_model_windows`]) of `model` on row `id` of `kind`
    /// (a key's token, a team's or user's id): records it in
    /// `metadata.`[`MODEL_WINDOWS`] and zeroes the row's `model_spend` of
    /// `model`, unless no window was recorded before (the first one only
    /// starts). One statement, applied once however many replicas ask;
    /// `false` when nothing changed.
    async fn start_model_window(
        &self,
        kind: RowKind,
        id: &str,
        model: &str,
        start: &str,
    ) -> Result<bool, StoreError>;
    /// Applies one membership change atomically (one statement: concurrent
    /// changes of one team never lose each other), keeping the team's
    /// `members` and `members_with_roles` and the user's `teams` in step.
    async fn change_team_member(
        &self,
        team_id: &str,
        op: MemberOp,
        member: &TeamMember,
    ) -> Result<MemberOutcome, StoreError>;
    /// The team's `members_with_roles`.
    async fn team_members(&self, team_id: &str) -> Result<Vec<TeamMember>, StoreError>;
    /// The `members_with_roles` of many teams at once, by team id (a team
    /// with none may be missing).
    async fn members_of_teams(
        &self,
        team_ids: &[String],
    ) -> Result<HashMap<String, Vec<TeamMember>>, StoreError>;
    /// `user_id`'s row in `team_id` (`LiteLLM_TeamMembership`), when it
    /// has one.
    async fn membership(
        &self,
        team_id: &str,
        user_id: &str,
    ) -> Result<Option<Membership>, StoreError>;
    /// Links `user_id`'s membership in `team_id` to budget row `budget_id`
    /// (`None` unlinks it), making the membership row when missing, and
    /// announces the team.
    async fn link_member_budget(
        &self,
        team_id: &str,
        user_id: &str,
        budget_id: Option<&str>,
    ) -> Result<(), StoreError>;
    /// Links the memberships of `user_ids` in `team_id` that have no budget
    /// row (or no membership row yet) to `budget_id`, and announces the team
    /// once.
    async fn link_unlinked_members(
        &self,
        team_id: &str,
        user_ids: &[String],
        budget_id: &str,
    ) -> Result<(), StoreError>;
    /// The teams with a membership linked to budget row `budget_id`.
    async fn teams_of_member_budget(&self, budget_id: &str) -> Result<Vec<String>, StoreError>;
    /// The ids of (at most two) users with email `email`.
    async fn users_with_email(&self, email: &str) -> Result<Vec<String>, StoreError>;
    /// The users `filter` selects, newest first, `limit` from `offset`,
    /// and how many it selects in all.
    async fn list_users(
        &self,
        filter: UserFilter<'_>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<UserRecord>, i64), StoreError>;

    /// A model deployment by id.
    async fn get_model(&self, model_id: &str) -> Result<Option<ModelRecord>, StoreError>;
    /// The model deployments of one group, by id.
    async fn models_named(&self, model_name: &str) -> Result<Vec<ModelRecord>, StoreError>;
    /// Every model deployment, by id.
    async fn list_models(&self) -> Result<Vec<ModelRecord>, StoreError>;
    /// Inserts a model deployment.
    async fn insert_model(&self, model: &ModelRecord) -> Result<(), StoreError>;
    /// Replaces a model deployment's fields (not its creation);
    /// `false` if it does not exist.
    async fn update_model(&self, model: &ModelRecord) -> Result<bool, StoreError>;
    /// Deletes a model deployment; `false` if it did not exist.
    async fn delete_model(&self, model_id: &str) -> Result<bool, StoreError>;

    /// Budget rows with these ids (every one when `None`), by id.
    async fn budgets(&self, ids: Option<&[String]>) -> Result<Vec<BudgetRecord>, StoreError>;
    /// Inserts a budget row (`Conflict` when its id is taken).
    async fn insert_budget(&self, budget: &BudgetRecord) -> Result<(), StoreError>;
    /// Deletes a budget row; the row as it was, when it existed.
    async fn delete_budget(&self, budget_id: &str) -> Result<Option<BudgetRecord>, StoreError>;
    /// Organizations with these ids (every one when `None`), by id.
    async fn organizations(&self, ids: Option<&[String]>) -> Result<Vec<OrgRecord>, StoreError>;
    /// One page of the organizations `filter` selects, by id, `offset`
    /// rows skipped, at most `limit`, and how many it selects in all.
    async fn organizations_page(
        &self,
        filter: OrgFilter<'_>,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<OrgRecord>, u64), StoreError>;
    /// Inserts `budget` (when given) and the organization, atomically
    /// (`Conflict` naming which id was taken).
    async fn insert_organization(
        &self,
        org: &OrgRecord,
        budget: Option<&BudgetRecord>,
    ) -> Result<(), StoreError>;
    /// Writes only `fields` (names from [`OrgTable::columns`]) of row `id`
    /// in one statement, `updated_at` with them; an organization's
    /// `metadata` is merged into the stored one. `false` when the row does
    /// not exist.
    async fn patch_org_row(
        &self,
        table: OrgTable,
        id: &str,
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, StoreError>;
    /// Deletes an organization and its memberships, detaching its teams;
    /// the row as it was, when it existed.
    async fn delete_organization(&self, org_id: &str) -> Result<Option<OrgRecord>, StoreError>;
    /// The memberships of an organization, by user id.
    async fn org_members(&self, org_id: &str) -> Result<Vec<OrgMembership>, StoreError>;
    /// The memberships of many organizations at once (a page of
    /// `/organization/list`), by organization id then user id, in one query.
    async fn members_of_orgs(&self, org_ids: &[String]) -> Result<Vec<OrgMembership>, StoreError>;
    /// The teams of many organizations at once, by organization id then
    /// team id, at most `per_org` of each, in one query.
    async fn teams_of_orgs(
        &self,
        org_ids: &[String],
        per_org: u64,
    ) -> Result<Vec<TeamRecord>, StoreError>;
    /// Applies one membership change atomically: `Add` creates the user row
    /// when missing (with `user_email`); `Update` writes the role and budget
    /// given. `NoTeam` when the organization does not exist.
    async fn change_org_member(
        &self,
        op: MemberOp,
        member: &OrgMembership,
        user_email: Option<&str>,
    ) -> Result<MemberOutcome, StoreError>;
    /// An end user with its budget row.
    async fn get_end_user(&self, user_id: &str) -> Result<Option<EndUserRecord>, StoreError>;
    /// Inserts an end user and, when given, its new budget row (linked as
    /// its `budget_id`), atomically; `Conflict` when the id is taken.
    async fn insert_end_user(
        &self,
        user: &EndUserRecord,
        budget: Option<&EndUserBudget>,
    ) -> Result<(), StoreError>;
    /// Applies `update` atomically (each given column written in place,
    /// never read and written back); a budget row it creates gets
    /// `new_budget_id`. `None` when the end user does not exist, else the
    /// end users whose cached copies are stale: it, and every end user
    /// sharing the budget row it changed.
    async fn update_end_user(
        &self,
        user_id: &str,
        update: &EndUserUpdate,
        new_budget_id: &str,
    ) -> Result<Option<Vec<String>>, StoreError>;
    /// Sets `blocked` of end users; blocking creates the rows missing (as
    /// LiteLLM's upsert does). Returns the rows written.
    async fn set_end_users_blocked(
        &self,
        ids: &[String],
        blocked: bool,
    ) -> Result<Vec<EndUserRecord>, StoreError>;
    /// Deletes end users; returns the ids that existed.
    async fn delete_end_users(&self, ids: &[String]) -> Result<Vec<String>, StoreError>;
    /// End users by id, `limit` from `offset`, those whose id or alias
    /// contains `search` (any case) when given.
    async fn list_end_users(
        &self,
        offset: i64,
        limit: i64,
        search: Option<&str>,
    ) -> Result<Vec<EndUserRecord>, StoreError>;
    /// Calls `sink` with the id of every end user whose row restricts it
    /// ([`EndUserRecord::is_restricted`]) and whether it is blocked;
    /// returns how many.
    async fn restricted_end_users(
        &self,
        sink: &mut (dyn for<'t> FnMut(&'t str, bool) + Send),
    ) -> Result<usize, StoreError>;
    /// Whether budget row `budget_id` exists.
    async fn budget_exists(&self, budget_id: &str) -> Result<bool, StoreError>;
    /// Tokens of the keys linking budget row `budget_id` (whose cached
    /// copies a change of that row makes stale).
    async fn keys_of_budget(&self, budget_id: &str) -> Result<Vec<String>, StoreError>;
    /// Ids of the end users whose budget row is `budget_id` (whose cached
    /// copies a change of that row makes stale).
    async fn end_users_of_budget(&self, budget_id: &str) -> Result<Vec<String>, StoreError>;

    /// Records a file or batch created through the gateway.
    async fn insert_managed(&self, object: &ManagedObject) -> Result<(), StoreError>;
    /// The file or batch with the provider's id `id`, if the gateway created it.
    async fn get_managed(&self, id: &str) -> Result<Option<ManagedObject>, StoreError>;
    /// Ids of the files or batches `key` created, newest first, at most `limit`.
    async fn managed_ids(
        &self,
        key: &str,
        kind: ManagedKind,
        limit: usize,
    ) -> Result<Vec<String>, StoreError>;
    /// Marks `batch` as charged (LiteLLM's `batch_processed`), recording it
    /// first when its record has not landed yet; true only for the one call
    /// that changed it, so a batch is charged once.
    async fn claim_batch_charge(&self, batch: &ManagedObject) -> Result<bool, StoreError>;
    /// Claims up to `limit` batches due for a poll at `now` (created at or
    /// after `oldest`, not charged, status not final), moving their next
    /// poll to `next`: each due batch goes to one caller in the fleet.
    async fn due_batches(
        &self,
        now: DateTime<Utc>,
        next: DateTime<Utc>,
        oldest: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<ManagedObject>, StoreError>;
    /// Records a poll of batch `id`: its upstream `status`; `last` (a final
    /// status) ends its polls and its hold.
    async fn batch_polled(&self, id: &str, status: &str, last: bool) -> Result<(), StoreError>;
    /// The USD each of `key`'s open batches (not charged, not final) holds,
    /// by batch id.
    async fn batch_holds(&self, key: &str) -> Result<Vec<(String, f64)>, StoreError>;

    /// Writes spend-log rows idempotently (by `request_id`) and adds the spend
    /// of newly written rows to their key, user, team and end user
    /// (created when missing, as LiteLLM does), atomically.
    /// Returns what changed, to announce and to refresh here. The rows'
    /// writing may be spread over up to `spread`, so the database meets
    /// them in short pieces rather than one burst (the live writer's busy
    /// batches); zero writes them at once.
    async fn record_spend(
        &self,
        rows: &[SpendLogRow],
        spread: std::time::Duration,
    ) -> Result<SpendChanges, StoreError>;
    /// Adds the spend of `rows` to their key, user, team and end user as
    /// [`Store::record_spend`] does, without writing the rows (LiteLLM's
    /// `disable_spend_logs`); with no row to find again, a batch counted
    /// twice counts twice.
    async fn count_spend(&self, rows: &[SpendLogRow]) -> Result<SpendChanges, StoreError>;
    /// Spend-log rows matching a filter, oldest first.
    async fn spend_logs(&self, filter: &SpendFilter) -> Result<Vec<SpendLogRow>, StoreError>;
    /// One page of the spend-log rows matching `filter` (its `offset`
    /// unused), newest first, strictly older than `before` when given. A
    /// filter no index serves (user, team, model, status alone) looks at a
    /// bounded number of rows a call and says so ([`LogPage::partial`]).
    async fn spend_log_page(
        &self,
        filter: &SpendFilter,
        before: Option<&LogCursor>,
    ) -> Result<LogPage, StoreError>;
    /// One page of a daily aggregate table (LiteLLM's `LiteLLM_Daily*Spend`)
    /// for `/*/daily/activity`, newest day first.
    async fn daily_activity(&self, query: &DailyQuery) -> Result<DailyPage, StoreError>;
    /// Spend of every request since the day `since` (`YYYY-MM-DD`, UTC),
    /// from the daily user table (LiteLLM's `/global/spend` reads its
    /// last 30 days of spend so).
    async fn global_spend(&self, since: &str) -> Result<f64, StoreError>;
    /// Zeroes the spend of keys, teams and users whose `budget_reset_at` is
    /// past, and of the end users and team memberships of budget rows
    /// whose `budget_reset_at` is (the team's announced), and schedules the
    /// next reset; returns what changed. When `end_user_default` (the
    /// proxy-wide `litellm_settings.max_end_user_budget_id`) is among the
    /// rows due, the end users that link no budget row of their own (who
    /// ride it) are reset with it, as LiteLLM's reset job resets them.
    async fn reset_due_budgets(
        &self,
        now: DateTime<Utc>,
        end_user_default: Option<&str>,
    ) -> Result<Vec<Change>, StoreError>;
    /// Announces changes to every replica (Postgres NOTIFY); a no-op in memory.
    async fn announce(&self, changes: &[Change]) -> Result<(), StoreError>;
    /// Whether the store answers now (one round trip), checked before work
    /// that is wasted when it does not (a spool replay).
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Records that console session `id` was logged out until `expires`,
    /// for the other replicas ([`Store::console_session_ended`]); a no-op
    /// in memory, where the replica's own list is the fleet's.
    async fn end_console_session(
        &self,
        _id: &str,
        _expires: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    /// Whether any replica recorded console session `id` as logged out
    /// ([`Store::end_console_session`]); never in memory.
    async fn console_session_ended(&self, _id: &str) -> Result<bool, StoreError> {
        Ok(false)
    }
    /// LiteLLM's settings kept in the database (`LiteLLM_Config`,
    /// `LiteLLM_CacheConfig`); none in memory.
    async fn stored_settings(&self) -> Result<settings::StoredSettings, StoreError> {
        Ok(settings::StoredSettings::default())
    }
}
