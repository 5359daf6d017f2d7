//! Persistence of keys, teams, users, models and spend: one trait, two backends
//! (Postgres when `DATABASE_URL` is set, in-memory otherwise). Only the
//! control-plane thread calls it; the request path reads caches.

pub mod cipher;
mod memory;
pub mod postgres;
mod records;

pub use memory::MemoryStore;
pub use records::{
    next_reset, parse_duration, usd_value, DurationError, KeyRecord, ModelRecord, SpendFilter,
    SpendLogRow, TeamRecord, UserRecord, MAX_DURATION,
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

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
}

impl Change {
    /// The NOTIFY payload, e.g. `key:<token>`.
    pub fn payload(&self) -> String {
        match self {
            Change::Key(t) => format!("key:{t}"),
            Change::Team(t) => format!("team:{t}"),
            Change::User(t) => format!("user:{t}"),
            Change::Model(t) => format!("model:{t}"),
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
            _ => None,
        }
    }
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

    /// A user by id.
    async fn get_user(&self, user_id: &str) -> Result<Option<UserRecord>, StoreError>;
    /// Inserts a user.
    async fn insert_user(&self, user: &UserRecord) -> Result<(), StoreError>;
    /// Replaces a user's fields (not spend).
    async fn update_user(&self, user: &UserRecord) -> Result<bool, StoreError>;
    /// Sets a user's spend.
    async fn set_user_spend(&self, user_id: &str, spend: f64) -> Result<bool, StoreError>;
    /// Deletes users; returns the ids that existed.
    async fn delete_users(&self, ids: &[String]) -> Result<Vec<String>, StoreError>;

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

    /// Writes spend-log rows idempotently (by `request_id`) and adds the spend
    /// of newly written rows to their key, user and team, atomically.
    /// Returns the changes to announce.
    async fn record_spend(&self, rows: &[SpendLogRow]) -> Result<Vec<Change>, StoreError>;
    /// Spend-log rows matching a filter, oldest first.
    async fn spend_logs(&self, filter: &SpendFilter) -> Result<Vec<SpendLogRow>, StoreError>;
    /// Total spend over all keys.
    async fn global_spend(&self) -> Result<f64, StoreError>;
    /// Zeroes the spend of keys, teams and users whose `budget_reset_at` is
    /// past and schedules the next reset; returns what changed.
    async fn reset_due_budgets(&self, now: DateTime<Utc>) -> Result<Vec<Change>, StoreError>;
    /// Announces changes to every replica (Postgres NOTIFY); a no-op in memory.
    async fn announce(&self, changes: &[Change]) -> Result<(), StoreError>;
    /// Whether the store answers now (one round trip), checked before work
    /// that is wasted when it does not (a spool replay).
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
