//! LiteLLM's daily spend aggregates (`LiteLLM_DailyUserSpend`,
//! `LiteLLM_DailyTeamSpend`, `LiteLLM_DailyOrganizationSpend`,
//! `LiteLLM_DailyEndUserSpend`, `LiteLLM_DailyTagSpend`): what a batch of
//! newly written spend rows adds to them, and what `/*/daily/activity`
//! asks of them. Pure; both backends write and read through these types.
//!
//! As LiteLLM's writer does, every spend row counts once per entity it
//! names: under its UTC start day (`YYYY-MM-DD`), key, upstream model,
//! provider and endpoint (LiteLLM's route for its `call_type`), each of
//! them `''` rather than absent, since the unique key must be NULL-free to
//! conflict. A row is one API request, successful or failed by its status;
//! a successful one adds its duration to `total_response_time_ms` and one
//! to `timed_requests`. A row without a user counts for the user `''`, as
//! in LiteLLM; rows without a team, end user or tag count for none.
//! Organizations are their teams'.

use super::SpendLogRow;
use crate::keyed_hash::KeyedHash;
use chrono::NaiveDate;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

/// One of LiteLLM's daily tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DailyScope {
    /// `LiteLLM_DailyUserSpend`, by `user_id`.
    User,
    /// `LiteLLM_DailyTeamSpend`, by `team_id`.
    Team,
    /// `LiteLLM_DailyOrganizationSpend`, by `organization_id`.
    Organization,
    /// `LiteLLM_DailyEndUserSpend`, by `end_user_id`.
    EndUser,
    /// `LiteLLM_DailyTagSpend`, by `tag`.
    Tag,
}

impl DailyScope {
    /// Every scope, in the order a batch writes them.
    pub const ALL: [DailyScope; 5] = [
        DailyScope::User,
        DailyScope::Team,
        DailyScope::Organization,
        DailyScope::EndUser,
        DailyScope::Tag,
    ];

    /// The table, quoted for SQL.
    pub fn table(self) -> &'static str {
        match self {
            DailyScope::User => r#""LiteLLM_DailyUserSpend""#,
            DailyScope::Team => r#""LiteLLM_DailyTeamSpend""#,
            DailyScope::Organization => r#""LiteLLM_DailyOrganizationSpend""#,
            DailyScope::EndUser => r#""LiteLLM_DailyEndUserSpend""#,
            DailyScope::Tag => r#""LiteLLM_DailyTagSpend""#,
        }
    }

    /// The entity's column in the table (and the query parameter naming it).
    pub fn id_column(self) -> &'static str {
        match self {
            DailyScope::User => "user_id",
            DailyScope::Team => "team_id",
            DailyScope::Organization => "organization_id",
            DailyScope::EndUser => "end_user_id",
            DailyScope::Tag => "tag",
        }
    }
}

/// LiteLLM's endpoint for a spend row's `call_type` (its
/// `ROUTE_ENDPOINT_MAPPING`); `''` for one it does not map.
pub fn endpoint_of(call_type: &str) -> &'static str {
    match call_type {
        "acompletion" => "/chat/completions",
        "atext_completion" => "/completions",
        "aembedding" => "/embeddings",
        "aimage_generation" => "/image/generations",
        "aspeech" => "/audio/speech",
        "atranscription" => "/audio/transcriptions",
        "amoderation" => "/moderations",
        "arerank" => "/rerank",
        "aresponses" => "/responses",
        "aimage_edit" => "/images/edits",
        _ => "",
    }
}

/// The unique key of a daily row after its entity (LiteLLM's
/// `mcp_namespaced_tool_name` is always `''` here).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DailyKey {
    /// The entity's id (`''` for a row without a user).
    pub entity: String,
    /// UTC day of the attempt's start, `YYYY-MM-DD`.
    pub date: String,
    /// The hashed key.
    pub api_key: String,
    /// The upstream model.
    pub model: String,
    /// The provider.
    pub custom_llm_provider: String,
    /// LiteLLM's endpoint of the call type.
    pub endpoint: String,
}

/// The counters of a daily row.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DailyCounts {
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Completion tokens.
    pub completion_tokens: i64,
    /// USD.
    pub spend: f64,
    /// Requests (spend rows).
    pub api_requests: i64,
    /// Rows with status `success`.
    pub successful_requests: i64,
    /// The others.
    pub failed_requests: i64,
    /// Durations of the successful ones, ms.
    pub total_response_time_ms: i64,
    /// Successful ones with a duration.
    pub timed_requests: i64,
}

impl DailyCounts {
    /// One spend row's counts.
    fn of(row: &SpendLogRow) -> DailyCounts {
        let success = row.status == "success";
        let duration = (row.end_time - row.start_time).num_milliseconds().max(0);
        DailyCounts {
            prompt_tokens: row.prompt_tokens.max(0),
            completion_tokens: row.completion_tokens.max(0),
            spend: row.spend,
            api_requests: 1,
            successful_requests: i64::from(success),
            failed_requests: i64::from(!success),
            total_response_time_ms: if success { duration } else { 0 },
            timed_requests: i64::from(success),
        }
    }

    /// Adds `other`, saturating.
    pub fn add(&mut self, other: &DailyCounts) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        self.spend += other.spend;
        self.api_requests = self.api_requests.saturating_add(other.api_requests);
        self.successful_requests = self
            .successful_requests
            .saturating_add(other.successful_requests);
        self.failed_requests = self.failed_requests.saturating_add(other.failed_requests);
        self.total_response_time_ms = self
            .total_response_time_ms
            .saturating_add(other.total_response_time_ms);
        self.timed_requests = self.timed_requests.saturating_add(other.timed_requests);
    }
}

/// What rows add to one daily row: its model group and one contributing
/// request (LiteLLM keeps one on tag rows), and the counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DailyDelta {
    /// The model group (the first row's).
    pub model_group: String,
    /// A request that counted here (the first).
    pub request_id: String,
    /// The sums.
    pub counts: DailyCounts,
}

/// What a batch of spend rows adds to the daily tables, per scope and
/// unique key, in key order (the order rows are locked in).
#[derive(Debug, Default, PartialEq)]
pub struct DailyBatch {
    /// Per scope.
    pub scopes: BTreeMap<DailyScope, BTreeMap<DailyKey, DailyDelta>>,
}

impl DailyBatch {
    /// What `rows` add; `org_of` names a team's organization, if any.
    ///
    /// Rows are summed under keys borrowed from them (the day as a date)
    /// in a hash map, and each distinct key is made into owned text once,
    /// after the distinct keys are sorted: a row costs one hash lookup per
    /// entity it names, not six strings and a date format, nor the string
    /// comparisons of a search among a batch's thousand keys.
    pub fn of<'a>(
        rows: impl IntoIterator<Item = &'a SpendLogRow>,
        org_of: impl Fn(&str) -> Option<String>,
    ) -> DailyBatch {
        let mut sums = HashMap::<(DailyScope, RowKey<'a>), RowDelta<'a>, KeyedHash>::default();
        for row in rows {
            let counts = DailyCounts::of(row);
            let mut add = |scope: DailyScope, entity: Cow<'a, str>| {
                let key = RowKey::of(entity, row);
                sums.entry((scope, key))
                    .or_insert_with(|| RowDelta {
                        model_group: &row.model_group,
                        request_id: &row.request_id,
                        counts: DailyCounts::default(),
                    })
                    .counts
                    .add(&counts);
            };
            add(
                DailyScope::User,
                Cow::Borrowed(row.user.as_deref().unwrap_or_default()),
            );
            if let Some(team) = row.team_id.as_deref() {
                if let Some(org) = org_of(team) {
                    add(DailyScope::Organization, Cow::Owned(org));
                }
                add(DailyScope::Team, Cow::Borrowed(team));
            }
            if let Some(end_user) = row.end_user.as_deref().filter(|e| !e.is_empty()) {
                add(DailyScope::EndUser, Cow::Borrowed(end_user));
            }
            let tags = row.request_tags.as_deref().unwrap_or_default();
            for (i, tag) in tags.iter().enumerate() {
                if !tags[..i].contains(tag) {
                    add(DailyScope::Tag, Cow::Borrowed(tag));
                }
            }
        }
        let mut sums: Vec<_> = sums.into_iter().collect();
        sums.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut batch = DailyBatch::default();
        // Each scope's rows, in key order, built into its map at once.
        let mut scope_rows = Vec::new();
        let mut current = None;
        // A batch's rows are mostly of one day: its text is formatted once.
        let mut day: Option<(NaiveDate, String)> = None;
        for ((scope, key), delta) in sums {
            if current != Some(scope) {
                if let Some(done) = current {
                    batch.scopes.insert(done, scope_rows.drain(..).collect());
                }
                current = Some(scope);
            }
            let date = match &day {
                Some((date, text)) if *date == key.date => text.clone(),
                _ => {
                    let text = key.date.format("%Y-%m-%d").to_string();
                    day = Some((key.date, text.clone()));
                    text
                }
            };
            let owned = DailyKey {
                entity: key.entity.into_owned(),
                date,
                api_key: key.api_key.to_string(),
                model: key.model.to_string(),
                custom_llm_provider: key.custom_llm_provider.to_string(),
                endpoint: key.endpoint.to_string(),
            };
            let delta = DailyDelta {
                model_group: delta.model_group.to_string(),
                request_id: delta.request_id.to_string(),
                counts: delta.counts,
            };
            scope_rows.push((owned, delta));
        }
        if let Some(done) = current {
            batch.scopes.insert(done, scope_rows.into_iter().collect());
        }
        batch
    }

    /// Whether no row counts anywhere.
    pub fn is_empty(&self) -> bool {
        self.scopes.values().all(BTreeMap::is_empty)
    }
}

/// A [`DailyKey`] borrowed from a spend row while a batch is summed, its
/// day a date (one day, one `YYYY-MM-DD`: the same rows group together).
#[derive(PartialEq, Eq, PartialOrd, Ord, Hash)]
struct RowKey<'a> {
    entity: Cow<'a, str>,
    date: NaiveDate,
    api_key: &'a str,
    model: &'a str,
    custom_llm_provider: &'a str,
    endpoint: &'static str,
}

impl<'a> RowKey<'a> {
    /// The key of `row` under `entity`.
    fn of(entity: Cow<'a, str>, row: &'a SpendLogRow) -> RowKey<'a> {
        RowKey {
            entity,
            date: row.start_time.date_naive(),
            api_key: &row.api_key,
            model: &row.model,
            custom_llm_provider: &row.custom_llm_provider,
            endpoint: endpoint_of(&row.call_type),
        }
    }
}

/// A [`DailyDelta`] borrowed from the first row of its key.
struct RowDelta<'a> {
    model_group: &'a str,
    request_id: &'a str,
    counts: DailyCounts,
}

/// One stored daily row, as `/*/daily/activity` reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct DailyRow {
    /// Its unique key.
    pub key: DailyKey,
    /// Its model group.
    pub model_group: String,
    /// Its counters.
    pub counts: DailyCounts,
}

/// What `/*/daily/activity` asks: rows of one scope from `start` to `end`
/// (days, inclusive), of some entities and keys, of one model, one page.
#[derive(Debug, Clone, PartialEq)]
pub struct DailyQuery {
    /// The table.
    pub scope: DailyScope,
    /// First day, `YYYY-MM-DD`.
    pub start: String,
    /// Last day, `YYYY-MM-DD`.
    pub end: String,
    /// Only these entities, if given.
    pub entities: Option<Vec<String>>,
    /// Not these entities.
    pub exclude: Vec<String>,
    /// Only these hashed keys, if given.
    pub api_keys: Option<Vec<String>>,
    /// Only this model, if given.
    pub model: Option<String>,
    /// Rows to skip.
    pub offset: i64,
    /// Rows to return.
    pub limit: i64,
}

impl DailyQuery {
    /// Whether a row is one this query asks for.
    pub fn matches(&self, key: &DailyKey) -> bool {
        let date = key.date.as_str();
        date >= self.start.as_str()
            && date <= self.end.as_str()
            && self
                .entities
                .as_ref()
                .is_none_or(|e| e.contains(&key.entity))
            && !self.exclude.contains(&key.entity)
            && self
                .api_keys
                .as_ref()
                .is_none_or(|k| k.contains(&key.api_key))
            && self.model.as_ref().is_none_or(|m| *m == key.model)
    }
}

/// One page of daily rows (newest day first) and how many match in all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DailyPage {
    /// Rows matching the query.
    pub total: i64,
    /// The page's rows.
    pub rows: Vec<DailyRow>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn row(id: &str, status: &'static str) -> SpendLogRow {
        let start = chrono::Utc
            .with_ymd_and_hms(2026, 3, 4, 23, 59, 59)
            .unwrap();
        SpendLogRow {
            request_id: id.into(),
            call_type: "acompletion".into(),
            api_key: "hashed".into(),
            spend: 0.25,
            prompt_tokens: 10,
            completion_tokens: 5,
            start_time: start,
            end_time: start + chrono::Duration::milliseconds(1500),
            model: "gpt-4o".into(),
            model_group: "gpt".into(),
            custom_llm_provider: "openai".into(),
            status: status.into(),
            ..Default::default()
        }
    }

    /// Two rows of one key, model and day are one user row: both counted,
    /// the failure as failed and untimed; the row without a user counts
    /// for user `''`, and on its start day though it ended the next.
    #[test]
    fn rows_of_one_key_model_and_day_add_up_under_the_user_they_name() {
        let batch = DailyBatch::of(&[row("a", "success"), row("b", "failure")], |_| None);
        let users = &batch.scopes[&DailyScope::User];
        assert_eq!(users.len(), 1);
        let (key, delta) = users.iter().next().unwrap();
        assert_eq!(
            key,
            &DailyKey {
                entity: String::new(),
                date: "2026-03-04".into(),
                api_key: "hashed".into(),
                model: "gpt-4o".into(),
                custom_llm_provider: "openai".into(),
                endpoint: "/chat/completions".into(),
            }
        );
        assert_eq!(delta.model_group, "gpt");
        assert_eq!(delta.request_id, "a");
        let c = delta.counts;
        assert_eq!(
            (c.prompt_tokens, c.completion_tokens, c.spend),
            (20, 10, 0.5)
        );
        assert_eq!(
            (c.api_requests, c.successful_requests, c.failed_requests),
            (2, 1, 1)
        );
        assert_eq!((c.total_response_time_ms, c.timed_requests), (1500, 1));
        assert!(!batch.scopes.contains_key(&DailyScope::Team));
        assert!(!batch.scopes.contains_key(&DailyScope::Tag));
    }

    /// A row counts for its team, its team's organization, its end user
    /// and each of its tags once (a repeated tag once).
    #[test]
    fn a_row_counts_for_each_entity_it_names() {
        let mut r = row("a", "success");
        r.user = Some("u1".into());
        r.team_id = Some("t1".into());
        r.end_user = Some("cust".into());
        r.request_tags = Some(vec!["x".to_string(), "y".into(), "x".into()].into());
        let batch = DailyBatch::of(&[r], |team| (team == "t1").then(|| "org1".to_string()));
        let entities = |scope| -> Vec<String> {
            batch.scopes[&scope]
                .keys()
                .map(|k| k.entity.clone())
                .collect()
        };
        assert_eq!(entities(DailyScope::User), ["u1"]);
        assert_eq!(entities(DailyScope::Team), ["t1"]);
        assert_eq!(entities(DailyScope::Organization), ["org1"]);
        assert_eq!(entities(DailyScope::EndUser), ["cust"]);
        assert_eq!(entities(DailyScope::Tag), ["x", "y"]);
        let x = batch.scopes[&DailyScope::Tag].values().next().unwrap();
        assert_eq!(x.counts.api_requests, 1, "a repeated tag counts once");
    }

    /// Rows of a batch split by day, key and entity, in key order, each
    /// daily row naming the first of its rows; an organization's rows
    /// (named by a lookup, not by the row) group as its team's do.
    #[test]
    fn a_batch_splits_by_day_key_and_entity_and_keeps_each_rows_first() {
        let next_day = |mut r: SpendLogRow| {
            r.start_time += chrono::Duration::seconds(1);
            r.end_time += chrono::Duration::seconds(1);
            r
        };
        let teamed = |mut r: SpendLogRow, team: &str| {
            r.team_id = Some(team.into());
            r
        };
        let mut other_key = row("c", "success");
        other_key.api_key = "other".into();
        let rows = [
            teamed(row("a", "success"), "t1"),
            teamed(next_day(row("b", "success")), "t1"),
            teamed(other_key, "t2"),
            teamed(row("d", "failure"), "t2"),
        ];
        let batch = DailyBatch::of(&rows, |team| Some(format!("org-{}", &team[1..2])));
        let of = |scope| -> Vec<(String, String, String, String, i64)> {
            batch.scopes[&scope]
                .iter()
                .map(|(k, d)| {
                    let key = (k.entity.clone(), k.date.clone(), k.api_key.clone());
                    (
                        key.0,
                        key.1,
                        key.2,
                        d.request_id.clone(),
                        d.counts.api_requests,
                    )
                })
                .collect()
        };
        let day = |s: &str| s.to_string();
        assert_eq!(
            of(DailyScope::User),
            [
                (day(""), day("2026-03-04"), day("hashed"), day("a"), 2),
                (day(""), day("2026-03-04"), day("other"), day("c"), 1),
                (day(""), day("2026-03-05"), day("hashed"), day("b"), 1),
            ]
        );
        assert_eq!(
            of(DailyScope::Team),
            [
                (day("t1"), day("2026-03-04"), day("hashed"), day("a"), 1),
                (day("t1"), day("2026-03-05"), day("hashed"), day("b"), 1),
                (day("t2"), day("2026-03-04"), day("hashed"), day("d"), 1),
                (day("t2"), day("2026-03-04"), day("other"), day("c"), 1),
            ]
        );
        assert_eq!(
            of(DailyScope::Organization),
            [
                (day("org-1"), day("2026-03-04"), day("hashed"), day("a"), 1),
                (day("org-1"), day("2026-03-05"), day("hashed"), day("b"), 1),
                (day("org-2"), day("2026-03-04"), day("hashed"), day("d"), 1),
                (day("org-2"), day("2026-03-04"), day("other"), day("c"), 1),
            ]
        );
        let user = &batch.scopes[&DailyScope::User];
        assert!(user.keys().all(|k| k.endpoint == "/chat/completions"));
        assert!(user.values().all(|d| d.model_group == "gpt"));
    }

    /// A batch of many keys' rows interleaved (each key's rows far apart, as
    /// at a thousand keys) sums each key's rows under it and keeps its
    /// first row, each scope's keys in order: the same as adding the rows
    /// one by one into an ordered map.
    #[test]
    fn interleaved_rows_of_many_keys_sum_per_key_in_key_order() {
        let rows: Vec<SpendLogRow> = (0..900)
            .map(|i| {
                let mut r = row(
                    &format!("r{i}"),
                    if i % 7 == 0 { "failure" } else { "success" },
                );
                r.api_key = format!("{:064x}", (i % 300) * 7919).into();
                r.team_id = (i % 2 == 0).then(|| format!("t{}", i % 3));
                r.spend = f64::from(i % 5);
                r
            })
            .collect();
        let batch = DailyBatch::of(&rows, |_| None);
        for scope in [DailyScope::User, DailyScope::Team] {
            let mut expected = BTreeMap::<(String, String), (String, i64, i64, f64)>::new();
            for r in &rows {
                let entity = match scope {
                    DailyScope::User => String::new(),
                    _ => match &r.team_id {
                        Some(t) => t.clone(),
                        None => continue,
                    },
                };
                let e = expected
                    .entry((entity, r.api_key.to_string()))
                    .or_insert_with(|| (r.request_id.to_string(), 0, 0, 0.0));
                e.1 += 1;
                e.2 += i64::from(r.status != "success");
                e.3 += r.spend;
            }
            let got: Vec<_> = batch.scopes[&scope]
                .iter()
                .map(|(k, d)| {
                    let c = &d.counts;
                    let sums = (
                        d.request_id.clone(),
                        c.api_requests,
                        c.failed_requests,
                        c.spend,
                    );
                    ((k.entity.clone(), k.api_key.clone()), sums)
                })
                .collect();
            let expected: Vec<_> = expected.into_iter().collect();
            // Every key has its own user row; the even rows' keys their team rows.
            let keys = if scope == DailyScope::User { 300 } else { 150 };
            assert_eq!(got.len(), keys, "{scope:?}");
            assert_eq!(got, expected, "{scope:?}");
        }
    }

    #[test]
    fn a_query_matches_its_days_entities_keys_and_model() {
        let key = DailyBatch::of(&[row("a", "success")], |_| None).scopes[&DailyScope::User]
            .keys()
            .next()
            .unwrap()
            .clone();
        let q = DailyQuery {
            scope: DailyScope::User,
            start: "2026-03-04".into(),
            end: "2026-03-04".into(),
            entities: None,
            exclude: Vec::new(),
            api_keys: None,
            model: None,
            offset: 0,
            limit: 10,
        };
        assert!(q.matches(&key));
        for other in [
            DailyQuery {
                start: "2026-03-05".into(),
                end: "2026-03-06".into(),
                ..q.clone()
            },
            DailyQuery {
                entities: Some(vec!["u1".into()]),
                ..q.clone()
            },
            DailyQuery {
                exclude: vec![String::new()],
                ..q.clone()
            },
            DailyQuery {
                api_keys: Some(vec!["other".into()]),
                ..q.clone()
            },
            DailyQuery {
                model: Some("gpt-5".into()),
                ..q.clone()
            },
        ] {
            assert!(!other.matches(&key), "{other:?}");
        }
    }
}
