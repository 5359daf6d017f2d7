//! LiteLLM's `/user/daily/activity`, `/team/daily/activity`,
//! `/organization/daily/activity`, `/customer/daily/activity` (and
//! `/end_user/daily/activity`) and `/tag/daily/activity`: a page of a daily
//! table over a date range, with LiteLLM's parameters, answered in its
//! shape ([`super::activity`]).

use super::activity::{self, KeyInfo, Labels};
use super::body::bad_field;
use super::db::{run, store_err, token_of};
use super::query::Query;
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::{DailyPage, DailyQuery, DailyScope};
use chrono::{Duration, NaiveDate, Utc};
use serde_json::{json, Map, Value};

/// The largest `page_size`, as LiteLLM's.
pub const MAX_PAGE_SIZE: i64 = 1_000;
/// The most rows a page may start past.
const MAX_OFFSET: i64 = 1_000_000;
/// Entities a filter may list.
const MAX_IDS: usize = 1_000;
/// Longest date range, in days.
const MAX_RANGE_DAYS: i64 = 3_660;
/// Keys and entities of one page whose names are looked up.
const MAX_LABELS: usize = 200;

/// The daily-activity path of `path`, if it is one.
pub fn scope_of(path: &str) -> Option<DailyScope> {
    Some(match path {
        "/user/daily/activity" => DailyScope::User,
        "/team/daily/activity" => DailyScope::Team,
        "/organization/daily/activity" => DailyScope::Organization,
        "/customer/daily/activity" | "/end_user/daily/activity" => DailyScope::EndUser,
        "/tag/daily/activity" => DailyScope::Tag,
        _ => return None,
    })
}

/// The parameter listing the entities of `scope` (comma-separated, but
/// the user's, which names one).
fn ids_param(scope: DailyScope) -> &'static str {
    match scope {
        DailyScope::User => "user_id",
        DailyScope::Team => "team_ids",
        DailyScope::Organization => "organization_ids",
        DailyScope::EndUser => "end_user_ids",
        DailyScope::Tag => "tags",
    }
}

/// A comma-separated list parameter, bounded.
fn list(q: &mut Query, name: &str) -> Result<Option<Vec<String>>, GatewayError> {
    let Some(text) = q.take(name) else {
        return Ok(None);
    };
    let ids: Vec<String> = text
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if ids.len() > MAX_IDS {
        return Err(bad_field(name, format!("lists at most {MAX_IDS} ids")));
    }
    Ok(Some(ids))
}

/// A required `YYYY-MM-DD` parameter.
fn required_date(q: &mut Query, name: &str) -> Result<NaiveDate, GatewayError> {
    q.take_date(name)?
        .ok_or_else(|| bad_field(name, "is required (YYYY-MM-DD)"))
}

/// The query of a request's parameters, and its page number and size.
pub(super) fn parse(
    scope: DailyScope,
    mut q: Query,
    today: NaiveDate,
) -> Result<(DailyQuery, (i64, i64)), GatewayError> {
    let start = required_date(&mut q, "start_date")?;
    let mut end = required_date(&mut q, "end_date")?;
    if end < start {
        return Err(bad_field("end_date", "must be on or after start_date"));
    }
    if (end - start).num_days() > MAX_RANGE_DAYS {
        return Err(bad_field(
            "end_date",
            format!("the range spans at most {MAX_RANGE_DAYS} days"),
        ));
    }
    let page: i64 = q.take_parsed("page")?.unwrap_or(1);
    if page < 1 {
        return Err(bad_field("page", "pages start at 1"));
    }
    let default_size = if scope == DailyScope::User { 50 } else { 10 };
    let size: i64 = q.take_parsed("page_size")?.unwrap_or(default_size);
    if !(1..=MAX_PAGE_SIZE).contains(&size) {
        return Err(bad_field(
            "page_size",
            format!("must be between 1 and {MAX_PAGE_SIZE}"),
        ));
    }
    let offset = (page - 1)
        .checked_mul(size)
        .filter(|o| *o <= MAX_OFFSET)
        .ok_or_else(|| bad_field("page", format!("pages end {MAX_OFFSET} rows in")))?;
    let ids = ids_param(scope);
    let entities = match scope {
        DailyScope::User => q.take(ids).map(|id| vec![id]),
        _ => list(&mut q, ids)?,
    };
    let exclude = match scope {
        DailyScope::User | DailyScope::Tag => Vec::new(),
        _ => list(&mut q, &format!("exclude_{ids}"))?.unwrap_or_default(),
    };
    if scope == DailyScope::User {
        let timezone: Option<i64> = q.take_parsed("timezone")?;
        if timezone.is_some_and(|t| !(-1440..=1440).contains(&t)) {
            return Err(bad_field(
                "timezone",
                "must be between -1440 and 1440 minutes",
            ));
        }
        let current: bool = q.take_parsed("include_current_utc_day")?.unwrap_or(false);
        // LiteLLM's include_current_utc_day: a range ending on the caller's
        // local today reaches today's UTC day too.
        if let (true, Some(minutes)) = (current, timezone) {
            let local_today = (Utc::now() - Duration::minutes(minutes)).date_naive();
            if end >= local_today {
                end = end.max(today);
            }
        }
    }
    let query = DailyQuery {
        scope,
        start: start.format("%Y-%m-%d").to_string(),
        end: end.format("%Y-%m-%d").to_string(),
        entities,
        exclude,
        api_keys: q.take("api_key").map(|k| vec![token_of(&k)]),
        model: q.take("model"),
        offset,
        limit: size,
    };
    q.finish()?;
    Ok((query, (page, size)))
}

/// `GET /<scope>/daily/activity?start_date=&end_date=&...`.
pub async fn activity(worker: &Worker, scope: DailyScope, q: Query) -> Result<Value, GatewayError> {
    let (query, paging) = parse(scope, q, Utc::now().date_naive())?;
    let (page, labels) = run(worker, move |ctx| async move {
        let store = ctx.store();
        let page = store.daily_activity(&query).await.map_err(store_err)?;
        let labels = labels(store, scope, &page).await;
        Ok((page, labels))
    })
    .await?;
    Ok(activity::answer(&page, paging, &labels))
}

/// Names of the page's keys and entities (the first [`MAX_LABELS`] of
/// each); a lookup that fails leaves its name out.
async fn labels(store: &dyn crate::store::Store, scope: DailyScope, page: &DailyPage) -> Labels {
    let mut labels = Labels::default();
    for row in &page.rows {
        let key = &row.key.api_key;
        if labels.keys.len() < MAX_LABELS && !labels.keys.contains_key(key) {
            if let Ok(found) = store.get_key(key).await {
                let info = found.map(|k| KeyInfo {
                    alias: k.key_alias,
                    team_id: k.team_id,
                    user_id: k.user_id,
                });
                labels.keys.insert(key.clone(), info);
            }
        }
        let entity = &row.key.entity;
        if entity.is_empty()
            || labels.entities.len() >= MAX_LABELS
            || labels.entities.contains_key(entity)
        {
            continue;
        }
        let meta = match scope {
            DailyScope::Team => store.get_team(entity).await.ok().flatten().map(|t| {
                let mut m = Map::new();
                m.insert("team_alias".into(), json!(t.team_alias));
                m
            }),
            DailyScope::User => store.get_user(entity).await.ok().flatten().map(|u| {
                let mut m = Map::new();
                m.insert("user_email".into(), json!(u.user_email));
                m.insert("user_alias".into(), json!(u.user_alias));
                m
            }),
            _ => None,
        };
        labels
            .entities
            .insert(entity.clone(), meta.unwrap_or_default());
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    fn today() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 3, 10).unwrap()
    }

    #[test]
    fn reads_litellms_parameters() {
        let (q, paging) = parse(
            DailyScope::Team,
            Query::parse(
                "start_date=2026-03-01&end_date=2026-03-02&team_ids=a,b&exclude_team_ids=c\
                 &model=gpt&api_key=sk-x&page=2&page_size=5",
            )
            .unwrap(),
            today(),
        )
        .unwrap();
        assert_eq!(
            (q.start.as_str(), q.end.as_str()),
            ("2026-03-01", "2026-03-02")
        );
        assert_eq!(q.entities, Some(vec!["a".to_string(), "b".into()]));
        assert_eq!(q.exclude, ["c"]);
        assert_eq!(q.model.as_deref(), Some("gpt"));
        assert_eq!(q.api_keys, Some(vec![token_of("sk-x")]));
        assert_eq!((q.offset, q.limit, paging), (5, 5, (2, 5)));
        let (user, _) = parse(
            DailyScope::User,
            Query::parse("start_date=2026-03-01&end_date=2026-03-01&user_id=u1").unwrap(),
            today(),
        )
        .unwrap();
        assert_eq!(
            (user.entities, user.limit),
            (Some(vec!["u1".to_string()]), 50)
        );
    }

    #[test]
    fn names_the_bad_parameter() {
        for (scope, query, param) in [
            (DailyScope::User, "end_date=2026-03-01", "start_date"),
            (DailyScope::User, "start_date=2026-03-01", "end_date"),
            (
                DailyScope::User,
                "start_date=2026-3-1&end_date=2026-03-01",
                "start_date",
            ),
            (
                DailyScope::User,
                "start_date=2026-03-02&end_date=2026-03-01",
                "end_date",
            ),
            (
                DailyScope::User,
                "start_date=2000-01-01&end_date=2026-03-01",
                "end_date",
            ),
            (
                DailyScope::Team,
                "start_date=2026-03-01&end_date=2026-03-01&page=0",
                "page",
            ),
            (
                DailyScope::Team,
                "start_date=2026-03-01&end_date=2026-03-01&page_size=1001",
                "page_size",
            ),
            (
                DailyScope::Team,
                "start_date=2026-03-01&end_date=2026-03-01&page=999999999",
                "page",
            ),
            (
                DailyScope::User,
                "start_date=2026-03-01&end_date=2026-03-01&timezone=9000",
                "timezone",
            ),
            (
                DailyScope::User,
                "start_date=2026-03-01&end_date=2026-03-01&team_ids=a",
                "team_ids",
            ),
            (
                DailyScope::Tag,
                "start_date=2026-03-01&end_date=2026-03-01&exclude_tags=a",
                "exclude_tags",
            ),
        ] {
            let err = Query::parse(query)
                .and_then(|q| parse(scope, q, today()))
                .unwrap_err();
            assert_eq!(err.param(), Some(param), "{query}");
        }
    }

    #[test]
    fn every_litellm_path_has_its_table() {
        assert_eq!(scope_of("/tag/daily/activity"), Some(DailyScope::Tag));
        assert_eq!(
            scope_of("/end_user/daily/activity"),
            Some(DailyScope::EndUser)
        );
        assert_eq!(scope_of("/user/daily"), None);
    }
}
