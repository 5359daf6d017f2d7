//! Files and batches created through the gateway, in LiteLLM's
//! `LiteLLM_ManagedFileTable` and `LiteLLM_ManagedObjectTable` (the
//! provider's id in `unified_file_id` / `unified_object_id` and
//! `model_object_id`), with the creating key and the upstream route in the
//! gateway's columns. A batch is charged once: `batch_processed` flips
//! under the row's lock, and only the call that flipped it charges. The
//! poller claims due batches by moving `gateway_next_poll` forward under
//! the row's lock (`SKIP LOCKED`), so each is polled by one replica.

use crate::store::{ManagedKind, ManagedObject};
use chrono::{DateTime, Utc};
use tokio_postgres::{Client, Error, Row};

/// `$1` row id, `$2` provider id, `$3` object, `$4` route, `$5` created at,
/// `$6` user, `$7` team, `$8` key.
const INSERT_FILE: &str = r#"INSERT INTO "LiteLLM_ManagedFileTable" (id, unified_file_id,
    file_object, model_mappings, flat_model_file_ids, created_at, created_by, team_id,
    updated_at, updated_by, gateway_key, gateway_route)
VALUES ($1::text, $2::text, $3::jsonb, jsonb_build_object('route', $4::text), ARRAY[$2::text],
    $5::timestamp, $6::text, $7::text, $5::timestamp, $6::text, $8::text, $4::text)
ON CONFLICT (unified_file_id) DO NOTHING"#;

/// The parameters of [`INSERT_FILE`], and `$9` the hold; due for its
/// first poll at once.
const INSERT_BATCH: &str = r#"INSERT INTO "LiteLLM_ManagedObjectTable" (id, unified_object_id,
    model_object_id, file_object, file_purpose, status, created_at, created_by, team_id, api_key,
    updated_at, updated_by, gateway_key, gateway_route, gateway_hold, gateway_next_poll)
VALUES ($1::text, $2::text, $2::text, $3::jsonb, 'batch', $3::jsonb->>'status', $5::timestamp,
    $6::text, $7::text, $8::text, $5::timestamp, $6::text, $8::text, $4::text, $9::float8,
    $5::timestamp)
ON CONFLICT (unified_object_id) DO NOTHING"#;

const SELECT: &str = r#"SELECT 'file' AS kind, unified_file_id AS object_id, file_object,
    gateway_key, gateway_route, created_by, team_id, created_at::timestamp AS created_at,
    0::float8 AS gateway_hold
FROM "LiteLLM_ManagedFileTable" WHERE unified_file_id = $1::text AND gateway_key IS NOT NULL
UNION ALL
SELECT 'batch', unified_object_id, file_object, gateway_key, gateway_route, created_by, team_id,
    created_at::timestamp, gateway_hold
FROM "LiteLLM_ManagedObjectTable" WHERE unified_object_id = $1::text AND gateway_key IS NOT NULL
LIMIT 1"#;

const FILE_IDS: &str = r#"SELECT unified_file_id FROM "LiteLLM_ManagedFileTable"
WHERE gateway_key = $1::text ORDER BY created_at DESC, unified_file_id DESC LIMIT $2::int8"#;

const BATCH_IDS: &str = r#"SELECT unified_object_id FROM "LiteLLM_ManagedObjectTable"
WHERE gateway_key = $1::text ORDER BY created_at DESC, unified_object_id DESC LIMIT $2::int8"#;

/// `$1` provider id, `$2` now.
const CLAIM: &str = r#"UPDATE "LiteLLM_ManagedObjectTable"
SET batch_processed = true, status = 'complete', updated_at = $2::timestamp
WHERE unified_object_id = $1::text AND gateway_key IS NOT NULL AND NOT batch_processed
RETURNING id"#;

/// `$1` now, `$2` the next poll, `$3` oldest creation still polled, `$4`
/// most batches.
const DUE: &str = r#"UPDATE "LiteLLM_ManagedObjectTable" SET gateway_next_poll = $2::timestamp
WHERE id IN (SELECT id FROM "LiteLLM_ManagedObjectTable"
    WHERE gateway_key IS NOT NULL AND NOT batch_processed AND gateway_next_poll <= $1::timestamp
        AND created_at >= $3::timestamp
    ORDER BY gateway_next_poll LIMIT $4::int8 FOR UPDATE SKIP LOCKED)
RETURNING 'batch' AS kind, unified_object_id AS object_id, file_object, gateway_key,
    gateway_route, created_by, team_id, created_at::timestamp AS created_at, gateway_hold"#;

/// `$1` provider id, `$2` status, `$3` whether it is final, `$4` now.
const POLLED: &str = r#"UPDATE "LiteLLM_ManagedObjectTable"
SET status = CASE WHEN batch_processed THEN status ELSE $2::text END,
    gateway_next_poll = CASE WHEN $3::bool THEN NULL ELSE gateway_next_poll END,
    updated_at = $4::timestamp
WHERE unified_object_id = $1::text AND gateway_key IS NOT NULL"#;

/// `$1` key.
const HOLDS: &str = r#"SELECT unified_object_id, gateway_hold FROM "LiteLLM_ManagedObjectTable"
WHERE gateway_key = $1::text AND NOT batch_processed AND gateway_next_poll IS NOT NULL
    AND gateway_hold > 0"#;

fn object(row: &Row) -> Result<ManagedObject, Error> {
    let kind: String = row.try_get("kind")?;
    Ok(ManagedObject {
        id: row.try_get("object_id")?,
        kind: if kind == "batch" {
            ManagedKind::Batch
        } else {
            ManagedKind::File
        },
        key: row.try_get("gateway_key")?,
        created_by: row.try_get("created_by")?,
        team_id: row.try_get("team_id")?,
        route: row
            .try_get::<_, Option<String>>("gateway_route")?
            .unwrap_or_default(),
        object: row
            .try_get::<_, Option<serde_json::Value>>("file_object")?
            .unwrap_or(serde_json::Value::Null),
        created_at: row
            .try_get::<_, chrono::NaiveDateTime>("created_at")?
            .and_utc(),
        hold: row.try_get("gateway_hold")?,
    })
}

/// Records `o`; false when its id was recorded already.
pub async fn insert(c: &Client, o: &ManagedObject) -> Result<bool, Error> {
    let sql = match o.kind {
        ManagedKind::File => INSERT_FILE,
        ManagedKind::Batch => INSERT_BATCH,
    };
    let row_id = uuid::Uuid::new_v4().to_string();
    let created = o.created_at.naive_utc();
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
        &row_id,
        &o.id,
        &o.object,
        &o.route,
        &created,
        &o.created_by,
        &o.team_id,
        &o.key,
    ];
    if o.kind == ManagedKind::Batch {
        params.push(&o.hold);
    }
    let n = c.execute(sql, &params).await?;
    Ok(n == 1)
}

/// The object with provider id `id`.
pub async fn get(c: &Client, id: &str) -> Result<Option<ManagedObject>, Error> {
    c.query_opt(SELECT, &[&id])
        .await?
        .as_ref()
        .map(object)
        .transpose()
}

/// Ids of `key`'s objects of `kind`, newest first.
pub async fn ids(
    c: &Client,
    key: &str,
    kind: ManagedKind,
    limit: usize,
) -> Result<Vec<String>, Error> {
    let sql = match kind {
        ManagedKind::File => FILE_IDS,
        ManagedKind::Batch => BATCH_IDS,
    };
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = c.query(sql, &[&key, &limit]).await?;
    rows.iter().map(|r| r.try_get(0)).collect()
}

/// Flips `batch`'s `batch_processed` (recording it first if its own
/// record has not landed); true when this call did.
pub async fn claim(c: &Client, batch: &ManagedObject) -> Result<bool, Error> {
    insert(c, batch).await?;
    let now = Utc::now().naive_utc();
    Ok(c.query_opt(CLAIM, &[&batch.id, &now]).await?.is_some())
}

/// Claims up to `limit` batches due at `now` (created at or after
/// `oldest`), moving their next poll to `next`.
pub async fn due(
    c: &Client,
    now: DateTime<Utc>,
    next: DateTime<Utc>,
    oldest: DateTime<Utc>,
    limit: usize,
) -> Result<Vec<ManagedObject>, Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = c
        .query(
            DUE,
            &[
                &now.naive_utc(),
                &next.naive_utc(),
                &oldest.naive_utc(),
                &limit,
            ],
        )
        .await?;
    rows.iter().map(object).collect()
}

/// Records a poll of batch `id`: its upstream `status`; a final one ends
/// its polls.
pub async fn polled(c: &Client, id: &str, status: &str, last: bool) -> Result<(), Error> {
    let now = Utc::now().naive_utc();
    c.execute(POLLED, &[&id, &status, &last, &now]).await?;
    Ok(())
}

/// The USD each of `key`'s open batches holds, by batch id.
pub async fn holds(c: &Client, key: &str) -> Result<Vec<(String, f64)>, Error> {
    c.query(HOLDS, &[&key])
        .await?
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect()
}
