//! Spend: the batched, idempotent spend-log writer (a COPY of the batch,
//! or when a row was already written one INSERT .. ON CONFLICT DO NOTHING
//! of the batch passed as one array per column), the totals it feeds, the
//! `/spend/logs` query and the budget-period reset sweep.

use super::convert::{naive, utc};
use super::notify;
use super::pool::Session;
use super::spend_binary::{Layout, COPY_LOGS_BINARY};
use super::spend_copy::{self, clean};
use crate::store::records::python_bool;
use crate::store::{
    next_reset, Change, DailyBatch, JsonText, SpendChanges, SpendFilter, SpendLogRow,
    PROXY_BUDGET_USER,
};
use bytes::Bytes;
use chrono::{DateTime, NaiveDateTime, Utc};
use futures_util::future::{try_join, try_join3, try_join4};
use futures_util::SinkExt;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Error, Row, Transaction};

/// Writes a batch's rows, passed as one array per column (see
/// [`Columns`]), skipping request ids already written (the first of two
/// rows with one `request_id` wins, as in memory); returns the rows
/// actually inserted. Arrays rather than a COPY into a temp staging table:
/// one statement instead of two, no temp-table writes and truncation per
/// batch (and no session state, so it works through a transaction pooler). Token counts are clamped to
/// LiteLLM's INTEGER columns so one odd row cannot fail a batch forever.
/// LiteLLM's columns: `litellm_call_id` is the client request's id,
/// `request_duration_ms` the attempt's, `metadata` LiteLLM's
/// `SpendLogsMetadata` names (`user_api_key*`, `status`,
/// `error_information`, `guardrail_information`).
const INSERT_LOGS: &str = r#"INSERT INTO "LiteLLM_SpendLogs" (request_id, call_id, attempt,
    call_type, api_key, spend, total_tokens, prompt_tokens, completion_tokens, "startTime",
    "completionStartTime", "endTime", model, model_id, model_group, custom_llm_provider, api_base,
    region, "user", team_id, status, status_code, error_class, error_message, litellm_call_id,
    request_duration_ms, metadata, end_user, response_id, cache_hit, cache_key,
    proxy_server_request, response)
SELECT DISTINCT ON (request_id) request_id, call_id, attempt, call_type, api_key, spend,
    LEAST(total_tokens, 2147483647), LEAST(prompt_tokens, 2147483647),
    LEAST(completion_tokens, 2147483647), start_time, completion_start_time, end_time, model,
    model_id, model_group, custom_llm_provider, api_base, region, user_id, team_id, status,
    status_code, error_class, error_message, call_id,
    LEAST(GREATEST(EXTRACT(EPOCH FROM (end_time - start_time)) * 1000, 0), 2147483647)::int4,
    jsonb_strip_nulls(jsonb_build_object('user_api_key', api_key,
        'user_api_key_user_id', user_id, 'user_api_key_team_id', team_id, 'status', status,
        'attempt', attempt,
        'error_information', CASE WHEN error_class IS NULL THEN NULL ELSE jsonb_build_object(
            'error_class', error_class, 'error_message', error_message,
            'error_code', status_code::text, 'llm_provider', custom_llm_provider) END,
        'guardrail_information', guardrail_information::jsonb)), end_user,
    response_id, cache_hit, COALESCE(cache_key, ''),
    COALESCE(proxy_server_request, '{}')::jsonb, COALESCE(response, '{}')::jsonb
FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::text[], $6::float8[],
    $7::int8[], $8::int8[], $9::int8[], $10::timestamp[], $11::timestamp[], $12::timestamp[],
    $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[],
    $20::text[], $21::text[], $22::int4[], $23::text[], $24::text[], $25::text[], $26::text[],
    $27::text[], $28::text[], $29::text[], $30::text[], $31::text[])
    WITH ORDINALITY AS s(request_id, call_id, attempt, call_type, api_key, spend, total_tokens,
        prompt_tokens, completion_tokens, start_time, completion_start_time, end_time, model,
        model_id, model_group, custom_llm_provider, api_base, region, user_id, team_id, status,
        status_code, error_class, error_message, end_user, response_id, cache_hit, cache_key,
        guardrail_information, proxy_server_request, response, ord)
ORDER BY request_id, ord
ON CONFLICT (request_id) DO NOTHING
RETURNING api_key, "user", team_id, spend::float8, model_group, "endTime"::timestamp, end_user,
    request_id"#;

/// The columns [`log_row`] reads, as a literal for `concat!`.
macro_rules! log_columns {
    () => {
        r#"request_id, COALESCE(call_id, request_id) AS call_id,
    COALESCE(attempt, 1) AS attempt, call_type, api_key, spend::float8 AS spend,
    total_tokens::int8 AS total_tokens, prompt_tokens::int8 AS prompt_tokens,
    completion_tokens::int8 AS completion_tokens, "startTime"::timestamp AS start_time,
    "completionStartTime"::timestamp AS completion_start_time, "endTime"::timestamp AS end_time,
    model, model_id, model_group, custom_llm_provider, api_base, region, "user", team_id, status,
    status_code, error_class, error_message, end_user, response_id, cache_hit, cache_key,
    metadata -> 'guardrail_information' AS guardrail_information,
    proxy_server_request::text AS proxy_server_request, response::text AS response"#
    };
}
pub(super) use log_columns;

/// The conditions of `/spend/logs`'s filter: `$1` key, `$2` user, `$3`
/// team, `$4` request id, `$8` model, `$9` status, as a literal for
/// `concat!`.
macro_rules! log_filters {
    () => {
        r#"($1::text IS NULL OR api_key = $1) AND ($2::text IS NULL OR "user" = $2)
    AND ($3::text IS NULL OR team_id = $3)
    AND ($4::text IS NULL OR litellm_call_id = $4 OR request_id = $4 OR response_id = $4)
    AND ($8::text IS NULL OR model_group = $8 OR model = $8) AND ($9::text IS NULL OR status = $9)"#
    };
}
pub(super) use log_filters;

const SELECT_LOGS: &str = concat!(
    "SELECT ",
    log_columns!(),
    r#"
FROM "LiteLLM_SpendLogs"
WHERE "#,
    log_filters!(),
    r#"
    AND ($5::timestamp IS NULL OR "startTime" >= $5) AND ($6::timestamp IS NULL OR "startTime" < $6)
ORDER BY "startTime", request_id
LIMIT $7 OFFSET $10"#
);

/// Writes `rows` once each and adds the spend of the newly written ones to
/// their key, user and team, in one transaction; announces each key whose
/// spend changed. A row settled before its key's (user's, team's) last
/// budget reset is logged but not counted in the new period: the rows are
/// locked first, so a reset committed before sees its period start here,
/// and one that comes after zeroes what this adds. Returns the changes.
///
/// The rows go by COPY, binary ([`super::spend_binary`]) where the table's
/// column types allow, else text ([`spend_copy`]): Postgres stores them
/// and computes nothing (no arrays to bind and unnest, no conflict check
/// per row): a quarter less of its CPU a row than by INSERT, and binary
/// spares it parsing the text.
/// A COPY fails whole when one of its request ids is already written; that
/// batch is then written again by [`INSERT_LOGS`], which skips them.
///
/// The COPY's pieces go `spread` apart at most in all ([`piece_pause`]),
/// before any row is locked, so a paced batch holds no lock while its rows
/// trickle in.
///
/// Eight round trips whatever the batch holds: BEGIN; the COPY statement's
/// parse; the COPY's start; its rows; the locks and the period read; the
/// updates; NOTIFY; COMMIT (five by INSERT: the insert goes with the
/// locks). Each statement goes with its parameter types or is prepared
/// inside the transaction, so it works through a transaction pooler, and
/// those of one step are sent together: the driver pipelines futures
/// polled together, in the order first polled, and the server runs them in
/// that order, so rows are still locked in one order (keys, users, teams,
/// then organizations and end users).
pub async fn record(
    session: &mut Session,
    copy: &CopyState,
    rows: &[SpendLogRow],
    spread: Duration,
) -> Result<SpendChanges, Error> {
    // Every row that could count is locked, also those the insert skips
    // (already written): locking a few more rows keeps this one round trip.
    let ids = Ids::of(rows);
    if copy.usable() {
        let format = copy.format(session).await?;
        let tx = session.transaction().await?;
        match copy_rows(&tx, rows, &ids, format, spread).await {
            Ok((inserted, periods)) => {
                return settle(tx, inserted, periods, &DailyBatch::of(rows, |_| None)).await
            }
            Err(Refused::Copy(e)) if copy.falls_back(&e, format) => tx.rollback().await?,
            Err(Refused::Copy(e) | Refused::Other(e)) => return Err(e),
        }
    }
    let tx = session.transaction().await?;
    let columns = Columns::of(rows);
    let (inserted, ((), (), (), periods)) = try_join(
        tx.query_typed(INSERT_LOGS, &columns.params()),
        try_join4(
            lock(&tx, LOCK_KEYS, &ids.keys),
            lock(&tx, LOCK_USERS, &ids.users),
            lock(&tx, LOCK_TEAMS, &ids.teams),
            Periods::read(&tx, &ids),
        ),
    )
    .await?;
    let daily = daily_of_inserted(rows, &inserted)?;
    settle(tx, Inserted::of(&inserted, rows)?, periods, &daily).await
}

/// What the rows the INSERT wrote (by the `request_id` it returns, last)
/// add to the daily tables.
fn daily_of_inserted(rows: &[SpendLogRow], inserted: &[Row]) -> Result<DailyBatch, Error> {
    let mut written = std::collections::HashSet::with_capacity(inserted.len());
    for row in inserted {
        written.insert(row.try_get::<_, String>(7)?);
    }
    let mut seen = std::collections::HashSet::with_capacity(inserted.len());
    let fresh = rows.iter().filter(|r| {
        let id = clean(&r.request_id);
        written.contains(id.as_ref()) && seen.insert(id.into_owned())
    });
    Ok(DailyBatch::of(fresh, |_| None))
}

/// Adds the spend of `rows` to their keys, users, teams, organizations and
/// end users without writing the rows (`disable_spend_logs`): the same
/// locks, period read and updates as [`record`], with every row counted.
pub async fn count(session: &mut Session, rows: &[SpendLogRow]) -> Result<SpendChanges, Error> {
    let ids = Ids::of(rows);
    let tx = session.transaction().await?;
    let ((), (), (), periods) = try_join4(
        lock(&tx, LOCK_KEYS, &ids.keys),
        lock(&tx, LOCK_USERS, &ids.users),
        lock(&tx, LOCK_TEAMS, &ids.teams),
        Periods::read(&tx, &ids),
    )
    .await?;
    settle(
        tx,
        Inserted::copied(rows),
        periods,
        &DailyBatch::of(rows, |_| None),
    )
    .await
}

/// Whether spend rows go by COPY, and in which format: binary when every
/// column of the table is of a type [`Layout`] encodes (read on the first
/// batch), else text; binary until a binary COPY fails for a reason every
/// batch would meet, then text; COPY until a text COPY fails so, then
/// [`INSERT_LOGS`] for the rest of the process.
#[derive(Default)]
pub struct CopyState {
    refused: AtomicBool,
    /// The table's binary layout once read (`None`: text only).
    layout: OnceLock<Option<Layout>>,
    binary_refused: AtomicBool,
}

/// The format of a batch's COPY.
#[derive(Clone, Copy)]
enum Format<'a> {
    Text,
    Binary(&'a Layout),
}

impl Format<'_> {
    fn statement(self) -> &'static str {
        match self {
            Format::Text => spend_copy::COPY_LOGS,
            Format::Binary(_) => COPY_LOGS_BINARY,
        }
    }

    /// Appends the COPY data of `piece`, the first and/or last of a batch.
    fn encode(self, piece: &[SpendLogRow], first: bool, last: bool, out: &mut Vec<u8>) {
        match self {
            Format::Text => spend_copy::encode(piece, out),
            Format::Binary(layout) => layout.encode(piece, first, last, out),
        }
    }
}

impl CopyState {
    fn usable(&self) -> bool {
        !self.refused.load(Ordering::Relaxed)
    }

    /// The format of the next COPY, reading the table's column types on
    /// the first call (one round trip, once a process).
    async fn format(&self, client: &Client) -> Result<Format<'_>, Error> {
        if self.layout.get().is_none() {
            let layout = match Layout::read(client).await? {
                Ok(layout) => Some(layout),
                Err(why) => {
                    tracing::info!(
                        why = %why,
                        "spend rows: \"LiteLLM_SpendLogs\" has a column binary COPY does not write; COPY in text"
                    );
                    None
                }
            };
            let _ = self.layout.set(layout);
        }
        Ok(match self.layout.get() {
            Some(Some(layout)) if !self.binary_refused.load(Ordering::Relaxed) => {
                Format::Binary(layout)
            }
            _ => Format::Text,
        })
    }

    /// Whether a batch whose COPY in `format` failed with `e` is written
    /// again by [`INSERT_LOGS`]: when Postgres refused the rows. A request
    /// id already written (a batch sent again after a lost commit, or twice
    /// in one batch) is that batch's alone; a value or a column the table
    /// refuses (SQLSTATE classes 22 and 42) would fail every COPY in that
    /// format, so binary is given up for text, text for INSERT. Any other
    /// error is the batch's error.
    fn falls_back(&self, e: &Error, format: Format<'_>) -> bool {
        let Some(code) = e.code() else {
            return false;
        };
        if *code == SqlState::UNIQUE_VIOLATION {
            return true;
        }
        if !matches!(code.code().get(..2), Some("22" | "42")) {
            return false;
        }
        if let Format::Binary(_) = format {
            if !self.binary_refused.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    error = %e,
                    "spend rows: binary COPY refused by \"LiteLLM_SpendLogs\"; COPY in text from now on"
                );
            }
            return true;
        }
        if !self.refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                error = %e,
                "spend rows: COPY refused by \"LiteLLM_SpendLogs\"; writing them by INSERT from now on"
            );
        }
        true
    }
}

/// Most pieces a batch's COPY of up to [`MAX_PIECES`] times
/// [`MAX_PIECE_ROWS`] rows is sent in, [`PIECE_PAUSE`] apart at least.
const MAX_PIECES: usize = 8;
/// Fewest rows in a piece.
const MIN_PIECE_ROWS: usize = 16;
/// Most rows in a piece: a larger batch (the writer's at a high rate)
/// goes in more pieces, so Postgres's bursts stay as short.
const MAX_PIECE_ROWS: usize = 64;
/// The shortest pause between two pieces of a COPY.
const PIECE_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause between two pieces of a COPY, however long its spread.
const MAX_PIECE_PAUSE: Duration = Duration::from_millis(50);

/// Rows in each piece of a COPY of `rows` rows. The server stores a piece
/// as it arrives and then waits for the next, so a batch's work is split
/// into bursts of a few hundred microseconds instead of one of several
/// milliseconds: a Postgres on the gateway's own CPUs then delays a core's
/// wake-up by one burst at most. At most [`MAX_PIECES`] for a batch of up
/// to [`MAX_PIECES`] times [`MAX_PIECE_ROWS`] rows; a larger one in pieces
/// of [`MAX_PIECE_ROWS`] at most.
fn piece_rows(rows: usize) -> usize {
    let pieces = (rows / MIN_PIECE_ROWS).clamp(1, MAX_PIECES);
    rows.div_ceil(pieces).clamp(1, MAX_PIECE_ROWS)
}

/// The pause between two of a COPY's `pieces` pieces, so that they span
/// `spread`: a busy batch's pieces then reach Postgres at about the rate
/// its rows came in, and Postgres's work on them is as many short bursts
/// spread over that time rather than back to back (measured at 12,000
/// requests a second with Postgres beside the gateway: back to back, a
/// batch's COPY kept Postgres busy a third of the time for 400 ms and the
/// core waited for the CPU as long, its p99 19 ms). Between
/// [`PIECE_PAUSE`] and [`MAX_PIECE_PAUSE`].
fn piece_pause(pieces: usize, spread: Duration) -> Duration {
    let gaps = u32::try_from(pieces.saturating_sub(1).max(1)).unwrap_or(u32::MAX);
    (spread / gaps).clamp(PIECE_PAUSE, MAX_PIECE_PAUSE)
}

/// Why [`copy_rows`] failed: the COPY itself, or a statement beside it.
enum Refused {
    Copy(Error),
    Other(Error),
}

/// Copies `rows` into `"LiteLLM_SpendLogs"` (every one new, or the COPY
/// fails), its pieces spread over `spread` ([`piece_pause`]), then locks
/// the rows they count for and reads their budget periods; all of them are
/// returned as inserted.
async fn copy_rows<'a>(
    tx: &Transaction<'_>,
    rows: &'a [SpendLogRow],
    ids: &Ids<'_>,
    format: Format<'_>,
    spread: Duration,
) -> Result<(Inserted<'a>, Periods), Refused> {
    let statement = tx
        .prepare_typed(format.statement(), &[])
        .await
        .map_err(Refused::Other)?;
    let copy = async {
        let sink = tx.copy_in::<_, Bytes>(&statement).await?;
        futures_util::pin_mut!(sink);
        let pieces = rows.chunks(piece_rows(rows.len()));
        let last = pieces.len().saturating_sub(1);
        let pause = piece_pause(pieces.len(), spread);
        for (i, piece) in pieces.enumerate() {
            if i > 0 {
                tokio::time::sleep(pause).await;
            }
            let mut data = Vec::with_capacity(piece.len() * 512);
            format.encode(piece, i == 0, i == last, &mut data);
            sink.send(Bytes::from(data)).await?;
        }
        sink.finish().await
    };
    copy.await.map_err(Refused::Copy)?;
    let ((), (), (), periods) = try_join4(
        lock(tx, LOCK_KEYS, &ids.keys),
        lock(tx, LOCK_USERS, &ids.users),
        lock(tx, LOCK_TEAMS, &ids.teams),
        Periods::read(tx, ids),
    )
    .await
    .map_err(Refused::Other)?;
    Ok((Inserted::copied(rows), periods))
}

/// Adds the spend of the `inserted` rows to their keys, users, teams,
/// organizations and end users and `daily` to the daily tables, announces
/// what changed and commits.
async fn settle(
    tx: Transaction<'_>,
    inserted: Inserted<'_>,
    periods: Periods,
    daily: &DailyBatch,
) -> Result<SpendChanges, Error> {
    let totals = Totals::of(&inserted, &periods);
    let end_user_totals = inserted.end_users();
    let lifetime = Lifetime::of(&inserted);
    let ((mut keys, _, _), ((), end_users, (), ())) = try_join(
        try_join3(
            add_key_spend(&tx, &totals, &lifetime),
            add_spend(&tx, ADD_USER_SPEND, &totals.users, &totals.user_models),
            add_spend(&tx, ADD_TEAM_SPEND, &totals.teams, &totals.team_models),
        ),
        try_join4(
            add_org_spend(&tx, &totals.teams),
            super::end_users::add_spend(&tx, &end_user_totals),
            lifetime.add_members(&tx),
            super::daily::upsert(&tx, daily),
        ),
    )
    .await?;
    // Keys, users and teams with rows of an earlier period: their caches
    // counted those rows as unflushed spend, and must read the figure that
    // leaves them out (here too, not only on the other replicas). End users
    // with a budget row are read again everywhere.
    let owned = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect::<Vec<_>>();
    let stale_keys = owned(&totals.stale_keys);
    let mut refresh: Vec<Change> = stale_keys.iter().cloned().map(Change::Key).collect();
    refresh.extend(owned(&totals.stale_users).into_iter().map(Change::User));
    refresh.extend(owned(&totals.stale_teams).into_iter().map(Change::Team));
    refresh.extend(end_users.into_iter().map(Change::EndUser));
    keys.extend(stale_keys);
    keys.sort();
    keys.dedup();
    let mut announce: Vec<Change> = keys.into_iter().map(Change::Key).collect();
    announce.extend(
        refresh
            .iter()
            .filter(|c| !matches!(c, Change::Key(_)))
            .cloned(),
    );
    notify(&tx, &announce).await?;
    tx.commit().await?;
    Ok(SpendChanges { announce, refresh })
}

/// A batch's values, one array per column of [`INSERT_LOGS`], with NUL
/// characters (which Postgres refuses in text) replaced so one odd error
/// message cannot fail a batch forever.
struct Columns<'a> {
    /// `request_id, call_id, call_type, api_key, model, model_id,
    /// model_group, custom_llm_provider, api_base`.
    text: [Vec<Cow<'a, str>>; 9],
    /// `region, user, team_id, error_class, error_message, end_user,
    /// response_id, cache_key, proxy_server_request, response`.
    opt_text: [Vec<Option<Cow<'a, str>>>; 10],
    status: Vec<&'a str>,
    cache_hit: Vec<&'static str>,
    attempt: Vec<i32>,
    status_code: Vec<i32>,
    spend: Vec<f64>,
    /// `total_tokens, prompt_tokens, completion_tokens`.
    tokens: [Vec<i64>; 3],
    start: Vec<NaiveDateTime>,
    first_byte: Vec<Option<NaiveDateTime>>,
    end: Vec<NaiveDateTime>,
    /// `metadata.guardrail_information`, as JSON text.
    guardrails: Vec<Option<String>>,
}

impl<'a> Columns<'a> {
    fn of(rows: &'a [SpendLogRow]) -> Self {
        let n = rows.len();
        let mut c = Columns {
            text: std::array::from_fn(|_| Vec::with_capacity(n)),
            opt_text: std::array::from_fn(|_| Vec::with_capacity(n)),
            status: Vec::with_capacity(n),
            cache_hit: Vec::with_capacity(n),
            attempt: Vec::with_capacity(n),
            status_code: Vec::with_capacity(n),
            spend: Vec::with_capacity(n),
            tokens: std::array::from_fn(|_| Vec::with_capacity(n)),
            start: Vec::with_capacity(n),
            first_byte: Vec::with_capacity(n),
            end: Vec::with_capacity(n),
            guardrails: Vec::with_capacity(n),
        };
        for r in rows {
            let text: [&str; 9] = [
                &r.request_id,
                &r.call_id,
                &r.call_type,
                &r.api_key,
                &r.model,
                &r.model_id,
                &r.model_group,
                &r.custom_llm_provider,
                &r.api_base,
            ];
            for (column, value) in c.text.iter_mut().zip(text) {
                column.push(clean(value));
            }
            let opt_text: [Option<&str>; 10] = [
                r.region.as_deref(),
                r.user.as_deref(),
                r.team_id.as_deref(),
                r.error_class.as_deref(),
                r.error_message.as_deref(),
                r.end_user.as_deref(),
                r.response_id.as_deref(),
                r.cache_key.as_deref(),
                r.proxy_server_request.as_ref().map(JsonText::as_str),
                r.response.as_ref().map(JsonText::as_str),
            ];
            for (column, value) in c.opt_text.iter_mut().zip(opt_text) {
                column.push(value.map(clean));
            }
            c.status.push(&r.status);
            c.cache_hit.push(python_bool::text(r.cache_hit));
            c.attempt.push(r.attempt);
            c.status_code.push(r.status_code);
            c.spend.push(r.spend);
            let tokens = [r.total_tokens, r.prompt_tokens, r.completion_tokens];
            for (column, value) in c.tokens.iter_mut().zip(tokens) {
                column.push(value);
            }
            c.start.push(r.start_time.naive_utc());
            c.first_byte.push(naive(r.completion_start_time));
            c.end.push(r.end_time.naive_utc());
            c.guardrails.push(
                r.guardrail_information
                    .as_ref()
                    .map(|g| spend_copy::clean_json(g.as_str()).into_owned()),
            );
        }
        c
    }

    /// The parameters of [`INSERT_LOGS`] with their types, in order.
    fn params(&self) -> [(&(dyn ToSql + Sync), Type); 31] {
        let (t, o) = (&self.text, &self.opt_text);
        let text = Type::TEXT_ARRAY;
        let time = Type::TIMESTAMP_ARRAY;
        [
            (&t[0], text.clone()),
            (&t[1], text.clone()),
            (&self.attempt, Type::INT4_ARRAY),
            (&t[2], text.clone()),
            (&t[3], text.clone()),
            (&self.spend, Type::FLOAT8_ARRAY),
            (&self.tokens[0], Type::INT8_ARRAY),
            (&self.tokens[1], Type::INT8_ARRAY),
            (&self.tokens[2], Type::INT8_ARRAY),
            (&self.start, time.clone()),
            (&self.first_byte, time.clone()),
            (&self.end, time),
            (&t[4], text.clone()),
            (&t[5], text.clone()),
            (&t[6], text.clone()),
            (&t[7], text.clone()),
            (&t[8], text.clone()),
            (&o[0], text.clone()),
            (&o[1], text.clone()),
            (&o[2], text.clone()),
            (&self.status, text.clone()),
            (&self.status_code, Type::INT4_ARRAY),
            (&o[3], text.clone()),
            (&o[4], text.clone()),
            (&o[5], text.clone()),
            (&o[6], text.clone()),
            (&self.cache_hit, text.clone()),
            (&o[7], text.clone()),
            (&self.guardrails, text.clone()),
            (&o[8], text.clone()),
            (&o[9], text),
        ]
    }
}

/// A newly written row with spend: who it counts for and when it settled,
/// its text borrowed from the batch's rows (or from what the INSERT
/// returned) as the table holds it.
struct InsertedRow<'a> {
    key: Cow<'a, str>,
    user: Option<Cow<'a, str>>,
    team: Option<Cow<'a, str>>,
    spend: f64,
    group: Option<Cow<'a, str>>,
    settled: NaiveDateTime,
    end_user: Option<Cow<'a, str>>,
    /// Also counts against the proxy-wide budget ([`PROXY_BUDGET_USER`]).
    proxy: bool,
}

/// The rows the INSERT wrote that carry spend (zero-spend rows touch
/// nothing, as in memory).
struct Inserted<'a>(Vec<InsertedRow<'a>>);

/// The ids a batch touches, sorted, so concurrent writers lock rows in one
/// order.
#[derive(Default)]
struct Ids<'a> {
    keys: Vec<&'a str>,
    users: Vec<&'a str>,
    teams: Vec<&'a str>,
}

impl<'a> Ids<'a> {
    /// The keys, users and teams of a batch's rows with spend.
    fn of(rows: &'a [SpendLogRow]) -> Ids<'a> {
        let sorted = |mut v: Vec<&'a str>| {
            v.sort_unstable();
            v.dedup();
            v
        };
        let charged = || rows.iter().filter(|r| r.spend != 0.0);
        Ids {
            keys: sorted(charged().map(|r| &*r.api_key).collect()),
            users: sorted(charged().filter_map(|r| r.user.as_deref()).collect()),
            teams: sorted(charged().filter_map(|r| r.team_id.as_deref()).collect()),
        }
        .with_proxy_budget(charged().any(|r| r.proxy_budget))
    }

    /// With the proxy-wide budget's user row among the users, when a row
    /// counts against it.
    fn with_proxy_budget(mut self, counts: bool) -> Self {
        if counts {
            if let Err(at) = self.users.binary_search(&PROXY_BUDGET_USER) {
                self.users.insert(at, PROXY_BUDGET_USER);
            }
        }
        self
    }
}

impl<'a> Inserted<'a> {
    /// Reads `api_key, user, team_id, spend, model_group, endTime,
    /// end_user, request_id` rows of the batch `sent`.
    fn of(rows: &'a [Row], sent: &[SpendLogRow]) -> Result<Inserted<'a>, Error> {
        let proxy: std::collections::HashSet<&str> = sent
            .iter()
            .filter(|r| r.proxy_budget)
            .map(|r| &*r.request_id)
            .collect();
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let spend: f64 = row.try_get::<_, Option<f64>>(3)?.unwrap_or_default();
            if spend == 0.0 {
                continue;
            }
            let text = |i| -> Result<Option<Cow<'a, str>>, Error> {
                Ok(row.try_get::<_, Option<&str>>(i)?.map(Cow::Borrowed))
            };
            out.push(InsertedRow {
                key: Cow::Borrowed(row.try_get(0)?),
                user: text(1)?,
                team: text(2)?,
                spend,
                group: text(4)?,
                settled: row.try_get(5)?,
                end_user: text(6)?,
                proxy: !proxy.is_empty() && proxy.contains(row.try_get::<_, &str>(7)?),
            });
        }
        Ok(Inserted(out))
    }

    /// The rows of a batch COPY wrote, all of them new, as the table holds
    /// them (text cleaned, the settle time to the millisecond).
    fn copied(rows: &'a [SpendLogRow]) -> Inserted<'a> {
        let charged = rows.iter().filter(|r| r.spend != 0.0);
        Inserted(
            charged
                .map(|r| InsertedRow {
                    key: clean(&r.api_key),
                    user: r.user.as_deref().map(clean),
                    team: r.team_id.as_deref().map(clean),
                    spend: r.spend,
                    group: Some(clean(&r.model_group)),
                    settled: spend_copy::settled(r.end_time),
                    end_user: r.end_user.as_deref().map(clean),
                    proxy: r.proxy_budget,
                })
                .collect(),
        )
    }

    /// Spend per end user, by id.
    fn end_users(&self) -> BTreeMap<String, f64> {
        let mut totals = BTreeMap::new();
        for r in &self.0 {
            if let Some(id) = &r.end_user {
                *totals.entry(id.to_string()).or_insert(0.0) += r.spend;
            }
        }
        totals
    }
}

/// Locks rows of a table by id, in id order: `$1` the ids.
macro_rules! lock_sql {
    ($table:literal, $id:literal) => {
        concat!(
            "SELECT 1 FROM ",
            $table,
            " WHERE ",
            $id,
            " = ANY($1) ORDER BY ",
            $id,
            " FOR UPDATE"
        )
    };
}

const LOCK_KEYS: &str = lock_sql!(r#""LiteLLM_VerificationToken""#, "token");
const LOCK_USERS: &str = lock_sql!(r#""LiteLLM_UserTable""#, "user_id");
const LOCK_TEAMS: &str = lock_sql!(r#""LiteLLM_TeamTable""#, "team_id");

/// Locks the rows of `ids` through `sql`, one of the `LOCK_*`.
async fn lock(tx: &Transaction<'_>, sql: &str, ids: &[&str]) -> Result<(), Error> {
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute_typed(sql, &[(&ids, Type::TEXT_ARRAY)]).await?;
    Ok(())
}

/// `scope, id, started_at` of the budget periods of `$1` scopes and `$2` ids.
const READ_PERIODS: &str = "SELECT p.scope, p.id, p.started_at FROM gateway_budget_periods p
    JOIN unnest($1::text[], $2::text[]) AS v(scope, id) ON p.scope = v.scope AND p.id = v.id";

/// When the current budget period of each key, user and team began (its
/// last reset); none for those never reset. By scope, then id: looked up
/// by borrowed text, for each scope of each row of a batch.
#[derive(Default)]
struct Periods {
    started: std::collections::HashMap<String, std::collections::HashMap<String, NaiveDateTime>>,
}

impl Periods {
    async fn read(tx: &Transaction<'_>, ids: &Ids<'_>) -> Result<Periods, Error> {
        let mut scopes: Vec<&str> = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        for (scope, list) in [
            ("key", &ids.keys),
            ("user", &ids.users),
            ("team", &ids.teams),
        ] {
            for id in list {
                scopes.push(scope);
                names.push(*id);
            }
        }
        if scopes.is_empty() {
            return Ok(Periods::default());
        }
        let rows = tx
            .query_typed(
                READ_PERIODS,
                &[(&scopes, Type::TEXT_ARRAY), (&names, Type::TEXT_ARRAY)],
            )
            .await?;
        let mut started =
            std::collections::HashMap::<String, std::collections::HashMap<_, _>>::new();
        for row in &rows {
            let scope: String = row.try_get(0)?;
            let at = row.try_get(2)?;
            started
                .entry(scope)
                .or_default()
                .insert(row.try_get(1)?, at);
        }
        Ok(Periods { started })
    }

    /// Whether a row settled at `settled` counts in the current period of
    /// `scope` `id`.
    fn counts(&self, scope: &str, id: &str, settled: NaiveDateTime) -> bool {
        self.started
            .get(scope)
            .and_then(|ids| ids.get(id))
            .is_none_or(|start| settled >= *start)
    }
}

/// Spend per model group of each id, as its JSON object sums it: a sum
/// that is not a finite number is written as `null` and counts as 0 for
/// the next row (see [`add_model`]).
type ModelSpend<'a> = BTreeMap<&'a str, BTreeMap<&'a str, f64>>;

/// Spend of newly written rows per key, user and team, each only for rows
/// of its current period; and who had rows of an earlier one. Ids and
/// model groups are borrowed from the rows.
#[derive(Default)]
struct Totals<'a> {
    keys: BTreeMap<&'a str, f64>,
    /// Per key: spend per model group.
    key_models: ModelSpend<'a>,
    /// Per team: spend per model group.
    team_models: ModelSpend<'a>,
    /// Per user: spend per model group.
    user_models: ModelSpend<'a>,
    users: BTreeMap<&'a str, f64>,
    teams: BTreeMap<&'a str, f64>,
    stale_keys: Vec<&'a str>,
    stale_users: Vec<&'a str>,
    stale_teams: Vec<&'a str>,
}

impl<'a> Totals<'a> {
    fn of(inserted: &'a Inserted<'_>, periods: &Periods) -> Totals<'a> {
        let mut totals = Totals::default();
        for row in &inserted.0 {
            let key = &*row.key;
            if periods.counts("key", key, row.settled) {
                add_model(&mut totals.key_models, key, row);
                *totals.keys.entry(key).or_default() += row.spend;
            } else {
                totals.stale_keys.push(key);
            }
            if let Some(user) = row.user.as_deref() {
                if periods.counts("user", user, row.settled) {
                    add_model(&mut totals.user_models, user, row);
                    *totals.users.entry(user).or_default() += row.spend;
                } else {
                    totals.stale_users.push(user);
                }
            }
            if row.proxy {
                if periods.counts("user", PROXY_BUDGET_USER, row.settled) {
                    *totals.users.entry(PROXY_BUDGET_USER).or_default() += row.spend;
                } else {
                    totals.stale_users.push(PROXY_BUDGET_USER);
                }
            }
            if let Some(team) = row.team.as_deref() {
                if periods.counts("team", team, row.settled) {
                    add_model(&mut totals.team_models, team, row);
                    *totals.teams.entry(team).or_default() += row.spend;
                } else {
                    totals.stale_teams.push(team);
                }
            }
        }
        for list in [
            &mut totals.stale_keys,
            &mut totals.stale_users,
            &mut totals.stale_teams,
        ] {
            list.sort_unstable();
            list.dedup();
        }
        totals
    }
}

/// Adds `row`'s spend to what `id` spent on its model group in `per_id`.
/// The sum so far counts as 0 when it is not a finite number, as the
/// `null` its JSON object holds then would.
fn add_model<'a>(per_id: &mut ModelSpend<'a>, id: &'a str, row: &'a InsertedRow<'_>) {
    if let Some(group) = row.group.as_deref() {
        let sum = per_id.entry(id).or_default().entry(group).or_insert(0.0);
        let so_far = if sum.is_finite() { *sum } else { 0.0 };
        *sum = so_far + row.spend;
    }
}

/// `model_spend` with the spend per model group of `v.delta` (a JSON
/// object) added, the groups merged in SQL; unchanged when `v.delta` is
/// empty. As a literal for `concat!`.
macro_rules! merged_model_spend {
    () => {
        r#"CASE WHEN v.delta = '{}'::jsonb THEN t.model_spend ELSE (
        SELECT COALESCE(jsonb_object_agg(g, COALESCE((COALESCE(t.model_spend, '{}'::jsonb) ->> g)::float8, 0)
            + COALESCE((v.delta ->> g)::float8, 0)), '{}'::jsonb)
        FROM jsonb_object_keys(COALESCE(t.model_spend, '{}'::jsonb) || v.delta) AS g) END"#
    };
}

/// Adds `$2` amounts to the spend of rows of a table by `$1` ids (already
/// locked by [`lock`]) and `$3` spend per model group (JSON objects) to
/// their `model_spend`, in one statement so each row gets one new version
/// a batch, not one per column; returns the ids updated.
macro_rules! add_spend_sql {
    ($table:literal, $id:literal) => {
        concat!(
            "UPDATE ",
            $table,
            " t SET spend = t.spend + v.amount, model_spend = ",
            merged_model_spend!(),
            "
            FROM unnest($1::text[], $2::float8[], $3::jsonb[]) AS v(id, amount, delta)
            WHERE t.",
            $id,
            " = v.id RETURNING t.",
            $id
        )
    };
}

const ADD_USER_SPEND: &str = add_spend_sql!(r#""LiteLLM_UserTable""#, "user_id");
const ADD_TEAM_SPEND: &str = add_spend_sql!(r#""LiteLLM_TeamTable""#, "team_id");

/// A key's row in one statement (one new row version a batch): `$2` added
/// to its period's `spend`, `$3` per model group to `model_spend`, `$4`
/// (every newly written row's spend, whatever its period, as LiteLLM
/// counts it) to `total_spend`, and `last_active` moved; returns the keys
/// updated.
const ADD_KEY_SPEND: &str = concat!(
    r#"UPDATE "LiteLLM_VerificationToken" t SET spend = t.spend + v.amount, model_spend = "#,
    merged_model_spend!(),
    r#",
        total_spend = t.total_spend + v.lifetime, last_active = (now() AT TIME ZONE 'UTC')
    FROM unnest($1::text[], $2::float8[], $3::jsonb[], $4::float8[])
        AS v(id, amount, delta, lifetime)
    WHERE t.token = v.id RETURNING t.token"#
);

/// Per model group spend of `id` in `models`, as a JSON object (empty when
/// none; a sum that is not a finite number is `null`).
fn model_delta(models: &ModelSpend<'_>, id: &str) -> serde_json::Value {
    let groups = models.get(id).into_iter().flatten();
    serde_json::Value::Object(
        groups
            .map(|(group, sum)| (group.to_string(), serde_json::Value::from(*sum)))
            .collect(),
    )
}

/// Adds `amounts` and `models` through `sql`, [`ADD_USER_SPEND`] or
/// [`ADD_TEAM_SPEND`] (every id of `models` is one of `amounts`); returns
/// the ids updated, sorted.
async fn add_spend(
    tx: &Transaction<'_>,
    sql: &str,
    amounts: &BTreeMap<&str, f64>,
    models: &ModelSpend<'_>,
) -> Result<Vec<String>, Error> {
    if amounts.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = amounts.keys().copied().collect();
    let values: Vec<f64> = amounts.values().copied().collect();
    let deltas: Vec<serde_json::Value> = ids.iter().map(|id| model_delta(models, id)).collect();
    let rows = tx
        .query_typed(
            sql,
            &[
                (&ids, Type::TEXT_ARRAY),
                (&values, Type::FLOAT8_ARRAY),
                (&deltas, Type::JSONB_ARRAY),
            ],
        )
        .await?;
    updated_ids(&rows)
}

/// Adds to each key charged in the batch its period's spend and spend per
/// model group (`totals`) and its lifetime spend (`lifetime`), in one
/// statement ([`ADD_KEY_SPEND`]); returns the keys updated, sorted.
async fn add_key_spend(
    tx: &Transaction<'_>,
    totals: &Totals<'_>,
    lifetime: &Lifetime<'_>,
) -> Result<Vec<String>, Error> {
    let mut ids: Vec<&str> = lifetime.keys.keys().copied().collect();
    ids.extend(totals.keys.keys().copied());
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let amounts: Vec<f64> = ids
        .iter()
        .map(|id| totals.keys.get(*id).copied().unwrap_or(0.0))
        .collect();
    let deltas: Vec<serde_json::Value> = ids
        .iter()
        .map(|id| model_delta(&totals.key_models, id))
        .collect();
    let lifetimes: Vec<f64> = ids
        .iter()
        .map(|id| lifetime.keys.get(id).copied().unwrap_or(0.0))
        .collect();
    let rows = tx
        .query_typed(
            ADD_KEY_SPEND,
            &[
                (&ids, Type::TEXT_ARRAY),
                (&amounts, Type::FLOAT8_ARRAY),
                (&deltas, Type::JSONB_ARRAY),
                (&lifetimes, Type::FLOAT8_ARRAY),
            ],
        )
        .await?;
    updated_ids(&rows)
}

/// The ids an `UPDATE .. RETURNING id` returned, sorted.
fn updated_ids(rows: &[Row]) -> Result<Vec<String>, Error> {
    let mut updated: Vec<String> = rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    updated.sort();
    Ok(updated)
}

/// Adds `$2` amounts of `$1` teams to their organizations' spend (LiteLLM's
/// `LiteLLM_OrganizationTable.spend`), locking those rows in id order.
const ADD_ORG_SPEND: &str = r#"WITH v AS (
        SELECT t.organization_id AS id, sum(v.amount) AS amount
        FROM unnest($1::text[], $2::float8[]) AS v(team, amount)
        JOIN "LiteLLM_TeamTable" t ON t.team_id = v.team
        WHERE t.organization_id IS NOT NULL GROUP BY 1),
    locked AS (
        SELECT o.organization_id FROM "LiteLLM_OrganizationTable" o JOIN v ON v.id = o.organization_id
        ORDER BY o.organization_id COLLATE "C" FOR UPDATE OF o)
    UPDATE "LiteLLM_OrganizationTable" o SET spend = o.spend + v.amount
    FROM v, locked WHERE o.organization_id = v.id AND locked.organization_id = v.id"#;

/// Adds the teams' spend to their organizations' ([`ADD_ORG_SPEND`]).
async fn add_org_spend(tx: &Transaction<'_>, teams: &BTreeMap<&str, f64>) -> Result<(), Error> {
    if teams.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = teams.keys().copied().collect();
    let values: Vec<f64> = teams.values().copied().collect();
    tx.execute_typed(
        ADD_ORG_SPEND,
        &[(&ids, Type::TEXT_ARRAY), (&values, Type::FLOAT8_ARRAY)],
    )
    .await?;
    Ok(())
}

/// Adds `$3` amounts to the `LiteLLM_TeamMembership` rows of `$1` users in
/// `$2` teams, creating a row only while the user is on the team's roster.
const ADD_MEMBER_LIFETIME: &str = r#"INSERT INTO "LiteLLM_TeamMembership" (user_id, team_id, spend, total_spend)
    SELECT m.user_id, m.team_id, m.amount, m.amount
    FROM unnest($1::text[], $2::text[], $3::float8[]) AS m(user_id, team_id, amount)
    WHERE EXISTS (SELECT 1 FROM "LiteLLM_TeamTable" t WHERE t.team_id = m.team_id
            AND (m.user_id = ANY(t.members) OR t.members_with_roles
                @> jsonb_build_array(jsonb_build_object('user_id', m.user_id))))
        OR EXISTS (SELECT 1 FROM "LiteLLM_TeamMembership" x
            WHERE x.user_id = m.user_id AND x.team_id = m.team_id)
    ON CONFLICT (user_id, team_id) DO UPDATE
    SET spend = "LiteLLM_TeamMembership".spend + EXCLUDED.spend,
        total_spend = GREATEST("LiteLLM_TeamMembership".total_spend,
            "LiteLLM_TeamMembership".spend) + EXCLUDED.total_spend"#;

/// Every newly written row's spend, whatever its budget period, per key and
/// per user in a team: added to the key's `total_spend` and to the user's
/// `LiteLLM_TeamMembership` row, as LiteLLM does.
struct Lifetime<'a> {
    keys: BTreeMap<&'a str, f64>,
    members: BTreeMap<(&'a str, &'a str), f64>,
}

impl<'a> Lifetime<'a> {
    fn of(inserted: &'a Inserted<'_>) -> Lifetime<'a> {
        let mut keys: BTreeMap<&str, f64> = BTreeMap::new();
        let mut members: BTreeMap<(&str, &str), f64> = BTreeMap::new();
        for row in &inserted.0 {
            *keys.entry(&row.key).or_default() += row.spend;
            if let (Some(user), Some(team)) = (&row.user, &row.team) {
                *members.entry((user, team)).or_default() += row.spend;
            }
        }
        Lifetime { keys, members }
    }

    /// Adds the members' amounts ([`ADD_MEMBER_LIFETIME`]); the keys' go
    /// with their period's spend ([`add_key_spend`]).
    async fn add_members(&self, tx: &Transaction<'_>) -> Result<(), Error> {
        if self.members.is_empty() {
            return Ok(());
        }
        let users: Vec<&str> = self.members.keys().map(|k| k.0).collect();
        let teams: Vec<&str> = self.members.keys().map(|k| k.1).collect();
        let amounts: Vec<f64> = self.members.values().copied().collect();
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&users, Type::TEXT_ARRAY),
            (&teams, Type::TEXT_ARRAY),
            (&amounts, Type::FLOAT8_ARRAY),
        ];
        tx.execute_typed(ADD_MEMBER_LIFETIME, &params).await?;
        Ok(())
    }
}

/// The longest a read of the spend log may run: the control plane gives up
/// on a management call after 5 s, and without a limit Postgres went on
/// scanning (a key with no rows walked every row of a 10M-row log) after
/// the caller had its 503, and the next calls queued behind it.
pub(super) const LOG_READ_TIMEOUT: &str = "SET LOCAL statement_timeout = 3000";

/// Spend-log rows matching `f`, oldest first; one statement, bounded by
/// [`LOG_READ_TIMEOUT`].
pub async fn logs(c: &mut Client, f: &SpendFilter) -> Result<Vec<SpendLogRow>, Error> {
    let (start, end) = (naive(f.start), naive(f.end));
    let limit = f.limit.map(|l| l.max(0));
    let offset = f.offset.max(0);
    let params: [&(dyn ToSql + Sync); 10] = [
        &f.api_key,
        &f.user_id,
        &f.team_id,
        &f.request_id,
        &start,
        &end,
        &limit,
        &f.model,
        &f.status,
        &offset,
    ];
    let tx = c.transaction().await?;
    tx.batch_execute(LOG_READ_TIMEOUT).await?;
    let rows = tx.query(SELECT_LOGS, &params).await?;
    tx.commit().await?;
    rows.iter().map(log_row).collect()
}

/// A spend-log row read with [`log_columns`].
pub(super) fn log_row(row: &Row) -> Result<SpendLogRow, Error> {
    let text = |column: &str| -> Result<String, Error> {
        Ok(row
            .try_get::<_, Option<String>>(column)?
            .unwrap_or_default())
    };
    Ok(SpendLogRow {
        request_id: row.try_get::<_, String>("request_id")?.into(),
        call_id: row.try_get::<_, String>("call_id")?.into(),
        attempt: row.try_get("attempt")?,
        call_type: text("call_type")?.into(),
        api_key: text("api_key")?.into(),
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
        model: text("model")?.into(),
        model_id: text("model_id")?.into(),
        model_group: text("model_group")?.into(),
        custom_llm_provider: text("custom_llm_provider")?.into(),
        api_base: text("api_base")?.into(),
        region: row.try_get::<_, Option<String>>("region")?.map(Into::into),
        user: row.try_get("user")?,
        team_id: row.try_get("team_id")?,
        status: text("status")?.into(),
        status_code: row
            .try_get::<_, Option<i32>>("status_code")?
            .unwrap_or_default(),
        error_class: row
            .try_get::<_, Option<String>>("error_class")?
            .map(Into::into),
        error_message: row.try_get("error_message")?,
        end_user: row.try_get("end_user")?,
        response_id: row
            .try_get::<_, Option<String>>("response_id")?
            .map(Into::into),
        proxy_budget: false,
        cache_hit: row
            .try_get::<_, Option<String>>("cache_hit")?
            .is_some_and(|v| v.eq_ignore_ascii_case("true")),
        cache_key: row
            .try_get::<_, Option<String>>("cache_key")?
            .filter(|k| !k.is_empty())
            .map(Into::into),
        request_tags: None,
        guardrail_information: row
            .try_get::<_, Option<serde_json::Value>>("guardrail_information")?
            .filter(|g| !g.is_null())
            .map(|g| Arc::new(JsonText(g.to_string().into()))),
        proxy_server_request: kept(row, "proxy_server_request")?,
        response: kept(row, "response")?,
    })
}

/// A row's `proxy_server_request` or `response` column, unless empty
/// (`{}`, the default of a row that keeps no prompt).
fn kept(row: &Row, column: &str) -> Result<Option<JsonText>, Error> {
    Ok(row
        .try_get::<_, Option<String>>(column)?
        .filter(|j| j.trim() != "{}" && !j.trim().is_empty())
        .map(|j| JsonText(j.into())))
}

/// Spend of every request since the day `since` (the daily user rows:
/// every request counts there once).
pub async fn global(c: &Client, since: &str) -> Result<f64, Error> {
    let sql = r#"SELECT COALESCE(SUM(spend), 0)::float8 FROM "LiteLLM_DailyUserSpend"
        WHERE date >= $1"#;
    c.query_typed(sql, &[(&since, Type::TEXT)]).await?[0].try_get(0)
}

/// Zeroes the spend of keys, teams and users whose period ended by `now`,
/// schedules their next reset and announces each, in one transaction; the
/// end users riding `end_user_default` (no budget row of their own) are
/// reset with that row.
pub async fn reset_due(
    c: &mut Client,
    now: DateTime<Utc>,
    end_user_default: Option<&str>,
) -> Result<Vec<Change>, Error> {
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
    start_periods(&tx, &changes, now).await?;
    // Budget rows linked to end users and team memberships (a member's own
    // budget, or its team's member defaults), as LiteLLM's reset cascade.
    let rows = super::end_users::advance_due(&tx, now, end_user_default).await?;
    let end_users = super::end_users::reset_linked(&tx, &rows, end_user_default).await?;
    changes.extend(end_users.into_iter().map(Change::EndUser));
    // The cached default row learns its next reset.
    let default = rows.iter().find(|r| Some(r.as_str()) == end_user_default);
    changes.extend(default.cloned().map(Change::Budget));
    let teams = super::members::reset_linked(&tx, &rows).await?;
    changes.extend(teams.into_iter().map(Change::Team));
    notify(&tx, &changes).await?;
    tx.commit().await?;
    Ok(changes)
}

/// Records that the budget periods of `changes` began at `now`.
async fn start_periods(
    tx: &Transaction<'_>,
    changes: &[Change],
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let (scopes, ids): (Vec<&str>, Vec<&str>) = changes
        .iter()
        .filter_map(|c| match c {
            Change::Key(id) => Some(("key", id.as_str())),
            Change::User(id) => Some(("user", id.as_str())),
            Change::Team(id) => Some(("team", id.as_str())),
            Change::Model(_) | Change::EndUser(_) | Change::Budget(_) => None,
        })
        .unzip();
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute(
        "INSERT INTO gateway_budget_periods (scope, id, started_at)
         SELECT scope, id, $3 FROM unnest($1::text[], $2::text[]) AS v(scope, id)
         ON CONFLICT (scope, id) DO UPDATE SET started_at = EXCLUDED.started_at",
        &[&scopes, &ids, &now.naive_utc()],
    )
    .await?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::{
        piece_pause, piece_rows, MAX_PIECES, MAX_PIECE_PAUSE, MAX_PIECE_ROWS, MIN_PIECE_ROWS,
        PIECE_PAUSE,
    };
    use std::time::Duration;

    #[test]
    fn a_copys_pieces_span_its_spread_within_the_bounds_of_a_pause() {
        let ms = Duration::from_millis;
        // A busy batch of 8,192 rows (128 pieces) spread over 500 ms.
        assert_eq!(piece_pause(128, ms(500)), ms(500) / 127);
        assert_eq!(piece_pause(5, ms(100)), ms(25));
        // Written at once: the shortest pause, as before spreading.
        assert_eq!(piece_pause(128, Duration::ZERO), PIECE_PAUSE);
        assert_eq!(piece_pause(1, Duration::ZERO), PIECE_PAUSE);
        // A few pieces over a long spread wait no longer than the bound.
        assert_eq!(piece_pause(2, ms(500)), MAX_PIECE_PAUSE);
        assert_eq!(piece_pause(0, ms(500)), MAX_PIECE_PAUSE);
    }

    #[test]
    fn a_copy_goes_in_a_few_pieces_of_at_least_a_few_rows() {
        assert_eq!(piece_rows(0), 1);
        assert_eq!(piece_rows(1), 1);
        assert_eq!(piece_rows(MIN_PIECE_ROWS), MIN_PIECE_ROWS);
        assert_eq!(piece_rows(100), 17, "6 pieces");
        for rows in [1, 15, 17, 64, 127, 128, 129, 200, 512] {
            let size = piece_rows(rows);
            let pieces = rows.div_ceil(size);
            assert!(pieces <= MAX_PIECES, "{rows} rows in {pieces} pieces");
            assert!(
                size >= MIN_PIECE_ROWS.min(rows),
                "{rows} rows, pieces of {size}"
            );
        }
    }

    #[test]
    fn a_large_copy_goes_in_pieces_no_larger_than_a_small_ones() {
        assert_eq!(piece_rows(MAX_PIECES * MAX_PIECE_ROWS), MAX_PIECE_ROWS);
        for rows in [513, 1000, 4096, 8192] {
            let size = piece_rows(rows);
            assert_eq!(size, MAX_PIECE_ROWS, "{rows} rows");
            assert!(rows.div_ceil(size) > MAX_PIECES, "{rows} rows");
        }
    }
}

#[cfg(test)]
mod totals_tests {
    use super::{model_delta, Inserted, InsertedRow, Periods, Totals, PROXY_BUDGET_USER};
    use chrono::NaiveDateTime;
    use proptest::prelude::*;
    use std::borrow::Cow;
    use std::collections::{BTreeMap, HashMap};

    /// The totals as they were summed before they borrowed from the rows:
    /// owned ids, per-group sums kept as JSON numbers (a non-finite sum
    /// written as `null`, read back as 0), periods looked up by an owned
    /// `(scope, id)` pair.
    mod before {
        use super::*;

        pub(super) type Models = BTreeMap<String, serde_json::Map<String, serde_json::Value>>;

        #[derive(Default)]
        pub(super) struct Totals {
            pub keys: BTreeMap<String, f64>,
            pub key_models: Models,
            pub team_models: Models,
            pub user_models: Models,
            pub users: BTreeMap<String, f64>,
            pub teams: BTreeMap<String, f64>,
            pub stale_keys: Vec<String>,
            pub stale_users: Vec<String>,
            pub stale_teams: Vec<String>,
        }

        pub(super) type Row = (
            String,
            Option<String>,
            Option<String>,
            f64,
            Option<String>,
            NaiveDateTime,
            bool,
        );

        fn counts(
            started: &HashMap<(String, String), NaiveDateTime>,
            scope: &str,
            id: &str,
            settled: NaiveDateTime,
        ) -> bool {
            started
                .get(&(scope.to_string(), id.to_string()))
                .is_none_or(|start| settled >= *start)
        }

        fn add_model(per_id: &mut Models, id: &str, group: &Option<String>, spend: f64) {
            if let Some(group) = group {
                let per_model = per_id.entry(id.to_string()).or_default();
                let sum = per_model.get(group).and_then(|v| v.as_f64()).unwrap_or(0.0) + spend;
                per_model.insert(group.clone(), sum.into());
            }
        }

        pub(super) fn totals(
            rows: &[Row],
            started: &HashMap<(String, String), NaiveDateTime>,
        ) -> Totals {
            let mut t = Totals::default();
            for (key, user, team, spend, group, settled, proxy) in rows {
                let (spend, settled) = (*spend, *settled);
                if counts(started, "key", key, settled) {
                    add_model(&mut t.key_models, key, group, spend);
                    *t.keys.entry(key.clone()).or_default() += spend;
                } else {
                    t.stale_keys.push(key.clone());
                }
                if let Some(user) = user {
                    if counts(started, "user", user, settled) {
                        add_model(&mut t.user_models, user, group, spend);
                        *t.users.entry(user.clone()).or_default() += spend;
                    } else {
                        t.stale_users.push(user.clone());
                    }
                }
                if *proxy {
                    if counts(started, "user", PROXY_BUDGET_USER, settled) {
                        *t.users.entry(PROXY_BUDGET_USER.to_string()).or_default() += spend;
                    } else {
                        t.stale_users.push(PROXY_BUDGET_USER.to_string());
                    }
                }
                if let Some(team) = team {
                    if counts(started, "team", team, settled) {
                        add_model(&mut t.team_models, team, group, spend);
                        *t.teams.entry(team.clone()).or_default() += spend;
                    } else {
                        t.stale_teams.push(team.clone());
                    }
                }
            }
            for list in [&mut t.stale_keys, &mut t.stale_users, &mut t.stale_teams] {
                list.sort();
                list.dedup();
            }
            t
        }

        pub(super) fn model_delta(models: &Models, id: &str) -> serde_json::Value {
            serde_json::Value::Object(models.get(id).cloned().unwrap_or_default())
        }
    }

    fn at(second: u32) -> NaiveDateTime {
        chrono::DateTime::from_timestamp(1_780_000_000 + i64::from(second), 0)
            .unwrap()
            .naive_utc()
    }

    /// Rows of a few keys, users, teams and groups, spends of every kind
    /// (non-finite and negative zero too), settled around the periods'
    /// starts.
    fn rows() -> impl Strategy<Value = Vec<before::Row>> {
        let id = |prefix: &'static str| {
            prop::option::of((0u8..3).prop_map(move |i| format!("{prefix}{i}")))
        };
        let spend = prop_oneof![
            6 => 0.000_001f64..10.0,
            1 => prop::sample::select(vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 1e308, -2.5]),
        ];
        let row = (
            (0u8..3).prop_map(|i| format!("k{i}")),
            id("u"),
            id("t"),
            spend,
            id("g"),
            (0u32..4).prop_map(at),
            any::<bool>(),
        );
        prop::collection::vec(row, 0..24)
    }

    /// Period starts of some of those keys, users and teams.
    fn starts() -> impl Strategy<Value = Vec<(&'static str, String, NaiveDateTime)>> {
        let scope = prop::sample::select(vec!["key", "user", "team"]);
        let id = prop::sample::select(vec!["k0", "k1", "u0", "u2", "t1", PROXY_BUDGET_USER]);
        prop::collection::vec(
            (scope, id.prop_map(str::to_string), (0u32..4).prop_map(at)),
            0..5,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        /// The borrowed totals sum what the owned ones summed, and the
        /// per-group JSON sent for each id is the same text.
        #[test]
        fn totals_are_what_they_were(rows in rows(), starts in starts()) {
            let old_started: HashMap<_, _> = starts
                .iter()
                .map(|(scope, id, t)| ((scope.to_string(), id.clone()), *t))
                .collect();
            let mut periods = Periods::default();
            for (scope, id, t) in &starts {
                periods.started.entry(scope.to_string()).or_default().insert(id.clone(), *t);
            }
            let inserted = Inserted(
                rows.iter()
                    .map(|(key, user, team, spend, group, settled, proxy)| InsertedRow {
                        key: Cow::Borrowed(key.as_str()),
                        user: user.as_deref().map(Cow::Borrowed),
                        team: team.as_deref().map(Cow::Borrowed),
                        spend: *spend,
                        group: group.as_deref().map(Cow::Borrowed),
                        settled: *settled,
                        end_user: None,
                        proxy: *proxy,
                    })
                    .collect(),
            );
            let new = Totals::of(&inserted, &periods);
            let old = before::totals(&rows, &old_started);
            let bits = |m: &BTreeMap<&str, f64>| -> Vec<(String, u64)> {
                m.iter().map(|(k, v)| (k.to_string(), v.to_bits())).collect()
            };
            let old_bits = |m: &BTreeMap<String, f64>| -> Vec<(String, u64)> {
                m.iter().map(|(k, v)| (k.clone(), v.to_bits())).collect()
            };
            prop_assert_eq!(bits(&new.keys), old_bits(&old.keys));
            prop_assert_eq!(bits(&new.users), old_bits(&old.users));
            prop_assert_eq!(bits(&new.teams), old_bits(&old.teams));
            prop_assert_eq!(&new.stale_keys, &old.stale_keys);
            prop_assert_eq!(&new.stale_users, &old.stale_users);
            prop_assert_eq!(&new.stale_teams, &old.stale_teams);
            for (models, old_models) in [
                (&new.key_models, &old.key_models),
                (&new.user_models, &old.user_models),
                (&new.team_models, &old.team_models),
            ] {
                let ids: Vec<&str> = models.keys().copied().collect();
                let old_ids: Vec<&str> = old_models.keys().map(String::as_str).collect();
                prop_assert_eq!(&ids, &old_ids);
                for id in ids.iter().chain(["absent"].iter()) {
                    prop_assert_eq!(
                        model_delta(models, id).to_string(),
                        before::model_delta(old_models, id).to_string()
                    );
                }
            }
        }
    }
}
