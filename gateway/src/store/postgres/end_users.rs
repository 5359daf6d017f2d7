//! End users (`LiteLLM_EndUserTable`) and the `LiteLLM_BudgetTable` rows
//! their budgets live in. Updates write each given column in place
//! (`COALESCE` of the new value and the column) under the end user's row
//! lock, so concurrent updates of different fields never lose one another;
//! spend is only ever added to (by the spend writer).

use super::convert::{naive, utc};
use super::notify;
use crate::store::{BudgetFields, Change, EndUserBudget, EndUserRecord, EndUserUpdate};
use chrono::{DateTime, Utc};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Error, Row, Transaction};

const SELECT: &str = r#"SELECT e.user_id, e.blocked, e.alias, e.spend::float8 AS spend,
    e.allowed_model_region, e.default_model, COALESCE(e.models, ARRAY[]::text[]) AS models,
    e.budget_id, e.object_permission_id, b.budget_id AS linked_budget,
    b.max_budget::float8 AS max_budget, b.soft_budget::float8 AS soft_budget,
    b.max_parallel_requests::int8 AS max_parallel_requests, b.tpm_limit::int8 AS tpm_limit,
    b.rpm_limit::int8 AS rpm_limit, b.model_max_budget::jsonb AS model_max_budget,
    b.budget_duration, b.budget_reset_at::timestamp AS budget_reset_at,
    b.created_at::timestamp AS created_at
FROM "LiteLLM_EndUserTable" e LEFT JOIN "LiteLLM_BudgetTable" b ON b.budget_id = e.budget_id"#;

/// Who LiteLLM records as the creator of rows the master key made.
const CREATED_BY: &str = "default_user_id";

/// `$1` id, `$2..$8` fields, `$9` budget period, `$10` its next reset,
/// `$11` now, `$12` creator.
const INSERT_BUDGET: &str = r#"INSERT INTO "LiteLLM_BudgetTable" (budget_id, max_budget,
    soft_budget, max_parallel_requests, tpm_limit, rpm_limit, model_max_budget, budget_duration,
    budget_reset_at, created_at, created_by, updated_at, updated_by)
VALUES ($1::text, $2::float8, $3::float8, $4::int8, $5::int8, $6::int8, $7::jsonb, $8::text,
    $9::timestamp, $10::timestamp, $11::text, $10::timestamp, $11::text)"#;

/// `$1` id, `$2..$9` fields (NULL: kept), `$10` now.
const UPDATE_BUDGET: &str = r#"UPDATE "LiteLLM_BudgetTable" SET
    max_budget = COALESCE($2::float8, max_budget), soft_budget = COALESCE($3::float8, soft_budget),
    max_parallel_requests = COALESCE($4::int8, max_parallel_requests),
    tpm_limit = COALESCE($5::int8, tpm_limit), rpm_limit = COALESCE($6::int8, rpm_limit),
    model_max_budget = COALESCE($7::jsonb, model_max_budget),
    budget_duration = COALESCE($8::text, budget_duration),
    budget_reset_at = COALESCE($9::timestamp, budget_reset_at), updated_at = $10::timestamp
WHERE budget_id = $1::text"#;

/// `$1` id, `$2..$7` fields (NULL: kept).
const UPDATE_END_USER: &str = r#"UPDATE "LiteLLM_EndUserTable" SET
    alias = COALESCE($2::text, alias), blocked = COALESCE($3::bool, blocked),
    allowed_model_region = COALESCE($4::text, allowed_model_region),
    default_model = COALESCE($5::text, default_model), models = COALESCE($6::text[], models),
    budget_id = COALESCE($7::text, budget_id)
WHERE user_id = $1::text"#;

fn record(row: &Row) -> Result<EndUserRecord, Error> {
    let linked: Option<String> = row.try_get("linked_budget")?;
    let budget = linked
        .map(|budget_id| -> Result<EndUserBudget, Error> {
            Ok(EndUserBudget {
                budget_id,
                max_budget: row.try_get("max_budget")?,
                soft_budget: row.try_get("soft_budget")?,
                max_parallel_requests: row.try_get("max_parallel_requests")?,
                tpm_limit: row.try_get("tpm_limit")?,
                rpm_limit: row.try_get("rpm_limit")?,
                model_max_budget: row.try_get("model_max_budget")?,
                budget_duration: row.try_get("budget_duration")?,
                budget_reset_at: utc(row.try_get("budget_reset_at")?),
                created_at: utc(row.try_get("created_at")?),
            })
        })
        .transpose()?;
    Ok(EndUserRecord {
        user_id: row.try_get("user_id")?,
        blocked: row.try_get::<_, Option<bool>>("blocked")?.unwrap_or(false),
        alias: row.try_get("alias")?,
        spend: row.try_get::<_, Option<f64>>("spend")?.unwrap_or(0.0),
        allowed_model_region: row.try_get("allowed_model_region")?,
        default_model: row.try_get("default_model")?,
        models: row.try_get("models")?,
        budget_id: row.try_get("budget_id")?,
        litellm_budget_table: budget,
        object_permission_id: row.try_get("object_permission_id")?,
    })
}

/// An end user with its budget row.
pub async fn get(c: &Client, id: &str) -> Result<Option<EndUserRecord>, Error> {
    let sql = format!("{SELECT} WHERE e.user_id = $1");
    c.query_opt(&sql, &[&id])
        .await?
        .as_ref()
        .map(record)
        .transpose()
}

/// End users `ids`, in that order.
async fn get_many(tx: &Transaction<'_>, ids: &[String]) -> Result<Vec<EndUserRecord>, Error> {
    let sql = format!(
        "{SELECT} JOIN unnest($1::text[]) WITH ORDINALITY AS v(id, n) ON v.id = e.user_id ORDER BY v.n"
    );
    tx.query(&sql, &[&ids]).await?.iter().map(record).collect()
}

/// A page of end users by id, those matching `search` (any case) when given.
pub async fn list(
    c: &Client,
    offset: i64,
    limit: i64,
    search: Option<&str>,
) -> Result<Vec<EndUserRecord>, Error> {
    let sql = format!(
        r#"{SELECT} WHERE $3::text IS NULL OR strpos(lower(e.user_id), lower($3)) > 0
            OR strpos(lower(COALESCE(e.alias, '')), lower($3)) > 0
        ORDER BY e.user_id COLLATE "C" LIMIT $1 OFFSET $2"#
    );
    c.query(&sql, &[&limit, &offset, &search])
        .await?
        .iter()
        .map(record)
        .collect()
}

/// Inserts budget row `b`.
async fn insert_budget(tx: &Transaction<'_>, b: &EndUserBudget) -> Result<(), Error> {
    let now = Utc::now().naive_utc();
    tx.execute(
        INSERT_BUDGET,
        &[
            &b.budget_id,
            &b.max_budget,
            &b.soft_budget,
            &b.max_parallel_requests,
            &b.tpm_limit,
            &b.rpm_limit,
            &b.model_max_budget,
            &b.budget_duration,
            &naive(b.budget_reset_at),
            &naive(b.created_at).unwrap_or(now),
            &CREATED_BY,
        ],
    )
    .await?;
    Ok(())
}

/// Inserts an end user and its new budget row; `false` when the id is taken.
pub async fn insert(
    c: &mut Client,
    u: &EndUserRecord,
    budget: Option<&EndUserBudget>,
) -> Result<bool, Error> {
    let tx = c.transaction().await?;
    if let Some(b) = budget {
        insert_budget(&tx, b).await?;
    }
    let budget_id = budget.map(|b| &b.budget_id).or(u.budget_id.as_ref());
    let inserted = tx
        .execute(
            r#"INSERT INTO "LiteLLM_EndUserTable" (user_id, alias, spend, allowed_model_region,
                default_model, models, budget_id, blocked)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (user_id) DO NOTHING"#,
            &[
                &u.user_id,
                &u.alias,
                &u.spend,
                &u.allowed_model_region,
                &u.default_model,
                &u.models,
                &budget_id,
                &u.blocked,
            ],
        )
        .await?;
    if inserted == 0 {
        return Ok(false);
    }
    notify(&tx, &[Change::EndUser(u.user_id.clone())]).await?;
    tx.commit().await?;
    Ok(true)
}

/// Writes the given fields of budget row `id`; `false` when it is gone.
async fn update_budget(tx: &Transaction<'_>, id: &str, f: &BudgetFields) -> Result<bool, Error> {
    let (duration, reset_at) = match &f.budget_duration {
        Some((d, at)) => (Some(d.as_str()), Some(at.naive_utc())),
        None => (None, None),
    };
    let n = tx
        .execute(
            UPDATE_BUDGET,
            &[
                &id,
                &f.max_budget,
                &f.soft_budget,
                &f.max_parallel_requests,
                &f.tpm_limit,
                &f.rpm_limit,
                &f.model_max_budget,
                &duration,
                &reset_at,
                &Utc::now().naive_utc(),
            ],
        )
        .await?;
    Ok(n > 0)
}

/// Applies `update` under the end user's row lock; `None` when it does not
/// exist, else the end users whose cached copies are stale.
pub async fn update(
    c: &mut Client,
    id: &str,
    update: &EndUserUpdate,
    new_budget_id: &str,
) -> Result<Option<Vec<String>>, Error> {
    let tx = c.transaction().await?;
    let locked = tx
        .query_opt(
            r#"SELECT budget_id FROM "LiteLLM_EndUserTable" WHERE user_id = $1 FOR UPDATE"#,
            &[&id],
        )
        .await?;
    let Some(locked) = locked else {
        return Ok(None);
    };
    let linked: Option<String> = locked.try_get(0)?;
    let mut budget_id = update.budget_id.clone();
    let mut stale = vec![id.to_string()];
    if !update.budget.is_empty() {
        let changed = match &linked {
            Some(b) => update_budget(&tx, b, &update.budget).await?,
            None => false,
        };
        match (&linked, changed) {
            (Some(b), true) => {
                let sharing = tx
                    .query(
                        r#"SELECT user_id FROM "LiteLLM_EndUserTable"
                        WHERE budget_id = $1 AND user_id <> $2"#,
                        &[b, &id],
                    )
                    .await?;
                for row in sharing {
                    stale.push(row.try_get(0)?);
                }
            }
            _ => {
                let row = update.budget.row(new_budget_id.to_string(), Utc::now());
                insert_budget(&tx, &row).await?;
                budget_id = Some(row.budget_id);
            }
        }
    }
    tx.execute(
        UPDATE_END_USER,
        &[
            &id,
            &update.alias,
            &update.blocked,
            &update.allowed_model_region,
            &update.default_model,
            &update.models,
            &budget_id,
        ],
    )
    .await?;
    let changes: Vec<Change> = stale.iter().cloned().map(Change::EndUser).collect();
    notify(&tx, &changes).await?;
    tx.commit().await?;
    Ok(Some(stale))
}

/// Sets `blocked`; blocking creates missing rows (LiteLLM's upsert).
pub async fn set_blocked(
    c: &mut Client,
    ids: &[String],
    blocked: bool,
) -> Result<Vec<EndUserRecord>, Error> {
    let mut unique: Vec<String> = Vec::with_capacity(ids.len());
    for id in ids {
        if !unique.contains(id) {
            unique.push(id.clone());
        }
    }
    let tx = c.transaction().await?;
    let sql = if blocked {
        r#"INSERT INTO "LiteLLM_EndUserTable" (user_id, blocked)
        SELECT id, true FROM unnest($1::text[]) AS v(id) ORDER BY id
        ON CONFLICT (user_id) DO UPDATE SET blocked = true RETURNING user_id"#
    } else {
        r#"UPDATE "LiteLLM_EndUserTable" SET blocked = false WHERE user_id = ANY($1)
        RETURNING user_id"#
    };
    let rows = tx.query(sql, &[&unique]).await?;
    let written: Vec<String> = rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    unique.retain(|id| written.contains(id));
    let changes: Vec<Change> = unique.iter().cloned().map(Change::EndUser).collect();
    notify(&tx, &changes).await?;
    let out = get_many(&tx, &unique).await?;
    tx.commit().await?;
    Ok(out)
}

/// Calls `sink` with every restricted end user; how many.
pub async fn restricted(
    c: &Client,
    sink: &mut (dyn for<'t> FnMut(&'t str, bool) + Send),
) -> Result<usize, Error> {
    let rows = c
        .query(
            r#"SELECT user_id, blocked FROM "LiteLLM_EndUserTable"
            WHERE blocked OR budget_id IS NOT NULL OR allowed_model_region IS NOT NULL"#,
            &[],
        )
        .await?;
    for row in &rows {
        sink(row.try_get(0)?, row.try_get(1)?);
    }
    Ok(rows.len())
}

/// Ids of the end users whose budget row is `id`.
pub async fn of_budget(c: &Client, id: &str) -> Result<Vec<String>, Error> {
    let sql = r#"SELECT user_id FROM "LiteLLM_EndUserTable" WHERE budget_id = $1 ORDER BY user_id"#;
    Ok(c.query(sql, &[&id])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// Whether budget row `id` exists.
pub async fn budget_exists(c: &Client, id: &str) -> Result<bool, Error> {
    let sql = r#"SELECT 1 FROM "LiteLLM_BudgetTable" WHERE budget_id = $1"#;
    Ok(c.query_opt(sql, &[&id]).await?.is_some())
}

/// Adds each end user's spend of a batch (ids sorted, so concurrent writers
/// lock rows in one order), creating missing rows as LiteLLM does; returns
/// those with a budget row, whose cached copies need the new figure. One
/// round trip (the parameter types given, nothing prepared), so the spend
/// writer can send it with its other updates.
pub async fn add_spend(
    tx: &Transaction<'_>,
    totals: &std::collections::BTreeMap<String, f64>,
) -> Result<Vec<String>, Error> {
    if totals.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, spends): (Vec<&str>, Vec<f64>) =
        totals.iter().map(|(id, s)| (id.as_str(), *s)).unzip();
    let rows = tx
        .query_typed(
            r#"INSERT INTO "LiteLLM_EndUserTable" AS e (user_id, spend, blocked)
            SELECT id, s, false FROM unnest($1::text[], $2::float8[]) AS v(id, s)
            ON CONFLICT (user_id) DO UPDATE SET spend = e.spend + EXCLUDED.spend
            RETURNING user_id, budget_id IS NOT NULL"#,
            &[(&ids, Type::TEXT_ARRAY), (&spends, Type::FLOAT8_ARRAY)],
        )
        .await?;
    let mut budgeted = Vec::new();
    for row in rows {
        if row.try_get::<_, bool>(1)? {
            budgeted.push(row.try_get(0)?);
        }
    }
    Ok(budgeted)
}

/// Advances every budget row whose reset is due and that end users or team
/// memberships are linked to, or that is `end_user_default` (the end users
/// without a row of their own ride it), locked in id order, to its next
/// reset; returns their ids, whose linked spend the caller zeroes.
pub async fn advance_due(
    tx: &Transaction<'_>,
    now: DateTime<Utc>,
    end_user_default: Option<&str>,
) -> Result<Vec<String>, Error> {
    let due = tx
        .query(
            r#"SELECT b.budget_id, b.budget_duration FROM "LiteLLM_BudgetTable" b
            WHERE b.budget_reset_at <= $1
                AND (b.budget_id = $2
                    OR EXISTS (SELECT 1 FROM "LiteLLM_EndUserTable" e
                        WHERE e.budget_id = b.budget_id)
                    OR EXISTS (SELECT 1 FROM "LiteLLM_TeamMembership" m
                        WHERE m.budget_id = b.budget_id))
            ORDER BY b.budget_id FOR UPDATE OF b"#,
            &[&now.naive_utc(), &end_user_default],
        )
        .await?;
    if due.is_empty() {
        return Ok(Vec::new());
    }
    let mut ids = Vec::with_capacity(due.len());
    let mut next = Vec::with_capacity(due.len());
    for row in &due {
        ids.push(row.try_get::<_, String>(0)?);
        let duration: Option<String> = row.try_get(1)?;
        next.push(naive(crate::store::next_reset(duration.as_deref(), now)));
    }
    tx.execute(
        r#"UPDATE "LiteLLM_BudgetTable" b SET budget_reset_at = v.at
        FROM unnest($1::text[], $2::timestamp[]) AS v(id, at) WHERE b.budget_id = v.id"#,
        &[&ids, &next],
    )
    .await?;
    Ok(ids)
}

/// Zeroes the spend of the end users linked to `budget_ids`, and of those
/// linked to none when `end_user_default` is among them (LiteLLM's
/// `_enduser_reset_where`); returns their ids.
pub async fn reset_linked(
    tx: &Transaction<'_>,
    budget_ids: &[String],
    end_user_default: Option<&str>,
) -> Result<Vec<String>, Error> {
    if budget_ids.is_empty() {
        return Ok(Vec::new());
    }
    let riders = end_user_default.is_some_and(|d| budget_ids.iter().any(|b| b == d));
    let rows = tx
        .query(
            r#"UPDATE "LiteLLM_EndUserTable" SET spend = 0
            WHERE budget_id = ANY($1) OR ($2 AND budget_id IS NULL AND spend > 0)
            RETURNING user_id"#,
            &[&budget_ids, &riders],
        )
        .await?;
    rows.iter().map(|r| r.try_get(0)).collect()
}
