//! One page of the spend log, newest first, by keyset (the console's Logs
//! page): every page costs what the first costs, however deep. No filter,
//! a request id, or a key alone reads the page's rows directly (a key's
//! newest first through LiteLLM's `(api_key, "startTime")` index,
//! migration 0031); a user or
//! team filter is read through an index led by `"user"` or `team_id` then
//! `"startTime"` when there is one (migration 0032 creates LiteLLM's
//! `("user", "startTime")`; a team's is the operator's to create, as each
//! costs the spend writer Postgres time on every row,
//! benches/hand-measured.md); any other filter no index serves (a team
//! without such an index, model, status) looks at the next [`SCAN_ROWS`]
//! rows (the key's next [`KEY_SCAN_ROWS`], when one is given) at most a query and says where it
//! stopped, so one that matches nothing answers as fast as one that
//! matches everything. Every statement runs under a
//! [`LOG_READ_TIMEOUT`](super::spend::LOG_READ_TIMEOUT), so no plan outlives the call that asked for it.

use super::convert::naive;
use super::spend::{log_columns, log_filters, log_row, LOG_READ_TIMEOUT};
use crate::store::{LogCursor, LogPage, SpendFilter, SpendLogRow};
use std::time::{Duration, Instant};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Error, Transaction};

/// Most rows one query of a filter no index serves looks at.
const SCAN_ROWS: i64 = 10_000;
/// [`SCAN_ROWS`] for a scan of one key's rows: those lie on a page each
/// (the time index's neighbours share pages), so a query of 10,000 took
/// 180 ms at 10 million rows; 2,000 fit in [`SCAN_TIME`].
const KEY_SCAN_ROWS: i64 = 2_000;
/// After this long a call by such a filter stops querying and answers
/// what it found (`partial`): a query of [`SCAN_ROWS`] rows took 30 to
/// 60 ms on a loaded 2-core machine, so such a call answered in 100 to
/// 155 ms there (BENCHMARKS.md).
const SCAN_TIME: Duration = Duration::from_millis(80);

/// The columns among `"user"` and `team_id` that lead a valid, whole-table
/// index of the spend log whose second column is `"startTime"` (read on
/// each call that could use one, so an index created at run time serves
/// the next call).
const INDEXED: &str = r#"SELECT a.attname::text FROM pg_index i
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
    JOIN pg_attribute b ON b.attrelid = i.indrelid AND b.attnum = i.indkey[1]
    WHERE i.indrelid = '"LiteLLM_SpendLogs"'::regclass AND i.indisvalid AND i.indpred IS NULL
    AND a.attname IN ('user', 'team_id') AND b.attname = 'startTime'"#;

/// The rows of the range `$5..$6` older than the cursor `($10, $11)`, of
/// the key `$1` if given, as a literal for `concat!`: `"startTime" <= $10`
/// first, so the index on `"startTime"` (or the key's on `(api_key,
/// "startTime")`) bounds the scan.
macro_rules! log_window {
    () => {
        r#"($5::timestamp IS NULL OR "startTime" >= $5) AND ($6::timestamp IS NULL OR "startTime" < $6)
    AND ($10::timestamp IS NULL
        OR ("startTime" <= $10 AND ("startTime" < $10 OR request_id < $11::text)))
    AND ($1::text IS NULL OR api_key = $1)"#
    };
}

/// The page's rows and one more (`$7`), newest first.
const DIRECT: &str = concat!(
    "SELECT ",
    log_columns!(),
    r#", true AS hit, 0::int8 AS n
FROM "LiteLLM_SpendLogs"
WHERE "#,
    log_filters!(),
    " AND ",
    log_window!(),
    r#"
ORDER BY "startTime" DESC, request_id DESC
LIMIT $7"#
);

/// The matching rows among the next `$12` rows of the window (of the key,
/// when one is given; newest
/// first, at most `$7`), and the `$12`-th row whether it matches or not
/// (`n = $12`: the scan reached its bound there).
const SCANNED: &str = concat!(
    r#"SELECT w.* FROM (
    SELECT s.*, row_number() OVER (ORDER BY s.t DESC, s.request_id DESC) AS n
    FROM (SELECT "#,
    log_columns!(),
    r#", "startTime" AS t, COALESCE("#,
    log_filters!(),
    r#", false) AS hit
        FROM "LiteLLM_SpendLogs"
        WHERE "#,
    log_window!(),
    r#"
        ORDER BY "startTime" DESC, request_id DESC
        LIMIT $12) s
) w
WHERE w.hit OR w.n = $12
ORDER BY w.t DESC, w.request_id DESC
LIMIT $7"#
);

/// How a page is read.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Plan {
    /// The page's rows, newest first, by the time index (no filter), the
    /// key's index or the request-id indexes.
    Direct,
    /// Bounded scans of the time index, or of the key's index.
    Scan,
}

/// Whether an index led by one of `indexed` (`"user"`, `team_id`, see
/// [`INDEXED`]) serves a user or team filter of `f`.
fn index_serves(f: &SpendFilter, indexed: &[String]) -> bool {
    let has = |column: &str| indexed.iter().any(|c| c == column);
    (f.user_id.is_some() && has("user")) || (f.team_id.is_some() && has("team_id"))
}

/// How to read a page of `f`, before asking how many rows a key has.
fn plan(f: &SpendFilter) -> Plan {
    let unindexed =
        f.user_id.is_some() || f.team_id.is_some() || f.model.is_some() || f.status.is_some();
    match &f.request_id {
        Some(_) => Plan::Direct,
        None if unindexed => Plan::Scan,
        None => Plan::Direct,
    }
}

/// One page of the rows matching `f` (at most `f.limit`, 100 unless
/// given), newest first, older than `before`: a bounded scan goes on from
/// where the last stopped until the page is full, the rows end, or
/// [`SCAN_TIME`] has passed.
pub async fn page(
    c: &mut Client,
    f: &SpendFilter,
    before: Option<&LogCursor>,
) -> Result<LogPage, Error> {
    let size = f.limit.unwrap_or(100).max(1);
    let started = Instant::now();
    let tx = c.transaction().await?;
    tx.batch_execute(LOG_READ_TIMEOUT).await?;
    let mut plan = plan(f);
    // With a key, its index bounds the scan; an operator's user or team
    // index serves the filters alone.
    if plan == Plan::Scan && f.api_key.is_none() && (f.user_id.is_some() || f.team_id.is_some()) {
        let indexed: Vec<String> = tx
            .query(INDEXED, &[])
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?;
        if index_serves(f, &indexed) {
            plan = Plan::Direct;
        }
    }
    let mut page = once(&tx, plan, f, before, size).await?;
    while page.partial && started.elapsed() < SCAN_TIME {
        let found = i64::try_from(page.rows.len()).unwrap_or(size);
        let more = once(&tx, plan, f, page.next.as_ref(), size - found).await?;
        page.rows.extend(more.rows);
        page.next = more.next;
        page.partial = more.partial;
    }
    tx.commit().await?;
    Ok(page)
}

/// One query's page of at most `size` rows (see [`page`]).
async fn once(
    c: &Transaction<'_>,
    plan: Plan,
    f: &SpendFilter,
    before: Option<&LogCursor>,
    size: i64,
) -> Result<LogPage, Error> {
    let (start, end) = (naive(f.start), naive(f.end));
    let cursor_time = before.map(|b| b.start.naive_utc());
    let cursor_id = before.map(|b| b.request_id.as_str());
    let scan = plan == Plan::Scan;
    let bound = if f.api_key.is_some() {
        KEY_SCAN_ROWS
    } else {
        SCAN_ROWS
    };
    // A page and one more row (is there a next page?), and with a scan the
    // row where it stopped, which may be neither.
    let wanted = size.saturating_add(if scan { 2 } else { 1 });
    let params: [&(dyn ToSql + Sync); 12] = [
        &f.api_key,
        &f.user_id,
        &f.team_id,
        &f.request_id,
        &start,
        &end,
        &wanted,
        &f.model,
        &f.status,
        &cursor_time,
        &cursor_id,
        &bound,
    ];
    let (sql, params) = match plan {
        Plan::Scan => (SCANNED, &params[..]),
        Plan::Direct => (DIRECT, &params[..11]),
    };
    let mut found = Vec::new();
    for row in c.query(sql, params).await? {
        let hit: bool = row.try_get("hit")?;
        let n: i64 = row.try_get("n")?;
        found.push((log_row(&row)?, hit, scan && n == bound));
    }
    Ok(assemble(found, usize::try_from(size).unwrap_or(usize::MAX)))
}

/// The page of `size` rows from what a query found, newest first: each
/// row, whether it matches, and whether the scan stopped at it.
fn assemble(found: Vec<(SpendLogRow, bool, bool)>, size: usize) -> LogPage {
    let mut page = LogPage::default();
    for (row, hit, edge) in found {
        if hit && page.rows.len() == size {
            // One more match: the page is full and a next one exists.
            page.next = page.rows.last().map(LogCursor::after);
            page.partial = false;
            return page;
        }
        if edge {
            page.next = Some(LogCursor::after(&row));
            page.partial = true;
        }
        if hit {
            page.rows.push(row);
        }
    }
    if page.partial && page.rows.len() == size {
        // Full exactly at the scan's bound: the next page continues there.
        page.next = page.rows.last().map(LogCursor::after);
        page.partial = false;
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn row(id: &str, second: u32) -> SpendLogRow {
        SpendLogRow {
            request_id: id.into(),
            start_time: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, second).unwrap(),
            ..SpendLogRow::default()
        }
    }

    fn ids(page: &LogPage) -> Vec<&str> {
        page.rows.iter().map(|r| &*r.request_id).collect()
    }

    #[test]
    fn a_full_page_continues_after_its_last_row() {
        let found = vec![
            (row("c", 3), true, false),
            (row("b", 2), true, false),
            (row("a", 1), true, false),
        ];
        let page = assemble(found, 2);
        assert_eq!(ids(&page), ["c", "b"]);
        assert_eq!(page.next, Some(LogCursor::after(&row("b", 2))));
        assert!(!page.partial);
    }

    #[test]
    fn a_short_page_without_a_bound_is_the_last() {
        let page = assemble(vec![(row("c", 3), true, false)], 2);
        assert_eq!(ids(&page), ["c"]);
        assert_eq!(page.next, None);
    }

    #[test]
    fn a_scan_that_reached_its_bound_continues_where_it_stopped() {
        let page = assemble(
            vec![(row("c", 3), true, false), (row("x", 1), false, true)],
            2,
        );
        assert_eq!(ids(&page), ["c"]);
        assert_eq!(page.next, Some(LogCursor::after(&row("x", 1))));
        assert!(page.partial);
        // Nothing matched: still where to go on.
        let page = assemble(vec![(row("x", 1), false, true)], 2);
        assert!(page.rows.is_empty() && page.partial);
        // The bound's row matches and fills the page: a plain next page.
        let page = assemble(
            vec![(row("c", 3), true, false), (row("x", 1), true, true)],
            2,
        );
        assert_eq!(ids(&page), ["c", "x"]);
        assert_eq!(page.next, Some(LogCursor::after(&row("x", 1))));
        assert!(!page.partial);
    }

    #[test]
    fn only_unindexed_filters_scan() {
        let mut f = SpendFilter {
            team_id: Some("t".into()),
            ..SpendFilter::default()
        };
        assert_eq!(plan(&f), Plan::Scan);
        f.api_key = Some("k".into());
        assert_eq!(plan(&f), Plan::Scan);
        f.team_id = None;
        assert_eq!(plan(&f), Plan::Direct);
        f.request_id = Some("r".into());
        assert_eq!(plan(&f), Plan::Direct);
        assert_eq!(plan(&SpendFilter::default()), Plan::Direct);
    }

    #[test]
    fn an_operators_index_serves_only_its_columns_filter() {
        let by = |user: Option<&str>, team: Option<&str>| SpendFilter {
            user_id: user.map(str::to_string),
            team_id: team.map(str::to_string),
            ..SpendFilter::default()
        };
        let user = ["user".to_string()];
        let team = ["team_id".to_string()];
        assert!(index_serves(&by(Some("u"), None), &user));
        assert!(!index_serves(&by(Some("u"), None), &team));
        assert!(index_serves(&by(None, Some("t")), &team));
        assert!(!index_serves(&by(None, Some("t")), &[]));
        // Both filters: one index narrows the rows enough.
        assert!(index_serves(&by(Some("u"), Some("t")), &team));
        assert!(!index_serves(&by(None, None), &user));
    }
}
