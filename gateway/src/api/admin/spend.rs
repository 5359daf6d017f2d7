//! `/spend/logs` and `/global/spend`.

use super::body::bad_field;
use super::db::{run, store_err, token_of};
use super::query::Query;
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::SpendFilter;
use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
use serde_json::{json, Value};

/// Midnight UTC of a `YYYY-MM-DD` parameter.
fn day(q: &mut Query, name: &str) -> Result<Option<DateTime<Utc>>, GatewayError> {
    q.take(name)
        .map(|text| {
            NaiveDate::parse_from_str(&text, "%Y-%m-%d")
                .map(|d| d.and_time(NaiveTime::MIN).and_utc())
                .map_err(|_| bad_field(name, format!("'{text}' is not a YYYY-MM-DD date")))
        })
        .transpose()
}

/// The filter of `/spend/logs`: `api_key` plain or hashed, `end_date`
/// inclusive (rows before the next midnight).
pub(super) fn filter(mut q: Query) -> Result<SpendFilter, GatewayError> {
    let filter = SpendFilter {
        api_key: q.take("api_key").map(|k| token_of(&k)),
        user_id: q.take("user_id"),
        team_id: q.take("team_id"),
        request_id: q.take("request_id"),
        start: day(&mut q, "start_date")?,
        end: day(&mut q, "end_date")?.map(|d| d + chrono::Duration::days(1)),
        limit: None,
    };
    q.finish()?;
    if let (Some(start), Some(end)) = (filter.start, filter.end) {
        if end <= start {
            return Err(bad_field("end_date", "is before start_date"));
        }
    }
    Ok(filter)
}

/// `GET /spend/logs?api_key=&user_id=&team_id=&request_id=&start_date=&end_date=`:
/// the matching rows, oldest first.
pub async fn logs(worker: &Worker, q: Query) -> Result<Value, GatewayError> {
    let filter = filter(q)?;
    let rows = run(worker, move |ctx| async move {
        ctx.store.spend_logs(&filter).await.map_err(store_err)
    })
    .await?;
    Ok(serde_json::to_value(rows).expect("spend rows are JSON"))
}

/// `GET /global/spend`: the spend of every key.
pub async fn global(worker: &Worker, q: Query) -> Result<Value, GatewayError> {
    q.finish()?;
    let spend = run(worker, |ctx| async move {
        ctx.store.global_spend().await.map_err(store_err)
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
    fn names_bad_dates_and_parameters() {
        for (query, param) in [
            ("start_date=02/01/2026", "start_date"),
            ("start_date=2026-01-03&end_date=2026-01-01", "end_date"),
            ("model=x", "model"),
        ] {
            let err = filter(Query::parse(query).unwrap()).unwrap_err();
            assert_eq!(err.param(), Some(param), "{query}");
        }
    }
}
