//! LiteLLM's daily spend tables on Postgres: a batch's deltas upserted in
//! the spend transaction (one `INSERT .. ON CONFLICT DO UPDATE` per table,
//! its rows passed as one array per column, in unique-key order so
//! concurrent writers lock rows in one order), and the page
//! `/*/daily/activity` reads.

use super::spend_copy::clean;
use crate::store::{
    DailyBatch, DailyCounts, DailyDelta, DailyKey, DailyPage, DailyQuery, DailyRow, DailyScope,
};
use futures_util::future::try_join_all;
use std::collections::BTreeMap;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Error, Row, Transaction};

/// The columns after `id` and the entity, as the upsert writes them.
const COLUMNS: &str = "date, api_key, model, custom_llm_provider, mcp_namespaced_tool_name, \
    endpoint, model_group, prompt_tokens, completion_tokens, spend, api_requests, \
    successful_requests, failed_requests, total_response_time_ms, timed_requests, updated_at";

/// The counters, each added to the stored row on conflict.
const COUNTERS: [&str; 8] = [
    "prompt_tokens",
    "completion_tokens",
    "spend",
    "api_requests",
    "successful_requests",
    "failed_requests",
    "total_response_time_ms",
    "timed_requests",
];

/// The batch's arrays, `$1` to `$16`.
const UNNEST: &str = "unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
    $6::text[], $7::text[], $8::text[], $9::int8[], $10::int8[], $11::float8[], $12::int8[], \
    $13::int8[], $14::int8[], $15::int8[], $16::int8[]) AS v(entity, date, api_key, model, \
    provider, endpoint, model_group, request_id, prompt, completion, spend, requests, ok, \
    failed, ms, timed)";

/// `ON CONFLICT` on LiteLLM's unique key: the counters added, `updated_at`
/// moved (on the tag table, the contributing request too).
fn on_conflict(scope: DailyScope) -> String {
    let table = scope.table();
    let mut set: Vec<String> = COUNTERS
        .iter()
        .map(|c| format!("{c} = {table}.{c} + EXCLUDED.{c}"))
        .collect();
    set.push("updated_at = EXCLUDED.updated_at".into());
    if scope == DailyScope::Tag {
        set.push(format!(
            "request_id = COALESCE(EXCLUDED.request_id, {table}.request_id)"
        ));
    }
    format!(
        "ON CONFLICT ({}, date, api_key, model, custom_llm_provider, mcp_namespaced_tool_name, \
         endpoint) DO UPDATE SET {}",
        scope.id_column(),
        set.join(", ")
    )
}

/// The upsert of one table's deltas.
fn upsert_sql(scope: DailyScope) -> String {
    let (extra_column, extra_value) = match scope {
        DailyScope::Tag => (", request_id", ", v.request_id"),
        _ => ("", ""),
    };
    format!(
        "INSERT INTO {table} (id, {id}, {COLUMNS}{extra_column})
        SELECT gen_random_uuid()::text, v.entity, v.date, v.api_key, v.model, v.provider, '',
            v.endpoint, v.model_group, v.prompt, v.completion, v.spend, v.requests, v.ok,
            v.failed, v.ms, v.timed, (now() AT TIME ZONE 'UTC'){extra_value}
        FROM {UNNEST}
        {conflict}",
        table = scope.table(),
        id = scope.id_column(),
        conflict = on_conflict(scope),
    )
}

/// The organizations' upsert, from the teams' deltas: each team's rows
/// counted for its organization (LiteLLM's organization spend is its
/// teams'), summed per organization and key, in key order.
fn org_upsert_sql() -> String {
    let scope = DailyScope::Organization;
    format!(
        "INSERT INTO {table} (id, organization_id, {COLUMNS})
        SELECT gen_random_uuid()::text, t.organization_id, v.date, v.api_key, v.model,
            v.provider, '', v.endpoint, min(v.model_group), sum(v.prompt)::int8,
            sum(v.completion)::int8, sum(v.spend)::float8, sum(v.requests)::int8,
            sum(v.ok)::int8, sum(v.failed)::int8, sum(v.ms)::int8, sum(v.timed)::int8,
            (now() AT TIME ZONE 'UTC')
        FROM {UNNEST}
        JOIN \"LiteLLM_TeamTable\" t ON t.team_id = v.entity
        WHERE t.organization_id IS NOT NULL
        GROUP BY t.organization_id, v.date, v.api_key, v.model, v.provider, v.endpoint
        ORDER BY t.organization_id, v.date, v.api_key, v.model, v.provider, v.endpoint
        {conflict}",
        table = scope.table(),
        conflict = on_conflict(scope),
    )
}

/// One table's deltas as arrays, text cleaned of NUL.
#[derive(Default)]
struct Arrays {
    /// entity, date, api_key, model, provider, endpoint, model_group, request_id.
    text: [Vec<String>; 8],
    /// prompt, completion, requests, ok, failed, ms, timed.
    ints: [Vec<i64>; 7],
    spend: Vec<f64>,
}

impl Arrays {
    fn of(deltas: &BTreeMap<DailyKey, DailyDelta>) -> Arrays {
        let mut a = Arrays::default();
        for (k, d) in deltas {
            let text = [
                &k.entity,
                &k.date,
                &k.api_key,
                &k.model,
                &k.custom_llm_provider,
                &k.endpoint,
                &d.model_group,
                &d.request_id,
            ];
            for (column, value) in a.text.iter_mut().zip(text) {
                column.push(clean(value).into_owned());
            }
            let c = &d.counts;
            let ints = [
                c.prompt_tokens,
                c.completion_tokens,
                c.api_requests,
                c.successful_requests,
                c.failed_requests,
                c.total_response_time_ms,
                c.timed_requests,
            ];
            for (column, value) in a.ints.iter_mut().zip(ints) {
                column.push(value);
            }
            a.spend.push(c.spend);
        }
        a
    }

    fn params(&self) -> [(&(dyn ToSql + Sync), Type); 16] {
        let (t, i) = (&self.text, &self.ints);
        let (text, int) = (Type::TEXT_ARRAY, Type::INT8_ARRAY);
        [
            (&t[0], text.clone()),
            (&t[1], text.clone()),
            (&t[2], text.clone()),
            (&t[3], text.clone()),
            (&t[4], text.clone()),
            (&t[5], text.clone()),
            (&t[6], text.clone()),
            (&t[7], text),
            (&i[0], int.clone()),
            (&i[1], int.clone()),
            (&self.spend, Type::FLOAT8_ARRAY),
            (&i[2], int.clone()),
            (&i[3], int.clone()),
            (&i[4], int.clone()),
            (&i[5], int.clone()),
            (&i[6], int),
        ]
    }
}

/// Upserts `batch` (whose organization rows, if any, are ignored: they
/// come from its team rows here) in `tx`, the statements sent together.
pub async fn upsert(tx: &Transaction<'_>, batch: &DailyBatch) -> Result<(), Error> {
    let mut statements: Vec<(String, Arrays)> = Vec::new();
    for (scope, deltas) in &batch.scopes {
        if deltas.is_empty() || *scope == DailyScope::Organization {
            continue;
        }
        statements.push((upsert_sql(*scope), Arrays::of(deltas)));
        if *scope == DailyScope::Team {
            statements.push((org_upsert_sql(), Arrays::of(deltas)));
        }
    }
    try_join_all(
        statements
            .iter()
            .map(|(sql, arrays)| async move { tx.execute_typed(sql, &arrays.params()).await }),
    )
    .await?;
    Ok(())
}

/// One page of `q`'s rows, newest day first (then by id, as LiteLLM
/// pages), and how many match, in one round trip.
pub async fn page(c: &Client, q: &DailyQuery) -> Result<DailyPage, Error> {
    let sql = format!(
        "SELECT {id}, date, api_key, model, model_group, custom_llm_provider, endpoint,
            prompt_tokens::int8, completion_tokens::int8, spend::float8, api_requests::int8,
            successful_requests::int8, failed_requests::int8, total_response_time_ms::int8,
            timed_requests::int8, count(*) OVER () AS total
        FROM {table}
        WHERE date >= $1 AND date <= $2 AND ($3::text[] IS NULL OR {id} = ANY($3))
            AND ($4::text[] IS NULL OR api_key = ANY($4)) AND ($5::text IS NULL OR model = $5)
            AND NOT (COALESCE({id}, '') = ANY($8))
        ORDER BY date DESC, id
        LIMIT $6 OFFSET $7",
        id = q.scope.id_column(),
        table = q.scope.table(),
    );
    let params: [(&(dyn ToSql + Sync), Type); 8] = [
        (&q.start, Type::TEXT),
        (&q.end, Type::TEXT),
        (&q.entities, Type::TEXT_ARRAY),
        (&q.api_keys, Type::TEXT_ARRAY),
        (&q.model, Type::TEXT),
        (&q.limit, Type::INT8),
        (&q.offset, Type::INT8),
        (&q.exclude, Type::TEXT_ARRAY),
    ];
    let rows = c.query_typed(&sql, &params).await?;
    let mut total = match rows.first() {
        Some(r) => r.try_get("total")?,
        None => 0,
    };
    if rows.is_empty() && q.offset > 0 {
        // Past the last page: the window saw no row to count.
        total = count(c, q).await?;
    }
    let rows = rows.iter().map(daily_row).collect::<Result<_, _>>()?;
    Ok(DailyPage { total, rows })
}

/// How many rows match `q` (for a page past the last).
async fn count(c: &Client, q: &DailyQuery) -> Result<i64, Error> {
    let sql = format!(
        "SELECT count(*) FROM {table}
        WHERE date >= $1 AND date <= $2 AND ($3::text[] IS NULL OR {id} = ANY($3))
            AND ($4::text[] IS NULL OR api_key = ANY($4)) AND ($5::text IS NULL OR model = $5)
            AND NOT (COALESCE({id}, '') = ANY($6))",
        id = q.scope.id_column(),
        table = q.scope.table(),
    );
    let params: [(&(dyn ToSql + Sync), Type); 6] = [
        (&q.start, Type::TEXT),
        (&q.end, Type::TEXT),
        (&q.entities, Type::TEXT_ARRAY),
        (&q.api_keys, Type::TEXT_ARRAY),
        (&q.model, Type::TEXT),
        (&q.exclude, Type::TEXT_ARRAY),
    ];
    c.query_typed(&sql, &params).await?[0].try_get(0)
}

fn daily_row(row: &Row) -> Result<DailyRow, Error> {
    let text = |i: usize| -> Result<String, Error> {
        Ok(row.try_get::<_, Option<String>>(i)?.unwrap_or_default())
    };
    Ok(DailyRow {
        key: DailyKey {
            entity: text(0)?,
            date: text(1)?,
            api_key: text(2)?,
            model: text(3)?,
            custom_llm_provider: text(5)?,
            endpoint: text(6)?,
        },
        model_group: text(4)?,
        counts: DailyCounts {
            prompt_tokens: row.try_get(7)?,
            completion_tokens: row.try_get(8)?,
            spend: row.try_get(9)?,
            api_requests: row.try_get(10)?,
            successful_requests: row.try_get(11)?,
            failed_requests: row.try_get(12)?,
            total_response_time_ms: row.try_get(13)?,
            timed_requests: row.try_get(14)?,
        },
    })
}
