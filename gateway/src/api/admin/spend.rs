//! `/spend/logs` and `/global/spend`.

use super::body::bad_field;
use super::db::{run, store_err, token_of};
use super::query::Query;
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::SpendFilter;
use chrono::{DateTime, NaiveTime, Utc};
use serde_json::{json, Value};

/// Midnight UTC of a `YYYY-MM-DD` parameter (years 1 to 9999).
fn day(q: &mut Query, name: &str) -> Result<Option<DateTime<Utc>>, GatewayError> {
    Ok(q.take_date(name)?
        .map(|d| d.and_time(NaiveTime::MIN).and_utc()))
}

/// Rows of a `/spend/logs` page unless `page_size` (or `limit`) says.
pub const DEFAULT_PAGE_SIZE: i64 = 100;
/// The largest `page_size`.
pub const MAX_PAGE_SIZE: i64 = 1_000;
/// The most rows a page may start past (deeper pages would make the
/// database skip that many rows per call): narrow with `start_date` and
/// `end_date` instead.
pub const MAX_OFFSET: i64 = 1_000_000;

/// `page` (from 1) and `page_size` (or LiteLLM's `limit`) as the rows to
/// skip and to return, checked.
fn paging(q: &mut Query) -> Result<(i64, i64), GatewayError> {
    let page: i64 = q.take_parsed("page")?.unwrap_or(1);
    let size: Option<i64> = q.take_parsed("page_size")?;
    let limit: Option<i64> = q.take_parsed("limit")?;
    let (name, size) = match (size, limit) {
        (Some(_), Some(_)) => return Err(bad_field("limit", "give page_size or limit, not both")),
        (Some(s), None) => ("page_size", s),
        (None, Some(l)) => ("limit", l),
        (None, None) => ("page_size", DEFAULT_PAGE_SIZE),
    };
    if !(1..=MAX_PAGE_SIZE).contains(&size) {
        return Err(bad_field(
            name,
            format!("must be between 1 and {MAX_PAGE_SIZE}"),
        ));
    }
    if page < 1 {
        return Err(bad_field("page", "pages start at 1"));
    }
    let offset = (page - 1)
        .checked_mul(size)
        .filter(|o| *o <= MAX_OFFSET)
        .ok_or_else(|| {
            bad_field(
                "page",
                format!("pages end {MAX_OFFSET} rows in; narrow with start_date and end_date"),
            )
        })?;
    Ok((offset, size))
}

/// The filter of `/spend/logs`: `api_key` plain or hashed, `end_date`
/// inclusive (rows before the next midnight), one page of rows.
pub(super) fn filter(mut q: Query) -> Result<SpendFilter, GatewayError> {
    let (offset, limit) = paging(&mut q)?;
    narrowed(q, offset, limit)
}

/// The filter of `/spend/logs`'s other parameters, for a page of `limit`
/// rows `offset` rows in; every parameter of `q` must be one.
pub(super) fn narrowed(mut q: Query, offset: i64, limit: i64) -> Result<SpendFilter, GatewayError> {
    let filter = SpendFilter {
        api_key: q.take("api_key").map(|k| token_of(&k)),
        user_id: q.take("user_id"),
        team_id: q.take("team_id"),
        request_id: q.take("request_id"),
        start: day(&mut q, "start_date")?,
        end: day(&mut q, "end_date")?
            .map(|d| {
                d.checked_add_signed(chrono::Duration::days(1))
                    .ok_or_else(|| bad_field("end_date", "is past the last representable date"))
            })
            .transpose()?,
        limit: Some(limit),
        offset,
        model: q.take("model"),
        status: q
            .take("status")
            .map(|s| match s.as_str() {
                "success" | "failure" => Ok(s),
                _ => Err(bad_field("status", "must be success or failure")),
            })
            .transpose()?,
    };
    q.finish()?;
    if let (Some(start), Some(end)) = (filter.start, filter.end) {
        if end <= start {
            return Err(bad_field("end_date", "is before start_date"));
        }
    }
    Ok(filter)
}

/// `GET /spend/logs?api_key=&user_id=&team_id=&request_id=&start_date=&end_date=&page=&page_size=`:
/// one page of the matching rows, oldest first (a list, as LiteLLM
/// answers; a page shorter than `page_size` is the last). This gateway
/// also takes `model` (a row's model group or model) and `status`
/// (`success` or `failure`), as LiteLLM's UI filters its logs.
pub async fn logs(worker: &Worker, q: Query) -> Result<Value, GatewayError> {
    let filter = filter(q)?;
    let rows = run(worker, move |ctx| async move {
        ctx.store().spend_logs(&filter).await.map_err(store_err)
    })
    .await?;
    Ok(serde_json::to_value(rows).expect("spend rows are JSON"))
}

/// Days `/global/spend` adds up, today's included (LiteLLM's
/// `MonthlyGlobalSpend` view: the spend log's last 30 days).
const GLOBAL_SPEND_DAYS: i64 = 30;

/// `GET /global/spend`: the spend of every request (any key's, the master
/// key's, deleted keys') over the last 30 days, as LiteLLM answers it.
pub async fn global(worker: &Worker, q: Query) -> Result<Value, GatewayError> {
    q.finish()?;
    let since = (Utc::now() - chrono::Duration::days(GLOBAL_SPEND_DAYS))
        .format("%Y-%m-%d")
        .to_string();
    let spend = run(worker, move |ctx| async move {
        ctx.store().global_spend(&since).await.map_err(store_err)
    })
    .await?;
    Ok(json!({"spend": spend, "max_budget": null}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_filter() {
        let f = filter(
            Query::parse("api_key=sk-abc&start_date=2026-01-02&end_date=2026-01-02").unwrap(),
        )
        .unwrap();
        assert_eq!(f.api_key, Some(token_of("sk-abc")));
        let start = f.start.unwrap();
        assert_eq!(start.to_rfc3339(), "2026-01-02T00:00:00+00:00");
        assert_eq!(f.end.unwrap() - start, chrono::Duration::days(1));
    }

    #[test]
    fn pages_with_a_default_and_a_cap() {
        let page = |query: &str| {
            let f = filter(Query::parse(query).unwrap()).unwrap();
            (f.offset, f.limit)
        };
        assert_eq!(page(""), (0, Some(DEFAULT_PAGE_SIZE)));
        assert_eq!(page("page=3&page_size=10"), (20, Some(10)));
        assert_eq!(page("limit=5"), (0, Some(5)));
        assert_eq!(page("page=1001&page_size=1000"), (MAX_OFFSET, Some(1000)));
        for (query, param) in [
            ("page_size=1001", "page_size"),
            ("page_size=0", "page_size"),
            ("limit=-1", "limit"),
            ("limit=10&page_size=10", "limit"),
            ("page=0", "page"),
            ("page=-5", "page"),
            ("page=1002&page_size=1000", "page"),
            ("page=9223372036854775807&page_size=1000", "page"),
            ("page=99999999999999999999", "page"),
        ] {
            let err = Query::parse(query).and_then(filter).unwrap_err();
            assert_eq!(err.param(), Some(param), "{query}");
        }
    }

    #[test]
    fn names_bad_dates_and_parameters() {
        for (query, param) in [
            ("start_date=02/01/2026", "start_date"),
            ("start_date=2026-01-03&end_date=2026-01-01", "end_date"),
            ("team=x", "team"),
            ("status=maybe", "status"),
            ("end_date=+262143-12-31", "end_date"),
            ("start_date=99999999999-01-01", "start_date"),
            ("start_date=-262143-01-01&end_date=2026-01-01", "start_date"),
            ("request_id=a%00", "request_id"),
        ] {
            let err = Query::parse(query).and_then(filter).unwrap_err();
            assert_eq!(err.param(), Some(param), "{query}");
        }
    }
}
