//! Console logouts shared by the replicas through Postgres
//! (`gateway_console_logouts`, migration 0025): a fleet without a shared
//! Redis still ends a session everywhere when it is logged out anywhere.

use chrono::{DateTime, Utc};
use futures_util::future::try_join;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Error};

/// Records session `id` as logged out until `expires`, and forgets the
/// sessions that have expired since (the table holds open sessions only).
pub async fn record(c: &Client, id: &str, expires: DateTime<Utc>) -> Result<(), Error> {
    let expires = expires.naive_utc();
    let params = [(&id as _, Type::TEXT), (&expires as _, Type::TIMESTAMP)];
    let insert = c.query_typed(
        "INSERT INTO gateway_console_logouts (session_id, expires_at) VALUES ($1, $2)
         ON CONFLICT (session_id) DO NOTHING",
        &params,
    );
    let purge = c.query_typed(
        "DELETE FROM gateway_console_logouts
         WHERE expires_at < (now() AT TIME ZONE 'UTC')",
        &[],
    );
    try_join(insert, purge).await.map(drop)
}

/// Whether session `id` was logged out (on any replica).
pub async fn ended(c: &Client, id: &str) -> Result<bool, Error> {
    let rows = c
        .query_typed(
            "SELECT 1 FROM gateway_console_logouts WHERE session_id = $1",
            &[(&id, Type::TEXT)],
        )
        .await?;
    Ok(!rows.is_empty())
}
