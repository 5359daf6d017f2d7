//! `GET /gateway/logs`: the spend log newest first, a page at a time by
//! keyset (the console's Logs page). LiteLLM's `/spend/logs` stays as
//! LiteLLM answers it (oldest first, `page` by `OFFSET`); this one costs
//! what its first page costs however deep it goes, and a filter no index
//! serves says where its bounded search stopped instead of walking the
//! whole log.

use super::body::bad_field;
use super::db::{run, store_err};
use super::query::Query;
use super::spend::{narrowed, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::{LogCursor, LogPage, SpendFilter};
use chrono::DateTime;
use serde_json::{json, Value};

/// Longest `request_id` a page token may carry.
const MAX_TOKEN_ID: usize = 512;

/// A cursor as a page token: `<startTime in Unix nanoseconds>:<request_id>`.
fn token(cursor: &LogCursor) -> Option<String> {
    let nanos = cursor.start.timestamp_nanos_opt()?;
    Some(format!("{nanos}:{}", cursor.request_id))
}

/// The cursor a page token names.
fn cursor(token: &str) -> Result<LogCursor, GatewayError> {
    let bad = || bad_field("page_token", "is not a page token this endpoint gave");
    let (nanos, id) = token.split_once(':').ok_or_else(bad)?;
    let nanos: i64 = nanos.parse().map_err(|_| bad())?;
    if id.is_empty() || id.len() > MAX_TOKEN_ID {
        return Err(bad());
    }
    Ok(LogCursor {
        start: DateTime::from_timestamp_nanos(nanos),
        request_id: id.to_string(),
    })
}

/// The filter and the cursor of a `/gateway/logs` call.
fn parse(mut q: Query) -> Result<(SpendFilter, Option<LogCursor>), GatewayError> {
    let size: i64 = q.take_parsed("page_size")?.unwrap_or(DEFAULT_PAGE_SIZE);
    if !(1..=MAX_PAGE_SIZE).contains(&size) {
        return Err(bad_field(
            "page_size",
            format!("must be between 1 and {MAX_PAGE_SIZE}"),
        ));
    }
    let before = q.take("page_token").map(|t| cursor(&t)).transpose()?;
    Ok((narrowed(q, 0, size)?, before))
}

/// `GET /gateway/logs?api_key=&user_id=&team_id=&request_id=&model=&status=&start_date=&end_date=&page_size=&page_token=`:
/// the matching rows newest first (`data`, at most `page_size`, 100 unless
/// given, at most 1,000), `next_page_token` to pass for the following
/// page (`null`: no older row matches), and `partial`: the search stopped
/// at its bound before the page was full (a filter by user, team, model or
/// status alone looks at 20,000 rows a call), so older rows may still
/// match and `searched_to` is the `startTime` it reached.
pub async fn page(worker: &Worker, q: Query) -> Result<Value, GatewayError> {
    let (filter, before) = parse(q)?;
    let page: LogPage = run(worker, move |ctx| async move {
        ctx.store()
            .spend_log_page(&filter, before.as_ref())
            .await
            .map_err(store_err)
    })
    .await?;
    let next = page.next.as_ref().and_then(token);
    let searched_to = page
        .partial
        .then(|| page.next.as_ref().map(|c| c.start.to_rfc3339()))
        .flatten();
    Ok(json!({
        "data": page.rows,
        "next_page_token": next,
        "partial": page.partial,
        "searched_to": searched_to,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_cursor_and_nothing_else() {
        let at = DateTime::from_timestamp_nanos(1_767_000_000_123_456_789);
        let c = LogCursor {
            start: at,
            request_id: "req:1".into(),
        };
        assert_eq!(cursor(&token(&c).unwrap()).unwrap(), c);
        for bad in [
            "",
            "x",
            "12",
            "12:",
            "a:b",
            "1.5:x",
            &format!("1:{}", "x".repeat(513)),
        ] {
            assert_eq!(
                cursor(bad).unwrap_err().param(),
                Some("page_token"),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_page_size_is_checked_and_the_filter_named() {
        let (f, before) =
            parse(Query::parse("team_id=t&page_size=7&page_token=5:r").unwrap()).unwrap();
        assert_eq!(
            (f.team_id.as_deref(), f.limit, f.offset),
            (Some("t"), Some(7), 0)
        );
        assert_eq!(before.unwrap().request_id, "r");
        let (f, before) = parse(Query::parse("").unwrap()).unwrap();
        assert_eq!((f.limit, before), (Some(DEFAULT_PAGE_SIZE), None));
        for (query, param) in [
            ("page_size=0", "page_size"),
            ("page_size=1001", "page_size"),
            ("page=2", "page"),
            ("page_token=nope", "page_token"),
            ("status=maybe", "status"),
        ] {
            let err = Query::parse(query).and_then(parse).unwrap_err();
            assert_eq!(err.param(), Some(param), "{query}");
        }
    }
}
