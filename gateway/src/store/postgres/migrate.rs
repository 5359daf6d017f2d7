//! Schema migrations: the SQL files of `migrations/`, embedded in the binary
//! and applied at start-up in order, each once, each in its own transaction
//! under a transaction-scoped advisory lock so replicas starting together
//! apply a file once between them.

use tokio_postgres::Client;

/// `(version, sql)` in the order they apply. A version, once released, never
/// changes: new schema goes in a new file.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_litellm_tables",
        include_str!("../../../../migrations/0001_litellm_tables.sql"),
    ),
    (
        "0002_gateway_key_tombstones",
        include_str!("../../../../migrations/0002_gateway_key_tombstones.sql"),
    ),
    (
        "0003_proxy_model_name_index",
        include_str!("../../../../migrations/0003_proxy_model_name_index.sql"),
    ),
    (
        "0004_gateway_budget_periods",
        include_str!("../../../../migrations/0004_gateway_budget_periods.sql"),
    ),
    (
        "0005_litellm_round_trip",
        include_str!("../../../../migrations/0005_litellm_round_trip.sql"),
    ),
    (
        "0006_litellm_organizations",
        include_str!("../../../../migrations/0006_litellm_organizations.sql"),
    ),
    (
        "0007_litellm_end_users",
        include_str!("../../../../migrations/0007_litellm_end_users.sql"),
    ),
    (
        "0008_drop_duplicate_call_id_index",
        include_str!("../../../../migrations/0008_drop_duplicate_call_id_index.sql"),
    ),
    (
        "0009_key_allowed_routes",
        include_str!("../../../../migrations/0009_key_allowed_routes.sql"),
    ),
    (
        "0010_spend_logs_response_id",
        include_str!("../../../../migrations/0010_spend_logs_response_id.sql"),
    ),
    (
        "0011_litellm_key_cache_controls",
        include_str!("../../../../migrations/0011_litellm_key_cache_controls.sql"),
    ),
    (
        "0012_litellm_daily_spend",
        include_str!("../../../../migrations/0012_litellm_daily_spend.sql"),
    ),
    (
        "0017_key_list_order_index",
        include_str!("../../../../migrations/0017_key_list_order_index.sql"),
    ),
    (
        "0020_litellm_managed_objects",
        include_str!("../../../../migrations/0020_litellm_managed_objects.sql"),
    ),
    (
        "0022_litellm_budget_limits",
        include_str!("../../../../migrations/0022_litellm_budget_limits.sql"),
    ),
    (
        "0023_batch_polls",
        include_str!("../../../../migrations/0023_batch_polls.sql"),
    ),
    (
        "0024_team_membership_budget_index",
        include_str!("../../../../migrations/0024_team_membership_budget_index.sql"),
    ),
    (
        "0025_console_logouts",
        include_str!("../../../../migrations/0025_console_logouts.sql"),
    ),
    (
        "0028_team_member_models_and_aliases",
        include_str!("../../../../migrations/0028_team_member_models_and_aliases.sql"),
    ),
    (
        "0029_spend_update_room",
        include_str!("../../../../migrations/0029_spend_update_room.sql"),
    ),
    (
        "0031_spend_logs_key_time_index",
        include_str!("../../../../migrations/0031_spend_logs_key_time_index.sql"),
    ),
    (
        "0032_spend_logs_user_time_index",
        include_str!("../../../../migrations/0032_spend_logs_user_time_index.sql"),
    ),
    (
        "0034_spend_logs_response_id_hash",
        include_str!("../../../../migrations/0034_spend_logs_response_id_hash.sql"),
    ),
];

/// Advisory lock key taken by every migration transaction ("gateway" in
/// ASCII): serializes concurrent start-ups.
const LOCK_KEY: i64 = 0x0067_6174_6577_6179;

const VERSIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS gateway_schema_migrations (
    version TEXT PRIMARY KEY,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)";

/// Applies every migration not yet recorded in
/// `gateway_schema_migrations`; returns the versions it applied.
pub async fn migrate(client: &mut Client) -> Result<Vec<&'static str>, tokio_postgres::Error> {
    let mut applied = Vec::new();
    for (version, sql) in MIGRATIONS {
        if apply(client, version, sql).await? {
            applied.push(*version);
        }
    }
    Ok(applied)
}

/// Applies one migration unless already applied; `true` if it ran.
async fn apply(
    client: &mut Client,
    version: &str,
    sql: &str,
) -> Result<bool, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    // IF NOT EXISTS skips are expected here (on LiteLLM's tables above all):
    // keep their notices out of the start-up log.
    tx.batch_execute("SET LOCAL client_min_messages = warning")
        .await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .await?;
    tx.batch_execute(VERSIONS_TABLE).await?;
    let done = tx
        .query_opt(
            "SELECT 1 FROM gateway_schema_migrations WHERE version = $1",
            &[&version],
        )
        .await?
        .is_some();
    if done {
        tx.rollback().await?;
        return Ok(false);
    }
    tx.batch_execute(sql).await?;
    tx.execute(
        "INSERT INTO gateway_schema_migrations (version) VALUES ($1)",
        &[&version],
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}
