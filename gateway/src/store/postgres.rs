//! The Postgres store: keys, teams, users, models and spend in LiteLLM's tables, so
//! the gateway runs on a database LiteLLM created (a key LiteLLM issued
//! authenticates here) and any number of replicas share one fleet view.
//!
//! Cross-replica freshness: every mutation sends `NOTIFY gateway_changes`
//! with its [`Change`] payload inside its own transaction, so a change and
//! its announcement commit together. The control plane's listener
//! (`sync::listener`) refreshes the other replicas' caches; this replica
//! refreshes its own when the caller publishes the returned changes, and the
//! listener skips notifications sent by this process's sessions
//! ([`SessionIds`]). [`Store::announce`] is therefore a no-op here.
//!
//! Limits: timestamps round to the millisecond (LiteLLM's `TIMESTAMP(3)`).
//! TLS as the URL's `sslmode` asks (`tls`).

mod accounts;
mod convert;
mod daily;
mod end_users;
mod keys;
mod log_page;
mod logouts;
mod managed;
mod members;
mod migrate;
mod models;
mod orgs;
mod pool;
mod settings;
mod spend;
mod spend_binary;
mod spend_copy;
mod tls;

pub use keys::RESYNC_TOKENS;
pub use migrate::MIGRATIONS;
pub use pool::{describe, pg_target, redact_url, PgConnection, PgTarget, SessionIds};
pub use tls::SslMode;

use super::cipher::ParamCipher;
use super::{
    BudgetRecord, Change, DailyPage, DailyQuery, EndUserBudget, EndUserRecord, EndUserUpdate,
    KeyFilter, KeyRecord, LogCursor, LogPage, ManagedKind, ManagedObject, MemberOp, MemberOutcome,
    Membership, ModelRecord, OrgFilter, OrgMembership, OrgRecord, OrgTable, RowKind, SpendChanges,
    SpendFilter, SpendLogRow, Store, StoreError, TeamFilter, TeamMember, TeamOrder, TeamRecord,
    UserFilter, UserRecord,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use pool::{classify, is_retryable_conflict, timed, Pool};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_postgres::types::Type;
use tokio_postgres::Transaction;

/// Runs `$op`, an expression using `$c`, a pooled session (a `&mut Client`
/// through `Deref`), with the pool's deadline; a session that failed is
/// replaced on next use. With `retry`, a transaction that lost a deadlock or
/// serialization conflict runs again (up to [`CONFLICT_ATTEMPTS`] times).
macro_rules! with_client {
    ($store:expr, $c:ident => $op:expr) => {{
        let mut conn = $store.pool.get().await?;
        let result = {
            let $c = conn.session();
            timed($op).await
        };
        conn.settle(result)
    }};
    (retry $store:expr, $c:ident => $op:expr) => {{
        let mut attempt = 1;
        loop {
            match with_client!($store, $c => $op) {
                Err(e) if is_retryable_conflict(&e) && attempt < CONFLICT_ATTEMPTS => attempt += 1,
                result => break result,
            }
        }
    }};
}

/// The NOTIFY channel of cache invalidations.
pub const CHANNEL: &str = "gateway_changes";

/// Times a transaction that hit a deadlock or serialization failure is run
/// again before the error reaches the caller.
const CONFLICT_ATTEMPTS: usize = 3;

/// [`Store`] over Postgres.
pub struct PostgresStore {
    pool: Pool,
    cipher: ParamCipher,
    spend_copy: spend::CopyState,
}

impl PostgresStore {
    /// Checks the database at `url` and applies pending migrations on one
    /// connection; returns a store whose pool connects on first use, on the
    /// runtime that uses it.
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let config = pg_target(url)?;
        let (mut client, _pid) = pool::connect(&config)
            .await
            .map_err(|e| StoreError::Unavailable(describe(&e)))?;
        let applied = migrate::migrate(&mut client)
            .await
            .map_err(|e| match classify(&e) {
                StoreError::Query(m) => StoreError::Query(format!("migration failed: {m}")),
                other => other,
            })?;
        if !applied.is_empty() {
            tracing::info!(?applied, "database migrations applied");
        }
        Ok(PostgresStore {
            pool: Pool::new(config),
            cipher: ParamCipher::default(),
            spend_copy: spend::CopyState::default(),
        })
    }

    /// [`connect`](Self::connect) from synchronous start-up code, on a
    /// short-lived runtime (the pool's connections open later, on the
    /// control plane's runtime).
    pub fn open(url: &str) -> Result<PostgresStore, StoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        runtime.block_on(Self::connect(url))
    }

    /// This store sealing and opening model params with `cipher` (keyless
    /// by default: params stored as they are).
    pub fn with_cipher(self, cipher: ParamCipher) -> PostgresStore {
        PostgresStore { cipher, ..self }
    }

    /// The backend process ids of this store's sessions, for the listener to
    /// skip this process's own notifications.
    pub fn sessions(&self) -> Arc<SessionIds> {
        self.pool.sessions()
    }
}

/// Sends each change on [`CHANNEL`]; delivered when `tx` commits. One
/// round trip (the parameter types given, nothing prepared).
async fn notify(tx: &Transaction<'_>, changes: &[Change]) -> Result<(), tokio_postgres::Error> {
    if changes.is_empty() {
        return Ok(());
    }
    let payloads: Vec<String> = changes.iter().map(Change::payload).collect();
    tx.execute_typed(
        "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p",
        &[(&CHANNEL, Type::TEXT), (&payloads, Type::TEXT_ARRAY)],
    )
    .await?;
    Ok(())
}

/// Tables whose spend and rows the generic helpers update.
const KEYS: &str = r#""LiteLLM_VerificationToken""#;
const TEAMS: &str = r#""LiteLLM_TeamTable""#;
const USERS: &str = r#""LiteLLM_UserTable""#;
const END_USERS: &str = r#""LiteLLM_EndUserTable""#;

#[async_trait]
impl Store for PostgresStore {
    async fn get_key(&self, token: &str) -> Result<Option<KeyRecord>, StoreError> {
        with_client!(self, c => keys::get(c, token))
    }

    async fn insert_key(&self, key: &KeyRecord) -> Result<(), StoreError> {
        let inserted = with_client!(self, c => keys::insert(c, key))?;
        conflict_unless(inserted, "key", &key.token)
    }

    async fn update_key(&self, key: &KeyRecord) -> Result<bool, StoreError> {
        with_client!(self, c => keys::update(c, key))
    }

    async fn set_key_spend(&self, token: &str, spend: f64) -> Result<bool, StoreError> {
        let change = Change::Key(token.to_string());
        with_client!(self, c => accounts::set_spend(c, KEYS, "token", token, spend, change))
    }

    async fn rename_key(&self, old: &str, new: &KeyRecord) -> Result<bool, StoreError> {
        with_client!(self, c => keys::rename(c, old, new))
    }

    async fn delete_keys(&self, tokens: &[String]) -> Result<Vec<String>, StoreError> {
        with_client!(self, c => keys::delete(c, tokens))
    }

    async fn list_keys(
        &self,
        user_id: Option<&str>,
        team_id: Option<&str>,
    ) -> Result<Vec<KeyRecord>, StoreError> {
        with_client!(self, c => keys::list(c, user_id, team_id))
    }

    async fn list_keys_page(
        &self,
        filter: KeyFilter<'_>,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<KeyRecord>, u64), StoreError> {
        with_client!(self, c => keys::page(c, filter, offset, limit))
    }

    async fn key_tokens(
        &self,
        sink: &mut (dyn for<'t> FnMut(&'t str) + Send),
    ) -> Result<usize, StoreError> {
        with_client!(self, c => keys::tokens(c, sink))
    }

    async fn get_team(&self, team_id: &str) -> Result<Option<TeamRecord>, StoreError> {
        with_client!(self, c => accounts::get_team(c, team_id))
    }

    async fn insert_team(&self, team: &TeamRecord) -> Result<(), StoreError> {
        let inserted = with_client!(self, c => accounts::write_team(c, team, true))?;
        conflict_unless(inserted, "team", &team.team_id)
    }

    async fn update_team(&self, team: &TeamRecord) -> Result<bool, StoreError> {
        with_client!(self, c => accounts::write_team(c, team, false))
    }

    async fn set_team_spend(&self, team_id: &str, spend: f64) -> Result<bool, StoreError> {
        let change = Change::Team(team_id.to_string());
        with_client!(self, c => accounts::set_spend(c, TEAMS, "team_id", team_id, spend, change))
    }

    async fn delete_teams(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        with_client!(self, c => accounts::delete(c, TEAMS, "team_id", ids, Change::Team))
    }

    async fn list_teams(&self) -> Result<Vec<TeamRecord>, StoreError> {
        with_client!(self, c => accounts::list_teams(c))
    }

    async fn list_teams_page(
        &self,
        filter: TeamFilter<'_>,
        order: TeamOrder,
        descending: bool,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<TeamRecord>, u64), StoreError> {
        let (offset, limit) = (sql_count(offset), sql_count(limit));
        with_client!(self, c => accounts::list_teams_page(c, &filter, order, descending, offset, limit))
    }

    async fn get_user(&self, user_id: &str) -> Result<Option<UserRecord>, StoreError> {
        with_client!(self, c => accounts::get_user(c, user_id))
    }

    async fn users(&self, user_ids: &[String]) -> Result<Vec<UserRecord>, StoreError> {
        with_client!(self, c => accounts::users(c, user_ids))
    }

    async fn insert_user(&self, user: &UserRecord) -> Result<(), StoreError> {
        let inserted = with_client!(self, c => accounts::write_user(c, user, true))?;
        conflict_unless(inserted, "user", &user.user_id)
    }

    async fn update_user(&self, user: &UserRecord) -> Result<bool, StoreError> {
        with_client!(self, c => accounts::write_user(c, user, false))
    }

    async fn set_user_spend(&self, user_id: &str, spend: f64) -> Result<bool, StoreError> {
        let change = Change::User(user_id.to_string());
        with_client!(self, c => accounts::set_spend(c, USERS, "user_id", user_id, spend, change))
    }

    async fn delete_users(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        with_client!(self, c => accounts::delete(c, USERS, "user_id", ids, Change::User))
    }

    async fn patch(
        &self,
        kind: RowKind,
        id: &str,
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, StoreError> {
        if let Some(k) = fields
            .keys()
            .find(|k| !kind.columns().contains(&k.as_str()))
        {
            return Err(StoreError::Query(format!("{k} cannot be patched")));
        }
        with_client!(retry self, c => members::patch(c, kind, id, fields))
    }

    async fn start_model_window(
        &self,
        kind: RowKind,
        id: &str,
        model: &str,
        start: &str,
    ) -> Result<bool, StoreError> {
        with_client!(retry self, c => members::start_model_window(c, kind, id, model, start))
    }

    async fn change_team_member(
        &self,
        team_id: &str,
        op: MemberOp,
        member: &TeamMember,
    ) -> Result<MemberOutcome, StoreError> {
        with_client!(retry self, c => members::change(c, team_id, op, member))
    }

    async fn team_members(&self, team_id: &str) -> Result<Vec<TeamMember>, StoreError> {
        with_client!(self, c => members::roles(c, team_id))
    }

    async fn members_of_teams(
        &self,
        team_ids: &[String],
    ) -> Result<HashMap<String, Vec<TeamMember>>, StoreError> {
        with_client!(self, c => members::roles_of_teams(c, team_ids))
    }

    async fn membership(
        &self,
        team_id: &str,
        user_id: &str,
    ) -> Result<Option<Membership>, StoreError> {
        with_client!(self, c => members::membership(c, team_id, user_id))
    }

    async fn link_member_budget(
        &self,
        team_id: &str,
        user_id: &str,
        budget_id: Option<&str>,
    ) -> Result<(), StoreError> {
        with_client!(retry self, c => members::link_budget(c, team_id, user_id, budget_id))
    }

    async fn link_unlinked_members(
        &self,
        team_id: &str,
        user_ids: &[String],
        budget_id: &str,
    ) -> Result<(), StoreError> {
        with_client!(retry self, c => members::link_unlinked(c, team_id, user_ids, budget_id))
    }

    async fn teams_of_member_budget(&self, budget_id: &str) -> Result<Vec<String>, StoreError> {
        with_client!(self, c => members::teams_of_budget(c, budget_id))
    }

    async fn users_with_email(&self, email: &str) -> Result<Vec<String>, StoreError> {
        with_client!(self, c => members::users_with_email(c, email))
    }

    async fn list_users(
        &self,
        filter: UserFilter<'_>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<UserRecord>, i64), StoreError> {
        with_client!(self, c => accounts::list_users(c, &filter, offset, limit))
    }

    async fn get_model(&self, model_id: &str) -> Result<Option<ModelRecord>, StoreError> {
        with_client!(self, c => models::get(c, &self.cipher, model_id))
    }

    async fn models_named(&self, model_name: &str) -> Result<Vec<ModelRecord>, StoreError> {
        with_client!(self, c => models::list(c, &self.cipher, Some(model_name)))
    }

    async fn list_models(&self) -> Result<Vec<ModelRecord>, StoreError> {
        with_client!(self, c => models::list(c, &self.cipher, None))
    }

    async fn insert_model(&self, model: &ModelRecord) -> Result<(), StoreError> {
        let inserted = with_client!(self, c => models::insert(c, &self.cipher, model))?;
        conflict_unless(inserted, "model", &model.model_id)
    }

    async fn update_model(&self, model: &ModelRecord) -> Result<bool, StoreError> {
        with_client!(self, c => models::update(c, &self.cipher, model))
    }

    async fn delete_model(&self, model_id: &str) -> Result<bool, StoreError> {
        with_client!(self, c => models::delete(c, model_id))
    }

    async fn budgets(&self, ids: Option<&[String]>) -> Result<Vec<BudgetRecord>, StoreError> {
        from_rows(with_client!(self, c => orgs::select(c, OrgTable::Budget, ids))?)
    }

    async fn insert_budget(&self, budget: &BudgetRecord) -> Result<(), StoreError> {
        let row = to_row(budget)?;
        let inserted = with_client!(self, c => orgs::insert_budget(c, &row))?;
        conflict_unless(inserted, "budget", &budget.budget_id)
    }

    async fn delete_budget(&self, budget_id: &str) -> Result<Option<BudgetRecord>, StoreError> {
        let row = with_client!(self, c => orgs::delete_budget(c, budget_id))?;
        Ok(from_rows(row.into_iter().collect())?.pop())
    }

    async fn organizations(&self, ids: Option<&[String]>) -> Result<Vec<OrgRecord>, StoreError> {
        from_rows(with_client!(self, c => orgs::select(c, OrgTable::Organization, ids))?)
    }

    async fn organizations_page(
        &self,
        filter: OrgFilter<'_>,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<OrgRecord>, u64), StoreError> {
        let (offset, limit) = (sql_count(offset), sql_count(limit));
        let (rows, total) =
            with_client!(self, c => orgs::organizations_page(c, &filter, offset, limit))?;
        Ok((from_rows(rows)?, total))
    }

    async fn insert_organization(
        &self,
        org: &OrgRecord,
        budget: Option<&BudgetRecord>,
    ) -> Result<(), StoreError> {
        let row = to_row(org)?;
        let budget_row = budget.map(to_row).transpose()?;
        match with_client!(self, c => orgs::insert_org(c, &row, budget_row.as_ref()))? {
            Ok(()) => Ok(()),
            Err("budget") => conflict_unless(false, "budget", &org.budget_id),
            Err(what) => conflict_unless(false, what, &org.organization_id),
        }
    }

    async fn patch_org_row(
        &self,
        table: OrgTable,
        id: &str,
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, StoreError> {
        if let Some(k) = fields
            .keys()
            .find(|k| !table.columns().contains(&k.as_str()))
        {
            return Err(StoreError::Query(format!("{k} cannot be patched")));
        }
        with_client!(retry self, c => orgs::patch(c, table, id, fields))
    }

    async fn delete_organization(&self, org_id: &str) -> Result<Option<OrgRecord>, StoreError> {
        let row = with_client!(retry self, c => orgs::delete_org(c, org_id))?;
        Ok(from_rows(row.into_iter().collect())?.pop())
    }

    async fn org_members(&self, org_id: &str) -> Result<Vec<OrgMembership>, StoreError> {
        from_rows(with_client!(self, c => orgs::members(c, org_id))?)
    }

    async fn members_of_orgs(&self, org_ids: &[String]) -> Result<Vec<OrgMembership>, StoreError> {
        from_rows(with_client!(self, c => orgs::members_of(c, org_ids))?)
    }

    async fn teams_of_orgs(
        &self,
        org_ids: &[String],
        per_org: u64,
    ) -> Result<Vec<TeamRecord>, StoreError> {
        let per_org = sql_count(per_org);
        with_client!(self, c => accounts::teams_of_orgs(c, org_ids, per_org))
    }

    async fn change_org_member(
        &self,
        op: MemberOp,
        member: &OrgMembership,
        user_email: Option<&str>,
    ) -> Result<MemberOutcome, StoreError> {
        with_client!(retry self, c => orgs::change_member(c, op, member, user_email))
    }

    async fn insert_managed(&self, object: &ManagedObject) -> Result<(), StoreError> {
        let inserted = with_client!(self, c => managed::insert(c, object))?;
        conflict_unless(inserted, object.kind.as_str(), &object.id)
    }

    async fn get_managed(&self, id: &str) -> Result<Option<ManagedObject>, StoreError> {
        with_client!(self, c => managed::get(c, id))
    }

    async fn managed_ids(
        &self,
        key: &str,
        kind: ManagedKind,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        with_client!(self, c => managed::ids(c, key, kind, limit))
    }

    async fn claim_batch_charge(&self, batch: &ManagedObject) -> Result<bool, StoreError> {
        with_client!(self, c => managed::claim(c, batch))
    }

    async fn due_batches(
        &self,
        now: DateTime<Utc>,
        next: DateTime<Utc>,
        oldest: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<ManagedObject>, StoreError> {
        with_client!(self, c => managed::due(c, now, next, oldest, limit))
    }

    async fn batch_polled(&self, id: &str, status: &str, last: bool) -> Result<(), StoreError> {
        with_client!(self, c => managed::polled(c, id, status, last))
    }

    async fn batch_holds(&self, key: &str) -> Result<Vec<(String, f64)>, StoreError> {
        with_client!(self, c => managed::holds(c, key))
    }

    async fn get_end_user(&self, user_id: &str) -> Result<Option<EndUserRecord>, StoreError> {
        with_client!(self, c => end_users::get(c, user_id))
    }

    async fn insert_end_user(
        &self,
        user: &EndUserRecord,
        budget: Option<&EndUserBudget>,
    ) -> Result<(), StoreError> {
        let inserted = with_client!(self, c => end_users::insert(c, user, budget))?;
        conflict_unless(inserted, "end user", &user.user_id)
    }

    async fn update_end_user(
        &self,
        user_id: &str,
        update: &EndUserUpdate,
        new_budget_id: &str,
    ) -> Result<Option<Vec<String>>, StoreError> {
        with_client!(retry self, c => end_users::update(c, user_id, update, new_budget_id))
    }

    async fn set_end_users_blocked(
        &self,
        ids: &[String],
        blocked: bool,
    ) -> Result<Vec<EndUserRecord>, StoreError> {
        with_client!(retry self, c => end_users::set_blocked(c, ids, blocked))
    }

    async fn delete_end_users(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        with_client!(self, c => accounts::delete(c, END_USERS, "user_id", ids, Change::EndUser))
    }

    async fn list_end_users(
        &self,
        offset: i64,
        limit: i64,
        search: Option<&str>,
    ) -> Result<Vec<EndUserRecord>, StoreError> {
        with_client!(self, c => end_users::list(c, offset, limit, search))
    }

    async fn restricted_end_users(
        &self,
        sink: &mut (dyn for<'t> FnMut(&'t str, bool) + Send),
    ) -> Result<usize, StoreError> {
        with_client!(self, c => end_users::restricted(c, sink))
    }

    async fn budget_exists(&self, budget_id: &str) -> Result<bool, StoreError> {
        with_client!(self, c => end_users::budget_exists(c, budget_id))
    }

    async fn keys_of_budget(&self, budget_id: &str) -> Result<Vec<String>, StoreError> {
        with_client!(self, c => keys::of_budget(c, budget_id))
    }

    async fn end_users_of_budget(&self, budget_id: &str) -> Result<Vec<String>, StoreError> {
        with_client!(self, c => end_users::of_budget(c, budget_id))
    }

    async fn record_spend(
        &self,
        rows: &[SpendLogRow],
        spread: std::time::Duration,
    ) -> Result<SpendChanges, StoreError> {
        if rows.is_empty() {
            return Ok(SpendChanges::default());
        }
        with_client!(retry self, c => spend::record(c, &self.spend_copy, rows, spread))
    }

    async fn count_spend(&self, rows: &[SpendLogRow]) -> Result<SpendChanges, StoreError> {
        if rows.is_empty() {
            return Ok(SpendChanges::default());
        }
        with_client!(retry self, c => spend::count(c, rows))
    }

    async fn spend_logs(&self, filter: &SpendFilter) -> Result<Vec<SpendLogRow>, StoreError> {
        with_client!(self, c => spend::logs(c, filter))
    }

    async fn spend_log_page(
        &self,
        filter: &SpendFilter,
        before: Option<&LogCursor>,
    ) -> Result<LogPage, StoreError> {
        with_client!(self, c => log_page::page(c, filter, before))
    }

    async fn end_console_session(
        &self,
        id: &str,
        expires: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        with_client!(self, c => logouts::record(c, id, expires))
    }

    async fn console_session_ended(&self, id: &str) -> Result<bool, StoreError> {
        with_client!(self, c => logouts::ended(c, id))
    }

    async fn daily_activity(&self, query: &DailyQuery) -> Result<DailyPage, StoreError> {
        with_client!(self, c => daily::page(c, query))
    }

    async fn global_spend(&self, since: &str) -> Result<f64, StoreError> {
        with_client!(self, c => spend::global(c, since))
    }

    async fn reset_due_budgets(
        &self,
        now: DateTime<Utc>,
        end_user_default: Option<&str>,
    ) -> Result<Vec<Change>, StoreError> {
        with_client!(retry self, c => spend::reset_due(c, now, end_user_default))
    }

    /// A no-op: every mutation announced itself in its own transaction.
    async fn announce(&self, _changes: &[Change]) -> Result<(), StoreError> {
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        with_client!(self, c => c.simple_query("SELECT 1")).map(drop)
    }

    async fn stored_settings(&self) -> Result<crate::store::settings::StoredSettings, StoreError> {
        with_client!(self, c => settings::read(c, &self.cipher))
    }
}

/// A record as a JSON row for [`orgs`].
fn to_row<T: serde::Serialize>(record: &T) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(record).map_err(|e| StoreError::Query(e.to_string()))
}

/// JSON rows from [`orgs`] as records.
/// A row count or offset as SQL's `int8`, saturating.
fn sql_count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn from_rows<T: serde::de::DeserializeOwned>(
    rows: Vec<serde_json::Value>,
) -> Result<Vec<T>, StoreError> {
    rows.into_iter()
        .map(|r| serde_json::from_value(r).map_err(|e| StoreError::Query(e.to_string())))
        .collect()
}

/// `Conflict` when an insert found its id taken.
fn conflict_unless(inserted: bool, what: &str, id: &str) -> Result<(), StoreError> {
    if inserted {
        Ok(())
    } else {
        Err(StoreError::Conflict(format!("{what} {id}")))
    }
}
