//! Model deployments added through the API, in LiteLLM's
//! `LiteLLM_ProxyModelTable`. Every change sends its [`Change::Model`] in
//! the transaction that makes it. Every string of `litellm_params` is
//! stored sealed, as LiteLLM stores it ([`ParamCipher`]), and opened on
//! read. A row LiteLLM marked `blocked` is not read (not served, as in
//! LiteLLM, whose router hides blocked deployments).

use super::convert::{as_map, json, naive, utc};
use super::notify;
use crate::store::cipher::ParamCipher;
use crate::store::{Change, ModelRecord};
use tokio_postgres::{Client, Error, Row};

const SELECT: &str = r#"SELECT model_id, model_name, litellm_params::jsonb AS litellm_params,
    model_info::jsonb AS model_info, created_at::timestamp AS created_at, created_by,
    updated_at::timestamp AS updated_at, updated_by
FROM "LiteLLM_ProxyModelTable""#;

/// A model row as a [`ModelRecord`], its params opened.
fn record(row: &Row, cipher: &ParamCipher) -> Result<ModelRecord, Error> {
    let mut litellm_params = as_map(row.try_get("litellm_params")?);
    cipher.open_params(&mut litellm_params);
    Ok(ModelRecord {
        model_id: row.try_get("model_id")?,
        model_name: row.try_get("model_name")?,
        litellm_params,
        model_info: as_map(row.try_get("model_info")?),
        created_at: utc(row.try_get("created_at")?),
        created_by: row.try_get("created_by")?,
        updated_at: utc(row.try_get("updated_at")?),
        updated_by: row.try_get("updated_by")?,
    })
}

/// A model by id.
pub async fn get(
    c: &Client,
    cipher: &ParamCipher,
    model_id: &str,
) -> Result<Option<ModelRecord>, Error> {
    let sql = format!("{SELECT} WHERE model_id = $1 AND NOT blocked");
    c.query_opt(&sql, &[&model_id])
        .await?
        .as_ref()
        .map(|r| record(r, cipher))
        .transpose()
}

/// Models whose `model_name` is `name` (or every model), by id.
pub async fn list(
    c: &Client,
    cipher: &ParamCipher,
    name: Option<&str>,
) -> Result<Vec<ModelRecord>, Error> {
    let sql = format!(
        "{SELECT} WHERE ($1::text IS NULL OR model_name = $1) AND NOT blocked ORDER BY model_id"
    );
    c.query(&sql, &[&name])
        .await?
        .iter()
        .map(|r| record(r, cipher))
        .collect()
}

/// Inserts a model, its params sealed; `false` if its id exists.
pub async fn insert(c: &mut Client, cipher: &ParamCipher, m: &ModelRecord) -> Result<bool, Error> {
    let tx = c.transaction().await?;
    let sql = r#"INSERT INTO "LiteLLM_ProxyModelTable" (model_id, model_name, litellm_params,
            model_info, created_at, created_by, updated_at, updated_by)
        VALUES ($1::text, $2::text, $3::jsonb, $4::jsonb,
            COALESCE($5::timestamp, CURRENT_TIMESTAMP), COALESCE($6::text, 'gateway'),
            COALESCE($7::timestamp, CURRENT_TIMESTAMP), COALESCE($8::text, 'gateway'))
        ON CONFLICT (model_id) DO NOTHING"#;
    let written = tx
        .execute(
            sql,
            &[
                &m.model_id,
                &m.model_name,
                &json(&cipher.seal_params(&m.litellm_params)),
                &json(&m.model_info),
                &naive(m.created_at),
                &m.created_by,
                &naive(m.updated_at),
                &m.updated_by,
            ],
        )
        .await?;
    if written == 0 {
        return Ok(false);
    }
    notify(&tx, &[Change::Model(m.model_id.clone())]).await?;
    tx.commit().await?;
    Ok(true)
}

/// Replaces a model's name, params (sealed) and info; `false` if it does
/// not exist.
pub async fn update(c: &mut Client, cipher: &ParamCipher, m: &ModelRecord) -> Result<bool, Error> {
    let tx = c.transaction().await?;
    let sql = r#"UPDATE "LiteLLM_ProxyModelTable" SET model_name = $2::text,
            litellm_params = $3::jsonb, model_info = $4::jsonb,
            updated_at = COALESCE($5::timestamp, CURRENT_TIMESTAMP),
            updated_by = COALESCE($6::text, 'gateway')
        WHERE model_id = $1::text"#;
    let written = tx
        .execute(
            sql,
            &[
                &m.model_id,
                &m.model_name,
                &json(&cipher.seal_params(&m.litellm_params)),
                &json(&m.model_info),
                &naive(m.updated_at),
                &m.updated_by,
            ],
        )
        .await?;
    if written == 0 {
        return Ok(false);
    }
    notify(&tx, &[Change::Model(m.model_id.clone())]).await?;
    tx.commit().await?;
    Ok(true)
}

/// Deletes a model; `false` if it did not exist.
pub async fn delete(c: &mut Client, model_id: &str) -> Result<bool, Error> {
    let tx = c.transaction().await?;
    let sql = r#"DELETE FROM "LiteLLM_ProxyModelTable" WHERE model_id = $1"#;
    if tx.execute(sql, &[&model_id]).await? == 0 {
        return Ok(false);
    }
    notify(&tx, &[Change::Model(model_id.to_string())]).await?;
    tx.commit().await?;
    Ok(true)
}
