//! Spend: the batched, idempotent spend-log writer (binary COPY into a
//! staging table, then one INSERT .. ON CONFLICT DO NOTHING), the totals it
//! feeds, the `/spend/logs` query and the budget-period reset sweep.

use super::convert::{naive, utc};
use super::notify;
use super::pool::Session;
use crate::store::{next_reset, Change, SpendFilter, SpendLogRow};
use chrono::{DateTime, NaiveDateTime, Utc};
use std::borrow::Cow;
use std::collections::BTreeMap;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Error, Row, Transaction};

/// The per-connection staging table. `ord` keeps the batch order so the
/// first of two rows with one `request_id` wins, as in memory.
const STAGING: &str = "CREATE TEMP TABLE IF NOT EXISTS gateway_spend_staging (
    ord INT8, request_id TEXT, call_id TEXT, attempt INT4, call_type TEXT, api_key TEXT,
    spend FLOAT8, total_tokens INT8, prompt_tokens INT8, completion_tokens INT8,
    start_time TIMESTAMP, completion_start_time TIMESTAMP, end_time TIMESTAMP, model TEXT,
    model_id TEXT, model_group TEXT, custom_llm_provider TEXT, api_base TEXT, region TEXT,
    user_id TEXT, team_id TEXT, status TEXT, status_code INT4, error_class TEXT,
    error_message TEXT
) ON COMMIT DELETE ROWS";

/// Column types of [`STAGING`], in order.
const STAGING_TYPES: [Type; 25] = [
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::INT4,
    Type::TEXT,
    Type::TEXT,
    Type::FLOAT8,
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::TIMESTAMP,
    Type::TIMESTAMP,
    Type::TIMESTAMP,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT4,
    Type::TEXT,
    Type::TEXT,
];

/// Moves staged rows into the log, skipping request ids already written;
/// returns the rows actually inserted. Token counts are clamped to
/// LiteLLM's INTEGER columns so one odd row cannot fail a batch forever.
const INSERT_LOGS: &str = r#"INSERT INTO "LiteLLM_SpendLogs" (request_id, call_id, attempt,
    call_type, api_key, spend, total_tokens, prompt_tokens, completion_tokens, "startTime",
    "completionStartTime", "endTime", model, model_id, model_group, custom_llm_provider, api_base,
    region, "user", team_id, status, status_code, error_class, error_message)
SELECT DISTINCT ON (request_id) request_id, call_id, attempt, call_type, api_key, spend,
    LEAST(total_tokens, 2147483647), LEAST(prompt_tokens, 2147483647),
    LEAST(completion_tokens, 2147483647), start_time, completion_start_time, end_time, model,
    model_id, model_group, custom_llm_provider, api_base, region, user_id, team_id, status,
    status_code, error_class, error_message
FROM gateway_spend_staging ORDER BY request_id, ord
ON CONFLICT (request_id) DO NOTHING
RETURNING api_key, "user", team_id, spend::float8, model_group"#;

const SELECT_LOGS: &str = r#"SELECT request_id, COALESCE(call_id, request_id) AS call_id,
    COALESCE(attempt, 1) AS attempt, call_type, api_key, spend::float8 AS spend,
    total_tokens::int8 AS total_tokens, prompt_tokens::int8 AS prompt_tokens,
    completion_tokens::int8 AS completion_tokens, "startTime"::timestamp AS start_time,
    "completionStartTime"::timestamp AS completion_start_time, "endTime"::timestamp AS end_time,
    model, model_id, model_group, custom_llm_provider, api_base, region, "user", team_id, status,
    status_code, error_class, error_message
FROM "LiteLLM_SpendLogs"
WHERE ($1::text IS NULL OR api_key = $1) AND ($2::text IS NULL OR "user" = $2)
    AND ($3::text IS NULL OR team_id = $3) AND ($4::text IS NULL OR call_id = $4 OR request_id = $4)
    AND ($5::timestamp IS NULL OR "startTime" >= $5) AND ($6::timestamp IS NULL OR "startTime" < $6)
ORDER BY "startTime", request_id
LIMIT $7 OFFSET $8"#;

/// Writes `rows` once each and adds the spend of the newly written ones to
/// their key, user and team, in one transaction; announces each key whose
/// spend changed. Returns those keys.
pub async fn record(session: &mut Session, rows: &[SpendLogRow]) -> Result<Vec<Change>, Error> {
    if !session.staged {
        session.batch_execute(STAGING).await?;
        session.staged = true;
    }
    let tx = session.transaction().await?;
    stage(&tx, rows).await?;
    let inserted = tx.query(INSERT_LOGS, &[]).await?;
    let totals = Totals::of(&inserted)?;
    let keys = add_spend(&tx, r#""LiteLLM_VerificationToken""#, "token", &totals.keys).await?;
    add_model_spend(&tx, &totals.key_models).await?;
    add_spend(&tx, r#""LiteLLM_UserTable""#, "user_id", &totals.users).await?;
    add_spend(&tx, r#""LiteLLM_TeamTable""#, "team_id", &totals.teams).await?;
    let changes: Vec<Change> = keys.into_iter().map(Change::Key).collect();
    notify(&tx, &changes).await?;
    tx.commit().await?;
    Ok(changes)
}

/// Copies `rows` into the staging table (binary COPY).
async fn stage(tx: &Transaction<'_>, rows: &[SpendLogRow]) -> Result<(), Error> {
    let sink = tx
        .copy_in("COPY gateway_spend_staging FROM STDIN (FORMAT binary)")
        .await?;
    let writer = BinaryCopyInWriter::new(sink, &STAGING_TYPES);
    let mut writer = std::pin::pin!(writer);
    for (ord, row) in rows.iter().enumerate() {
        let staged = Staged::of(ord, row);
        writer.as_mut().write(&staged.params()).await?;
    }
    writer.finish().await?;
    Ok(())
}

/// One row's COPY values, with NUL characters (which Postgres refuses in
/// text) replaced so one odd error message cannot fail a batch forever.
struct Staged<'a> {
    ord: i64,
    row: &'a SpendLogRow,
    text: [Cow<'a, str>; 9],
    opt_text: [Option<Cow<'a, str>>; 5],
    start: NaiveDateTime,
    first_byte: Option<NaiveDateTime>,
    end: NaiveDateTime,
}

impl<'a> Staged<'a> {
    fn of(ord: usize, r: &'a SpendLogRow) -> Self {
        let opt = |s: &'a Option<String>| s.as_deref().map(clean);
        Staged {
            ord: ord as i64,
            row: r,
            text: [
                clean(&r.request_id),
                clean(&r.call_id),
                clean(&r.call_type),
                clean(&r.api_key),
                clean(&r.model),
                clean(&r.model_id),
                clean(&r.model_group),
                clean(&r.custom_llm_provider),
                clean(&r.api_base),
            ],
            opt_text: [
                opt(&r.region),
                opt(&r.user),
                opt(&r.team_id),
                opt(&r.error_class),
                opt(&r.error_message),
            ],
            start: r.start_time.naive_utc(),
            first_byte: naive(r.completion_start_time),
            end: r.end_time.naive_utc(),
        }
    }

    /// Values in [`STAGING_TYPES`] order.
    fn params(&self) -> [&(dyn ToSql + Sync); 25] {
        let (t, o, r) = (&self.text, &self.opt_text, self.row);
        [
            &self.ord,
            &t[0],
            &t[1],
            &r.attempt,
            &t[2],
            &t[3],
            &r.spend,
            &r.total_tokens,
            &r.prompt_tokens,
            &r.completion_tokens,
            &self.start,
            &self.first_byte,
            &self.end,
            &t[4],
            &t[5],
            &t[6],
            &t[7],
            &t[8],
            &o[0],
            &o[1],
            &o[2],
            &r.status,
            &r.status_code,
            &o[3],
            &o[4],
        ]
    }
}

fn clean(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{fffd}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// Spend of newly written rows per key, user and team (sorted, so
/// concurrent writers lock rows in one order).
#[derive(Default)]
struct Totals {
    keys: BTreeMap<String, f64>,
    /// Per key: spend per model group, as a JSON object.
    key_models: BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
    users: BTreeMap<String, f64>,
    teams: BTreeMap<String, f64>,
}

impl Totals {
    /// Sums `api_key, user, team_id, spend` rows; zero-spend rows touch
    /// nothing, as in memory.
    fn of(inserted: &[Row]) -> Result<Totals, Error> {
        let mut totals = Totals::default();
        for row in inserted {
            let spend: f64 = row.try_get::<_, Option<f64>>(3)?.unwrap_or_default();
            if spend == 0.0 {
                continue;
            }
            let key: String = row.try_get(0)?;
            let group: Option<String> = row.try_get(4)?;
            if let Some(group) = group {
                let per_model = totals.key_models.entry(key.clone()).or_default();
                let sum = per_model
                    .get(&group)
                    .and_then(|v| v.as_f64())
                    .unwrap_or(0.0)
                    + spend;
                per_model.insert(group, sum.into());
            }
            *totals.keys.entry(key).or_default() += spend;
            if let Some(user) = row.try_get::<_, Option<String>>(1)? {
                *totals.users.entry(user).or_default() += spend;
            }
            if let Some(team) = row.try_get::<_, Option<String>>(2)? {
                *totals.teams.entry(team).or_default() += spend;
            }
        }
        Ok(totals)
    }
}

/// Adds `amounts` to the spend of existing rows of `table`, locking them in
/// id order; returns the ids updated.
async fn add_spend(
    tx: &Transaction<'_>,
    table: &str,
    id: &str,
    amounts: &BTreeMap<String, f64>,
) -> Result<Vec<String>, Error> {
    if amounts.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&String> = amounts.keys().collect();
    let values: Vec<f64> = amounts.values().copied().collect();
    let lock = format!("SELECT 1 FROM {table} WHERE {id} = ANY($1) ORDER BY {id} FOR UPDATE");
    tx.execute(&lock, &[&ids]).await?;
    let sql = format!(
        "UPDATE {table} t SET spend = t.spend + v.amount
         FROM unnest($1::text[], $2::float8[]) AS v(id, amount)
         WHERE t.{id} = v.id RETURNING t.{id}"
    );
    let rows = tx.query(&sql, &[&ids, &values]).await?;
    let mut updated: Vec<String> = rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    updated.sort();
    Ok(updated)
}

/// Adds spend per model group to keys' `model_spend` (rows already locked
/// by [`add_spend`]); one row per key, the groups merged in SQL.
async fn add_model_spend(
    tx: &Transaction<'_>,
    per_key: &BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
) -> Result<(), Error> {
    if per_key.is_empty() {
        return Ok(());
    }
    let ids: Vec<&String> = per_key.keys().collect();
    let deltas: Vec<serde_json::Value> = per_key
        .values()
        .map(|m| serde_json::Value::Object(m.clone()))
        .collect();
    let sql = r#"UPDATE "LiteLLM_VerificationToken" t SET model_spend = (
            SELECT COALESCE(jsonb_object_agg(g, COALESCE((COALESCE(t.model_spend, '{}'::jsonb) ->> g)::float8, 0)
                + COALESCE((v.delta ->> g)::float8, 0)), '{}'::jsonb)
            FROM jsonb_object_keys(COALESCE(t.model_spend, '{}'::jsonb) || v.delta) AS g)
        FROM unnest($1::text[], $2::jsonb[]) AS v(id, delta)
        WHERE t.token = v.id"#;
    tx.execute(sql, &[&ids, &deltas]).await?;
    Ok(())
}

/// Spend-log rows matching `f`, oldest first.
pub async fn logs(c: &Client, f: &SpendFilter) -> Result<Vec<SpendLogRow>, Error> {
    let (start, end) = (naive(f.start), naive(f.end));
    let limit = f.limit.map(|l| l.max(0));
    let offset = f.offset.max(0);
    let params: [&(dyn ToSql + Sync); 8] = [
        &f.api_key,
        &f.user_id,
        &f.team_id,
        &f.request_id,
        &start,
        &end,
        &limit,
        &offset,
    ];
    c.query(SELECT_LOGS, &params)
        .await?
        .iter()
        .map(log_row)
        .collect()
}

fn log_row(row: &Row) -> Result<SpendLogRow, Error> {
    let text = |column: &str| -> Result<String, Error> {
        Ok(row
            .try_get::<_, Option<String>>(column)?
            .unwrap_or_default())
    };
    Ok(SpendLogRow {
        request_id: row.try_get("request_id")?,
        call_id: row.try_get("call_id")?,
        attempt: row.try_get("attempt")?,
        call_type: text("call_type")?,
        api_key: text("api_key")?,
        spend: row.try_get::<_, Option<f64>>("spend")?.unwrap_or_default(),
        total_tokens: row
            .try_get::<_, Option<i64>>("total_tokens")?
            .unwrap_or_default(),
        prompt_tokens: row
            .try_get::<_, Option<i64>>("prompt_tokens")?
            .unwrap_or_default(),
        completion_tokens: row
            .try_get::<_, Option<i64>>("completion_tokens")?
            .unwrap_or_default(),
        start_time: row.try_get::<_, NaiveDateTime>("start_time")?.and_utc(),
        completion_start_time: utc(row.try_get("completion_start_time")?),
        end_time: row.try_get::<_, NaiveDateTime>("end_time")?.and_utc(),
        model: text("model")?,
        model_id: text("model_id")?,
        model_group: text("model_group")?,
        custom_llm_provider: text("custom_llm_provider")?,
        api_base: text("api_base")?,
        region: row.try_get("region")?,
        user: row.try_get("user")?,
        team_id: row.try_get("team_id")?,
        status: text("status")?,
        status_code: row
            .try_get::<_, Option<i32>>("status_code")?
            .unwrap_or_default(),
        error_class: row.try_get("error_class")?,
        error_message: row.try_get("error_message")?,
    })
}

/// Total spend over all keys.
pub async fn global(c: &Client) -> Result<f64, Error> {
    let sql = r#"SELECT COALESCE(SUM(spend), 0)::float8 FROM "LiteLLM_VerificationToken""#;
    c.query_one(sql, &[]).await?.try_get(0)
}

/// Zeroes the spend of keys, teams and users whose period ended by `now`,
/// schedules their next reset and announces each, in one transaction.
pub async fn reset_due(c: &mut Client, now: DateTime<Utc>) -> Result<Vec<Change>, Error> {
    let tx = c.transaction().await?;
    let mut changes = Vec::new();
    for token in reset_table(&tx, r#""LiteLLM_VerificationToken""#, "token", now).await? {
        changes.push(Change::Key(token));
    }
    // Keys, users, teams: the order `record` locks them in.
    for user in reset_table(&tx, r#""LiteLLM_UserTable""#, "user_id", now).await? {
        changes.push(Change::User(user));
    }
    for team in reset_table(&tx, r#""LiteLLM_TeamTable""#, "team_id", now).await? {
        changes.push(Change::Team(team));
    }
    notify(&tx, &changes).await?;
    tx.commit().await?;
    Ok(changes)
}

/// Resets the due rows of one table; returns their ids. A replica running
/// the same sweep concurrently waits on the row locks, then finds the rows
/// no longer due.
async fn reset_table(
    tx: &Transaction<'_>,
    table: &str,
    id: &str,
    now: DateTime<Utc>,
) -> Result<Vec<String>, Error> {
    let due = format!(
        "UPDATE {table} SET spend = 0, model_spend = '{{}}'::jsonb WHERE budget_reset_at <= $1 RETURNING {id}, budget_duration"
    );
    let rows = tx.query(&due, &[&now.naive_utc()]).await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let mut ids = Vec::with_capacity(rows.len());
    let mut next = Vec::with_capacity(rows.len());
    for row in &rows {
        ids.push(row.try_get::<_, String>(0)?);
        let duration: Option<String> = row.try_get(1)?;
        next.push(naive(next_reset(duration.as_deref(), now)));
    }
    let schedule = format!(
        "UPDATE {table} t SET budget_reset_at = v.at
         FROM unnest($1::text[], $2::timestamp[]) AS v(id, at) WHERE t.{id} = v.id"
    );
    tx.execute(&schedule, &[&ids, &next]).await?;
    Ok(ids)
}
